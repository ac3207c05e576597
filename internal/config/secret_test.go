package config

import (
	"errors"
	"flag"
	"strings"
	"testing"
)

func TestRedactURL(t *testing.T) {
	for _, c := range []struct{ in, want string }{
		{"redis://u:secret@host:6379/0", "redis://u:xxxxx@host:6379/0"},
		{"rediss://:secret@host/0", "rediss://:xxxxx@host/0"},
		{"redis://host:6379/0", "redis://host:6379/0"},
		{"redis://user@host/0", "redis://user@host/0"},
		{"redis://u:se%2Fcret@host/0", "redis://u:xxxxx@host/0"},
		{"redis://u:se/cret@host:1/0", "redis://u:xxxxx@host:1/0"}, // does not parse as a URL with a password
		{"redis://u:sec ret@host/0", "redis://u:xxxxx@host/0"},     // does not parse at all
		{"", ""},
	} {
		if got := RedactURL(c.in); got != c.want {
			t.Errorf("RedactURL(%q) = %q, want %q", c.in, got, c.want)
		}
	}
	if got := RedactURLs("redis://a:p1@h1/0,redis://h2/0"); got != "redis://a:xxxxx@h1/0,redis://h2/0" {
		t.Errorf("RedactURLs: %q", got)
	}
}

// -h shows the environment's value of each setting as its default: URLs with their passwords redacted,
// secrets not at all. After a bad flag nothing is printed (the binary logs the error, which shows none).
func TestHelpShowsNoSecrets(t *testing.T) {
	var url, urls, token, name string
	s := NewSet("t", envOf(map[string]string{
		"REDIS_URL": "redis://u:hunter2@h:1/0", "REDLOCK_URLS": "redis://u:hunter3@h:2/0,redis://u:hunter4@h:3/0",
		"METRICS_TOKEN": "hunter5-token", "WORKER_NAME": "w-7",
	}))
	var out strings.Builder
	s.SetOutput(&out)
	s.URL(&url, "REDIS_URL", "redis://127.0.0.1:6379/0", "")
	s.URLList(&urls, "REDLOCK_URLS", "", "")
	s.Secret(&token, "METRICS_TOKEN", "")
	s.String(&name, "WORKER_NAME", "", "")
	if err := s.Parse([]string{"-h"}); err == nil {
		t.Fatal("-h: no error")
	}
	help := out.String()
	for _, want := range []string{"redis://u:xxxxx@h:1/0", "redis://u:xxxxx@h:2/0,redis://u:xxxxx@h:3/0", "w-7"} {
		if !strings.Contains(help, want) {
			t.Errorf("-h: the usage lacks %q:\n%s", want, help)
		}
	}
	if strings.Contains(help, "hunter") {
		t.Errorf("-h: the usage shows a secret:\n%s", help)
	}
	out.Reset()
	if err := s.Parse([]string{"--no-such-flag"}); err == nil || strings.Contains(err.Error(), "hunter") || out.Len() > 0 {
		t.Errorf("--no-such-flag: error %v, printed %q; want an error that shows no secret, and nothing printed", err, out.String())
	}
	if url != "redis://u:hunter2@h:1/0" || token != "hunter5-token" || urls != "redis://u:hunter3@h:2/0,redis://u:hunter4@h:3/0" {
		t.Errorf("the values are %q %q %q, want the environment's, unredacted", url, urls, token)
	}
	for _, p := range s.Params() {
		if strings.Contains(p.Default, "hunter") {
			t.Errorf("Params shows a secret: %+v", p)
		}
	}
}

// failing is a flag value that refuses every value, as an int setting refuses "x".
type failing struct{ flag.Value }

func (failing) Set(string) error { return errBad }
func (failing) String() string   { return "" }

type failingURL struct{ failing }

func (failingURL) redact(raw string) string { return (*urlValue)(nil).redact(raw) }

var errBad = errors.New("bad value")

// A value from the environment that a setting refuses is named in the error, redacted when it is a URL.
func TestBadValuesFromTheEnvironmentAreShownRedacted(t *testing.T) {
	s := NewSet("t", envOf(map[string]string{"PLAIN": "x", "SECRET_URL": "redis://u:hunter2@h/0"}))
	s.Var(failing{}, "PLAIN", "")
	if err := s.Parse(nil); err == nil || !strings.Contains(err.Error(), `invalid PLAIN "x"`) {
		t.Errorf("plain value: %v", err)
	}
	s = NewSet("t", envOf(map[string]string{"SECRET_URL": "redis://u:hunter2@h/0"}))
	s.Var(failingURL{}, "SECRET_URL", "")
	if err := s.Parse(nil); err == nil || !strings.Contains(err.Error(), `invalid SECRET_URL "redis://u:xxxxx@h/0"`) {
		t.Errorf("URL value: %v", err)
	}
}
