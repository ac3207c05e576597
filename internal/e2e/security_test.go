package e2e

import (
	"bytes"
	"context"
	"errors"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/stockflow/stockflow/lockmw/rlock"
	"github.com/stockflow/stockflow/testkit/redistest"
)

// tlsEnv are the TLS settings of a client of certs' servers: their CA and, with clientCert, the client
// certificate.
func tlsEnv(certs *redistest.Certs, clientCert bool) []string {
	env := []string{"REDIS_TLS_CA_FILE=" + certs.CAFile}
	if clientCert {
		env = append(env, "REDIS_TLS_CERT_FILE="+certs.ClientCertFile, "REDIS_TLS_KEY_FILE="+certs.ClientKeyFile)
	}
	return env
}

// runBinary runs a binary with the environment entries env added, and returns its exit code and its
// standard output and error together.
func runBinary(t *testing.T, path string, env []string, args ...string) (int, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, path, args...)
	cmd.Env = append(os.Environ(), env...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	var exit *exec.ExitError
	switch {
	case errors.As(err, &exit):
		return exit.ExitCode(), out.String()
	case err != nil:
		t.Fatalf("run %s: %v", path, err)
	}
	return 0, out.String()
}

// A worker and a producer on a TLS-only Redis that requires client certificates: the pipeline adds up over
// rediss:// with the test's CA and client certificate, and every client that lacks one of them is refused.
func TestTLSOnlyPipeline(t *testing.T) {
	certs := redistest.NewCerts(t)
	s := redistest.Start(t, redistest.WithTLS(certs, true))
	env := tlsEnv(certs, true)
	startWorker(t, s, "tls-0", env...)
	startWorker(t, s, "tls-1", env...)
	sum := produceEnv(t, append([]string{"REDIS_URL=" + s.URL()}, env...), "--orders", "1500", "--skus", "5", "--seed-stock", "200")
	assertConsistent(t, sum)
	if sum.Reserved != 1000 || sum.Rejected != 500 {
		t.Fatalf("reserved %d rejected %d, want 1000 and 500", sum.Reserved, sum.Rejected)
	}

	plain := redis.NewClient(&redis.Options{Addr: s.Addr, MaxRetries: -1})
	defer plain.Close()
	if err := plain.Ping(context.Background()).Err(); err == nil {
		t.Error("a plain TCP client was answered by the TLS-only server")
	}
	_, prod := binaries(t)
	for _, c := range []struct {
		name string
		env  []string
		want string
	}{
		{"without the CA", []string{"REDIS_TLS_CERT_FILE=" + certs.ClientCertFile, "REDIS_TLS_KEY_FILE=" + certs.ClientKeyFile}, "certificate signed by unknown authority"},
		{"without a client certificate", tlsEnv(certs, false), "certificate required"},
		{"over redis://", append([]string{"REDIS_URL=" + strings.Replace(s.URL(), "rediss://", "redis://", 1)}, env...), "rediss://"},
	} {
		code, out := runBinary(t, prod, append([]string{"REDIS_URL=" + s.URL()}, c.env...), "--orders", "1", "--seed-stock", "1")
		if code == 0 || !strings.Contains(out, c.want) {
			t.Errorf("producer %s: exit %d, output %q; want a failure saying %q", c.name, code, out, c.want)
		}
	}
}

// Redlock over three TLS-only masters, and the stock on a fourth: the locks (and their fencing counters)
// live on the masters, reached over rediss://.
func TestTLSRedlockMasters(t *testing.T) {
	certs := redistest.NewCerts(t)
	s := redistest.Start(t, redistest.WithTLS(certs, true))
	masters := redistest.StartN(t, 3, redistest.WithTLS(certs, true))
	var urls []string
	for _, m := range masters {
		urls = append(urls, m.URL())
	}
	env := append(tlsEnv(certs, true), "REDLOCK_URLS="+strings.Join(urls, ","))
	startWorker(t, s, "tls-redlock-0", env...)
	startWorker(t, s, "tls-redlock-1", env...)
	sum := produceEnv(t, append([]string{"REDIS_URL=" + s.URL()}, tlsEnv(certs, true)...), "--orders", "600", "--skus", "3", "--seed-stock", "150")
	assertConsistent(t, sum)
	ctx := context.Background()
	for i, m := range masters {
		if n, err := m.Client().Exists(ctx, rlock.TokenKey("SKU-0")).Result(); err != nil || n != 1 {
			t.Errorf("master %d has no fencing counter of SKU-0 (%d, %v): the locks were not taken on it", i, n, err)
		}
	}
	if n := s.Client().Exists(ctx, rlock.TokenKey("SKU-0")).Val(); n != 0 {
		t.Error("the stock Redis has a fencing counter: the worker locked there, not on the Redlock masters")
	}
}

// adminPassword is the password of the admin user the ACL tests add to the shipped file, for their own
// checks; no service uses it.
const adminPassword = "e2e-admin-password"

// startACLServer starts a Redis with the shipped ACL file plus an admin user for the test's own client.
func startACLServer(t *testing.T) *redistest.Server {
	t.Helper()
	b, err := os.ReadFile(aclFile)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "users.acl")
	admin := "user admin on >" + adminPassword + " ~* &* +@all\n"
	if err := os.WriteFile(path, append(b, admin...), 0o600); err != nil {
		t.Fatal(err)
	}
	s := redistest.Start(t, redistest.WithACL(path, "admin", adminPassword))
	// As compose.yaml configures its Redis: the worker's user may not turn keyspace events on itself.
	if err := s.Client().ConfigSet(context.Background(), "notify-keyspace-events", "Kt").Err(); err != nil {
		t.Fatal(err)
	}
	return s
}

