package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/idemgo/idem/internal/testenv"
	"github.com/idemgo/idem/storeurl"
)

// rabbitMQ is the broker of the tests.
var rabbitMQ = testenv.Server{Name: "RabbitMQ", Env: "IDEM_AMQP_URL", Default: "amqp://guest:guest@127.0.0.1:5672/"}

// The demo through the development machine's RabbitMQ: crashes close the
// consumer's socket, the broker requeues what it had not acked, and the
// idem consumer still charges every order once.
func TestDemoThroughRabbitMQ(t *testing.T) {
	url := rabbitMQ.Addr()
	c, err := amqp.DialConfig(url, amqp.Config{Dial: amqp.DefaultDial(3 * time.Second)})
	if err != nil {
		rabbitMQ.Unreachable(t, storeurl.Redact(url), err)
	}
	c.Close()
	for _, seed := range []uint64{1, 2} {
		t.Run(fmt.Sprintf("seed=%d", seed), func(t *testing.T) {
			o := demoOptions{messages: 500, consumers: 6, dupRate: 0.2, crashRate: 0.05, seed: seed,
				store: "mem://", broker: url, timeout: time.Minute}
			var out bytes.Buffer
			naive, guarded, err := demo(context.Background(), o, &out, io.Discard)
			if err != nil {
				t.Fatalf("demo: %v\n%s", err, out.String())
			}
			t.Logf("\n%s", out.String())
			if guarded.doubleCharges != 0 || guarded.lost != 0 || guarded.charges != o.messages {
				t.Errorf("idem: %d charges for %d orders, %d double charges, %d lost; want each order charged once",
					guarded.charges, o.messages, guarded.doubleCharges, guarded.lost)
			}
			if naive.doubleCharges == 0 || naive.lost != 0 {
				t.Errorf("naive: %d double charges and %d lost, want some double charges and none lost", naive.doubleCharges, naive.lost)
			}
			for _, r := range []runReport{naive, guarded} {
				if r.timedOut || r.duplicates == 0 || r.deliveries < r.messages+r.duplicates {
					t.Errorf("%s: %d deliveries of %d messages and %d duplicates (timed out: %v)", r.name, r.deliveries, r.messages, r.duplicates, r.timedOut)
				}
				if r.crashes[crashBeforeCharge] == 0 || r.crashes[crashAfterCharge] == 0 {
					t.Errorf("%s: crashes before / after the charge = %d / %d, want some of each",
						r.name, r.crashes[crashBeforeCharge], r.crashes[crashAfterCharge])
				}
			}
			if guarded.takeovers == 0 {
				t.Errorf("idem: no takeover after %d crashes before the charge", guarded.crashes[crashBeforeCharge])
			}
		})
	}
}
