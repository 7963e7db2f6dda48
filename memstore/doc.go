// Package memstore is idem's embedded default store: records in this
// process's memory, in sharded maps, with every transition atomic under its
// shard's lock.
//
// It suits a single process (tests, demos, one replica of a service whose
// duplicates all reach the same process). Records die with the process and
// are not shared between replicas: for several processes use a Redis or
// PostgreSQL store.
//
//	s, err := memstore.New(memstore.Config{})
//	if err != nil { … }
//	defer s.Close()
//	g, err := idem.New(s, idem.Config{})
package memstore
