package storeurl

import (
	"errors"
	"net/url"
	"regexp"
	"slices"
	"strings"
)

// Redact returns rawURL fit to print: the password of its user info and
// the values of its query parameters that hold secrets (password=,
// sslpassword=, secret_access_key=, token=, a key…) replaced with "xxxxx".
// A URL that does not parse (a malformed escape, a stray character) is
// redacted as text: whatever follows the user name in the user info, and
// every secret parameter.
func Redact(rawURL string) string {
	if u, err := url.Parse(rawURL); err == nil {
		changed := false
		if _, ok := u.User.Password(); ok {
			u.User, changed = url.UserPassword(u.User.Username(), "xxxxx"), true
		}
		if q := secretParam.ReplaceAllString(u.RawQuery, "${1}xxxxx"); q != u.RawQuery {
			u.RawQuery, changed = q, true
		}
		if !changed {
			return rawURL // u.String() would write mem:// as mem:
		}
		return u.String()
	}
	s := rawURL
	if i, at := userInfo(s); at >= 0 {
		user, _, _ := strings.Cut(s[i:at], ":")
		s = s[:i] + user + ":xxxxx" + s[at:]
	}
	return secretParam.ReplaceAllString(s, "${1}xxxxx")
}

// userInfo returns where the user info of a URL's text starts (after
// "://") and where its last "@" stands, or at = -1 when it has none.
func userInfo(s string) (start, at int) {
	i := strings.Index(s, "://")
	if i < 0 {
		return 0, -1
	}
	rest := s[i+3:]
	end := strings.IndexAny(rest, "/?#")
	if end < 0 {
		end = len(rest)
	}
	at = strings.LastIndex(rest[:end], "@")
	if at < 0 {
		return 0, -1
	}
	return i + 3, i + 3 + at
}

// secretParam matches a query parameter that holds a secret, and its
// value: password=, sslpassword=, passwd=, secret=, secret_access_key=,
// token=, session_token=, api_key=, sslkey=… (any case).
var secretParam = regexp.MustCompile(`(?i)((?:^|[?&;])(?:[a-z_]*pass[a-z_]*|[a-z_]*secret[a-z_]*|[a-z_]*token|api_?key|sslkey)=)[^&;#]*`)

// Secrets returns the secrets that rawURL holds, read from its text (so
// from a URL that does not parse too): the password of its user info and
// the values of its secret parameters (see [Redact]), each as written and
// as decoded. Secrets shorter than 3 bytes are left out: replacing them
// in a message would garble its ordinary words. A program that prints
// what a library says about a URL replaces these in it.
func Secrets(rawURL string) []string {
	var out []string
	add := func(s string) {
		if len(s) >= 3 && !slices.Contains(out, s) {
			out = append(out, s)
		}
	}
	addAll := func(s string) {
		add(s)
		for _, unescape := range []func(string) (string, error){url.PathUnescape, url.QueryUnescape} {
			if d, err := unescape(s); err == nil {
				add(d)
			}
		}
	}
	if i, at := userInfo(rawURL); at >= 0 {
		if _, pw, ok := strings.Cut(rawURL[i:at], ":"); ok {
			addAll(pw)
		}
	}
	for _, m := range secretParam.FindAllStringSubmatchIndex(rawURL, -1) {
		addAll(rawURL[m[3]:m[1]])
	}
	return out
}

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
