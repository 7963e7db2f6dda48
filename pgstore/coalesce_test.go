package pgstore_test

import (
	"testing"

	"github.com/idemgo/idem/coalesce"
	"github.com/idemgo/idem/idemtest"
	"github.com/idemgo/idem/storage"
)

func TestCoalesceConformance(t *testing.T) {
	t.Parallel()
	s := coalesce.New(newEnv(t, 16).store)
	idemtest.Run(t, func(t *testing.T) storage.Store { return s })
}
