package idemsqs

import (
	"strings"

	"github.com/aws/aws-sdk-go-v2/service/sqs/types"
)

// DeduplicationIDKey is a key function for [WithKeyFunc] that takes the key
// from a FIFO queue's MessageDeduplicationId (sent, or the SHA-256 of the
// body under content-based deduplication): the id SQS deduplicates sends
// by for five minutes, which idem then holds for the Guard's retention. A
// message of a standard queue has none, and so no key.
func DeduplicationIDKey(m types.Message) (string, error) {
	return m.Attributes[string(types.MessageSystemAttributeNameMessageDeduplicationId)], nil
}

// attrText returns the message attribute name of m as text: a String or
// Number attribute's value, a Binary one's bytes.
func attrText(m types.Message, name string) (string, bool) {
	v, ok := m.MessageAttributes[name]
	if !ok {
		return "", false
	}
	if v.StringValue != nil {
		return *v.StringValue, true
	}
	return string(v.BinaryValue), true
}

// attrValues returns the value of the attribute name of m, as the chassis
// reads a key header: none when m has no such attribute.
func attrValues(m types.Message, name string) []string {
	if v, ok := attrText(m, name); ok {
		return []string{v}
	}
	return nil
}

// traceAttr returns the attribute name of m as text, matched without regard
// to case when no attribute has the name as it is.
func traceAttr(m types.Message, name string) string {
	if v, ok := attrText(m, name); ok {
		return v
	}
	for k := range m.MessageAttributes {
		if strings.EqualFold(k, name) {
			v, _ := attrText(m, k)
			return v
		}
	}
	return ""
}

// body returns m's body as bytes.
func body(m types.Message) []byte {
	if m.Body == nil {
		return nil
	}
	return []byte(*m.Body)
}

// sysAttr returns the system attribute name of m ("" without it).
func sysAttr(m types.Message, name types.MessageSystemAttributeName) string {
	return m.Attributes[string(name)]
}
