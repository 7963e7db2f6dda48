package idemsqs

import (
	"errors"
	"fmt"
	"strconv"
	"sync"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/idemgo/idem/internal/chassis"
)

// settler deletes messages and changes their visibility in batch calls of
// up to ten: what the handlers settle while a call is under way goes in
// the next. Each entry of a batch has its own answer: an entry SQS failed
// on its side (SenderFault false) is tried again in the next call, a few
// times; one it refused (a receipt handle no longer valid, its visibility
// having ended) is the message's own outcome, reported as unsettled: SQS
// delivers it again, and the store answers that delivery.
type settler struct {
	r *runner

	mu      sync.Mutex
	deletes []settling
	changes []settling

	wake chan struct{}
	quit chan struct{}
	done chan struct{}
}

// settling is one message to delete, or whose visibility to change to
// secs, and what to call with SQS's answer.
type settling struct {
	j     *job
	secs  int32
	tries int
	done  func(error)
}

// maxSettleTries bounds the calls an entry SQS failed on its side is
// tried in.
const maxSettleTries = 5

func newSettler(r *runner) *settler {
	s := &settler{r: r, wake: make(chan struct{}, 1), quit: make(chan struct{}), done: make(chan struct{})}
	go s.loop()
	return s
}

func (s *settler) delete(j *job, done func(error)) {
	s.add(&s.deletes, settling{j: j, done: done})
}

func (s *settler) change(j *job, secs int32, done func(error)) {
	s.add(&s.changes, settling{j: j, secs: secs, done: done})
}

func (s *settler) add(q *[]settling, e settling) {
	s.mu.Lock()
	*q = append(*q, e)
	s.mu.Unlock()
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

// close settles what waits, and returns; nothing is added after.
func (s *settler) close() {
	close(s.quit)
	<-s.done
}

func (s *settler) loop() {
	defer close(s.done)
	for quit := false; ; {
		select {
		case <-s.wake:
		case <-s.quit:
			quit = true
		}
		for s.flush() {
		}
		if quit {
			return
		}
	}
}

// flush sends one batch of deletes and one of visibility changes, and
// reports whether any was sent.
func (s *settler) flush() bool {
	s.mu.Lock()
	dels := take(&s.deletes)
	changes := take(&s.changes)
	s.mu.Unlock()
	if len(dels) > 0 {
		s.send(dels, true)
	}
	if len(changes) > 0 {
		s.send(changes, false)
	}
	return len(dels)+len(changes) > 0
}

// take takes up to ten entries off the front of q.
func take(q *[]settling) []settling {
	n := min(len(*q), maxReceive)
	batch := (*q)[:n:n]
	*q = (*q)[n:]
	return batch
}

// send deletes batch's messages (del) or changes their visibility.
func (s *settler) send(batch []settling, del bool) {
	r := s.r
	ctx, cancel := r.apiContext()
	defer cancel()
	var failed []types.BatchResultErrorEntry
	var err error
	if del {
		entries := make([]types.DeleteMessageBatchRequestEntry, len(batch))
		for i, e := range batch {
			entries[i] = types.DeleteMessageBatchRequestEntry{Id: aws.String(entryID(i)), ReceiptHandle: e.j.m.ReceiptHandle}
		}
		var out *sqs.DeleteMessageBatchOutput
		if out, err = r.c.api.DeleteMessageBatch(ctx, &sqs.DeleteMessageBatchInput{QueueUrl: aws.String(r.c.queue), Entries: entries}); err == nil {
			failed = out.Failed
		}
	} else {
		entries := make([]types.ChangeMessageVisibilityBatchRequestEntry, len(batch))
		for i, e := range batch {
			entries[i] = types.ChangeMessageVisibilityBatchRequestEntry{Id: aws.String(entryID(i)), ReceiptHandle: e.j.m.ReceiptHandle,
				VisibilityTimeout: e.secs}
		}
		var out *sqs.ChangeMessageVisibilityBatchOutput
		if out, err = r.c.api.ChangeMessageVisibilityBatch(ctx, &sqs.ChangeMessageVisibilityBatchInput{QueueUrl: aws.String(r.c.queue), Entries: entries}); err == nil {
			failed = out.Failed
		}
	}
	if err != nil {
		// The call as a whole: the SDK already tried it again; an outage
		// that lasts leaves the messages to their visibility timeout.
		for _, e := range batch {
			s.retry(e, del, err)
		}
		return
	}
	answered := make([]bool, len(batch))
	for _, f := range failed {
		i := entryIndex(f.Id)
		if i < 0 || i >= len(batch) || answered[i] {
			continue
		}
		answered[i] = true
		err := &EntryError{Code: aws.ToString(f.Code), Message: aws.ToString(f.Message), SenderFault: f.SenderFault}
		if f.SenderFault {
			batch[i].done(err)
		} else {
			s.retry(batch[i], del, err)
		}
	}
	for i, e := range batch {
		if !answered[i] {
			e.done(nil)
		}
	}
}

// retry queues e again for the next call, unless it was tried enough or
// the error says SQS refused it for good.
func (s *settler) retry(e settling, del bool, err error) {
	e.tries++
	if e.tries >= maxSettleTries || refusal(err) == chassis.Refused {
		e.done(err)
		return
	}
	q := &s.changes
	if del {
		q = &s.deletes
	}
	s.mu.Lock()
	*q = append(*q, e)
	s.mu.Unlock()
}

// EntryError is SQS's answer to one entry of a batch call that failed
// while the others may have succeeded: the Failed entries of
// DeleteMessageBatch, ChangeMessageVisibilityBatch and SendMessageBatch.
type EntryError struct {
	Code        string // ReceiptHandleIsInvalid, InvalidParameterValue, …
	Message     string
	SenderFault bool // the request's fault (true), or SQS's (false: worth trying again)
}

func (e *EntryError) Error() string {
	return fmt.Sprintf("idemsqs: SQS refused the entry: %s: %s", e.Code, e.Message)
}

// ErrEntryRefused is matched by an *EntryError of the request's fault.
var ErrEntryRefused = errors.New("idemsqs: SQS refused the entry")

// Is reports whether target is ErrEntryRefused and the error is the
// request's fault.
func (e *EntryError) Is(target error) bool { return target == ErrEntryRefused && e.SenderFault }

// entryID is the id of the i-th entry of a batch call.
func entryID(i int) string { return strconv.Itoa(i) }

// entryIndex returns the index an entry id names, or -1.
func entryIndex(id *string) int {
	i, err := strconv.Atoi(aws.ToString(id))
	if err != nil {
		return -1
	}
	return i
}
