package main

import (
	"context"

	"github.com/idemgo/idem/storage"
)

// DeleteIf is the shared store's, refused once the process crashed, as
// processStore's other calls are.
func (s processStore) DeleteIf(ctx context.Context, key string, status storage.Status, t storage.Token) error {
	if s.p.dead.Load() {
		return errProcessDead
	}
	return s.store.DeleteIf(ctx, key, status, t)
}
