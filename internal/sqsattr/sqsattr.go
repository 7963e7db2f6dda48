// Package sqsattr holds what SQS takes as a message attribute's name and
// as text, for the consumer (idemsqs) and the publisher (outbox/sqspub)
// alike.
package sqsattr

import (
	"strings"
	"unicode/utf8"
)

// ValidName reports whether SQS takes name as a message attribute's: 1 to
// 256 of A-Z, a-z, 0-9, '_', '-' and '.', no period first, last or twice
// in a row, and no "AWS." or "Amazon." prefix in any case, which SQS keeps
// for itself.
func ValidName(name string) bool {
	if name == "" || len(name) > 256 || name[0] == '.' || name[len(name)-1] == '.' || strings.Contains(name, "..") {
		return false
	}
	lower := strings.ToLower(name)
	if strings.HasPrefix(lower, "aws.") || strings.HasPrefix(lower, "amazon.") {
		return false
	}
	for _, r := range name {
		ok := r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '_' || r == '-' || r == '.'
		if !ok {
			return false
		}
	}
	return true
}

// Text reports whether SQS takes s as a body or attribute value: valid
// UTF-8 of #x9, #xA, #xD, #x20 to #xD7FF, #xE000 to #xFFFD and #x10000 to
// #x10FFFF.
func Text(s string) bool {
	if !utf8.ValidString(s) {
		return false
	}
	for _, r := range s {
		switch {
		case r == 0x9 || r == 0xA || r == 0xD:
		case r >= 0x20 && r <= 0xD7FF, r >= 0xE000 && r <= 0xFFFD, r >= 0x10000 && r <= 0x10FFFF:
		default:
			return false
		}
	}
	return true
}
