package idemamqp

import (
	"errors"
	"net/url"
	"regexp"
	"slices"
	"strings"
)

// redact returns rawURL fit for errors and logs, without its password, and
// the password, as written and decoded, to keep out of other messages. A
// URL that parses is shown as url.URL.Redacted shows it; of one that does
// not, or that has an "@" after its host, everything between its user name
// and its last "@" is hidden: a password with an unescaped "/", "?" or "#"
// ends the host early ("amqp://guest:12#34@host/" parses, as the host
// "guest" and the port 12), and the rest of it would show.
func redact(rawURL string) (shown string, secrets []string) {
	if u, err := url.Parse(rawURL); err == nil && !atAfterHost(rawURL) {
		if p, ok := u.User.Password(); ok && p != "" {
			_, written, _ := strings.Cut(u.User.String(), ":")
			return u.Redacted(), nonEmpty(p, written)
		}
		return u.Redacted(), nil
	}
	scheme, rest, ok := strings.Cut(rawURL, "://")
	if !ok {
		scheme, rest = "", rawURL
	} else {
		scheme += "://"
	}
	at := strings.LastIndex(rest, "@")
	if at < 0 {
		return rawURL, nil
	}
	user, password, ok := strings.Cut(rest[:at], ":")
	if !ok || password == "" {
		return rawURL, nil
	}
	secrets = nonEmpty(password)
	if p, err := url.PathUnescape(password); err == nil {
		secrets = nonEmpty(password, p)
	}
	return scheme + user + ":xxxxx" + rest[at:], secrets
}

// atAfterHost reports whether rawURL has an "@" after the end of its
// authority.
func atAfterHost(rawURL string) bool {
	_, rest, ok := strings.Cut(rawURL, "://")
	if !ok {
		return false
	}
	end := strings.IndexAny(rest, "/?#")
	return end >= 0 && strings.LastIndex(rest, "@") > end
}

// parseError returns the message of amqp091's error for a URL that does
// not parse without the parts of the URL that url.Parse quotes: the URL, or
// the part it stopped at (`invalid port ":ab" after host`), which can be a
// piece of a password cut at an unescaped "/", "?" or "#".
func parseError(err error) string {
	msg := err.Error()
	if ue, ok := errors.AsType[*url.Error](err); ok {
		msg = strings.Replace(msg, ue.Error(), quoted.ReplaceAllString(ue.Err.Error(), "(hidden)"), 1)
	}
	return msg
}

var quoted = regexp.MustCompile(`"[^"]*"`)

func nonEmpty(ss ...string) []string {
	var out []string
	for _, s := range ss {
		if s != "" && !slices.Contains(out, s) {
			out = append(out, s)
		}
	}
	return out
}

// scrub returns err with the URL's password hidden from its message, or
// err itself when its message does not show it.
func (c *Consumer) scrub(err error) error {
	if err == nil {
		return nil
	}
	msg := err.Error()
	shown := msg
	if c.url != "" {
		shown = strings.ReplaceAll(shown, c.url, c.shown)
	}
	for _, s := range c.secrets {
		shown = strings.ReplaceAll(shown, s, "xxxxx")
	}
	if shown == msg {
		return err
	}
	return &scrubbed{msg: shown, err: err}
}

// scrubbed is an error whose message hides a password; errors.Is and As
// see the error it stands for.
type scrubbed struct {
	msg string
	err error
}

func (e *scrubbed) Error() string { return e.msg }
func (e *scrubbed) Unwrap() error { return e.err }
