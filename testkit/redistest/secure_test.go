package redistest_test

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/stockflow/stockflow/internal/config"
	"github.com/stockflow/stockflow/testkit/redistest"
)

func pingWith(opts *redis.Options) error {
	opts.MaxRetries = -1
	c := redis.NewClient(opts)
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	return c.Ping(ctx).Err()
}

// A TLS-only server answers its own client (CA and client certificate), and refuses a plain TCP client, a
// TLS client without a client certificate, and one that does not trust its CA.
func TestTLSOnlyServer(t *testing.T) {
	certs := redistest.NewCerts(t)
	s := redistest.Start(t, redistest.WithTLS(certs, true))
	if !strings.HasPrefix(s.URL(), "rediss://127.0.0.1:") {
		t.Fatalf("URL %s, want rediss://127.0.0.1:port", s.URL())
	}
	if err := s.Client().Set(context.Background(), "k", "v", 0).Err(); err != nil {
		t.Fatalf("the test's own TLS client: %v", err)
	}
	url := s.URL()
	other := redistest.NewCerts(t)
	// The server refuses a client's certificate after the client's side of a TLS 1.3 handshake is done: the
	// client's command then meets either the server's alert or, when the server closed first, a reset.
	const reset = "connection reset by peer"
	for _, c := range []struct {
		name string
		tls  config.TLSFiles
		want []string
	}{
		{"without a client certificate", config.TLSFiles{CAFile: certs.CAFile}, []string{"certificate required", reset}},
		{"trusting another CA", config.TLSFiles{CAFile: other.CAFile, CertFile: certs.ClientCertFile, KeyFile: certs.ClientKeyFile}, []string{"unknown authority"}},
		{"with another CA's client certificate", config.TLSFiles{CAFile: certs.CAFile, CertFile: other.ClientCertFile, KeyFile: other.ClientKeyFile}, []string{"unknown certificate authority", reset}},
	} {
		opts, err := c.tls.RedisOptions(url)
		if err != nil {
			t.Fatal(err)
		}
		err = pingWith(opts)
		if err == nil || !slices.ContainsFunc(c.want, func(w string) bool { return strings.Contains(err.Error(), w) }) {
			t.Errorf("a client %s: %v, want an error saying one of %q", c.name, err, c.want)
		}
	}
	plain, _ := config.RedisOptions(strings.Replace(url, "rediss://", "redis://", 1))
	if err := pingWith(plain); err == nil {
		t.Error("a plain TCP client was served by the TLS-only server")
	} else {
		t.Logf("a plain TCP client: %v", err)
	}
}

// Without tls-auth-clients, a client with the CA alone is served.
func TestTLSServerWithoutClientCertificates(t *testing.T) {
	certs := redistest.NewCerts(t)
	s := redistest.Start(t, redistest.WithTLS(certs, false))
	opts, err := config.TLSFiles{CAFile: certs.CAFile}.RedisOptions(s.URL())
	if err != nil {
		t.Fatal(err)
	}
	if err := pingWith(opts); err != nil {
		t.Fatalf("a client with the CA and no certificate: %v", err)
	}
}

// A server with an ACL file lets in its users only; the test's own client logs in as the user given.
func TestServerWithACLFile(t *testing.T) {
	acl := filepath.Join(t.TempDir(), "users.acl")
	lines := "user default off\nuser admin on >admin-pw ~* &* +@all\nuser reader on >reader-pw ~r:* -@all +get\n"
	if err := os.WriteFile(acl, []byte(lines), 0o600); err != nil {
		t.Fatal(err)
	}
	s := redistest.Start(t, redistest.WithACL(acl, "admin", "admin-pw"))
	ctx := context.Background()
	if err := s.Client().Set(ctx, "r:1", "v", 0).Err(); err != nil {
		t.Fatalf("admin: %v", err)
	}
	anonymous, _ := config.RedisOptions("redis://" + s.Addr + "/0")
	if err := pingWith(anonymous); err == nil || !strings.Contains(err.Error(), "NOAUTH") {
		t.Errorf("a client without a user: %v, want NOAUTH", err)
	}
	reader := redis.NewClient(&redis.Options{Addr: s.Addr, Username: "reader", Password: "reader-pw"})
	defer reader.Close()
	if v, err := reader.Get(ctx, "r:1").Result(); err != nil || v != "v" {
		t.Errorf("reader GET r:1: %q %v", v, err)
	}
	if err := reader.Set(ctx, "r:1", "w", 0).Err(); err == nil || !strings.Contains(err.Error(), "NOPERM") {
		t.Errorf("reader SET: %v, want NOPERM", err)
	}
}
