package dynamostore_test

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"hash/crc32"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/idemgo/idem/dynamostore"
	"github.com/idemgo/idem/dynamostore/dynamostoretest"
	"github.com/idemgo/idem/storage"
)

// clock is a settable clock for Config.Now; stores built on it with
// different offsets are hosts whose clocks disagree by those offsets.
type clock struct{ ns atomic.Int64 }

func newClock() *clock {
	c := &clock{}
	c.ns.Store(time.Now().Truncate(time.Second).UnixNano())
	return c
}

func (c *clock) now() time.Time      { return time.Unix(0, c.ns.Load()) }
func (c *clock) add(d time.Duration) { c.ns.Add(int64(d)) }
func (c *clock) set(t time.Time)     { c.ns.Store(t.UnixNano()) }
func (c *clock) skewed(d time.Duration) func() time.Time {
	return func() time.Time { return c.now().Add(d) }
}

// rawItem reads key's item as DynamoDB holds it, bypassing the store: nil
// when there is none.
func rawItem(t testing.TB, c *dynamodb.Client, table, key string) map[string]types.AttributeValue {
	t.Helper()
	out, err := c.GetItem(ctxT(t), &dynamodb.GetItemInput{
		TableName: &table, ConsistentRead: aws.Bool(true),
		Key: map[string]types.AttributeValue{dynamostore.AttrKey: itemKey(key)},
	})
	if err != nil {
		t.Fatalf("GetItem: %v", err)
	}
	return out.Item
}

// itemKey is the documented partition key of a store key: the key in
// unpadded base64url.
func itemKey(key string) types.AttributeValue {
	return &types.AttributeValueMemberS{Value: base64.RawURLEncoding.EncodeToString([]byte(key))}
}

// numAttr returns the number attribute name of item, failing t when it is
// missing.
func numAttr(t testing.TB, item map[string]types.AttributeValue, name string) int64 {
	t.Helper()
	v, ok := item[name].(*types.AttributeValueMemberN)
	if !ok {
		t.Fatalf("item has no number %s: %v", name, item)
	}
	n, err := strconv.ParseInt(v.Value, 10, 64)
	if err != nil {
		t.Fatalf("%s = %q: %v", name, v.Value, err)
	}
	return n
}

func mustClaim(t testing.TB, s storage.Store, a storage.ClaimArgs, want storage.Outcome) storage.Claim {
	t.Helper()
	c, err := s.Claim(ctxT(t), a)
	if err != nil {
		t.Fatalf("Claim(%q): %v", a.Key, err)
	}
	if c.Outcome != want {
		t.Fatalf("Claim(%q) = %v (record %+v), want %v", a.Key, c.Outcome, c.Record, want)
	}
	return c
}

func args(key string, lease time.Duration) storage.ClaimArgs {
	return storage.ClaimArgs{Key: storage.StoreKey("test", key), Fingerprint: []byte("fp"), Lease: lease, Retention: time.Hour}
}

// proxy is an HTTP transport between the SDK and the server that records
// the operations the store sends and can act as DynamoDB does where
// dynalite does not, or as a network that loses replies.
type proxy struct {
	next http.RoundTripper

	// returnOld makes a failed condition of a request that asked for
	// ReturnValuesOnConditionCheckFailure ALL_OLD carry the item, as
	// DynamoDB's answer does (dynalite's does not). The proxy reads the
	// item right after the failure: the tests that use it do not race.
	returnOld bool

	mu     sync.Mutex
	ops    []string
	lose   map[string]int    // operation → how many of its next replies to lose
	before map[string]func() // operation → what to do once before its next request goes on
}

func (p *proxy) RoundTrip(r *http.Request) (*http.Response, error) {
	op := strings.TrimPrefix(r.Header.Get("X-Amz-Target"), "DynamoDB_20120810.")
	body, err := io.ReadAll(r.Body)
	if err != nil {
		return nil, err
	}
	r.Body = io.NopCloser(bytes.NewReader(body))
	p.mu.Lock()
	p.ops = append(p.ops, op)
	lose := p.lose[op] > 0
	if lose {
		p.lose[op]--
	}
	before := p.before[op]
	delete(p.before, op)
	p.mu.Unlock()
	if before != nil {
		before()
	}
	resp, err := p.next.RoundTrip(r)
	if err != nil {
		return nil, err
	}
	if lose { // the server did the work; its answer never arrives
		resp.Body.Close()
		return nil, errors.New("read tcp 127.0.0.1: connection reset by peer")
	}
	if p.returnOld && resp.StatusCode == http.StatusBadRequest && bytes.Contains(body, []byte(`"ReturnValuesOnConditionCheckFailure":"ALL_OLD"`)) {
		return p.withItem(r, body, resp)
	}
	return resp, nil
}

// withItem adds to a ConditionalCheckFailedException answer the item the
// request addressed.
func (p *proxy) withItem(r *http.Request, reqBody []byte, resp *http.Response) (*http.Response, error) {
	errBody, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil {
		return nil, err
	}
	var failure map[string]any
	if json.Unmarshal(errBody, &failure) == nil && strings.HasSuffix(failure["__type"].(string), "ConditionalCheckFailedException") {
		var req struct {
			TableName any
			Key, Item map[string]any
		}
		json.Unmarshal(reqBody, &req)
		if req.Key == nil { // a PutItem
			req.Key = map[string]any{dynamostore.AttrKey: req.Item[dynamostore.AttrKey]}
		}
		get, _ := json.Marshal(map[string]any{"TableName": req.TableName, "Key": req.Key, "ConsistentRead": true})
		g := r.Clone(r.Context())
		g.Body, g.ContentLength = io.NopCloser(bytes.NewReader(get)), int64(len(get))
		g.Header.Set("X-Amz-Target", "DynamoDB_20120810.GetItem")
		gr, err := p.next.RoundTrip(g)
		if err != nil {
			return nil, err
		}
		var out map[string]any
		err = json.NewDecoder(gr.Body).Decode(&out)
		gr.Body.Close()
		if err != nil {
			return nil, err
		}
		if item, ok := out["Item"]; ok {
			failure["Item"] = item
			errBody, _ = json.Marshal(failure)
		}
	}
	resp.Body = io.NopCloser(bytes.NewReader(errBody))
	resp.ContentLength = int64(len(errBody))
	resp.Header.Set("Content-Length", strconv.Itoa(len(errBody)))
	resp.Header.Set("X-Amz-Crc32", strconv.FormatUint(uint64(crc32.ChecksumIEEE(errBody)), 10))
	return resp, nil
}

// take returns the operations recorded since the last take.
func (p *proxy) take() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	ops := p.ops
	p.ops = nil
	return ops
}

func (p *proxy) loseNext(op string, n int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.lose == nil {
		p.lose = map[string]int{}
	}
	p.lose[op] += n
}

// beforeNext runs f once, before the next request of op goes on to the
// server.
func (p *proxy) beforeNext(op string, f func()) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.before == nil {
		p.before = map[string]func(){}
	}
	p.before[op] = f
}

// proxiedClient returns a client whose requests go through p.
func proxiedClient(t testing.TB, p *proxy, opts ...func(*dynamodb.Options)) *dynamodb.Client {
	t.Helper()
	dynamostoretest.Client(t) // skips or fails without a server
	tr := http.DefaultTransport.(*http.Transport).Clone()
	t.Cleanup(tr.CloseIdleConnections)
	p.next = tr
	return dynamostoretest.NewClient(&http.Client{Transport: p}, opts...)
}
