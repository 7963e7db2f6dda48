// Package grpcstores runs package idemgrpc's behaviour suite
// (idemgrpc/idemgrpctest) over the real stores, Redis and PostgreSQL, from
// the integration module, so the idemgrpc module's go.mod stays free of the
// stores' dependencies. It holds tests only.
package grpcstores
