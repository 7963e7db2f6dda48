package idemamqptest

import (
	"context"
	"crypto/rand"
	"fmt"
	"os/exec"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/idemgo/idem/internal/testenv"
)

// server is the RabbitMQ of the tests.
var server = testenv.Server{Name: "RabbitMQ", Env: "IDEM_AMQP_URL", Default: "amqp://guest:guest@127.0.0.1:5672/"}

// URL returns the AMQP URI of the broker the tests use: the value of
// IDEM_AMQP_URL, or amqp://guest:guest@127.0.0.1:5672/.
func URL() string { return server.Addr() }

// redacted returns URL without its password.
func redacted() string {
	u, err := amqp.ParseURI(URL())
	if err != nil {
		return "(unparsable " + server.Env + ")"
	}
	return fmt.Sprintf("amqp://%s@%s:%d/%s", u.Username, u.Host, u.Port, u.Vhost)
}

// probes holds, by URL, whether the broker answered: dialled once per URL
// and test binary.
var probes sync.Map // URL → func() error

func reachable() error {
	url := URL()
	probe, _ := probes.LoadOrStore(url, sync.OnceValue(func() error {
		c, err := amqp.DialConfig(url, amqp.Config{Dial: amqp.DefaultDial(5 * time.Second)})
		if err != nil {
			return err
		}
		return c.Close()
	}))
	return probe.(func() error)()
}

