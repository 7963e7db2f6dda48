package idemsqs_test

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/consumer"
	"github.com/idemgo/idem/idemsqs"
	"github.com/idemgo/idem/internal/testenv"
)

// events records what an observer saw.
type events = testenv.Events[idemsqs.Event]

func kind(k idemsqs.EventKind) func(idemsqs.Event) bool {
	return func(e idemsqs.Event) bool { return e.Kind == k }
}

// run runs c until the test ends, and fails the test if Run fails.
func run(t *testing.T, c *idemsqs.Consumer) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	})
}

// A message whose handler runs longer than the queue's visibility timeout
// runs once: its visibility is renewed while the Guard holds its key, so
// SQS does not deliver it again, not even to a second consumer polling
// the same queue all along.
func TestHandlerLongerThanVisibilityRunsOnce(t *testing.T) {
	t.Parallel()
	c := client(t)
	q := newQueue(t, c, map[string]string{"VisibilityTimeout": "1"})
	g := guard(t, 3*time.Second)
	var runs atomic.Int32
	var evs events
	h := func(ctx context.Context, m types.Message) error {
		runs.Add(1)
		select {
		case <-time.After(4 * time.Second): // four visibility timeouts
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	for range 2 {
		cons, err := idemsqs.New(g, newClient(t, server.Addr()), q, h, idemsqs.WithSharedScope(), idemsqs.WithDiscardPoison(),
			idemsqs.WithWaitTime(time.Second), idemsqs.WithObserver(evs.Observe))
		if err != nil {
			t.Fatal(err)
		}
		run(t, cons)
	}
	send(t, c, q, "slow", "slow")
	waitFor(t, 30*time.Second, "the slow message deleted", func() bool { return evs.Count(kind(idemsqs.EventDeleted)) == 1 })
	time.Sleep(1500 * time.Millisecond) // were it visible again, it would come back now
	if n := runs.Load(); n != 1 {
		t.Fatalf("a handler four times longer than the visibility timeout ran %d times, want 1", n)
	}
	if n := evs.Count(func(e idemsqs.Event) bool { return e.Kind != idemsqs.EventStarted && e.Kind != idemsqs.EventDeleted }); n != 0 {
		t.Fatalf("%d events besides the delete: the message came back (%v)", n, evs.All())
	}
	if n := evs.Count(func(e idemsqs.Event) bool { return e.Kind == idemsqs.EventDeleted && e.ReceiveCount == 1 }); n != 1 {
		t.Fatalf("the message was deleted on another receive than its first: %v", evs.All())
	}
	if v, inv, _ := counts(t, c, q); v != "0" || inv != "0" {
		t.Fatalf("the queue holds %s visible and %s invisible messages, want none", v, inv)
	}
}

// On a FIFO queue the messages of a group run in order, one at a time,
// though the consumer runs several handlers at once; a message to be
// retried holds the rest of its group back until it succeeded. The key is
// the message's MessageDeduplicationId.
func TestFIFOGroupsInOrder(t *testing.T) {
	t.Parallel()
	c := client(t)
	q := newQueue(t, c, map[string]string{"FifoQueue": "true", "VisibilityTimeout": "5"})
	g := guard(t, time.Minute)
	var mu sync.Mutex
	done := map[string][]int{} // successful runs by group, in order
	running := map[string]bool{}
	failed := false
	var overlap atomic.Bool
	h := func(ctx context.Context, m types.Message) error {
		group, n := m.Attributes["MessageGroupId"], aws.ToString(m.Body)
		mu.Lock()
		if running[group] {
			overlap.Store(true)
		}
		running[group] = true
		mu.Unlock()
		time.Sleep(20 * time.Millisecond)
		mu.Lock()
		defer mu.Unlock()
		running[group] = false
		if group == "a" && n == "2" && !failed {
			failed = true
			return errors.New("downstream timeout")
		}
		i, _ := strconv.Atoi(n)
		done[group] = append(done[group], i)
		return nil
	}
	cons, err := idemsqs.New(g, c, q, h, idemsqs.WithSharedScope(), idemsqs.WithDiscardPoison(), idemsqs.WithConcurrency(4),
		idemsqs.WithWaitTime(time.Second), idemsqs.WithKeyFunc(idemsqs.DeduplicationIDKey), idemsqs.WithRetryBackoff(10*time.Millisecond, 20*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	for i := range 5 {
		for _, group := range []string{"a", "b"} {
			send(t, c, q, "", strconv.Itoa(i), inGroup(group, group+strconv.Itoa(i)))
		}
	}
	run(t, cons)
	waitFor(t, 30*time.Second, "both groups handled", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(done["a"]) == 5 && len(done["b"]) == 5
	})
	mu.Lock()
	defer mu.Unlock()
	for _, group := range []string{"a", "b"} {
		for i, n := range done[group] {
			if n != i {
				t.Fatalf("group %s ran in the order %v, want 0 1 2 3 4", group, done[group])
			}
		}
	}
	if overlap.Load() {
		t.Fatal("two messages of one group ran at once")
	}
	for _, key := range []string{"a0", "b4"} {
		if _, err := g.Store().Get(context.Background(), g.ScopedStoreKey("", key)); err != nil {
			t.Fatalf("no record under the MessageDeduplicationId %s: %v", key, err)
		}
	}
}

// deleteFails is an SQS client whose first DeleteMessageBatch entry has its
// receipt handle spoilt, so SQS refuses that entry alone.
type deleteFails struct {
	*sqs.Client
	spoilt atomic.Bool
}

func (d *deleteFails) DeleteMessageBatch(ctx context.Context, in *sqs.DeleteMessageBatchInput, opts ...func(*sqs.Options)) (*sqs.DeleteMessageBatchOutput, error) {
	if d.spoilt.CompareAndSwap(false, true) {
		in.Entries[0].ReceiptHandle = aws.String("spoilt")
	}
	return d.Client.DeleteMessageBatch(ctx, in, opts...)
}

// An entry of a DeleteMessageBatch that SQS refuses is that message's
// outcome alone: it is reported unsettled, the others of the batch are
// deleted, and once it comes back the store answers it with the stored
// outcome, without running the handler again.
func TestDeleteEntryRefused(t *testing.T) {
	t.Parallel()
	c := client(t)
	q := newQueue(t, c, map[string]string{"VisibilityTimeout": "1"})
	g := guard(t, time.Minute)
	var runs atomic.Int32
	var evs events
	cons, err := idemsqs.New(g, &deleteFails{Client: c}, q, func(context.Context, types.Message) error { runs.Add(1); return nil },
		idemsqs.WithSharedScope(), idemsqs.WithDiscardPoison(), idemsqs.WithWaitTime(time.Second), idemsqs.WithObserver(evs.Observe))
	if err != nil {
		t.Fatal(err)
	}
	for i := range 5 {
		send(t, c, q, "k"+strconv.Itoa(i), "body")
	}
	run(t, cons)
	waitFor(t, 30*time.Second, "every message deleted", func() bool { return evs.Count(kind(idemsqs.EventDeleted)) == 5 })
	unsettled := evs.Count(func(e idemsqs.Event) bool {
		return e.Kind == idemsqs.EventUnsettled && errors.Is(e.Err, idemsqs.ErrEntryRefused) && strings.Contains(e.Err.Error(), "ReceiptHandleIsInvalid")
	})
	if unsettled != 1 {
		t.Fatalf("%d unsettled messages, want the one whose entry SQS refused (%v)", unsettled, evs.All())
	}
	if n := evs.Count(func(e idemsqs.Event) bool { return e.Kind == idemsqs.EventDeleted && e.Replayed }); n != 1 {
		t.Fatalf("%d messages deleted as duplicates, want the one that came back", n)
	}
	if n := runs.Load(); n != 5 {
		t.Fatalf("5 messages ran their handlers %d times", n)
	}
}

// A busy key's message comes back after the busy delay, through its
// visibility timeout: a few receives while the key is held, not a loop.
func TestBusyKeyNoReceiveLoop(t *testing.T) {
	t.Parallel()
	c := client(t)
	q := newQueue(t, c, nil)
	g := guard(t, time.Minute)
	release, held := make(chan struct{}), make(chan struct{})
	go g.Do(context.Background(), "busy", []byte("body"), func(context.Context) ([]byte, error) {
		close(held)
		<-release
		return nil, nil
	})
	<-held
	var evs events
	cons, err := idemsqs.New(g, c, q, func(context.Context, types.Message) error { return nil }, idemsqs.WithSharedScope(),
		idemsqs.WithDiscardPoison(), idemsqs.WithWaitTime(time.Second), idemsqs.WithBusyDelay(time.Second), idemsqs.WithObserver(evs.Observe))
	if err != nil {
		t.Fatal(err)
	}
	run(t, cons)
	send(t, c, q, "busy", "body")
	time.Sleep(3500 * time.Millisecond)
	close(release)
	waitFor(t, 30*time.Second, "the busy message deleted as a duplicate", func() bool {
		return evs.Count(func(e idemsqs.Event) bool { return e.Kind == idemsqs.EventDeleted && e.Replayed }) == 1
	})
	busy := evs.Count(func(e idemsqs.Event) bool {
		return e.Kind == idemsqs.EventDelayed && errors.Is(e.Err, idem.ErrInProgress) && e.Delay == time.Second
	})
	if busy < 2 || busy > 5 {
		t.Fatalf("a key held 3.5s with a busy delay of 1s came back %d times, want 2 to 5 (%v)", busy, evs.All())
	}
}

// WithRedrivePolicy leaves poison to the queue's redrive policy: the
// message comes back until SQS moves it to the policy's dead-letter queue,
// its stored failure replayed each time, its handler run once.
func TestRedrivePolicyPoison(t *testing.T) {
	t.Parallel()
	c := client(t)
	dlq := newQueue(t, c, nil)
	q := newQueue(t, c, map[string]string{"VisibilityTimeout": "5",
		"RedrivePolicy": `{"deadLetterTargetArn":"` + queueArn(t, c, dlq) + `","maxReceiveCount":"3"}`})
	g := guard(t, time.Minute)
	var runs atomic.Int32
	var evs events
	cons, err := idemsqs.New(g, c, q, func(context.Context, types.Message) error {
		runs.Add(1)
		return idem.Permanent(errors.New("card declined"))
	}, idemsqs.WithSharedScope(), idemsqs.WithRedrivePolicy(), idemsqs.WithWaitTime(time.Second),
		idemsqs.WithRetryBackoff(10*time.Millisecond, 20*time.Millisecond), idemsqs.WithObserver(evs.Observe))
	if err != nil {
		t.Fatal(err)
	}
	run(t, cons)
	send(t, c, q, "poison", "body")
	var moved []types.Message
	waitFor(t, 30*time.Second, "the poison in the redrive policy's dead-letter queue", func() bool {
		moved = append(moved, receive(t, c, dlq, 1, 0, 30)...)
		return len(moved) == 1
	})
	if n := runs.Load(); n != 1 {
		t.Fatalf("a permanent failure ran %d times, want 1", n)
	}
	if n := evs.Count(func(e idemsqs.Event) bool {
		return e.Kind == idemsqs.EventRedriven && e.Reason == consumer.ReasonPermanent
	}); n != 3 {
		t.Fatalf("%d redriven events, want one for each of the 3 receives", n)
	}
}

// Run fails at once, saying why, when it cannot read the queue or the
// dead-letter queue, or when WithRedrivePolicy is given for a queue with
// no redrive policy: a consumer that would lose poison must not start.
func TestRunRefusesWhatItCannotUse(t *testing.T) {
	t.Parallel()
	c := client(t)
	q := newQueue(t, c, nil)
	missing := strings.TrimSuffix(q, "/") + "-missing"
	g := guard(t, time.Minute)
	h := func(context.Context, types.Message) error { return nil }
	for _, tc := range []struct {
		name  string
		queue string
		opt   idemsqs.Option
		want  string
	}{
		{"no queue", missing, idemsqs.WithDiscardPoison(), "reading the queue"},
		{"no dead-letter queue", q, idemsqs.WithDeadLetter(missing), "the dead-letter queue \"" + missing + "\" does not exist"},
		{"no redrive policy", q, idemsqs.WithRedrivePolicy(), "has no redrive policy"},
	} {
		cons, err := idemsqs.New(g, c, tc.queue, h, idemsqs.WithSharedScope(), tc.opt)
		if err != nil {
			t.Fatalf("%s: New: %v", tc.name, err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		err = cons.Run(ctx)
		cancel()
		if err == nil || !strings.Contains(err.Error(), tc.want) || !strings.HasPrefix(err.Error(), "idemsqs: Run: ") {
			t.Errorf("%s: Run = %v, want an error saying %q", tc.name, err, tc.want)
		}
	}
	if _, err := idemsqs.New(g, c, q, h, idemsqs.WithSharedScope(), idemsqs.WithRedrivePolicy(), idemsqs.WithDeadLetter(q)); err == nil ||
		!strings.Contains(err.Error(), "choose one") {
		t.Errorf("New with WithRedrivePolicy and WithDeadLetter = %v, want an error", err)
	}
}

// A dead letter fits SQS: at most 10 message attributes (the original's
// left out, the longest first, and named), and a body at the limit left
// out, stood for by its size and SHA-256, with a body SQS takes.
func TestDeadLetterFitsSQS(t *testing.T) {
	t.Parallel()
	c := client(t)
	q := newQueue(t, c, nil)
	dlq := newQueue(t, c, nil)
	g := guard(t, time.Minute)
	cons, err := idemsqs.New(g, c, q, func(context.Context, types.Message) error { return idem.Permanent(errors.New("not an event")) },
		idemsqs.WithSharedScope(), idemsqs.WithDeadLetter(dlq), idemsqs.WithWaitTime(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	run(t, cons)
	body := strings.Repeat("b", maxMessage-4<<10)
	send(t, c, q, "big", body, func(in *sqs.SendMessageInput) {
		for i := range 9 {
			in.MessageAttributes["attr"+strconv.Itoa(i)] = attr(strings.Repeat("v", i+1))
		}
	})
	var got []types.Message
	waitFor(t, 30*time.Second, "the dead letter", func() bool {
		got = append(got, receive(t, c, dlq, 1, 0, 30)...)
		return len(got) == 1
	})
	dl := got[0]
	if n := len(dl.MessageAttributes); n > 10 {
		t.Fatalf("the dead letter has %d attributes; SQS takes 10", n)
	}
	if aws.ToString(dl.Body) != idemsqs.BodyLeftOut {
		t.Fatalf("the dead letter's body is %d bytes, want it left out", len(aws.ToString(dl.Body)))
	}
	a := texts(dl.MessageAttributes)
	if a[consumer.HeaderBodySize] != strconv.Itoa(len(body)) || a[consumer.HeaderReason] != string(consumer.ReasonPermanent) ||
		a[consumer.HeaderKey] != "big" || a[idemsqs.HeaderQueue] != q {
		t.Fatalf("the dead letter's attributes %v", a)
	}
	if !strings.Contains(a[consumer.HeaderCutHeaders], "attr8") {
		t.Fatalf("%s = %q, want the longest attributes left out named", consumer.HeaderCutHeaders, a[consumer.HeaderCutHeaders])
	}
}

// noExtension is an SQS client that refuses every renewal of a message's
// visibility to vis seconds (the keeper's), as an SQS out of reach would,
// and passes the consumer's other visibility changes.
type noExtension struct {
	*sqs.Client
	vis int32
}

func (n noExtension) ChangeMessageVisibilityBatch(ctx context.Context, in *sqs.ChangeMessageVisibilityBatchInput, opts ...func(*sqs.Options)) (*sqs.ChangeMessageVisibilityBatchOutput, error) {
	for _, e := range in.Entries {
		if e.VisibilityTimeout == n.vis {
			return nil, errors.New("test: SQS out of reach")
		}
	}
	return n.Client.ChangeMessageVisibilityBatch(ctx, in, opts...)
}

// A message SQS delivers again while its handler still runs (its
// visibility could not be renewed) does not run twice at once: the
// store's claim answers each later delivery busy, and the message is
// deleted once the first stored its outcome.
func TestRedeliveryWhileRunningIsBusy(t *testing.T) {
	t.Parallel()
	c := client(t)
	q := newQueue(t, c, map[string]string{"VisibilityTimeout": "2"})
	g := guard(t, time.Minute)
	var runs, running, overlap atomic.Int32
	var evs events
	h := func(ctx context.Context, m types.Message) error {
		runs.Add(1)
		if running.Add(1) > 1 {
			overlap.Store(1)
		}
		defer running.Add(-1)
		time.Sleep(5 * time.Second) // past two visibility timeouts
		return nil
	}
	for range 2 {
		cons, err := idemsqs.New(g, noExtension{Client: newClient(t, server.Addr()), vis: 2}, q, h, idemsqs.WithSharedScope(),
			idemsqs.WithDiscardPoison(), idemsqs.WithWaitTime(time.Second), idemsqs.WithBusyDelay(time.Second),
			idemsqs.WithObserver(evs.Observe))
		if err != nil {
			t.Fatal(err)
		}
		run(t, cons)
	}
	send(t, c, q, "slow", "slow")
	// The first delivery's delete, with its receipt handle, deletes the
	// message on moto; SQS may instead keep it, and delete the copy it
	// delivers next, as a duplicate. Either way the queue ends empty.
	waitFor(t, 30*time.Second, "the message deleted", func() bool {
		if evs.Count(kind(idemsqs.EventDeleted)) == 0 {
			return false
		}
		v, inv, _ := counts(t, c, q)
		return v == "0" && inv == "0"
	})
	if n := runs.Load(); n != 1 || overlap.Load() != 0 {
		t.Fatalf("the handler ran %d times (at once: %v), want once", n, overlap.Load() != 0)
	}
	if n := evs.Count(func(e idemsqs.Event) bool {
		return e.Kind == idemsqs.EventDelayed && errors.Is(e.Err, idem.ErrInProgress)
	}); n == 0 {
		t.Fatalf("the message never came back busy: SQS did not deliver it again (%v)", evs.All())
	}
}
