// Package lincheck checks that a store's transitions are linearizable: that
// the answers many concurrent clients got could have come, one at a time,
// from the state machine of package idem. It records a history of random
// Claim, Complete, Fail, Release, Extend and Get calls on a few keys and
// hands it to porcupine with a model of the state machine.
//
// The model holds the store's clock. By default leases and retentions are
// an hour, so nothing expires during a check. With the durations of
// [Expiring] (tens of milliseconds) leases run out, other clients take
// over, late holders finish and records are forgotten and claimed anew in
// the middle of the history. A store reads its own clock (memstore
// time.Now, Redis its server time, PostgreSQL statement_timestamp(),
// dynamostore the calling host's), at
// an instant the checker knows only to lie inside the call; the machine's
// servers share the host clock, so the model knows every lease end and
// expiry as an interval: a lease granted by a call made in [c, r] ends in
// [c+L, r+L]. A later claim made in [c2, r2] must answer Busy when r2 is
// before that interval, must take over when c2 is after it, and may do
// either in between; the answer it gives narrows the interval. Record
// expiry after the retention, Extend, Release and the outcomes' retention
// are modelled the same way. Options.Tolerance widens every call's
// interval by how far the store's clock may be from the checker's
// (Redis keeps expiries in whole milliseconds).
package lincheck

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/storage"
)

// Options size a check. The zero value checks 6 clients doing 60 calls
// each on 8 keys, with leases and retentions of an hour: keys reach an
// outcome quickly, after which every call is a duplicate, so enough keys
// keep the interesting in-progress phase busy.
type Options struct {
	Clients, Calls, Keys int
	Seed                 uint64 // 0: random

	// Lease is the lease of every Claim; an Extend asks for half, once or
	// twice it. Retention is every Claim's retention, OutcomeRetention
	// every Complete's and Fail's. Default one hour each: nothing expires.
	Lease, Retention, OutcomeRetention time.Duration

	// Think is the longest pause a client takes before each call (a
	// uniformly random pause up to it), so that the history spans several
	// leases and retentions. Default none.
	Think time.Duration

	// Tolerance is how far the store's clock may be from this process's
	// clock (time.Now), added on both sides of every call's interval.
	// Default 2ms: Redis keeps expiries in whole milliseconds and reads its
	// clock to the millisecond. Negative: none.
	Tolerance time.Duration
}

// Expiring returns the options of a check in which leases and records
// expire during the history: leases of 20ms, records kept 30ms after the
// lease and outcomes 50ms, clients pausing up to 8ms between calls, on 3
// keys so that each key sees many calls per lease.
func Expiring() Options {
	return Options{
		Clients: 5, Calls: 60, Keys: 3,
		Lease: 20 * time.Millisecond, Retention: 30 * time.Millisecond, OutcomeRetention: 50 * time.Millisecond,
		Think: 8 * time.Millisecond,
	}
}

// DefaultTolerance is the default of Options.Tolerance.
const DefaultTolerance = 2 * time.Millisecond

const maxAttempts = 3

type kind uint8

const (
	claim      kind = iota
	claimOther      // a claim with another payload: ErrKeyReused unless absent
	complete
	fail
	release
	extend
	get
)

var kindNames = [...]string{"claim", "claim-other", "complete", "fail", "release", "extend", "get"}

type input struct {
	kind  kind
	key   string
	token storage.Token
	value string
	lease int64 // Claim's and Extend's lease, ns
	ret   int64 // Claim's, Complete's or Fail's retention, ns
	at    span  // the instant the store read its clock: inside the call, give or take the tolerance
}

func (i input) fingerprint() string {
	if i.kind == claimOther {
		return "other"
	}
	return "fp"
}

type output struct {
	err     string // "", "reused", "lost", "notfound"
	outcome storage.Outcome
	token   storage.Token // Acquired: the new token; Get: the record's
	attempt int
	status  storage.Status
	result  string
}

