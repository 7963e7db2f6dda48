package dynamostore_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/idemgo/idem/dynamostore"
	"github.com/idemgo/idem/dynamostore/dynamostoretest"
	"github.com/idemgo/idem/internal/testenv"
	"github.com/idemgo/idem/storage"
)

// The benchmarks compare the store with the bare SDK doing the least a
// DynamoDB idempotency check can do, with the same client options against
// the same server, each side in a new table: a PutItem conditioned on the
// key being absent, then an UpdateItem of the result conditioned on the
// token. A bare replay is that PutItem failing, then a strongly consistent
// GetItem of the result (the server returns no item with the failure; see
// the package documentation). scripts/bench-dynamo.sh runs them in
// interleaved rounds and prints the ratios.

// A payment-like key: a 32-byte SHA-256 fingerprint and a 16-byte result.
var (
	benchFP     = sha256.Sum256([]byte("charge 10 EUR to card 4242"))
	benchResult = []byte("charge_0123456789")[:16]
)

// bench is a client, a new table and a store over it.
type bench struct {
	c     *dynamodb.Client
	table string
	s     *dynamostore.Store
}

func newBench(b testing.TB) *bench {
	c := dynamostoretest.Client(b)
	s := dynamostoretest.Store(b, c, dynamostore.Config{})
	return &bench{c: c, table: s.Config().Table, s: s}
}

// serverCPU returns the CPU time the server process has used so far, when
// IDEM_DYNAMODB_PID names it (scripts/bench-dynamo.sh sets it), and false
// otherwise. Unlike a rate, it moves little with the load of other
// processes on the machine.
func serverCPU() (time.Duration, bool) {
	pid := os.Getenv("IDEM_DYNAMODB_PID")
	if pid == "" {
		return 0, false
	}
	stat, err := os.ReadFile("/proc/" + pid + "/stat")
	if err != nil {
		return 0, false
	}
	// Fields 14 and 15 (utime, stime) after the command name in parentheses.
	f := strings.Fields(string(stat[bytes.LastIndexByte(stat, ')')+1:]))
	if len(f) < 13 {
		return 0, false
	}
	utime, _ := strconv.ParseInt(f[11], 10, 64)
	stime, _ := strconv.ParseInt(f[12], 10, 64)
	return time.Duration(utime+stime) * 10 * time.Millisecond, true // USER_HZ is 100 on Linux
}

// parallel runs op(0) … op(b.N-1) on exactly goroutines goroutines and
// reports keys/s, and the server's CPU time per key when serverCPU knows it.
func parallel(b *testing.B, goroutines int, op func(n int) error) {
	b.ResetTimer()
	cpu0, cpuKnown := serverCPU()
	var ru0, ru1 syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru0)
	start := time.Now()
	testenv.Spread(b, b.N, goroutines, op)
	elapsed := time.Since(start)
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru1)
	b.StopTimer()
	client := time.Duration(ru1.Utime.Nano() + ru1.Stime.Nano() - ru0.Utime.Nano() - ru0.Stime.Nano())
	b.ReportMetric(float64(client.Microseconds())/float64(b.N), "client-µs/key")
	b.ReportMetric(float64(b.N)/elapsed.Seconds(), "keys/s")
	if cpu1, ok := serverCPU(); ok && cpuKnown {
		b.ReportMetric(float64((cpu1-cpu0).Microseconds())/float64(b.N), "server-µs/key")
	}
}

var goroutineCounts = []int{1, 16}

// The bare sides: "bare" writes the least a check needs (key and token,
// then the result); "bare-powertools" writes what AWS Lambda Powertools'
// idempotency utility writes with payload validation on (key, status,
// TTL, in-progress expiry and payload hash, then the result), with its
// condition on the claim (absent, expired, or in progress past its
// expiry); "bare-item" writes the item the store writes, with the
// simplest conditions. The three ratios tell what the record's content
// costs from what the store's conditions and code cost.
type bareShape uint8

const (
	shapeBare bareShape = iota
	shapePowertools
	shapeItem
)

