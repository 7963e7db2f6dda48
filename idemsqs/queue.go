package idemsqs

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"
	"github.com/aws/smithy-go"

	"github.com/idemgo/idem/consumer"
	"github.com/idemgo/idem/internal/chassis"
)

// start reads the queue's attributes, and the dead-letter queue's: an
// outage is tried again until ctx ends, anything else is Run's error.
func (r *runner) start(ctx context.Context) error {
	o := &r.c.o
	attrs, err := r.attributes(ctx, r.c.queue, types.QueueAttributeNameVisibilityTimeout,
		types.QueueAttributeNameFifoQueue, types.QueueAttributeNameRedrivePolicy)
	if err != nil {
		return fmt.Errorf("idemsqs: Run: reading the queue %s: %w", r.c.queue, err)
	}
	r.fifo = attrs[string(types.QueueAttributeNameFifoQueue)] == "true"
	r.redriven = attrs[string(types.QueueAttributeNameRedrivePolicy)] != ""
	r.vis = o.visibility
	if r.vis == 0 {
		secs, err := strconv.Atoi(attrs[string(types.QueueAttributeNameVisibilityTimeout)])
		if err != nil {
			return fmt.Errorf("idemsqs: Run: the queue %s has no VisibilityTimeout attribute SQS's way (%q)", r.c.queue,
				attrs[string(types.QueueAttributeNameVisibilityTimeout)])
		}
		// A queue's timeout of 0 would have every message visible again
		// at once: the consumer keeps it invisible for a second at least.
		r.vis = max(time.Duration(secs)*time.Second, time.Second)
	}
	if o.redrive && !r.redriven {
		return fmt.Errorf("idemsqs: Run: WithRedrivePolicy, but the queue %s has no redrive policy: poison would come back "+
			"without end. Give the queue a RedrivePolicy (deadLetterTargetArn, maxReceiveCount), or pass WithDeadLetter or WithDiscardPoison", r.c.queue)
	}
	if o.deadLetter == "" {
		return nil
	}
	r.dlq = o.deadLetter
	attrs, err = r.attributes(ctx, r.dlq, types.QueueAttributeNameFifoQueue, types.QueueAttributeNameMaximumMessageSize)
	if err != nil {
		return fmt.Errorf("idemsqs: Run: WithDeadLetter: %w", &consumer.DeadLetterMissingError{Destination: fmt.Sprintf("queue %q", r.dlq), Err: err})
	}
	r.dlqFIFO = attrs[string(types.QueueAttributeNameFifoQueue)] == "true"
	r.dlqMax, err = strconv.Atoi(attrs[string(types.QueueAttributeNameMaximumMessageSize)])
	if err != nil || r.dlqMax <= 0 {
		r.dlqMax = defaultMaxMessage
	}
	return nil
}

// defaultMaxMessage is the size limit of a dead letter when the
// dead-letter queue does not tell its MaximumMessageSize: SQS's smallest
// default.
const defaultMaxMessage = 256 << 10

// attributes returns the attributes names of the queue at url, trying
// again with a backoff while SQS cannot be reached.
func (r *runner) attributes(ctx context.Context, url string, names ...types.QueueAttributeName) (map[string]string, error) {
	for failures := 1; ; failures++ {
		out, err := r.c.api.GetQueueAttributes(ctx, &sqs.GetQueueAttributesInput{QueueUrl: aws.String(url), AttributeNames: names})
		if err == nil {
			return out.Attributes, nil
		}
		if refusal(err) != chassis.Unreached || ctx.Err() != nil {
			return nil, err
		}
		pause := r.c.o.Backoff(failures)
		r.c.o.Logger().WarnContext(ctx, "idemsqs: cannot read the queue's attributes; trying again", slog.String("queue", url),
			slog.Duration("pause", pause), slog.Any("error", err))
		if !r.sleep(pause) {
			return nil, ctx.Err()
		}
	}
}

// refusal says what SQS's error err means for a call that may be made
// again: SQS answered no (a 4xx other than throttling: a queue that does
// not exist, a request it refuses), refused the message as too large, or
// could not be reached (no answer, a 5xx, throttling).
func refusal(err error) chassis.Refusal {
	if apiErr, ok := errors.AsType[smithy.APIError](err); ok {
		// The JSON protocol's codes may carry the query protocol's
		// prefix (AWS.SimpleQueueService.NonExistentQueue).
		code, msg := strings.TrimPrefix(apiErr.ErrorCode(), "AWS.SimpleQueueService."), apiErr.ErrorMessage()
		switch {
		case throttled(code):
			return chassis.Unreached
		case code == "InvalidParameterValue" && strings.Contains(msg, "shorter than"),
			code == "BatchRequestTooLong", code == "RequestEntityTooLarge":
			return chassis.RefusedTooLarge
		}
	}
	if status, ok := errors.AsType[interface {
		error
		HTTPStatusCode() int
	}](err); ok {
		if s := status.HTTPStatusCode(); s >= 400 && s < 500 && s != 429 && s != 408 {
			return chassis.Refused
		}
	}
	return chassis.Unreached
}

// throttled reports whether an SQS error code asks the caller to slow
// down: an outage, tried again.
func throttled(code string) bool {
	switch code {
	case "ThrottlingException", "RequestThrottled", "KmsThrottled", "ServiceUnavailable", "InternalError":
		return true
	}
	return false
}
