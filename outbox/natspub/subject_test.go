package natspub_test

import (
	"errors"
	"testing"

	"github.com/idemgo/idem/outbox/natspub"
)

func TestCheckSubject(t *testing.T) {
	// A wildcard is a whole token only: "a*b.c>d" is literal.
	for _, valid := range []string{"orders", "orders.created.eu-1", "a*b.c>d", "$JS.API.INFO"} {
		if err := natspub.CheckSubject(valid); err != nil {
			t.Errorf("CheckSubject(%q) = %v, want nil", valid, err)
		}
	}
	invalid := []string{"", "orders created", "orders\tcreated", "orders\r\n", "orders..created", ".orders", "orders.",
		"orders.*", "orders.>", "*"}
	for _, s := range invalid {
		if err := natspub.CheckSubject(s); !errors.Is(err, natspub.ErrInvalidSubject) {
			t.Errorf("CheckSubject(%q) = %v, want ErrInvalidSubject", s, err)
		}
	}
}
