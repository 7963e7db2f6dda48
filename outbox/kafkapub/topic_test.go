package kafkapub_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/idemgo/idem/outbox/kafkapub"
)

func TestCheckTopic(t *testing.T) {
	for _, tc := range []struct {
		topic string
		valid bool
	}{
		{"orders", true},
		{"orders.created_v2-eu", true},
		{"...", true},
		{strings.Repeat("t", 249), true},
		{"", false},
		{".", false},
		{"..", false},
		{"orders created", false},
		{"orders/created", false},
		{"commandes.créées", false},
		{strings.Repeat("t", 250), false},
	} {
		err := kafkapub.CheckTopic(tc.topic)
		if tc.valid && err != nil {
			t.Errorf("CheckTopic(%q) = %v, want nil", tc.topic, err)
		}
		if !tc.valid && !errors.Is(err, kafkapub.ErrInvalidTopic) {
			t.Errorf("CheckTopic(%q) = %v, want ErrInvalidTopic", tc.topic, err)
		}
	}
}
