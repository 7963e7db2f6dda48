package kafkapub

import (
	"errors"
	"fmt"
	"strings"
)

// ErrInvalidTopic is wrapped by the error of [CheckTopic] for a name Kafka
// refuses as a topic (INVALID_TOPIC_EXCEPTION).
var ErrInvalidTopic = errors.New("kafkapub: invalid topic")

// maxTopicLen is the longest topic name Kafka takes.
const maxTopicLen = 249

// CheckTopic returns an error wrapping [ErrInvalidTopic] when Kafka would
// refuse topic as a topic name, else nil: it must be 1 to 249 bytes of
// ASCII letters, digits, '.', '_' and '-', and not "." or "..". It is the
// rule of Kafka itself, and cheap: give it to outbox.Config.CheckDestination
// so that Enqueue refuses such a message in the caller's transaction rather
// than the relay finding it dead later.
func CheckTopic(topic string) error {
	reason := ""
	switch {
	case topic == "":
		reason = "is empty"
	case len(topic) > maxTopicLen:
		reason = fmt.Sprintf("is %d bytes, longer than %d", len(topic), maxTopicLen)
	case topic == "." || topic == "..":
		reason = "is . or .."
	case strings.IndexFunc(topic, func(r rune) bool { return !legalTopicRune(r) }) >= 0:
		reason = "holds a character other than ASCII letters, digits, '.', '_' and '-'"
	default:
		return nil
	}
	return fmt.Errorf("%w: %q %s", ErrInvalidTopic, topic, reason)
}

func legalTopicRune(r rune) bool {
	return r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '.' || r == '_' || r == '-'
}
