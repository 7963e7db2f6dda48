package idemnats

import "github.com/idemgo/idem/internal/chassis"

// SetTriesTable gives c an in-memory count of failures of n messages at
// most, for a test of more failing messages than it holds.
func SetTriesTable(c *Consumer, n int) { c.tries = chassis.NewTries(n) }
