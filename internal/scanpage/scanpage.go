// Package scanpage is the loop of a storage.Scanner over a store that reads
// its records in key order, a page at a time (pgstore, sqlitestore).
package scanpage

import (
	"context"
	"strings"

	"github.com/idemgo/idem/storage"
)

// Scan calls fn with the records of prefix, page by page, as
// storage.Scanner.Scan does: read returns, in key order, at most size live
// records whose key follows from (from from on, when inclusive); Scan
// stops at the first key past prefix, at a short page, or when fn returns
// false.
func Scan(ctx context.Context, prefix string, size int, read func(ctx context.Context, from []byte, inclusive bool) ([]storage.Record, error), fn func(storage.Record) bool) error {
	from, inclusive := []byte(prefix), true
	for {
		recs, err := read(ctx, from, inclusive)
		if err != nil {
			return err
		}
		for _, r := range recs {
			if !strings.HasPrefix(r.Key, prefix) {
				return nil // past the prefix: keys are in order
			}
			if !fn(r) {
				return nil
			}
		}
		if len(recs) < size {
			return nil
		}
		from, inclusive = []byte(recs[len(recs)-1].Key), false
	}
}
