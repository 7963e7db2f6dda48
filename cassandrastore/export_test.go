package cassandrastore

// SetFault makes s run each of its conditional writes through f, which
// gets the write's operation and the function that sends it: f may send
// it and answer otherwise (a reply lost), or answer without sending it.
// Tests use it to make Cassandra's "outcome unknown" answers happen on
// demand; a real node gives them only under load or a failure.
func SetFault(s *Store, f func(op string, exec func() (bool, error)) (bool, error)) { s.fault = f }
