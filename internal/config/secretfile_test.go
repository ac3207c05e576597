package config

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// secretSettings defines the three kinds of setting that carry a secret, and a plain one.
type secretSettings struct{ url, urls, token, name string }

func parseSecrets(env map[string]string, args ...string) (secretSettings, *Set, error) {
	var v secretSettings
	s := NewSet("t", envOf(env))
	s.SetOutput(new(strings.Builder))
	s.URL(&v.url, "REDIS_URL", "redis://127.0.0.1:6379/0", "")
	s.URLList(&v.urls, "REDLOCK_URLS", "", "")
	s.Secret(&v.token, "METRICS_TOKEN", "")
	s.String(&v.name, "WORKER_NAME", "w", "")
	return v, s, s.Parse(args)
}

// writeSecret writes content to a file of the test and returns its path.
func writeSecret(t *testing.T, content string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "secret")
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// Every setting that carries a secret reads NAME_FILE, a file holding its value without the trailing
// newline; the others do not.
func TestSecretsAreReadFromTheFilesNamedByTheirFileVariables(t *testing.T) {
	env := map[string]string{
		"REDIS_URL_FILE":     writeSecret(t, "redis://worker:hunter2@redis:6379/0\n"),
		"REDLOCK_URLS_FILE":  writeSecret(t, "redis://:p1@a:1/0,redis://:p2@b:2/0"),
		"METRICS_TOKEN_FILE": writeSecret(t, "a-token-of-sixteen-chars\r\n"),
		"WORKER_NAME_FILE":   writeSecret(t, "from-a-file\n"),
	}
	v, s, err := parseSecrets(env)
	if err != nil {
		t.Fatal(err)
	}
	want := secretSettings{url: "redis://worker:hunter2@redis:6379/0", urls: "redis://:p1@a:1/0,redis://:p2@b:2/0",
		token: "a-token-of-sixteen-chars", name: "w"}
	if v != want {
		t.Errorf("read %+v, want %+v (WORKER_NAME carries no secret: it has no _FILE)", v, want)
	}
	var help strings.Builder
	s.SetOutput(&help)
	s.PrintDefaults()
	for _, name := range []string{"REDIS_URL_FILE", "REDLOCK_URLS_FILE", "METRICS_TOKEN_FILE"} {
		if !strings.Contains(help.String(), name) {
			t.Errorf("-h does not name %s:\n%s", name, help.String())
		}
	}
	if strings.Contains(help.String(), "hunter2") || strings.Contains(help.String(), "WORKER_NAME_FILE") {
		t.Errorf("-h shows a secret from a file, or a _FILE of a plain setting:\n%s", help.String())
	}
	// An empty NAME_FILE is unset; a flag still wins over the file, as over the variable.
	v, _, err = parseSecrets(map[string]string{"REDIS_URL_FILE": "", "METRICS_TOKEN_FILE": env["METRICS_TOKEN_FILE"]},
		"--metrics-token", "from-the-flag-0123")
	if err != nil || v.url != "redis://127.0.0.1:6379/0" || v.token != "from-the-flag-0123" {
		t.Errorf("empty REDIS_URL_FILE and --metrics-token: %+v, %v", v, err)
	}
}

func TestSecretFileErrorsNameTheSettingAndKeepTheSecret(t *testing.T) {
	missing := filepath.Join(t.TempDir(), "no-such-secret")
	cases := []struct {
		name string
		env  map[string]string
		want string
		is   error
	}{
		{name: "both the variable and its file set", env: map[string]string{"METRICS_TOKEN": "hunter2-hunter2-x", "METRICS_TOKEN_FILE": writeSecret(t, "hunter2-hunter2-y")},
			want: "both METRICS_TOKEN and METRICS_TOKEN_FILE are set: set one of them"},
		{name: "a file that does not exist", env: map[string]string{"REDIS_URL_FILE": missing},
			want: "REDIS_URL_FILE: cannot read the file of REDIS_URL: open " + missing, is: fs.ErrNotExist},
		{name: "a directory instead of a file", env: map[string]string{"REDLOCK_URLS_FILE": t.TempDir()},
			want: "REDLOCK_URLS_FILE: cannot read the file of REDLOCK_URLS"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, _, err := parseSecrets(c.env)
			if err == nil || !strings.Contains(err.Error(), c.want) || strings.Contains(err.Error(), "hunter2") {
				t.Fatalf("error %v, want one containing %q and no secret", err, c.want)
			}
			if c.is != nil && !errors.Is(err, c.is) {
				t.Errorf("errors.Is(%v, %v) is false", err, c.is)
			}
		})
	}
	// A value from a file that the setting refuses is named by the file and shown redacted.
	s := NewSet("t", envOf(map[string]string{"SECRET_URL_FILE": writeSecret(t, "redis://u:hunter2@h/0\n")}))
	s.Var(failingURL{}, "SECRET_URL", "")
	err := s.Parse(nil)
	if err == nil || !strings.Contains(err.Error(), `invalid SECRET_URL_FILE (`) || !strings.Contains(err.Error(), `"redis://u:xxxxx@h/0"`) {
		t.Errorf("a refused URL from a file: %v", err)
	}
}
