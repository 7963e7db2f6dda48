module github.com/idemgo/idem/cassandrastore

go 1.26.0

require (
	github.com/apache/cassandra-gocql-driver/v2 v2.1.2
	github.com/idemgo/idem v0.1.0
	go.uber.org/goleak v1.3.0
)

require gopkg.in/inf.v0 v0.9.1 // indirect
