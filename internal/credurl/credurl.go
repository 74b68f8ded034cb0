// Package credurl keeps the credentials of connection URLs (redis://user:pass@…,
// kafkas://user:pass@…) out of messages: every error or log line that names such a URL goes
// through Redact or Error.
package credurl

import "strings"

// Redact returns raw with the password of its userinfo replaced by "xxxxx" (the user kept, as
// net/url's URL.Redacted does; a userinfo without a colon is replaced whole); raw itself when
// it holds no userinfo. raw need not parse as a URL.
func Redact(raw string) string {
	prefix, rest := "", raw
	if i := strings.Index(raw, "://"); i >= 0 {
		prefix, rest = raw[:i+3], raw[i+3:]
	}
	end := len(rest)
	if i := strings.IndexAny(rest, "/?#"); i >= 0 {
		end = i
	}
	at := strings.LastIndexByte(rest[:end], '@')
	if at < 0 {
		return raw
	}
	user, _, ok := strings.Cut(rest[:at], ":")
	if !ok {
		return prefix + "xxxxx" + rest[at:] // no colon: the whole userinfo may be a secret
	}
	return prefix + user + ":xxxxx" + rest[at:]
}

// Error wraps err, whose message may quote raw (net/url's parse errors do), so that its
// message shows raw redacted; errors.Is and errors.As still reach err.
func Error(err error, raw string) error {
	if err == nil {
		return nil
	}
	return &redacted{err: err, raw: raw}
}

type redacted struct {
	err error
	raw string
}

func (e *redacted) Error() string {
	r := Redact(e.raw)
	if r == e.raw {
		return e.err.Error()
	}
	return strings.ReplaceAll(e.err.Error(), e.raw, r)
}

func (e *redacted) Unwrap() error { return e.err }
