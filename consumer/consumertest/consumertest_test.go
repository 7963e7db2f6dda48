package consumertest_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/consumer"
	"github.com/idemgo/idem/consumer/consumertest"
)

// The cases the in-memory consumer is held to: the dead-letter cases, which
// need no real broker to fail on a consumer broken for them.
const memCases = "^(DeadLetterMissing|DeadLetterRefused|NoSteeringHeaders)$"

// steerHeader is the header the in-memory broker acts on, as RabbitMQ acts
// on CC: a message published with it is routed elsewhere too.
const steerHeader = "steer"

// memBroker is a broker in memory, with a consumer over it that does what
// the suite asks of the dead-letter cases, but for one bug.
type memBroker struct{ bug string }

func (memBroker) MaxBody() int   { return 1 << 20 }
func (memBroker) MaxHeader() int { return 1 << 10 }
func (memBroker) Ordered() bool  { return false }

func (memBroker) New(*testing.T, consumertest.Config) error { return nil }

func (b memBroker) Start(t *testing.T, cfg consumertest.Config) consumertest.Consumer {
	c := &memConsumer{bug: b.bug, cfg: cfg, queue: make(chan consumertest.Message, 64), dlq: true}
	c.Running = consumertest.Go(c.run)
	t.Cleanup(func() { c.Stop(t) })
	return c
}

// memConsumer is a consumer of memBroker, running.
type memConsumer struct {
	*consumertest.Running
	bug   string
	cfg   consumertest.Config
	queue chan consumertest.Message

	mu      sync.Mutex
	pending int  // messages published or delayed, not settled
	dlq     bool // the dead-letter destination exists
	dead    []consumertest.DeadLetter
	steered []string
}

func (c *memConsumer) Publish(_ *testing.T, m consumertest.Message) {
	if m.Steer {
		m.Headers = map[string]string{steerHeader: "elsewhere"}
	}
	c.mu.Lock()
	c.pending++
	c.mu.Unlock()
	c.queue <- m
}

// Settled reports whether every message published was handled,
// dead-lettered or given up on.
func (c *memConsumer) Settled(*testing.T) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.pending == 0
}

func (c *memConsumer) DeadLetters(*testing.T) []consumertest.DeadLetter {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]consumertest.DeadLetter(nil), c.dead...)
}

func (c *memConsumer) Cut(*testing.T) {}

func (c *memConsumer) DropDeadLetter(*testing.T) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.dlq = false
}

func (c *memConsumer) Steered(*testing.T) []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]string(nil), c.steered...)
}

var errNoDestination = errors.New("no such destination")

// run consumes until ctx ends: after checking that the dead-letter
// destination exists (unless its bug is "no-start-check").
func (c *memConsumer) run(ctx context.Context) error {
	if c.cfg.Poison == consumertest.PoisonMissing && c.bug != "no-start-check" {
		return &consumer.DeadLetterMissingError{Destination: `queue "dlq"`, Err: errNoDestination}
	}
	for {
		select {
		case <-ctx.Done():
			return nil
		case m := <-c.queue:
			c.handle(ctx, m)
		}
	}
}

func (c *memConsumer) handle(ctx context.Context, m consumertest.Message) {
	if m.NoKey {
		c.poison(m, consumer.ReasonMissingKey, consumer.ErrNoKey)
		return
	}
	_, err := c.cfg.Guard.Do(ctx, m.Key, m.Body, func(ctx context.Context) ([]byte, error) {
		return nil, c.cfg.Handler(ctx, consumertest.Received{Key: m.Key, Body: m.Body, Headers: m.Headers})
	})
	switch {
	case err == nil:
		c.settled()
	case idem.IsPermanent(err):
		c.poison(m, consumer.ReasonPermanent, err)
	default:
		// Busy, or failed: a copy comes back after the busy delay.
		if c.bug != "keep-steering" {
			m.Headers = defused(m.Headers)
		} else if _, ok := m.Headers[steerHeader]; ok {
			c.mu.Lock()
			c.steered = append(c.steered, "a delayed copy routed elsewhere too")
			c.mu.Unlock()
		}
		time.AfterFunc(c.cfg.BusyDelay, func() {
			select {
			case c.queue <- m:
			case <-ctx.Done():
			}
		})
	}
}

