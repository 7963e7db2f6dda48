package idemhttp

import "fmt"

// Syntax says which forms of the idempotency key header [ParseKey] and the
// middleware accept.
type Syntax uint8

const (
	// Lenient accepts what [Strict] accepts and also a bare key of visible
	// ASCII characters without quotes or spaces, as Stripe-style clients send
	// it (Idempotency-Key: 8e03978e-40d5-43e8-bc93-6894a57f9324). A bare key
	// and the same key quoted are the same key. The default.
	Lenient Syntax = iota
	// Strict accepts only what the IETF draft specifies: an RFC 8941 Item
	// whose bare item is a String (Idempotency-Key: "8e03978e-…"), with
	// optional parameters, which are checked and ignored.
	Strict
)

// String returns the syntax name.
func (s Syntax) String() string {
	switch s {
	case Lenient:
		return "Lenient"
	case Strict:
		return "Strict"
	}
	return fmt.Sprintf("Syntax(%d)", uint8(s))
}

// ParseKey returns the idempotency key carried by one header field value.
// In the quoted form the key is the String's content with its escapes
// (\" and \\) undone. Leading and trailing spaces and tabs are ignored. It
// fails, wrapping [ErrKeyInvalid], for a value that is not valid in syntax s
// and for an empty key; it never panics. It does not check the key's length.
func ParseKey(value string, s Syntax) (string, error) {
	v := trimOWS(value)
	if v == "" {
		return "", fmt.Errorf("%w: the header is empty", ErrKeyInvalid)
	}
	if v[0] != '"' {
		if s == Strict {
			return "", fmt.Errorf("%w: not a quoted string (RFC 8941 sf-string), for example \"8e03978e-40d5-43e8-bc93-6894a57f9324\"", ErrKeyInvalid)
		}
		for i := 0; i < len(v); i++ {
			if c := v[i]; c <= ' ' || c >= 0x7f || c == '"' {
				return "", fmt.Errorf("%w: byte %#02x at offset %d is not allowed in an unquoted key (visible ASCII other than '\"' only)", ErrKeyInvalid, c, i)
			}
		}
		return v, nil
	}
	key, rest, err := parseString(v)
	if err != nil {
		return "", err
	}
	if err := parseParams(rest); err != nil {
		return "", err
	}
	if key == "" {
		return "", fmt.Errorf("%w: the key is empty", ErrKeyInvalid)
	}
	return key, nil
}

func trimOWS(s string) string {
	for len(s) > 0 && (s[0] == ' ' || s[0] == '\t') {
		s = s[1:]
	}
	for len(s) > 0 && (s[len(s)-1] == ' ' || s[len(s)-1] == '\t') {
		s = s[:len(s)-1]
	}
	return s
}

// parseString parses the sf-string at the start of v (RFC 8941 §4.2.5) and
// returns its content and what follows it.
func parseString(v string) (string, string, error) {
	// Most keys hold no escapes: return a substring of v then.
	for i := 1; i < len(v); i++ {
		switch c := v[i]; {
		case c == '"':
			return v[1:i], v[i+1:], nil
		case c == '\\':
			return parseEscaped(v, i)
		case c < 0x20 || c > 0x7e:
			return "", "", fmt.Errorf("%w: byte %#02x at offset %d is not allowed in a string (printable ASCII only)", ErrKeyInvalid, c, i)
		}
	}
	return "", "", fmt.Errorf("%w: the string has no closing quote", ErrKeyInvalid)
}

func parseEscaped(v string, i int) (string, string, error) {
	b := []byte(v[1:i])
	for ; i < len(v); i++ {
		switch c := v[i]; {
		case c == '"':
			return string(b), v[i+1:], nil
		case c == '\\':
			i++
			if i == len(v) || (v[i] != '"' && v[i] != '\\') {
				return "", "", fmt.Errorf("%w: a backslash in a string must escape '\"' or '\\'", ErrKeyInvalid)
			}
			b = append(b, v[i])
		case c < 0x20 || c > 0x7e:
			return "", "", fmt.Errorf("%w: byte %#02x at offset %d is not allowed in a string (printable ASCII only)", ErrKeyInvalid, c, i)
		default:
			b = append(b, c)
		}
	}
	return "", "", fmt.Errorf("%w: the string has no closing quote", ErrKeyInvalid)
}

