package memstore

// QueuedVictims returns how many records the eviction queues hold.
func (s *Store) QueuedVictims() int {
	n := 0
	for i := range s.shards {
		sh := &s.shards[i]
		sh.mu.Lock()
		n += sh.rel.len() + sh.fin.len()
		sh.mu.Unlock()
	}
	return n
}
