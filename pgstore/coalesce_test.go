package pgstore_test

import (
	"testing"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/idemtest"
)

func TestCoalesceConformance(t *testing.T) {
	t.Parallel()
	s := idem.Coalesce(newEnv(t, 16).store)
	idemtest.Run(t, func(t *testing.T) idem.Store { return s })
}