var bareShapes = []struct {
	name  string
	shape bareShape
}{{"bare", shapeBare}, {"bare-powertools", shapePowertools}, {"bare-item", shapeItem}}

func BenchmarkClaimComplete(b *testing.B) {
	ctx := context.Background()
	for _, g := range goroutineCounts {
		b.Run(fmt.Sprintf("store/goroutines=%d", g), func(b *testing.B) {
			s := newBench(b).s
			run := strconv.FormatInt(time.Now().UnixNano(), 36)
			parallel(b, g, func(n int) error {
				a := storage.ClaimArgs{Key: storage.StoreKey("orders", run+"-"+strconv.Itoa(n)), Fingerprint: benchFP[:], Lease: 30 * time.Second, Retention: time.Hour}
				return claimComplete(ctx, s, a)
			})
		})
		for _, shape := range bareShapes {
			b.Run(fmt.Sprintf("%s/goroutines=%d", shape.name, g), func(b *testing.B) {
				bb := newBench(b)
				run := strconv.FormatInt(time.Now().UnixNano(), 36)
				parallel(b, g, func(n int) error {
					return bb.bareClaimComplete(ctx, run+"-"+strconv.Itoa(n), strconv.Itoa(n), shape.shape)
				})
			})
		}
	}
}

func claimComplete(ctx context.Context, s *dynamostore.Store, a storage.ClaimArgs) error {
	c, err := s.Claim(ctx, a)
	if err != nil {
		return err
	}
	if c.Outcome != storage.Acquired {
		return fmt.Errorf("claim of %q: %v", a.Key, c.Outcome)
	}
	return s.Complete(ctx, a.Key, c.Token, benchResult, time.Hour)
}

func numAV(v string) types.AttributeValue { return &types.AttributeValueMemberN{Value: v} }

// barePut is the bare claim's item: key and token, or the other
// attributes of its shape (with values of the same sizes as the store's).
func barePut(key, token string, shape bareShape) map[string]types.AttributeValue {
	m := map[string]types.AttributeValue{"id": &types.AttributeValueMemberS{Value: key}, "token": numAV(token)}
	switch shape {
	case shapePowertools:
		delete(m, "token") // Powertools holds no token: it does not fence
		m["status"] = &types.AttributeValueMemberS{Value: "INPROGRESS"}
		m["expiration"], m["in_progress_expiration"] = numAV("1795444377"), numAV("1795440775406")
		m["validation"] = &types.AttributeValueMemberS{Value: "5e2bf57d3f40c4b6df69daf1936cb766f832374b4fc0259a7cbff06e2f70f269"}
	case shapeItem:
		m["status"] = &types.AttributeValueMemberS{Value: "INPROGRESS"}
		m["attempt"], m["fingerprint"] = numAV("1"), &types.AttributeValueMemberB{Value: benchFP[:]}
		m["lease_until"], m["expires_at"], m["expiration"] = numAV("1795440775406"), numAV("1795444375406"), numAV("1795444377")
		m["retention"], m["retention_ttl"] = numAV("3600000"), numAV("3602")
	}
	return m
}

// bareClaim is the bare side's conditional put of shape.
func (bb *bench) bareClaim(ctx context.Context, key, token string, shape bareShape) error {
	in := &dynamodb.PutItemInput{
		TableName:           &bb.table,
		Item:                barePut(key, token, shape),
		ConditionExpression: aws.String("attribute_not_exists(id)"),
	}
	if shape == shapePowertools {
		in.ConditionExpression = aws.String("attribute_not_exists(id) OR expiration < :now OR (#s = :inprogress AND in_progress_expiration < :nowms)")
		in.ExpressionAttributeNames = map[string]string{"#s": "status"}
		in.ExpressionAttributeValues = map[string]types.AttributeValue{
			":now": numAV("1795440700"), ":nowms": numAV("1795440700000"), ":inprogress": &types.AttributeValueMemberS{Value: "INPROGRESS"},
		}
	}
	_, err := bb.c.PutItem(ctx, in)
	return err
}