// parseParams checks that rest is a valid RFC 8941 parameter list (§4.2.3.2)
// and nothing else: the key's parameters are ignored, anything else after
// the string (a second list member, stray characters) is refused.
func parseParams(rest string) error {
	for rest != "" && rest[0] == ';' {
		rest = rest[1:]
		for rest != "" && rest[0] == ' ' {
			rest = rest[1:]
		}
		if rest == "" || !(isLCAlpha(rest[0]) || rest[0] == '*') {
			return fmt.Errorf("%w: a parameter name must start with a lowercase letter or '*'", ErrKeyInvalid)
		}
		i := 1
		for i < len(rest) && (isLCAlpha(rest[i]) || isDigit(rest[i]) || rest[i] == '_' || rest[i] == '-' || rest[i] == '.' || rest[i] == '*') {
			i++
		}
		rest = rest[i:]
		if rest != "" && rest[0] == '=' {
			var err error
			if rest, err = skipBareItem(rest[1:]); err != nil {
				return err
			}
		}
	}
	if trimOWS(rest) != "" {
		return fmt.Errorf("%w: unexpected %q after the key (one quoted string expected)", ErrKeyInvalid, clip(rest))
	}
	return nil
}

// skipBareItem checks the bare item at the start of v (RFC 8941 §4.2.3.1:
// integer, decimal, string, token, byte sequence or boolean) and returns
// what follows it.
func skipBareItem(v string) (string, error) {
	bad := func(what string) (string, error) {
		return "", fmt.Errorf("%w: invalid %s in a parameter value", ErrKeyInvalid, what)
	}
	switch {
	case v == "":
		return bad("empty value")
	case v[0] == '-' || isDigit(v[0]):
		i := 0
		if v[0] == '-' {
			i++
		}
		start, dot := i, -1
		for i < len(v) && (isDigit(v[i]) || (v[i] == '.' && dot < 0)) {
			if v[i] == '.' {
				dot = i
			}
			i++
		}
		switch {
		case i == start || !isDigit(v[start]):
			return bad("number")
		case dot < 0 && i-start > 15:
			return bad("integer (more than 15 digits)")
		case dot >= 0 && (dot-start > 12 || i-dot-1 < 1 || i-dot-1 > 3):
			return bad("decimal")
		}
		return v[i:], nil
	case v[0] == '"':
		_, rest, err := parseString(v)
		return rest, err
	case isAlpha(v[0]) || v[0] == '*':
		i := 1
		for i < len(v) && (isTChar(v[i]) || v[i] == ':' || v[i] == '/') {
			i++
		}
		return v[i:], nil
	case v[0] == ':':
		for i := 1; i < len(v); i++ {
			switch c := v[i]; {
			case c == ':':
				return v[i+1:], nil
			case !(isAlpha(c) || isDigit(c) || c == '+' || c == '/' || c == '='):
				return bad("byte sequence")
			}
		}
		return bad("byte sequence (no closing ':')")
	case v[0] == '?':
		if len(v) < 2 || (v[1] != '0' && v[1] != '1') {
			return bad("boolean")
		}
		return v[2:], nil
	}
	return bad("value")
}

func clip(s string) string {
	if len(s) > 16 {
		return s[:16] + "…"
	}
	return s
}

func isLCAlpha(c byte) bool { return 'a' <= c && c <= 'z' }
func isAlpha(c byte) bool   { return isLCAlpha(c) || ('A' <= c && c <= 'Z') }
func isDigit(c byte) bool   { return '0' <= c && c <= '9' }

// isTChar reports whether c may appear in an RFC 9110 token.
func isTChar(c byte) bool {
	if isAlpha(c) || isDigit(c) {
		return true
	}
	switch c {
	case '!', '#', '$', '%', '&', '\'', '*', '+', '-', '.', '^', '_', '`', '|', '~':
		return true
	}
	return false
}

func isToken[T string | []byte](s T) bool {
	if len(s) == 0 {
		return false
	}
	for i := 0; i < len(s); i++ {
		if !isTChar(s[i]) {
			return false
		}
	}
	return true
}
