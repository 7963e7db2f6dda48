package natspub_test

import (
	"errors"
	"testing"

	"github.com/idemgo/idem/outbox/natspub"
)

func TestCheckSubject(t *testing.T) {
	for _, tc := range []struct {
		subject string
		valid   bool
	}{
		{"orders", true},
		{"orders.created.eu-1", true},
		{"a*b.c>d", true}, // a wildcard is a whole token only
		{"$JS.API.INFO", true},
		{"", false},
		{"orders created", false},
		{"orders\tcreated", false},
		{"orders\r\n", false},
		{"orders..created", false},
		{".orders", false},
		{"orders.", false},
		{"orders.*", false},
		{"orders.>", false},
		{"*", false},
	} {
		err := natspub.CheckSubject(tc.subject)
		if tc.valid && err != nil {
			t.Errorf("CheckSubject(%q) = %v, want nil", tc.subject, err)
		}
		if !tc.valid && !errors.Is(err, natspub.ErrInvalidSubject) {
			t.Errorf("CheckSubject(%q) = %v, want ErrInvalidSubject", tc.subject, err)
		}
	}
}
