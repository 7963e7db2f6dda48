package idemamqp_test

import (
	"testing"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/idemamqp/idemamqptest"
	"github.com/idemgo/idem/memstore"
)

// The behaviour suite over memstore; integration/amqpstores runs it over
// Redis and PostgreSQL.
func TestSuiteMemstore(t *testing.T) {
	s, err := memstore.New(memstore.Config{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	idemamqptest.Run(t, func(*testing.T) idem.Store { return s })
}
