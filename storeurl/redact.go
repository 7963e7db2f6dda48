package storeurl

import (
	"errors"
	"net/url"
	"regexp"
	"slices"
	"strings"
)

// Redact returns rawURL fit to print: every secret it holds replaced with
// "xxxxx", read from its text, so that a URL that does not parse is
// redacted too. The secrets are the password of its user info, which runs
// to the last "@" of the text (a password with an unescaped "/", "?", "#"
// or "@" is hidden whole, and with it whatever stands between it and that
// "@"); the whole user info of a nats:// (tls://, ws://, wss://) URL,
// where a lone name is a token; and the values of the parameters that hold
// secrets (password=, sslpassword=, secret_access_key=, token=, a key…),
// in a URL's query or in a libpq "key=value" connection string
// (host=db password=secret). Where the text is ambiguous it hides more.
func Redact(rawURL string) string {
	var b strings.Builder
	last := 0
	for _, sp := range merge(secretSpans(rawURL)) {
		b.WriteString(rawURL[last:sp[0]])
		b.WriteString("xxxxx")
		last = sp[1]
	}
	b.WriteString(rawURL[last:])
	return b.String()
}

// Secrets returns the secrets that rawURL holds (see [Redact]), each as
// written and as decoded, and the pieces of one that holds a "/", "?",
// "#", "@" or ":". Secrets shorter than 3 bytes are left out:
// replacing them in a message would garble its ordinary words. A program
// that prints what a library says about a URL replaces these in it.
func Secrets(rawURL string) []string {
	var out []string
	add := func(s string) {
		if len(s) >= 3 && !slices.Contains(out, s) {
			out = append(out, s)
		}
	}
	for _, sp := range secretSpans(rawURL) {
		s := rawURL[sp[0]:sp[1]]
		add(s)
		// A driver that misreads a password with an unescaped "/", "?",
		// "#" or "@" repeats a piece of it.
		if pieces := strings.FieldsFunc(s, func(r rune) bool { return strings.ContainsRune("/?#@:", r) }); len(pieces) > 1 {
			for _, p := range pieces {
				add(p)
			}
		}
		if len(s) >= 2 && s[0] == '\'' && s[len(s)-1] == '\'' { // a quoted libpq value
			add(strings.ReplaceAll(strings.ReplaceAll(s[1:len(s)-1], `\'`, `'`), `\\`, `\`))
		}
		for _, unescape := range []func(string) (string, error){url.PathUnescape, url.QueryUnescape} {
			if d, err := unescape(s); err == nil {
				add(d)
			}
		}
	}
	return out
}

// secretSpans returns where the secrets of s stand, as [start, end) byte
// offsets: the user info's first, then the parameters', which may overlap.
func secretSpans(s string) [][2]int {
	var spans [][2]int
	if i, at := userInfo(s); at >= 0 {
		if tokenSchemes[strings.ToLower(s[:i-len("://")])] {
			spans = append(spans, [2]int{i, at})
		} else if user, _, ok := strings.Cut(s[i:at], ":"); ok {
			spans = append(spans, [2]int{i + len(user) + 1, at})
		}
	}
	// Both forms of parameters, whatever the text looks like: a
	// connection string may hold "://" in a value, and hiding a
	// word too many costs nothing.
	for _, param := range []*regexp.Regexp{secretParam, secretKeyword} {
		for _, m := range param.FindAllStringSubmatchIndex(s, -1) {
			spans = append(spans, [2]int{m[3], m[1]})
		}
	}
	return spans
}

// merge returns spans sorted, the overlapping ones joined.
func merge(spans [][2]int) [][2]int {
	slices.SortFunc(spans, func(a, b [2]int) int { return a[0] - b[0] })
	var out [][2]int
	for _, sp := range spans {
		if n := len(out); n > 0 && sp[0] <= out[n-1][1] {
			out[n-1][1] = max(out[n-1][1], sp[1])
			continue
		}
		out = append(out, sp)
	}
	return out
}

// tokenSchemes are the schemes whose user info may be a token alone
// (nats://TOKEN@host).
var tokenSchemes = map[string]bool{"nats": true, "tls": true, "ws": true, "wss": true}

// userInfo returns where the user info of a URL's text starts (after
// "://") and where the last "@" of the text stands, or at = -1 when it
// has none. The last "@" of the whole text, not of the authority: a
// password with an unescaped "/", "?" or "#" ends the authority early for
// a URL parser, but not for the one who wrote it.
func userInfo(s string) (start, at int) {
	i := strings.Index(s, "://")
	if i < 0 {
		return 0, -1
	}
	at = strings.LastIndex(s[i+3:], "@")
	if at < 0 {
		return 0, -1
	}
	return i + 3, i + 3 + at
}

// ambiguousUserInfo reports whether the password of rawURL's user info
// (see userInfo) runs past the end of the authority a URL parser reads:
// it holds an unescaped "/", "?" or "#", so a driver would take a piece
// of it for the host, the path or the query, and repeat that piece in
// its errors.
func ambiguousUserInfo(rawURL string) bool {
	i, at := userInfo(rawURL)
	if at < 0 || !strings.Contains(rawURL[i:at], ":") {
		return false
	}
	end := strings.IndexAny(rawURL[i:], "/?#")
	return end >= 0 && i+end < at
}

// secretNames are the names of the parameters that hold secrets:
// password, sslpassword, passwd, secret, secret_access_key, token,
// session_token, api_key, sslkey… (any case).
const secretNames = `(?:[a-z_]*pass[a-z_]*|[a-z_]*secret[a-z_]*|[a-z_]*token|api_?key|sslkey)`

// secretParam matches a query parameter that holds a secret, and its
// value.
var secretParam = regexp.MustCompile(`(?i)((?:^|[?&;])` + secretNames + `=)[^&;#]*`)

// secretKeyword matches a keyword of a libpq connection string that holds
// a secret, and its value: a word, or a quoted string with \' and \\
// escapes (unterminated: to the end).
var secretKeyword = regexp.MustCompile(`(?i)((?:^|\s)` + secretNames + `\s*=\s*)('(?:[^'\\]|\\.)*'?|\S*)`)

// scrub returns err, or, when its message holds one of secrets, an error
// whose message has each replaced with "xxxxx". That one matches the
// targets err matches with errors.Is (storage.ErrStoreUnavailable, a
// context's error) but unwraps to nothing, so that no error in its chain
// prints a secret.
func scrub(err error, secrets []string) error {
	msg := err.Error()
	clean := msg
	for _, s := range secrets {
		clean = strings.ReplaceAll(clean, s, "xxxxx")
	}
	if clean == msg {
		return err
	}
	return &scrubbed{msg: clean, err: err}
}

type scrubbed struct {
	msg string
	err error
}

func (e *scrubbed) Error() string { return e.msg }

func (e *scrubbed) Is(target error) bool { return errors.Is(e.err, target) }
