package config

import (
	"strings"
	"testing"
	"time"

	"github.com/caarlos0/env/v11"
)

// What a well-kept environment library, github.com/caarlos0/env/v11, would get wrong for these binaries,
// each case against what a Set does (docs/configuration.md, "Why the settings are not on a library"). A
// case that fails means the library changed: look again at moving onto it.
func TestWhatAnEnvironmentLibraryWouldGetWrongHere(t *testing.T) {
	type settings struct {
		Concurrency int           `env:"WORKER_CONCURRENCY" envDefault:"128"`
		LockWait    time.Duration `env:"LOCK_WAIT" envDefault:"5s"`
	}
	parseLib := func(vars map[string]string) (settings, error) {
		var s settings
		return s, env.ParseWithOptions(&s, env.Options{Environment: vars})
	}

	t.Run("a misspelt variable is ignored and the default used", func(t *testing.T) {
		vars := map[string]string{"WORKER_CONCURENCY": "4"}
		if s, err := parseLib(vars); err != nil || s.Concurrency != 128 {
			t.Errorf("library: %+v, %v; want the typo ignored (the default 128, no error)", s, err)
		}
		if err := strictSet(vars).Parse(nil); err == nil || !strings.Contains(err.Error(), "did you mean WORKER_CONCURRENCY?") {
			t.Errorf("Set: %v, want the typo refused, naming WORKER_CONCURRENCY", err)
		}
	})
	t.Run("a bad value is reported by the Go field's name, not the variable's", func(t *testing.T) {
		vars := map[string]string{"LOCK_WAIT": "soon"}
		if _, err := parseLib(vars); err == nil || strings.Contains(err.Error(), "LOCK_WAIT") || !strings.Contains(err.Error(), `"LockWait"`) {
			t.Errorf("library: %v; want an error naming the field LockWait, not LOCK_WAIT", err)
		}
		s := NewSet("worker", envOf(vars))
		var d time.Duration
		s.Duration(&d, "LOCK_WAIT", time.Second, "")
		if err := s.Parse(nil); err == nil || !strings.Contains(err.Error(), "LOCK_WAIT") {
			t.Errorf("Set: %v, want an error naming LOCK_WAIT", err)
		}
	})
	t.Run("a secret from a file replaces the variable instead of adding NAME_FILE, and shows the secret", func(t *testing.T) {
		var secret struct {
			RedisURL string `env:"REDIS_URL,file"` // file: the URL may be a mounted secret
		}
		vars := map[string]string{"REDIS_URL": "redis://u:hunter2@h:1/0"}
		if err := env.ParseWithOptions(&secret, env.Options{Environment: vars}); err == nil || !strings.Contains(err.Error(), "hunter2") {
			t.Errorf("library: %v; want the URL taken for a file name, and shown in the error", err)
		}
		var url string
		s := NewSet("worker", envOf(vars))
		s.URL(&url, "REDIS_URL", "", "")
		if err := s.Parse(nil); err != nil || url != vars["REDIS_URL"] {
			t.Errorf("Set: %q, %v; want the URL of REDIS_URL (REDIS_URL_FILE would name a file)", url, err)
		}
	})
}
