package memstore

// QueuedVictims returns how many records the eviction queues hold.
func (s *Store) QueuedVictims() int {
	n := 0
	for i := range s.shards {
		sh := &s.shards[i]
		sh.mu.Lock()
		for k := range kinds {
			n += sh.victims[k].len()
		}
		sh.mu.Unlock()
	}
	return n
}