// userURL is the URL of s for the user of a compose service (its user name and password).
func userURL(t *testing.T, s *redistest.Server, service string) string {
	t.Helper()
	user, password := composeCredentials(t, service)
	u, err := url.Parse(s.URL())
	if err != nil {
		t.Fatal(err)
	}
	u.User = url.UserPassword(user, password)
	return u.String()
}

// aclDenials are the entries of ACL LOG: every command, key or channel the server refused a user.
func aclDenials(t *testing.T, admin *redis.Client) []any {
	t.Helper()
	entries, err := admin.Do(context.Background(), "ACL", "LOG").Slice()
	if err != nil {
		t.Fatal(err)
	}
	return entries
}

// No binary shows a password or a token: not in -h (which shows the environment's values as defaults),
// not after a bad flag, not in the error of a bad setting. Bad TLS settings stop the binaries
// at start with a message naming the setting.
func TestSecurityNoSecretsInHelpOrErrors(t *testing.T) {
	worker, prod := binaries(t)
	certs := redistest.NewCerts(t)
	notPEM := filepath.Join(t.TempDir(), "not.pem")
	if err := os.WriteFile(notPEM, []byte("hello"), 0o600); err != nil {
		t.Fatal(err)
	}
	masters := "redis://l:hunter2-lock@127.0.0.1:2/0,redis://l:hunter2-lock@127.0.0.1:3/0,redis://l:hunter2-lock@127.0.0.1:4/0"
	base := []string{"REDIS_URL=redis://u:hunter2-redis@127.0.0.1:1/0", "REDLOCK_URLS=" + masters, "METRICS_TOKEN=hunter2-metrics-token-0123"}
	tlsURL := "REDIS_URL=rediss://u:hunter2-redis@127.0.0.1:1/0"
	cases := []struct {
		name, bin string
		env, args []string
		code      int
		want      string
	}{
		{"worker -h", worker, nil, []string{"-h"}, 0, "redis://l:xxxxx@127.0.0.1:2/0"},
		{"worker with a bad flag", worker, nil, []string{"--no-such-flag"}, 2, "flag provided but not defined: -no-such-flag"},
		{"producer -h", prod, nil, []string{"-h"}, 0, "redis://u:xxxxx@127.0.0.1:1/0"},
		{"demo -h", buildDemo(t), nil, []string{"-h"}, 0, "redis://u:xxxxx@127.0.0.1:1/0"},
		{"stockctl -h", buildStockctl(t), nil, []string{"-h"}, 0, "REDIS_URL"},
		{"two Redlock masters", worker, []string{"REDLOCK_URLS=redis://l:hunter2-lock@h:2/0,redis://l:hunter2-lock@h:3/0"}, nil, 2, "invalid REDLOCK_URLS"},
		{"a URL that does not parse", worker, []string{"REDIS_URL=redis://u:hunter2/x@h:1/0"}, nil, 2, "invalid REDIS_URL"},
		{"a bad database", worker, []string{"REDIS_URL=redis://u:hunter2-redis@h:1/x"}, nil, 2, "not a valid Redis URL (redis://u:xxxxx@h:1/x): check the database number"},
		{"a password that parses as a path", worker, []string{"REDIS_URL=redis://worker:/hunter2-redis@h:6379"}, nil, 2, "not a valid Redis URL (redis://worker:xxxxx@h:6379)"},
		{"stockctl with a bad database", buildStockctl(t), []string{"REDIS_URL=redis://u:hunter2-redis@h:1/x"}, []string{"stock", "SKU-1"}, 2, "invalid REDIS_URL"},
		{"a certificate without its key", worker, []string{tlsURL, "REDIS_TLS_CERT_FILE=" + certs.ClientCertFile}, nil, 2, "REDIS_TLS_CERT_FILE: set without REDIS_TLS_KEY_FILE"},
		{"a key without its certificate", prod, []string{tlsURL, "REDIS_TLS_KEY_FILE=" + certs.ClientKeyFile}, nil, 2, "REDIS_TLS_KEY_FILE: set without REDIS_TLS_CERT_FILE"},
		{"a missing CA file", worker, []string{tlsURL, "REDIS_TLS_CA_FILE=/nonexistent/ca.pem"}, nil, 2, "invalid REDIS_TLS_CA_FILE: open /nonexistent/ca.pem"},
		{"a CA file without a certificate", buildStockctl(t), []string{tlsURL, "REDIS_TLS_CA_FILE=" + notPEM}, []string{"stock", "SKU-1"}, 2, "no PEM certificate"},
		{"a key of another certificate", worker, []string{tlsURL, "REDIS_TLS_CERT_FILE=" + certs.ClientCertFile, "REDIS_TLS_KEY_FILE=" + certs.ServerKeyFile}, nil, 2, "private key does not match public key"},
		{"TLS files with redis://", worker, []string{"REDIS_TLS_CA_FILE=" + certs.CAFile}, nil, 2, "REDIS_TLS_CA_FILE set, but the URL redis://u:xxxxx@127.0.0.1:1/0 is not rediss://"},
		{"TLS files with a redis:// master", worker, []string{tlsURL, "REDIS_TLS_CA_FILE=" + certs.CAFile}, nil, 2, "invalid REDLOCK_URLS: redis://l:xxxxx@127.0.0.1:2/0: REDIS_TLS_CA_FILE set"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			code, out := runBinary(t, c.bin, append(append([]string{}, base...), c.env...), c.args...)
			if code != c.code || !strings.Contains(out, c.want) {
				t.Errorf("exit %d, want %d, and output saying %q:\n%s", code, c.code, c.want, out)
			}
			if strings.Contains(out, "hunter2") {
				t.Errorf("the output shows a secret:\n%s", out)
			}
		})
	}
}
