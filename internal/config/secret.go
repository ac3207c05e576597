package config

import (
	"flag"
	"fmt"
	"net/url"
	"os"
	"strconv"
	"strings"
)

// The flag package shows a flag's value as its default in -h and in the usage text printed after a bad
// flag, and a Set takes that value from the environment before it defines the flag: a secret or a URL with a
// password given in the environment would land in the help and the logs. The values below show themselves
// redacted instead: a secret not at all, a URL with its password as xxxxx.

// Redacted is what stands for a password in a URL that is shown: redis://user:xxxxx@host:6379/0.
const Redacted = "xxxxx"

// FileSuffix names the variable that gives a secret setting's value in a file: REDIS_URL_FILE holds the path
// of a file whose content is REDIS_URL (a Docker or Kubernetes secret mounted as a file), so the secret
// stays out of the environment, which `docker inspect`, /proc/PID/environ and crash reports show. Every
// setting defined by Secret, URL or URLList has one.
const FileSuffix = "_FILE"

// lookup returns the environment's value of the setting env, and the variable it came from: env itself,
// or for a secret (a redactor) the content of the file that env_FILE names, less one trailing newline
// (what `echo` and editors add). An empty variable counts as unset. Setting both, or a file that cannot
// be read, is an error of the set; ok is then false.
func (s *Set) lookup(value flag.Value, env string) (v, from string, ok bool) {
	v, ok = s.env(env)
	if _, secret := value.(redactor); !secret {
		return v, env, ok
	}
	fileEnv := env + FileSuffix
	path, fromFile := s.env(fileEnv)
	switch {
	case !fromFile || path == "":
		return v, env, ok
	case ok && v != "":
		s.errs = append(s.errs, fmt.Errorf("both %s and %s are set: set one of them", env, fileEnv))
		return "", "", false
	}
	b, err := os.ReadFile(path)
	if err != nil {
		s.errs = append(s.errs, fmt.Errorf("%s: cannot read the file of %s: %w", fileEnv, env, err))
		return "", "", false
	}
	content := strings.TrimSuffix(string(b), "\n")
	return strings.TrimSuffix(content, "\r"), fileEnv + " (" + path + ")", true
}

// Secret defines a string setting whose value is never shown, in help or in errors (METRICS_TOKEN).
func (s *Set) Secret(p *string, name, usage string) {
	s.Var((*secretValue)(p), name, usage)
}

// URL defines a setting holding one URL whose password is never shown: help, errors and Params show it as
// RedactURL does (REDIS_URL).
func (s *Set) URL(p *string, name, def, usage string) {
	*p = def
	s.Var((*urlValue)(p), name, usage)
}

// URLList defines a setting holding comma-separated URLs whose passwords are never shown (REDLOCK_URLS).
func (s *Set) URLList(p *string, name, def, usage string) {
	*p = def
	s.Var((*urlListValue)(p), name, usage)
}

// redactor is a flag value that says how to show a raw value in an error message.
type redactor interface{ redact(raw string) string }

// shown is how an error message shows the raw value v of value: quoted, or redacted.
func shown(value flag.Value, v string) string {
	if r, ok := value.(redactor); ok {
		return r.redact(v)
	}
	return strconv.Quote(v)
}

type secretValue string

func (v *secretValue) Set(s string) error { *v = secretValue(s); return nil }
func (*secretValue) String() string       { return "" }
func (*secretValue) redact(string) string { return "(not shown)" }

type urlValue string

func (v *urlValue) Set(s string) error     { *v = urlValue(s); return nil }
func (v *urlValue) String() string         { return RedactURL(string(*v)) }
func (*urlValue) redact(raw string) string { return strconv.Quote(RedactURL(raw)) }

type urlListValue string

func (v *urlListValue) Set(s string) error     { *v = urlListValue(s); return nil }
func (v *urlListValue) String() string         { return RedactURLs(string(*v)) }
func (*urlListValue) redact(raw string) string { return strconv.Quote(RedactURLs(raw)) }

// RedactURL returns raw with the password of its user info replaced by Redacted: redis://u:xxxxx@host/0.
// A URL without a password is returned as it is. It never fails: a string that does not parse is redacted
// from its "scheme://" up to the last "@".
func RedactURL(raw string) string {
	if u, err := url.Parse(raw); err == nil && u.User != nil {
		if _, ok := u.User.Password(); ok {
			return u.Redacted()
		}
		return raw
	}
	scheme, rest, ok := strings.Cut(raw, "://")
	at := strings.LastIndex(rest, "@")
	if !ok || at < 0 {
		return raw
	}
	user, _, hasPassword := strings.Cut(rest[:at], ":")
	if !hasPassword {
		return raw
	}
	return scheme + "://" + user + ":" + Redacted + "@" + rest[at+1:]
}

// RedactURLs redacts each URL of a comma-separated list, as RedactURL does.
func RedactURLs(list string) string {
	urls := splitURLs(list)
	for i, u := range urls {
		urls[i] = RedactURL(u)
	}
	return strings.Join(urls, ",")
}

// splitURLs splits a comma-separated list of URLs at the commas that start a new URL: a piece without
// "://" belongs to the one before (a comma in its password), so the password is neither cut nor shown.
func splitURLs(list string) []string {
	var urls []string
	for _, piece := range strings.Split(list, ",") {
		if t := strings.TrimSpace(piece); len(urls) > 0 && t != "" && !strings.Contains(t, "://") {
			urls[len(urls)-1] += "," + piece
			continue
		}
		urls = append(urls, piece)
	}
	return urls
}

// redactedError is an error whose message had a URL's password taken out; errors.Is and errors.As still
// see the original.
type redactedError struct {
	msg string
	err error
}

func (e *redactedError) Error() string { return e.msg }
func (e *redactedError) Unwrap() error { return e.err }

// redactError keeps the password of raw out of err's message: the error of a URL with user info ("@")
// loses its detail, which may quote a piece of the password however the URL was split (a password with
// a "/" or "?" parses as a port and a path: "invalid database number: \"TopSecret@redis:6379\"").
func redactError(err error, raw string) error {
	if !strings.Contains(raw, "@") {
		return err
	}
	return &redactedError{msg: "not a valid Redis URL (" + RedactURL(raw) + "): check the database number and the " +
		"options, and percent-encode the reserved characters (: / @ ? # %) of a user name or password", err: err}
}
