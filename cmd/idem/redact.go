package main

import (
	"io"
	"net/url"
	"regexp"
	"strings"
)

// redactURL returns rawURL fit to print: the password of its user info
// and the values of its query parameters that hold secrets (password,
// sslpassword, secret, token, a key…) replaced with "xxxxx". A URL that
// does not parse (a malformed escape, a stray character) is redacted as
// text: whatever sits between "://" and the last "@" of its authority,
// and every secret parameter. Every error and line of the CLI that names
// a --store or --broker URL names it through this.
func redactURL(rawURL string) string {
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
	if i := strings.Index(s, "://"); i >= 0 {
		rest := s[i+3:]
		end := strings.IndexAny(rest, "/?#")
		if end < 0 {
			end = len(rest)
		}
		if at := strings.LastIndex(rest[:end], "@"); at >= 0 {
			user, _, _ := strings.Cut(rest[:at], ":")
			s = s[:i+3] + user + ":xxxxx" + rest[at:]
		}
	}
	return secretParam.ReplaceAllString(s, "${1}xxxxx")
}

// secretParam matches a query parameter that holds a secret, and its
// value: password=, sslpassword=, passwd=, secret=, secret_access_key=,
// token=, session_token=, api_key=, sslkey=… (any case).
var secretParam = regexp.MustCompile(`(?i)((?:^|[?&;])(?:[a-z_]*pass[a-z_]*|[a-z_]*secret[a-z_]*|[a-z_]*token|api_?key|sslkey)=)[^&;#]*`)

// secretsIn returns the secrets that the URLs among args hold: the
// passwords of their user info and the values of their secret parameters,
// as written and decoded. The CLI's output passes through a [scrubber] of
// them, so that no library's error that repeats a URL it could not use
// (a driver's parse error, a dial error) prints one.
func secretsIn(args []string) []string {
	var out []string
	add := func(s string) {
		if len(s) >= 3 { // shorter ones would scrub ordinary text
			out = append(out, s)
			if d, err := url.PathUnescape(s); err == nil && d != s {
				out = append(out, d)
			}
		}
	}
	for _, a := range args {
		if flag, v, ok := strings.Cut(a, "="); ok && strings.HasPrefix(flag, "-") && !strings.Contains(flag, "://") {
			a = v // --store=URL
		}
		i := strings.Index(a, "://")
		if i < 0 {
			continue
		}
		rest := a[i+3:]
		end := strings.IndexAny(rest, "/?#")
		if end < 0 {
			end = len(rest)
		}
		if at := strings.LastIndex(rest[:end], "@"); at >= 0 {
			if _, pw, ok := strings.Cut(rest[:at], ":"); ok {
				add(pw)
			}
		}
		for _, m := range secretParam.FindAllStringSubmatchIndex(a, -1) {
			add(a[m[3]:m[1]])
		}
	}
	return out
}

// scrubber writes to w with every secret replaced by "xxxxx".
type scrubber struct {
	w       io.Writer
	secrets []string
}

func (s scrubber) Write(p []byte) (int, error) {
	text := string(p)
	for _, sec := range s.secrets {
		text = strings.ReplaceAll(text, sec, "xxxxx")
	}
	if _, err := io.WriteString(s.w, text); err != nil {
		return 0, err
	}
	return len(p), nil
}
