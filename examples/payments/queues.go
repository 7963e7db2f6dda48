package main

import (
	"io"
	"sync"
	"sync/atomic"
)

// queueOrder is the body of an OrderCreated message on RabbitMQ and SQS.
type queueOrder struct {
	OrderID     string `json:"order_id"`
	Customer    string `json:"customer"`
	AmountCents int    `json:"amount_cents"`
}

// queueReport is what a run of the RabbitMQ or SQS example did.
type queueReport struct {
	published atomic.Int64 // messages, duplicates included
	settled   atomic.Int64 // acked (deleted) or dead-lettered
	replayed  atomic.Int64
	delayed   atomic.Int64
	dead      atomic.Int64

	mu      sync.Mutex
	charges map[string]int // by order
}

func (r *queueReport) charge(order string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.charges[order]++
	return r.charges[order]
}

// lockedWriter serialises the writes of the replicas.
type lockedWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}
