package redisstore_test

import (
	"context"
	"errors"
	"sync"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/idemgo/idem/idemtest"
	"github.com/idemgo/idem/redisstore"
	"github.com/idemgo/idem/storage"
)

// replySizes is a go-redis hook that keeps the size of the largest reply
// the server sent to a script, in bytes of strings. A claim's SET … GET
// answers the whole value, as a GET would: it is not counted.
type replySizes struct {
	mu      sync.Mutex
	largest int
}

func (h *replySizes) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *replySizes) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		err := next(ctx, cmd)
		h.see(cmd)
		return err
	}
}

func (h *replySizes) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		err := next(ctx, cmds)
		for _, cmd := range cmds {
			h.see(cmd)
		}
		return err
	}
}

func (h *replySizes) see(cmd redis.Cmder) {
	c, ok := cmd.(interface{ Val() any })
	if !ok || cmd.Name() == "set" {
		return
	}
	n := stringBytes(c.Val())
	h.mu.Lock()
	h.largest = max(h.largest, n)
	h.mu.Unlock()
}

func (h *replySizes) reset() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	n := h.largest
	h.largest = 0
	return n
}

func stringBytes(v any) int {
	switch v := v.(type) {
	case string:
		return len(v)
	case []any:
		n := 0
		for _, e := range v {
			n += stringBytes(e)
		}
		return n
	}
	return 0
}

// TestStoredValueOverTheCapIsRefusedOnRead: a Store reads no result longer
// than its MaxValueSize. A record another Store (with a larger limit)
// stored is refused by Claim, ClaimBatch and Get with a
// *storage.ValueTooLargeError naming the key and the stored size. The scripts
// never send the result (Get's, and a claim's that finds a key in
// progress): their replies stay the size of a header. A claim's SET … GET
// is answered the whole value, and refuses it.
func TestStoredValueOverTheCapIsRefusedOnRead(t *testing.T) {
	h := &replySizes{}
	writer := newStore(t, sharedClient(t), redisstore.Config{MaxValueSize: 1 << 20})
	reader, err := redisstore.New(sharedClient(t, h), redisstore.Config{Prefix: writer.Config().Prefix, MaxValueSize: 1024})
	if err != nil {
		t.Fatal(err)
	}
	idemtest.RunStoredValueOverLimit(t, writer, reader, func(err error, key string, size int) bool {
		tooLarge, ok := errors.AsType[*storage.ValueTooLargeError](err)
		return ok && tooLarge.Stored && tooLarge.Key == key && tooLarge.Size == size && tooLarge.Max == 1024
	})
	if n := h.reset(); n > 1024 {
		t.Errorf("the reading store was sent a reply of %d bytes, more than its MaxValueSize", n)
	}
}
