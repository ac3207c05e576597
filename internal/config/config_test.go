package config

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func envOf(m map[string]string) func(string) (string, bool) {
	return func(k string) (string, bool) { v, ok := m[k]; return v, ok }
}

func TestFlagsOverrideEnvironment(t *testing.T) {
	var url string
	var n int
	var d time.Duration
	var on bool
	s := NewSet("t", envOf(map[string]string{"REDIS_URL": "redis://env:6379/0", "WORKER_CONCURRENCY": "4", "LOCK_WAIT": "2s", "WAIT": "true"}))
	s.String(&url, "REDIS_URL", "redis://default", "")
	s.Int(&n, "WORKER_CONCURRENCY", 16, "")
	s.Duration(&d, "LOCK_WAIT", time.Second, "")
	s.Bool(&on, "WAIT", "")
	if err := s.Parse([]string{"--worker-concurrency", "8"}); err != nil {
		t.Fatal(err)
	}
	if url != "redis://env:6379/0" || n != 8 || d != 2*time.Second || !on {
		t.Fatalf("got %q %d %v %v; want the environment's url, wait and flag, and the flag's concurrency", url, n, d, on)
	}
}

func TestBadValuesNameTheSetting(t *testing.T) {
	var d time.Duration
	s := NewSet("t", envOf(map[string]string{"LOCK_LEASE": "thirty"}))
	s.Duration(&d, "LOCK_LEASE", time.Second, "")
	if err := s.Parse(nil); err == nil || !strings.Contains(err.Error(), "LOCK_LEASE") {
		t.Fatalf("bad env value: %v, want an error naming LOCK_LEASE", err)
	}

	var n int
	s = NewSet("t", envOf(nil))
	s.SetOutput(new(strings.Builder))
	s.Int(&n, "WORKER_CONCURRENCY", 1, "")
	if err := s.Parse([]string{"--worker-concurrency", "many"}); err == nil || !strings.Contains(err.Error(), "worker-concurrency") {
		t.Fatalf("bad flag value: %v, want an error naming the flag", err)
	}
}

func TestRedisOptions(t *testing.T) {
	o, err := RedisOptions("rediss://user:secret@cache.example:6380/2")
	if err != nil {
		t.Fatal(err)
	}
	if o.Username != "user" || o.Password != "secret" || o.DB != 2 || o.TLSConfig == nil || !o.ContextTimeoutEnabled {
		t.Fatalf("options %+v: want user, password, db 2, TLS and context deadlines", o)
	}
	if _, err := RedisOptions("http://nope"); err == nil {
		t.Fatal("an http URL was accepted")
	}
	urls, err := RedisURLs(" redis://a:1/0, redis://b:2/0 ,")
	if err != nil || len(urls) != 2 || urls[1].Addr != "b:2" {
		t.Fatalf("RedisURLs: %v %v", urls, err)
	}
}

func TestRequiredSettingMustBeGiven(t *testing.T) {
	parse := func(env map[string]string, args ...string) (string, error) {
		var url string
		s := NewSet("t", envOf(env))
		s.URL(&url, "REDIS_URL", "redis://127.0.0.1:6379/0", "")
		s.Require("REDIS_URL", "no guess")
		return url, s.Parse(args)
	}
	if _, err := parse(nil); err == nil || err.Error() != "REDIS_URL is not set: give REDIS_URL or --redis-url (no guess)" {
		t.Errorf("neither the environment nor a flag: %v, want an error naming both", err)
	}
	if url, err := parse(map[string]string{"REDIS_URL": "redis://env:1/0"}); err != nil || url != "redis://env:1/0" {
		t.Errorf("from the environment: %q, %v", url, err)
	}
	if url, err := parse(nil, "--redis-url", "redis://flag:1/0"); err != nil || url != "redis://flag:1/0" {
		t.Errorf("from the flag: %q, %v", url, err)
	}
	if url, err := parse(nil, "--redis-url", "redis://127.0.0.1:6379/0"); err != nil || url != "redis://127.0.0.1:6379/0" {
		t.Errorf("the flag with the default's value is given all the same: %q, %v", url, err)
	}
	file := filepath.Join(t.TempDir(), "url")
	if err := os.WriteFile(file, []byte("redis://file:1/0\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if url, err := parse(map[string]string{"REDIS_URL_FILE": file}); err != nil || url != "redis://file:1/0" {
		t.Errorf("from REDIS_URL_FILE: %q, %v", url, err)
	}
}

func TestHelpSaysARequiredSettingIsRequired(t *testing.T) {
	for _, tc := range []struct {
		env  map[string]string
		want string
	}{
		{nil, "(required)"},
		{map[string]string{"REDIS_URL": "redis://u:secret@env:1/0"}, "(default redis://u:xxxxx@env:1/0)"},
	} {
		var url string
		var help strings.Builder
		s := NewSet("t", envOf(tc.env))
		s.SetOutput(&help)
		s.URL(&url, "REDIS_URL", "redis://127.0.0.1:6379/0", "the Redis")
		s.Require("REDIS_URL", "no guess")
		s.PrintDefaults()
		if !strings.Contains(help.String(), tc.want) || strings.Contains(help.String(), "127.0.0.1") {
			t.Errorf("help with the environment %v:\n%s\nwant %q and not the built-in default", tc.env, help.String(), tc.want)
		}
	}
}
