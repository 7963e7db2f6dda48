package redisstore

import (
	"context"
	"errors"
	"strings"

	"github.com/redis/go-redis/v9"

	"github.com/idemgo/idem/storage"
)

var _ storage.Scanner = (*Store)(nil)

// scanCount is the COUNT hint of Scan's SCAN calls.
const scanCount = 500

// Scan implements [storage.Scanner] with SCAN over the keys of Config.Prefix
// whose encoded store key starts as prefix's does (on Cluster, on every
// primary), then a Get of each: an operator's tool, which reads each
// record in a round trip of its own. SCAN may return a key twice; Scan
// lists it once. A key that expired or was deleted meanwhile, or holds a
// value this package did not write, is left out. A record holding a result
// longer than Config.MaxValueSize is listed without it (as pgstore lists
// one): the get script does not send it, and the record's other fields
// are what an operator counts or deletes it by.
func (s *Store) Scan(ctx context.Context, prefix string, fn func(storage.Record) bool) error {
	// The base64 of prefix's whole 3-byte groups starts the encoding of
	// every key that starts with prefix; the rest is checked decoded.
	whole := prefix[:len(prefix)/3*3]
	match := globEscape(s.cfg.Prefix) + "{" + b64.EncodeToString([]byte(whole)) + "*"
	seen := map[string]bool{}
	stopped, done := errors.New("stopped"), false
	scan := func(ctx context.Context, c *redis.Client) error {
		if done { // fn returned false while another primary was scanned
			return stopped
		}
		iter := c.Scan(ctx, 0, match, scanCount).Iterator()
		for iter.Next(ctx) {
			rk := iter.Val()
			enc, ok := strings.CutPrefix(rk, s.cfg.Prefix+"{")
			if !ok || !strings.HasSuffix(enc, "}") {
				continue
			}
			raw, err := b64.DecodeString(strings.TrimSuffix(enc, "}"))
			key := string(raw)
			if err != nil || !strings.HasPrefix(key, prefix) || seen[key] {
				continue
			}
			seen[key] = true
			rec, _, err := s.get(ctx, "Scan", key)
			switch {
			case errors.Is(err, storage.ErrNotFound), errors.Is(err, ErrUnknownFormat):
				continue
			case err != nil:
				return err
			}
			if !fn(rec) {
				done = true
				return stopped
			}
		}
		if err := iter.Err(); err != nil {
			return unavailable(ctx, "Scan", err)
		}
		return nil
	}
	var err error
	switch c := s.client.(type) {
	case *redis.ClusterClient:
		// ForEachMaster runs a goroutine per primary: they scan one at
		// a time, so that fn and seen have one user at a time.
		turn := make(chan struct{}, 1)
		err = c.ForEachMaster(ctx, func(ctx context.Context, node *redis.Client) error {
			turn <- struct{}{}
			defer func() { <-turn }()
			return scan(ctx, node)
		})
	case *redis.Client:
		err = scan(ctx, c)
	default:
		return errors.New("redisstore: Scan: the client is neither a *redis.Client nor a *redis.ClusterClient")
	}
	if errors.Is(err, stopped) {
		return nil
	}
	if err == nil {
		err = ctx.Err()
	}
	return err
}

// globEscape escapes the glob characters of SCAN's MATCH in s.
func globEscape(s string) string {
	var b strings.Builder
	for _, r := range s {
		if strings.ContainsRune(`*?[]\^`, r) {
			b.WriteByte('\\')
		}
		b.WriteRune(r)
	}
	return b.String()
}
