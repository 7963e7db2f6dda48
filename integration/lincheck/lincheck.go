// Package lincheck checks that a store's transitions are linearizable: that
// the answers many concurrent clients got could have come, one at a time,
// from the state machine of package idem. It records a history of random
// Claim, Complete, Fail, Release, Extend and Get calls on a few keys and
// hands it to porcupine with a model of the state machine.
//
// Leases are long, so no lease or record expires during a check: expiry
// is the conformance suite's business (package idemtest), linearity this
// package's.
package lincheck

import (
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
)

// Options size a check. The zero value checks 6 clients doing 60 calls
// each on 8 keys: keys reach an outcome quickly, after which every call is
// a duplicate, so enough keys keep the interesting in-progress phase busy.
type Options struct {
	Clients, Calls, Keys int
	Seed                 uint64 // 0: random
}

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
	token idem.Token
	value string
}

type output struct {
	err     string // "", "reused", "lost", "notfound"
	outcome idem.Outcome
	token   idem.Token // Acquired: the new token; Busy: the record's (none); Get: the record's
	attempt int
	status  idem.Status
	result  string
}

// state is one key's record in the model.
type state struct {
	exists  bool
	status  idem.Status
	token   idem.Token // 0 once released
	attempt int
	fp      string
	result  string
}

func step(st, in, out any) (bool, any) {
	s, i, o := st.(state), in.(input), out.(output)
	switch i.kind {
	case claim, claimOther:
		fp := "fp"
		if i.kind == claimOther {
			fp = "other"
		}
		switch {
		case !s.exists:
			ok := o.err == "" && o.outcome == idem.Acquired && o.attempt == 1 && o.token != 0
			return ok, state{exists: true, status: idem.StatusInProgress, token: o.token, attempt: 1, fp: fp}
		case s.fp != fp:
			return o.err == "reused", s
		case s.status.Done():
			return o.err == "" && o.outcome == idem.Duplicate && o.status == s.status && o.result == s.result, s
		case s.token != 0: // lease live (leases never expire here); a Busy answer carries no token
			return o.err == "" && o.outcome == idem.Busy && o.token == 0 && o.attempt == s.attempt, s
		case s.attempt >= maxAttempts:
			n := s
			n.status, n.result = idem.StatusFailed, string(idem.TooManyAttemptsCause())
			return o.err == "" && o.outcome == idem.Duplicate && o.status == idem.StatusFailed && o.result == n.result, n
		default:
			n := s
			n.token, n.attempt = o.token, s.attempt+1
			return o.err == "" && o.outcome == idem.Acquired && o.token != 0 && o.attempt == n.attempt, n
		}
	case complete, fail, release, extend:
		holder := s.exists && s.status == idem.StatusInProgress && s.token != 0 && i.token == s.token
		if !holder {
			return o.err == "lost", s
		}
		if o.err != "" {
			return false, s
		}
		n := s
		switch i.kind {
		case complete:
			n.status, n.result = idem.StatusCompleted, i.value
		case fail:
			n.status, n.result = idem.StatusFailed, i.value
		case release:
			n.token = 0
		}
		return true, n
	case get:
		if !s.exists {
			return o.err == "notfound", s
		}
		return o.err == "" && o.status == s.status && o.token == s.token && o.attempt == s.attempt && o.result == s.result, s
	}
	return false, s
}

var model = porcupine.Model{
	Partition: func(h []porcupine.Operation) [][]porcupine.Operation {
		byKey := map[string][]porcupine.Operation{}
		var keys []string
		for _, op := range h {
			k := op.Input.(input).key
			if _, ok := byKey[k]; !ok {
				keys = append(keys, k)
			}
			byKey[k] = append(byKey[k], op)
		}
		parts := make([][]porcupine.Operation, 0, len(keys))
		for _, k := range keys {
			parts = append(parts, byKey[k])
		}
		return parts
	},
	Init:              func() any { return state{} },
	Step:              step,
	DescribeOperation: func(in, out any) string { return describe(in.(input), out.(output)) },
	DescribeState:     func(st any) string { return fmt.Sprintf("%+v", st.(state)) },
}

// describe shows one call and its answer.
func describe(i input, o output) string {
	return fmt.Sprintf("%s(t%d %q) → %v t%d a%d %v %q %s", kindNames[i.kind], i.token, i.value, o.outcome, o.token, o.attempt, o.status, o.result, o.err)
}

