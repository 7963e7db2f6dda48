package idemsqs

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"
)

// The visibility timeout is SQS's lease on a message, as the Guard's lease
// is idem's on its key: the keeper holds the one as long as the Guard
// holds the other. From its receipt to its settlement, a message is kept
// invisible: every third of the visibility timeout the keeper sets it
// again to the whole timeout, for every message held, in
// ChangeMessageVisibilityBatch calls of ten, as the Guard's heartbeat
// extends a key's lease every third of the lease. A message whose
// handler's context ended (its lease lost, or the drain timeout passed) is
// no longer extended: SQS may deliver it again once its visibility ends,
// and the store's claim answers that delivery (busy while another holder
// runs it, a duplicate once its outcome is stored), so no handler runs
// twice at once whatever SQS does.

// keeper extends the visibility of the messages held.
type keeper struct {
	r *runner

	// mu is held through an extension's calls too, so that a message
	// removed (to be deleted or made visible) is never extended after.
	mu   sync.Mutex
	held map[*job]struct{}

	quit chan struct{}
	done chan struct{}
}

func newKeeper(r *runner) *keeper {
	k := &keeper{r: r, held: map[*job]struct{}{}, quit: make(chan struct{}), done: make(chan struct{})}
	go k.loop()
	return k
}

// add keeps jobs' messages invisible from now on.
func (k *keeper) add(jobs ...*job) {
	k.mu.Lock()
	defer k.mu.Unlock()
	for _, j := range jobs {
		k.held[j] = struct{}{}
	}
}

// remove stops extending j's message; it waits for an extension under way.
func (k *keeper) remove(j *job) {
	k.mu.Lock()
	defer k.mu.Unlock()
	delete(k.held, j)
}

func (k *keeper) close() {
	close(k.quit)
	<-k.done
}

func (k *keeper) loop() {
	defer close(k.done)
	t := time.NewTicker(k.r.vis / 3)
	defer t.Stop()
	for {
		select {
		case <-t.C:
			k.extend()
		case <-k.quit:
			return
		}
	}
}

// extend sets the visibility of every message held, whose handler's lease
// is not lost, to the visibility timeout from now.
func (k *keeper) extend() {
	k.mu.Lock()
	defer k.mu.Unlock()
	var batch []*job
	for j := range k.held {
		if ctx := j.lease.Load(); ctx != nil && (*ctx).Err() != nil {
			continue // the Guard let the key go: so does the keeper
		}
		batch = append(batch, j)
	}
	// Within a third of the timeout, so that a slow call cannot let the
	// messages it extends become visible.
	ctx, cancel := context.WithTimeout(context.WithoutCancel(k.r.hctx), k.r.vis/3)
	defer cancel()
	for len(batch) > 0 {
		n := min(len(batch), maxReceive)
		k.extendBatch(ctx, batch[:n])
		batch = batch[n:]
	}
}

func (k *keeper) extendBatch(ctx context.Context, jobs []*job) {
	r := k.r
	entries := make([]types.ChangeMessageVisibilityBatchRequestEntry, len(jobs))
	for i, j := range jobs {
		entries[i] = types.ChangeMessageVisibilityBatchRequestEntry{Id: aws.String(entryID(i)), ReceiptHandle: j.m.ReceiptHandle,
			VisibilityTimeout: seconds(r.vis)}
	}
	out, err := r.c.api.ChangeMessageVisibilityBatch(ctx, &sqs.ChangeMessageVisibilityBatchInput{QueueUrl: aws.String(r.c.queue), Entries: entries})
	if err != nil {
		r.c.o.Logger().Warn("idemsqs: cannot extend the visibility of the messages held; SQS may deliver them again, "+
			"and the store answers that delivery", slog.String("queue", r.c.queue), slog.Int("messages", len(jobs)), slog.Any("error", err))
		return
	}
	for _, f := range out.Failed {
		i := entryIndex(f.Id)
		if i < 0 || i >= len(jobs) {
			continue
		}
		r.c.o.Logger().Warn("idemsqs: cannot extend the visibility of a message held; SQS may deliver it again, "+
			"and the store answers that delivery", slog.String("queue", r.c.queue), slog.String("message_id", jobs[i].ev.MessageID),
			slog.String("key", jobs[i].ev.Key), slog.String("code", aws.ToString(f.Code)), slog.String("error", aws.ToString(f.Message)))
	}
}