// Connect returns a connection to the broker, closed when t ends. It skips
// t when the broker is unreachable, or fails it under
// IDEM_REQUIRE_SERVICES=1.
func Connect(t testing.TB) *amqp.Connection {
	t.Helper()
	if err := reachable(); err != nil {
		server.Unreachable(t, redacted(), err)
	}
	c, err := amqp.Dial(URL())
	if err != nil {
		t.Fatalf("dial %s: %v", redacted(), err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// QueueType is the x-queue-type of a test queue.
type QueueType string

// The queue types of RabbitMQ that the consumer supports.
const (
	Classic QueueType = "classic"
	Quorum  QueueType = "quorum"
)

// Queue is a queue of one test, with a dead-letter queue of its own.
type Queue struct {
	Name        string // the queue
	DeadLetters string // where the queue's dead-letter exchange routes rejected messages
	Type        QueueType

	t     testing.TB
	conn  *amqp.Connection
	ch    *amqp.Channel // in confirm mode
	mu    sync.Mutex
	extra []string
}

// expires is the x-expires of test queues, in milliseconds: an hour.
const expires = int64(time.Hour / time.Millisecond)

var unsafeChars = regexp.MustCompile(`[^A-Za-z0-9_.-]+`)

// NewQueue declares a durable queue of type typ named after the test, with
// a random suffix, and args added to its arguments. Its dead-letter
// exchange is the default exchange, routing rejected messages to the queue
// DeadLetters. Both are deleted when t ends, with the queues given to
// DeleteAtEnd; both also expire after an hour unused (x-expires), should a
// killed test run leave them behind.
func NewQueue(t testing.TB, conn *amqp.Connection, typ QueueType, args amqp.Table) *Queue {
	t.Helper()
	name := unsafeChars.ReplaceAllString(t.Name(), "_")
	if len(name) > 120 {
		name = name[len(name)-120:]
	}
	name = "idemtest." + name + "." + rand.Text()[:10]
	q := &Queue{Name: name, DeadLetters: name + ".dlq", Type: typ, t: t, conn: conn}
	ch := q.channel()
	qargs := amqp.Table{
		"x-queue-type":              string(typ),
		"x-dead-letter-exchange":    "",
		"x-dead-letter-routing-key": q.DeadLetters,
		"x-expires":                 expires,
	}
	for k, v := range args {
		qargs[k] = v
	}
	t.Cleanup(q.deleteAll)
	if _, err := ch.QueueDeclare(q.DeadLetters, true, false, false, false, amqp.Table{"x-expires": expires}); err != nil {
		t.Fatalf("declare %s: %v", q.DeadLetters, err)
	}
	if _, err := ch.QueueDeclare(q.Name, true, false, false, false, qargs); err != nil {
		t.Fatalf("declare %s: %v", q.Name, err)
	}
	if err := ch.Confirm(false); err != nil {
		t.Fatal(err)
	}
	q.ch = ch
	return q
}

// channel opens a channel on the queue's connection, closed when t ends.
func (q *Queue) channel() *amqp.Channel {
	q.t.Helper()
	ch, err := q.conn.Channel()
	if err != nil {
		q.t.Fatalf("open a channel: %v", err)
	}
	q.t.Cleanup(func() { ch.Close() })
	return ch
}

// DeleteAtEnd has the queue name deleted when the test ends, such as a
// consumer's delay queue.
func (q *Queue) DeleteAtEnd(name string) {
	if name == "" {
		return
	}
	q.mu.Lock()
	q.extra = append(q.extra, name)
	q.mu.Unlock()
}

func (q *Queue) deleteAll() {
	c, err := amqp.Dial(URL())
	if err != nil {
		q.t.Errorf("deleting the test's queues: %v", err)
		return
	}
	defer c.Close()
	q.mu.Lock()
	names := append([]string{q.Name, q.DeadLetters}, q.extra...)
	q.mu.Unlock()
	for _, n := range names {
		ch, err := c.Channel()
		if err != nil {
			q.t.Errorf("deleting queue %s: %v", n, err)
			return
		}
		if _, err := ch.QueueDelete(n, false, false, false); err != nil {
			q.t.Errorf("deleting queue %s: %v", n, err)
		}
		ch.Close()
	}
}

// Msg is a message for the queue: its key goes in the idempotency-key
// header unless NoKey; Headers are added.
type Msg struct {
	Key     string
	Body    string
	Headers amqp.Table
	NoKey   bool
	Props   func(*amqp.Publishing) // edits the publishing last
}

// Publish publishes msgs to the queue, persistent, through the default
// exchange, and waits for the broker's confirms.
func (q *Queue) Publish(msgs ...Msg) {
	q.t.Helper()
	q.PublishTo(q.Name, msgs...)
}

// PublishTo publishes msgs to the queue named queue, as Publish does.
func (q *Queue) PublishTo(queue string, msgs ...Msg) {
	q.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	confs := make([]*amqp.DeferredConfirmation, 0, len(msgs))
	for _, m := range msgs {
		h := amqp.Table{}
		for k, v := range m.Headers {
			h[k] = v
		}
		if !m.NoKey {
			h["idempotency-key"] = m.Key
		}
		p := amqp.Publishing{Headers: h, Body: []byte(m.Body), DeliveryMode: amqp.Persistent, ContentType: "application/json"}
		if m.Props != nil {
			m.Props(&p)
		}
		c, err := q.ch.PublishWithDeferredConfirmWithContext(ctx, "", queue, true, false, p)
		if err != nil {
			q.t.Fatalf("publish to %s: %v", queue, err)
		}
		confs = append(confs, c)
	}
	for _, c := range confs {
		if ok, err := c.WaitContext(ctx); !ok || err != nil {
			q.t.Fatalf("publish to %s: not confirmed (%v)", queue, err)
		}
	}
}

// Ready returns how many messages of the queue named name wait for a
// consumer (unacknowledged deliveries not counted).
func (q *Queue) Ready(name string) int {
	q.t.Helper()
	ch := q.channel()
	defer ch.Close()
	qi, err := ch.QueueDeclarePassive(name, true, false, false, false, nil)
	if err != nil {
		q.t.Fatalf("inspect queue %s: %v", name, err)
	}
	return qi.Messages
}

// GetAll takes n messages from the queue named name, acking them, waiting
// up to timeout for them to arrive. It fails the test with fewer.
func (q *Queue) GetAll(name string, n int, timeout time.Duration) []amqp.Delivery {
	q.t.Helper()
	ch := q.channel()
	defer ch.Close()
	var got []amqp.Delivery
	deadline := time.Now().Add(timeout)
	for len(got) < n {
		d, ok, err := ch.Get(name, true)
		switch {
		case err != nil:
			q.t.Fatalf("get from %s: %v", name, err)
		case ok:
			got = append(got, d)
		case time.Now().After(deadline):
			q.t.Fatalf("%d messages in %s after %v, want %d", len(got), name, timeout, n)
		default:
			time.Sleep(20 * time.Millisecond)
		}
	}
	return got
}

// ConnectionNamed returns the process ids of the broker's connections
// whose client property connection_name is clientName, asking rabbitmqctl. It
// skips t when rabbitmqctl is not installed or cannot reach the broker
// (a broker on another machine).
func ConnectionNamed(t testing.TB, clientName string) []string {
	t.Helper()
	if _, err := exec.LookPath("rabbitmqctl"); err != nil {
		testenv.Unavailable(t, "rabbitmqctl is not installed: cannot close a connection from the broker's side")
	}
	out, err := exec.Command("rabbitmqctl", "list_connections", "-q", "--no-table-headers", "pid", "client_properties").Output()
	if err != nil {
		testenv.Unavailable(t, "rabbitmqctl list_connections: %v (a broker on another machine?)", err)
	}
	// One line per connection: the pid, a tab, the client properties as
	// an Erlang term holding {"connection_name","…"}.
	var names []string
	want := fmt.Sprintf(`{"connection_name",%q}`, clientName)
	for line := range strings.Lines(string(out)) {
		pid, props, ok := strings.Cut(strings.TrimSpace(line), "\t")
		if ok && strings.Contains(props, want) {
			names = append(names, pid)
		}
	}
	return names
}

// CloseConnection closes, from the broker's side, the connection whose
// client property connection_name is clientName, with rabbitmqctl. It
// touches that connection only.
func CloseConnection(t testing.TB, clientName string) {
	t.Helper()
	var names []string
	for deadline := time.Now().Add(10 * time.Second); ; {
		if names = ConnectionNamed(t, clientName); len(names) > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no connection named %q on the broker", clientName)
		}
		time.Sleep(100 * time.Millisecond)
	}
	for _, n := range names {
		out, err := exec.Command("rabbitmqctl", "close_connection", n, "closed by a test").CombinedOutput()
		if err != nil && !strings.Contains(string(out), "not found") {
			t.Fatalf("rabbitmqctl close_connection %q: %v\n%s", n, err, out)
		}
	}
}

// Eventually waits until cond holds, checking every 10ms, and fails t
// with what after timeout.
func Eventually(t testing.TB, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	testenv.WaitFor(t, timeout, what, cond)
}