func (bb *bench) bareClaimComplete(ctx context.Context, key, token string, shape bareShape) error {
	if err := bb.bareClaim(ctx, key, token, shape); err != nil {
		return err
	}
	in := &dynamodb.UpdateItemInput{
		TableName:                 &bb.table,
		Key:                       map[string]types.AttributeValue{"id": &types.AttributeValueMemberS{Value: key}},
		UpdateExpression:          aws.String("SET #r = :r"),
		ConditionExpression:       aws.String("#t = :t"),
		ExpressionAttributeNames:  map[string]string{"#r": "result", "#t": "token"},
		ExpressionAttributeValues: map[string]types.AttributeValue{":r": &types.AttributeValueMemberB{Value: benchResult}, ":t": numAV(token)},
	}
	switch shape {
	case shapePowertools: // Powertools' outcome write has no condition
		in.ConditionExpression, in.ExpressionAttributeNames = nil, map[string]string{"#r": "result", "#s": "status"}
		in.UpdateExpression = aws.String("SET #r = :r, #s = :s, expiration = :x")
		in.ExpressionAttributeValues = map[string]types.AttributeValue{":r": &types.AttributeValueMemberB{Value: benchResult},
			":s": &types.AttributeValueMemberS{Value: "COMPLETED"}, ":x": numAV("1795444377")}
	case shapeItem:
		in.UpdateExpression = aws.String("SET #r = :r, #s = :s, expires_at = :e, expiration = :x")
		in.ExpressionAttributeNames["#s"] = "status"
		v := in.ExpressionAttributeValues
		v[":s"], v[":e"], v[":x"] = &types.AttributeValueMemberS{Value: "COMPLETED"}, numAV("1795444375406"), numAV("1795444377")
	}
	_, err := bb.c.UpdateItem(ctx, in)
	return err
}

// replayKeys is how many completed keys a replay benchmark cycles through.
const replayKeys = 64

func BenchmarkReplay(b *testing.B) {
	ctx := context.Background()
	for _, g := range goroutineCounts {
		b.Run(fmt.Sprintf("store/goroutines=%d", g), func(b *testing.B) {
			s := newBench(b).s
			keys := make([]storage.ClaimArgs, replayKeys)
			for i := range keys {
				keys[i] = storage.ClaimArgs{Key: storage.StoreKey("orders", strconv.Itoa(i)), Fingerprint: benchFP[:], Lease: 30 * time.Second, Retention: time.Hour}
				if err := claimComplete(ctx, s, keys[i]); err != nil {
					b.Fatal(err)
				}
			}
			parallel(b, g, func(n int) error {
				c, err := s.Claim(ctx, keys[n%replayKeys])
				if err == nil && c.Outcome != storage.Duplicate {
					err = fmt.Errorf("replay: %v", c.Outcome)
				}
				return err
			})
		})
		for _, shape := range bareShapes {
			b.Run(fmt.Sprintf("%s/goroutines=%d", shape.name, g), func(b *testing.B) {
				bb := newBench(b)
				for i := range replayKeys {
					if err := bb.bareClaimComplete(ctx, strconv.Itoa(i), strconv.Itoa(i), shape.shape); err != nil {
						b.Fatal(err)
					}
				}
				parallel(b, g, func(n int) error { return bb.bareReplay(ctx, strconv.Itoa(n%replayKeys), shape.shape) })
			})
		}
	}
}

func (bb *bench) bareReplay(ctx context.Context, key string, shape bareShape) error {
	err := bb.bareClaim(ctx, key, "0", shape)
	if ccf := (*types.ConditionalCheckFailedException)(nil); !errors.As(err, &ccf) {
		return fmt.Errorf("bare replay of %s: the conditional put answered %v", key, err)
	}
	out, err := bb.c.GetItem(ctx, &dynamodb.GetItemInput{
		TableName:      &bb.table,
		Key:            map[string]types.AttributeValue{"id": &types.AttributeValueMemberS{Value: key}},
		ConsistentRead: aws.Bool(true),
	})
	if err == nil && out.Item["result"] == nil {
		err = fmt.Errorf("bare replay of %s: no result", key)
	}
	return err
}
