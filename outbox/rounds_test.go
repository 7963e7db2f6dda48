package outbox_test

import (
	"context"
	"errors"
	"slices"
	"testing"

	"github.com/idemgo/idem/outbox"
	"github.com/idemgo/idem/outbox/outboxtest"
)

func TestPublishInRounds(t *testing.T) {
	msg := func(id, key string) outbox.Message { return outbox.Message{ID: id, Key: key, Destination: "d"} }
	msgs := []outbox.Message{
		msg("a1", "a"), msg("b1", "b"), msg("a2", "a"), msg("u1", ""), msg("a3", "a"), msg("b2", "b"), msg("u2", ""), msg("c1", "c"),
	}
	refuse := errors.New("refused")
	var rounds [][]string
	err := outbox.PublishInRounds(context.Background(), msgs, func(_ context.Context, round []outbox.Message) []error {
		ids := outboxtest.IDs(round)
		rounds = append(rounds, ids)
		errs := make([]error, len(round))
		for i, id := range ids {
			if id == "b1" || id == "a2" {
				errs[i] = refuse
			}
		}
		return errs
	})
	want := [][]string{{"a1", "b1", "u1", "u2", "c1"}, {"a2"}}
	if !slices.EqualFunc(rounds, want, slices.Equal) {
		t.Errorf("rounds %q, want %q", rounds, want)
	}
	pe, ok := errors.AsType[*outbox.PublishError](err)
	if !ok {
		t.Fatalf("PublishInRounds = %v, want a *PublishError", err)
	}
	for i, m := range msgs {
		got := pe.Errs[i]
		switch m.ID {
		case "b1", "a2":
			if !errors.Is(got, refuse) || errors.Is(got, outbox.ErrHeldBack) {
				t.Errorf("%s: %v, want its own failure", m.ID, got)
			}
		case "a3", "b2":
			if !errors.Is(got, outbox.ErrHeldBack) || !errors.Is(got, refuse) {
				t.Errorf("%s: %v, want ErrHeldBack wrapping the earlier failure", m.ID, got)
			}
		default:
			if got != nil {
				t.Errorf("%s: %v, want nil", m.ID, got)
			}
		}
	}

	if err := outbox.PublishInRounds(context.Background(), msgs[:2], func(context.Context, []outbox.Message) []error { return nil }); err == nil {
		t.Error("a send that returns too few results: nil error, want one per missing result")
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	called := false
	err = outbox.PublishInRounds(ctx, msgs, func(context.Context, []outbox.Message) []error { called = true; return nil })
	if !errors.Is(err, context.Canceled) || called {
		t.Errorf("with a cancelled context: %v (send called: %v), want context.Canceled before any send", err, called)
	}
}