// Check runs a random concurrent history on s and fails t if it is not
// linearizable; the history is then written as an HTML visualization
// under t's temporary directory (or $LINCHECK_DIR) and its path logged.
// It also fails t when a token was handed out twice for a key. It returns
// what the history held, for a caller to show that expiry happened.
func Check(t testing.TB, s storage.Store, o Options) Stats {
	t.Helper()
	clients, calls, nkeys := cmp.Or(max(o.Clients, 0), 6), cmp.Or(max(o.Calls, 0), 60), cmp.Or(max(o.Keys, 0), 8)
	lease := cmp.Or(o.Lease, time.Hour)
	retention := cmp.Or(o.Retention, time.Hour)
	outcomeRetention := cmp.Or(o.OutcomeRetention, time.Hour)
	tol := cmp.Or(o.Tolerance, DefaultTolerance)
	tol = max(tol, 0)
	seed := o.Seed
	if seed == 0 {
		seed = rand.Uint64()
	}
	ns := fmt.Sprintf("lincheck-%x", rand.Uint64())
	keys := make([]string, nkeys)
	for i := range keys {
		keys[i] = storage.StoreKey(ns, fmt.Sprint("k", i))
	}

	// tokens holds every token issued per key, so clients also try stale
	// and foreign tokens, which fencing must refuse.
	var mu sync.Mutex
	tokens := map[string][]storage.Token{}
	history := make([][]porcupine.Operation, clients)
	var wg sync.WaitGroup
	for c := range clients {
		wg.Go(func() {
			r := rand.New(rand.NewPCG(seed, uint64(c)))
			mine := map[string]storage.Token{}
			for n := range calls {
				key := keys[r.IntN(len(keys))]
				in := input{kind: kind(r.IntN(len(kindNames))), key: key}
				switch in.kind {
				case claim, claimOther:
					in.lease, in.ret = int64(lease), int64(retention)
				case complete, fail, release, extend:
					mu.Lock()
					all := tokens[key]
					mu.Unlock()
					in.token = mine[key]
					if r.IntN(4) == 0 && len(all) > 0 {
						in.token = all[r.IntN(len(all))]
					}
					in.value = fmt.Sprintf("c%d-%d", c, n)
					if in.kind == fail {
						in.value = string(storage.EncodeFailure(errors.New(in.value)))
					}
					in.ret = int64(outcomeRetention)
					in.lease = int64(lease) / 2 << r.IntN(3)
				}
				if o.Think > 0 {
					// The workload's pacing: a client's calls spread
					// over several leases, as a holder's would.
					time.Sleep(time.Duration(r.Int64N(int64(o.Think))))
				}
				call := time.Now().UnixNano()
				out := do(s, in)
				ret := time.Now().UnixNano()
				in.at = span{call - int64(tol), ret + int64(tol)}
				if out.outcome == storage.Acquired {
					mine[key] = out.token
					mu.Lock()
					tokens[key] = append(tokens[key], out.token)
					mu.Unlock()
				}
				history[c] = append(history[c], porcupine.Operation{ClientId: c, Input: in, Call: call, Output: out, Return: ret})
			}
		})
	}
	began := time.Now()
	wg.Wait()
	ran := time.Since(began)
	var ops []porcupine.Operation
	for _, h := range history {
		ops = append(ops, h...)
	}
	// A call that failed (a timeout, a lost connection) says nothing about
	// linearizability: report the store's failure as such, not as a
	// history the model refuses.
	for _, op := range ops {
		if out := op.Output.(output); strings.HasPrefix(out.err, "error: ") {
			t.Fatalf("lincheck: the store failed a call, so the history cannot be judged: %s", describe(op.Input.(input), out))
		}
	}
	// Tokens are unique per key across its whole history, records that
	// expired and were claimed anew included. The model does not hold
	// every past token, so this is checked here.
	for key, ts := range tokens {
		seen := map[storage.Token]bool{}
		for _, tok := range ts {
			if seen[tok] {
				t.Fatalf("lincheck: token %d was handed out twice for key %q (seed %d)", tok, key, seed)
			}
			seen[tok] = true
		}
	}
	res, info := porcupine.CheckOperationsVerbose(model, ops, 30*time.Second)
	t.Logf("lincheck: %d calls in %v, checked in %v", len(ops), ran.Round(time.Millisecond), (time.Since(began) - ran).Round(time.Millisecond))
	switch res {
	case porcupine.Ok:
		var st Stats
		for _, part := range info.PartialLinearizationsOperations() {
			if len(part) > 0 {
				st.Add(count(part[0]))
			}
		}
		return st
	case porcupine.Unknown:
		t.Logf("lincheck: the checker timed out on %d operations (seed %d): inconclusive", len(ops), seed)
		return Stats{}
	}
	dir := os.Getenv("LINCHECK_DIR")
	if dir == "" {
		dir = t.TempDir()
	}
	path := filepath.Join(dir, fmt.Sprintf("lincheck-%d.html", seed))
	if f, err := os.Create(path); err == nil {
		porcupine.Visualize(model, info, f)
		f.Close()
	}
	t.Fatalf("lincheck: history of %d operations (seed %d) is not linearizable; visualization: %s", len(ops), seed, path)
	return Stats{}
}

// do runs one call and turns its answer into the model's output.
func do(s storage.Store, in input) output {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var err error
	var out output
	switch in.kind {
	case claim, claimOther:
		var c storage.Claim
		c, err = s.Claim(ctx, storage.ClaimArgs{Key: in.key, Fingerprint: []byte(in.fingerprint()),
			Lease: time.Duration(in.lease), Retention: time.Duration(in.ret), MaxAttempts: maxAttempts})
		out = output{outcome: c.Outcome, token: c.Token, attempt: c.Record.Attempt, status: c.Record.Status, result: string(c.Record.Result)}
	case complete:
		err = s.Complete(ctx, in.key, in.token, []byte(in.value), time.Duration(in.ret))
	case fail:
		err = s.Fail(ctx, in.key, in.token, []byte(in.value), time.Duration(in.ret))
	case release:
		err = s.Release(ctx, in.key, in.token)
	case extend:
		err = s.Extend(ctx, in.key, in.token, time.Duration(in.lease))
	case get:
		var r storage.Record
		r, err = s.Get(ctx, in.key)
		out = output{token: r.Token, attempt: r.Attempt, status: r.Status, result: string(r.Result)}
	}
	switch {
	case err == nil:
	case errors.Is(err, idem.ErrKeyReused):
		out = output{err: "reused"}
	case errors.Is(err, idem.ErrLeaseLost):
		out = output{err: "lost"}
	case errors.Is(err, storage.ErrNotFound):
		out = output{err: "notfound"}
	default:
		out = output{err: "error: " + err.Error()}
	}
	return out
}
