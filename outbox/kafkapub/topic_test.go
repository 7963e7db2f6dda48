package kafkapub_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/idemgo/idem/outbox/kafkapub"
)

func TestCheckTopic(t *testing.T) {
	for _, valid := range []string{"orders", "orders.created_v2-eu", "...", strings.Repeat("t", 249)} {
		if err := kafkapub.CheckTopic(valid); err != nil {
			t.Errorf("CheckTopic(%q) = %v, want nil", valid, err)
		}
	}
	invalid := []string{"", ".", "..", "orders created", "orders/created", "commandes.créées", strings.Repeat("t", 250)}
	for _, s := range invalid {
		if err := kafkapub.CheckTopic(s); !errors.Is(err, kafkapub.ErrInvalidTopic) {
			t.Errorf("CheckTopic(%q) = %v, want ErrInvalidTopic", s, err)
		}
	}
}
