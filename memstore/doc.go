// Package memstore is idem's embedded default store: records in this
// process's memory, in sharded maps, with every transition atomic under its
// shard's lock.
//
// It suits a single process (tests, demos, one replica of a service whose
// duplicates all reach the same process). Records die with the process and
// are not shared between replicas: for several processes use a Redis or
// PostgreSQL store.
//
// Its memory is bounded: Config.MaxEntries caps the records and
// Config.MaxBytes their bytes (keys, fingerprints, results). A full store
// makes room by evicting the records a retry needs least, released ones
// (those under an attempt cap after the others) and then the oldest
// outcomes, reporting each (Config.OnEvict, a warning
// on Config.Logger), and refuses a new key (ErrFull) only when every
// record is in progress; see [Store].
//
//	s, err := memstore.New(memstore.Config{})
//	if err != nil { … }
//	defer s.Close()
//	g, err := idem.New(s, idem.Config{})
package memstore
