package main

import (
	"bytes"
	"context"
	"io"
	"strings"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/idemgo/idem/internal/testenv"
)

// The RabbitMQ example against the development machine's broker: every
// order is charged once, the duplicates are acked without a charge, the
// malformed event is dead-lettered.
func TestAMQPPayments(t *testing.T) {
	server := testenv.Server{Name: "RabbitMQ", Env: "IDEM_AMQP_URL", Default: "amqp://guest:guest@127.0.0.1:5672/"}
	url := server.Addr()
	c, err := amqp.DialConfig(url, amqp.Config{Dial: amqp.DefaultDial(3 * time.Second)})
	if err != nil {
		server.Unreachable(t, "the broker of "+server.Env, err)
	}
	c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var out bytes.Buffer
	if err := runAMQP(ctx, url, &out, []string{"-orders", "30", "-dup-rate", "0.5"}); err != nil {
		t.Fatalf("runAMQP: %v\n%s", err, out.String())
	}
	for _, want := range []string{
		"for 30 orders: 29 charged, 0 charged twice,",
		"1 dead-lettered (1 in",
		`order-0002, reason permanent, cause "not an OrderCreated event: json: cannot unmarshal`,
		"OK: every order charged once",
	} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("the output lacks %q:\n%s", want, out.String())
		}
	}
	if !strings.Contains(out.String(), "is a duplicate: acked, not charged again") {
		t.Errorf("no duplicate was acked as one:\n%s", out.String())
	}
}

// A --broker URL that does not parse is refused without its password.
func TestAMQPBadURLHidesThePassword(t *testing.T) {
	err := runAMQP(context.Background(), "amqp://guest:s3cret@127.0.0.1:bad/", io.Discard, nil)
	if err == nil || strings.Contains(err.Error(), "s3cret") {
		t.Errorf("runAMQP with a bad URL: %v; want an error without the password", err)
	}
}
