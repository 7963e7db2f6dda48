package demo

import "testing"

func TestAcks(t *testing.T) {
	stream := []Message{{Order: 0}, {Order: 1}, {Order: 0, Duplicate: true}}
	a := NewAcks(stream)
	a.Delivered(0, 1)
	a.Delivered(2, 1) // a duplicate copy's first delivery
	a.Delivered(2, 2) // and its redelivery
	a.Ack(2)
	a.Ack(2) // a second ack of a message counts once
	a.Ack(0)
	if st := a.Stats(2); a.Count() != 2 || st.Deliveries != 3 || st.Duplicates != 1 || st.Unacked[0] || !st.Unacked[1] {
		t.Errorf("count %d, stats %+v; want 2 acked, 3 deliveries, 1 duplicate, order 1 unacked", a.Count(), st)
	}
	select {
	case <-a.All():
		t.Fatal("All closed with a message unacked")
	default:
	}
	a.Ack(1)
	<-a.All()
}
