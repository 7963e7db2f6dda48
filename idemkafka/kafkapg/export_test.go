package kafkapg

// SetAfterCommit makes c call f after each transaction it commits, before
// anything else: the kill test stops the process there.
func SetAfterCommit(c *Consumer, f func(topic string, partition int32, next int64)) {
	c.afterCommit = f
}
