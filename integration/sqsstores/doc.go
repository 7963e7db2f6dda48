// Package sqsstores runs the benchmark of idemsqs over the stores: the
// consumer beside a bare SQS receive-and-delete loop and the same loop
// with a bare Redis dedupe, in one run, on the SQS-compatible server of
// the tests (moto, IDEM_SQS_URL) and the machine's Redis. It lives in the
// integration module so that idemsqs's go.mod stays free of go-redis and
// redisstore. It holds tests only.
package sqsstores
