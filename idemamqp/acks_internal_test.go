package idemamqp

import "testing"

// An ack of a run covers only deliveries that are the writer's to ack or
// settled already: never one still running, waiting or about to be
// requeued.
func TestTagLogRun(t *testing.T) {
	var l tagLog
	for tag := uint64(1); tag <= 8; tag++ {
		l.add(tag)
	}
	l.settled(2) // requeued by a worker, sent
	l.mu.Lock()
	if upTo := l.run([]uint64{1, 3, 5, 6}); upTo != 3 {
		t.Errorf("run up to %d, want 3: delivery 4 is not settled", upTo)
	}
	l.sent([]uint64{1, 3, 5, 6})
	l.mu.Unlock()
	if len(l.es) != 5 || l.es[0].tag != 4 {
		t.Fatalf("log %+v, want 4 to 8 left", l.es)
	}
	l.mu.Lock()
	if upTo := l.run([]uint64{7}); upTo != 0 {
		t.Errorf("run up to %d, want none: delivery 4 is the oldest, unsettled", upTo)
	}
	l.sent([]uint64{7})
	l.mu.Unlock()
	l.settled(4)
	l.mu.Lock()
	if upTo := l.run([]uint64{8}); upTo != 8 {
		t.Errorf("run up to %d, want 8: 4 to 7 are settled", upTo)
	}
	l.sent([]uint64{8})
	l.mu.Unlock()
	if len(l.es) != 0 {
		t.Fatalf("log %+v, want it empty", l.es)
	}
	l.settled(3) // settled already: nothing to do
}