// Check runs a random concurrent history on s and fails t if it is not
// linearizable; the history is then written as an HTML visualization
// under t's temporary directory (or $LINCHECK_DIR) and its path logged.
func Check(t testing.TB, s idem.Store, o Options) {
	t.Helper()
	clients, calls, nkeys := max(o.Clients, 1), max(o.Calls, 1), max(o.Keys, 1)
	if o.Clients == 0 {
		clients = 6
	}
	if o.Calls == 0 {
		calls = 60
	}
	if o.Keys == 0 {
		nkeys = 8
	}
	seed := o.Seed
	if seed == 0 {
		seed = rand.Uint64()
	}
	ns := fmt.Sprintf("lincheck-%x", rand.Uint64())
	keys := make([]string, nkeys)
	for i := range keys {
		keys[i] = idem.StoreKey(ns, fmt.Sprint("k", i))
	}

	// tokens holds every token issued per key, so clients also try stale
	// and foreign tokens, which fencing must refuse.
	var mu sync.Mutex
	tokens := map[string][]idem.Token{}
	start := time.Now()
	history := make([][]porcupine.Operation, clients)
	var wg sync.WaitGroup
	for c := range clients {
		wg.Go(func() {
			r := rand.New(rand.NewPCG(seed, uint64(c)))
			mine := map[string]idem.Token{}
			for n := range calls {
				key := keys[r.IntN(len(keys))]
				in := input{kind: kind(r.IntN(len(kindNames))), key: key}
				if in.kind != claim && in.kind != get && in.kind != claimOther {
					mu.Lock()
					all := tokens[key]
					mu.Unlock()
					in.token = mine[key]
					if r.IntN(4) == 0 && len(all) > 0 {
						in.token = all[r.IntN(len(all))]
					}
					in.value = fmt.Sprintf("c%d-%d", c, n)
					if in.kind == fail {
						in.value = string(idem.EncodeFailure(errors.New(in.value)))
					}
				}
				call := time.Since(start).Nanoseconds()
				out := do(s, in)
				ret := time.Since(start).Nanoseconds()
				if out.outcome == idem.Acquired {
					mine[key] = out.token
					mu.Lock()
					tokens[key] = append(tokens[key], out.token)
					mu.Unlock()
				}
				history[c] = append(history[c], porcupine.Operation{ClientId: c, Input: in, Call: call, Output: out, Return: ret})
			}
		})
	}
	wg.Wait()
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
	res, info := porcupine.CheckOperationsVerbose(model, ops, 30*time.Second)
	switch res {
	case porcupine.Ok:
		return
	case porcupine.Unknown:
		t.Logf("lincheck: the checker timed out on %d operations (seed %d): inconclusive", len(ops), seed)
		return
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
}

// do runs one call and turns its answer into the model's output.
func do(s idem.Store, in input) output {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var err error
	var out output
	switch in.kind {
	case claim, claimOther:
		fp := "fp"
		if in.kind == claimOther {
			fp = "other"
		}
		var c idem.Claim
		c, err = s.Claim(ctx, idem.ClaimArgs{Key: in.key, Fingerprint: []byte(fp), Lease: time.Hour, Retention: time.Hour, MaxAttempts: maxAttempts})
		out = output{outcome: c.Outcome, token: c.Token, attempt: c.Record.Attempt, status: c.Record.Status, result: string(c.Record.Result)}
		if c.Outcome == idem.Busy {
			out.token = c.Record.Token
		}
	case complete:
		err = s.Complete(ctx, in.key, in.token, []byte(in.value), time.Hour)
	case fail:
		err = s.Fail(ctx, in.key, in.token, []byte(in.value), time.Hour)
	case release:
		err = s.Release(ctx, in.key, in.token)
	case extend:
		err = s.Extend(ctx, in.key, in.token, time.Hour)
	case get:
		var r idem.Record
		r, err = s.Get(ctx, in.key)
		out = output{token: r.Token, attempt: r.Attempt, status: r.Status, result: string(r.Result)}
	}
	switch {
	case err == nil:
	case errors.Is(err, idem.ErrKeyReused):
		out = output{err: "reused"}
	case errors.Is(err, idem.ErrLeaseLost):
		out = output{err: "lost"}
	case errors.Is(err, idem.ErrNotFound):
		out = output{err: "notfound"}
	default:
		out = output{err: "error: " + err.Error()}
	}
	return out
}
