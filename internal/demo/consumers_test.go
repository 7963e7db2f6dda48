package demo

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/memstore"
	"github.com/idemgo/idem/storage"
)

// memStore returns a new memstore, closed when the test ends.
func memStore(t *testing.T) *memstore.Store {
	t.Helper()
	s, err := memstore.New(memstore.Config{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// A crash inside fn is a process death: the key stays held by the dead
// claim, as if nobody could tell the store. Returning an error or panicking
// from fn would release it instead.
func TestCrashInsideDoLeavesTheKeyHeld(t *testing.T) {
	ctx := context.Background()
	s := memStore(t)
	var stats RunStats
	cfg := idem.Config{Lease: time.Minute}
	dying := &Process{Stats: &stats}
	g, err := idem.New(ProcessStore{Store: s, Process: dying}, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()

	done := make(chan struct{})
	go func() {
		defer close(done)
		g.Do(ctx, "order-1", []byte("pay"), func(context.Context) ([]byte, error) {
			dying.Crash(CrashBeforeCharge)
			t.Error("crash returned")
			return nil, nil
		})
		t.Error("Do returned in a crashed process")
	}()
	<-done

	r, err := s.Get(ctx, g.StoreKey("order-1"))
	if err != nil {
		t.Fatalf("Get: %v", err)
	}
	if r.Status != storage.StatusInProgress || r.Token == 0 || r.Attempt != 1 {
		t.Errorf("record after the crash: %v, token %d, attempt %d; want InProgress, held by the dead claim", r.Status, r.Token, r.Attempt)
	}
	if got := stats.Crashes[CrashBeforeCharge].Load(); got != 1 {
		t.Errorf("%d crashes counted, want 1", got)
	}
	if _, err := (ProcessStore{Store: s, Process: dying}).Claim(ctx, storage.ClaimArgs{Key: "k", Lease: time.Second, Retention: time.Second}); !errors.Is(err, ErrProcessDead) {
		t.Errorf("Claim through the dead process: %v, want errProcessDead", err)
	}

	// A fresh process finds the order in progress, not free.
	g2, err := idem.New(ProcessStore{Store: s, Process: &Process{Stats: &stats}}, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer g2.Close()
	_, err = g2.Do(ctx, "order-1", []byte("pay"), func(context.Context) ([]byte, error) {
		t.Error("ran while the crashed claim's lease lives")
		return nil, nil
	})
	if !errors.Is(err, idem.ErrInProgress) {
		t.Errorf("Do after the crash: %v, want ErrInProgress", err)
	}
	if stats.Busy.Load() != 1 {
		t.Errorf("%d busy claims counted, want 1", stats.Busy.Load())
	}
}

func TestCrashPlan(t *testing.T) {
	if got := (CrashPlan{Seed: 1, Rate: 0}).At(3, 1); got != NoCrash {
		t.Errorf("rate 0: %v, want no crash", got)
	}
	p := CrashPlan{Seed: 1, Rate: 0.5}
	var counts [3]int
	for id := range 5000 {
		for attempt := 1; attempt <= 2; attempt++ {
			point := p.At(id, attempt)
			if again := p.At(id, attempt); again != point {
				t.Fatalf("message %d attempt %d: %v, then %v", id, attempt, point, again)
			}
			counts[point]++
		}
	}
	// 10000 draws at 0.5: each count is far from 0 and from all.
	if counts[NoCrash] < 4500 || counts[NoCrash] > 5500 || counts[CrashBeforeCharge] < 2000 || counts[CrashAfterCharge] < 2000 {
		t.Errorf("rate 0.5, 10000 deliveries: %d without crash, %d before the charge, %d after", counts[0], counts[1], counts[2])
	}
}

// A process that dies while another of its calls has charged and not yet
// stored the outcome: that call still stores it (the demo's crash points
// are before a charge and after an outcome, never between), so no other
// process takes the order over and charges it again. A call that had not
// charged when the process died stores nothing.
func TestCrashLandsAfterChargedCallsStoreTheirOutcome(t *testing.T) {
	ctx := context.Background()
	s := memStore(t)
	var stats RunStats
	p := &Process{Stats: &stats}
	g, err := idem.New(ProcessStore{Store: s, Process: p}, idem.Config{Lease: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	l := NewLedger(2)

	// Order 0 charges, then its process dies (another call crashed)
	// before Do stores the outcome.
	res, err := g.Do(ctx, "order-0", []byte("pay"), func(ctx context.Context) ([]byte, error) {
		receipt := p.Charge(ctx, l, 0)
		p.Dead.Store(true)
		return receipt, nil
	})
	if err != nil || string(res.Value) != "ch_1" {
		t.Fatalf("Do of the call that charged: %q, %v; want its receipt stored", res.Value, err)
	}
	if r, err := s.Get(ctx, g.StoreKey("order-0")); err != nil || r.Status != storage.StatusCompleted {
		t.Fatalf("order-0 after the crash: %v, %v; want Completed", r.Status, err)
	}
	// Order 1 has not charged when the process is found dead: its outcome
	// is refused, as a dead process writes nothing.
	_, err = g.Do(ctx, "order-1", []byte("pay"), func(ctx context.Context) ([]byte, error) { return nil, nil })
	if err == nil {
		t.Fatal("Do in a dead process succeeded")
	}
	if err := (ProcessStore{Store: s, Process: p}).Complete(ctx, "order-1", 42, nil, time.Minute); !errors.Is(err, ErrProcessDead) {
		t.Errorf("Complete of a call that did not charge, in a dead process: %v, want errProcessDead", err)
	}
	if got := l.charges[0].Load(); got != 1 {
		t.Errorf("order 0 charged %d times, want 1", got)
	}
}
