package main

import (
	"fmt"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/idemgo/idem/internal/demo"
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
			o := options{Options: demo.Options{Messages: 500, Consumers: 6, DupRate: 0.2, CrashRate: 0.05, Seed: seed,
				Store: "mem://", StoreName: "mem://", Timeout: time.Minute}, broker: url}
			naive, guarded, _ := runChecked(t, o)
			for _, r := range []demo.Report{naive, guarded} {
				if r.TimedOut || r.Duplicates == 0 || r.Deliveries < r.Messages+r.Duplicates {
					t.Errorf("%s: %d deliveries of %d messages and %d duplicates (timed out: %v)", r.Name, r.Deliveries, r.Messages, r.Duplicates, r.TimedOut)
				}
				if r.Crashes[demo.CrashBeforeCharge] == 0 || r.Crashes[demo.CrashAfterCharge] == 0 {
					t.Errorf("%s: crashes before / after the charge = %d / %d, want some of each",
						r.Name, r.Crashes[demo.CrashBeforeCharge], r.Crashes[demo.CrashAfterCharge])
				}
			}
		})
	}
}
