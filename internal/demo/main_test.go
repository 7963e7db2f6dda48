package demo

import (
	"testing"

	"github.com/idemgo/idem/idemtest"
)

func TestMain(m *testing.M) { idemtest.Main(m, "github.com/idemgo/idem") }
