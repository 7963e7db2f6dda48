// Package httpstores runs package idemhttp's behaviour suite
// (idemhttp/idemhttptest) over the real stores, Redis and PostgreSQL, from
// the integration module, so the core module's go.mod stays free of the
// stores' dependencies. It holds tests only.
package httpstores