// poison sends m's dead letter, given up on after MaxAttempts refusals,
// each reported (unless its bug is "silent-refusals").
func (c *memConsumer) poison(m consumertest.Message, reason consumer.Reason, cause error) {
	defer c.settled()
	headers := map[string]string{consumer.HeaderReason: string(reason), consumer.HeaderCause: cause.Error(), consumer.HeaderKey: m.Key}
	original := m.Headers
	if c.bug != "keep-steering" {
		original = defused(original)
	}
	for k, v := range original {
		headers[k] = v
	}
	max := c.cfg.MaxAttempts
	if max == 0 {
		max = consumer.DefaultMaxAttempts
	}
	observe := func(a consumer.Activity) {
		if c.cfg.Observer != nil && c.bug != "silent-refusals" {
			c.cfg.Observer(a)
		}
	}
	for try := 1; ; try++ {
		c.mu.Lock()
		ok := c.dlq
		if ok {
			c.dead = append(c.dead, consumertest.DeadLetter{Body: m.Body, Headers: headers})
			if _, live := headers[steerHeader]; live {
				c.steered = append(c.steered, "a dead letter routed elsewhere too")
			}
		}
		c.mu.Unlock()
		if ok {
			observe(consumer.Activity{Kind: consumer.ActivityDeadLettered, Messages: 1, Reason: reason, Err: cause})
			return
		}
		observe(consumer.Activity{Kind: consumer.ActivityDeadLetterFailed, Messages: 1, Reason: reason, Err: errNoDestination, Refused: true})
		if try == max {
			observe(consumer.Activity{Kind: consumer.ActivityDiscarded, Messages: 1, Reason: reason, Err: cause, GaveUp: true})
			return
		}
	}
}

func (c *memConsumer) settled() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.pending--
}

// defused returns headers with the steering header renamed.
func defused(headers map[string]string) map[string]string {
	out := make(map[string]string, len(headers))
	for k, v := range headers {
		if k == steerHeader {
			k = consumer.HeaderOriginalPrefix + k
		}
		out[k] = v
	}
	return out
}

// TestMemConsumer runs the dead-letter cases against the in-memory
// consumer, broken as CONSUMERTEST_BUG says, or sound.
func TestMemConsumer(t *testing.T) {
	bug, ok := os.LookupEnv("CONSUMERTEST_BUG")
	if !ok {
		t.Skip("run by TestSuiteCatchesBrokenConsumers, on the dead-letter cases")
	}
	consumertest.Run(t, memBroker{bug: bug})
}

// Each dead-letter case fails on a consumer broken for it, and the sound
// one passes them.
func TestSuiteCatchesBrokenConsumers(t *testing.T) {
	if _, ok := os.LookupEnv("CONSUMERTEST_BUG"); ok {
		t.Skip("the parent of a broken run")
	}
	for bug, failing := range map[string]string{
		"":                "",
		"no-start-check":  "DeadLetterMissing",
		"silent-refusals": "DeadLetterRefused",
		"keep-steering":   "NoSteeringHeaders",
	} {
		t.Run(fmt.Sprintf("bug=%q", bug), func(t *testing.T) {
			t.Parallel()
			cmd := exec.Command(os.Args[0], "-test.run=^TestMemConsumer$/"+memCases, "-test.count=1")
			cmd.Env = append(os.Environ(), "CONSUMERTEST_BUG="+bug)
			out, err := cmd.CombinedOutput()
			switch {
			case failing == "" && err != nil:
				t.Fatalf("the sound consumer failed:\n%s", out)
			case failing != "" && !strings.Contains(string(out), "--- FAIL: TestMemConsumer/"+failing):
				t.Fatalf("bug %q: the suite did not fail %s:\n%s", bug, failing, out)
			case failing != "" && strings.Count(string(out), "--- FAIL: TestMemConsumer/") != 1:
				t.Fatalf("bug %q: the suite failed more than %s:\n%s", bug, failing, out)
			}
		})
	}
}
