package config_test

import (
	"context"
	"crypto/tls"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/stockflow/stockflow/internal/config"
	"github.com/stockflow/stockflow/testkit/redistest"
)

// On rediss:// the options trust the CA file and present the client certificate, with TLS 1.2 at least:
// they reach a TLS-only server that requires client certificates, which the system's CAs do not.
func TestRedisOptionsWithTLSFiles(t *testing.T) {
	certs := redistest.NewCerts(t)
	s := redistest.Start(t, redistest.WithTLS(certs, true))
	files := config.TLSFiles{CAFile: certs.CAFile, CertFile: certs.ClientCertFile, KeyFile: certs.ClientKeyFile}
	opts, err := files.RedisOptions(s.URL())
	if err != nil {
		t.Fatal(err)
	}
	if opts.TLSConfig.MinVersion != tls.VersionTLS12 || opts.TLSConfig.RootCAs == nil || len(opts.TLSConfig.Certificates) != 1 || !opts.ContextTimeoutEnabled {
		t.Fatalf("TLS config %+v: want TLS 1.2, the CA, the client certificate and context deadlines", opts.TLSConfig)
	}
	if err := ping(opts); err != nil {
		t.Fatalf("the options with the files do not reach the server: %v", err)
	}
	system, err := config.RedisOptions(s.URL())
	if err != nil || system.TLSConfig == nil || system.TLSConfig.RootCAs != nil {
		t.Fatalf("without files: %+v %v, want TLS with the system's CAs", system, err)
	}
	if err := ping(system); err == nil || !strings.Contains(err.Error(), "unknown authority") {
		t.Fatalf("the system's CAs trusted the test CA: %v", err)
	}
	masters, err := files.RedisURLs(s.URL() + "," + s.URL())
	if err != nil || len(masters) != 2 || masters[1].TLSConfig == nil || len(masters[1].TLSConfig.Certificates) != 1 {
		t.Fatalf("RedisURLs: %v %v, want both with the client certificate", masters, err)
	}
}

func ping(opts *redis.Options) error {
	opts.MaxRetries = -1
	c := redis.NewClient(opts)
	defer c.Close()
	return c.Ping(context.Background()).Err()
}

// Files that cannot be used, or TLS files with a redis:// URL, are refused with a message naming the
// setting, and never the password.
func TestTLSFilesRefused(t *testing.T) {
	certs, other := redistest.NewCerts(t), redistest.NewCerts(t)
	notPEM := filepath.Join(t.TempDir(), "ca.pem")
	if err := os.WriteFile(notPEM, []byte("not a certificate"), 0o600); err != nil {
		t.Fatal(err)
	}
	const url = "rediss://u:hunter2@127.0.0.1:1/0"
	for _, c := range []struct {
		name  string
		files config.TLSFiles
		url   string
		want  string
	}{
		{"a missing CA file", config.TLSFiles{CAFile: "/nonexistent.pem"}, url, "invalid REDIS_TLS_CA_FILE: open /nonexistent.pem"},
		{"a CA file without a certificate", config.TLSFiles{CAFile: notPEM}, url, "invalid REDIS_TLS_CA_FILE \"" + notPEM + "\": no PEM certificate in it"},
		{"a certificate without its key", config.TLSFiles{CertFile: certs.ClientCertFile}, url, "invalid REDIS_TLS_CERT_FILE: set without REDIS_TLS_KEY_FILE"},
		{"a key without its certificate", config.TLSFiles{KeyFile: certs.ClientKeyFile}, url, "invalid REDIS_TLS_KEY_FILE: set without REDIS_TLS_CERT_FILE"},
		{"a missing key file", config.TLSFiles{CertFile: certs.ClientCertFile, KeyFile: "/nonexistent-key.pem"}, url, "invalid REDIS_TLS_KEY_FILE: open /nonexistent-key.pem"},
		{"the key of another certificate", config.TLSFiles{CertFile: certs.ClientCertFile, KeyFile: other.ClientKeyFile}, url, "private key does not match public key"},
		{"the files in swapped places", config.TLSFiles{CertFile: certs.ClientKeyFile, KeyFile: certs.ClientCertFile}, url, "invalid REDIS_TLS_CERT_FILE"},
		{"a redis:// URL", config.TLSFiles{CAFile: certs.CAFile}, "redis://u:hunter2@127.0.0.1:1/0",
			"REDIS_TLS_CA_FILE set, but the URL redis://u:xxxxx@127.0.0.1:1/0 is not rediss://"},
		{"skip_verify in the URL", config.TLSFiles{CAFile: certs.CAFile}, url + "?skip_verify=true",
			"turns certificate checking off (skip_verify): not allowed"},
		{"a redis:// URL with a client certificate", config.TLSFiles{CertFile: certs.ClientCertFile, KeyFile: certs.ClientKeyFile}, "redis://h/0",
			"REDIS_TLS_CERT_FILE and REDIS_TLS_KEY_FILE set"},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := c.files.RedisOptions(c.url)
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("got %v, want an error saying %q", err, c.want)
			}
			if strings.Contains(err.Error(), "hunter2") {
				t.Fatalf("the error shows the password: %v", err)
			}
		})
	}
	if err := (config.TLSFiles{CAFile: notPEM}).Validate(); err == nil || !strings.Contains(err.Error(), "REDIS_TLS_CA_FILE") {
		t.Errorf("Validate: %v", err)
	}
}

// URLs that do not parse are refused without their password.
func TestRedisOptionsErrorsHideThePassword(t *testing.T) {
	for _, url := range []string{
		"redis://u:hunter2@h:1/notanumber",
		"redis://u:hunter2/x@h:1/0", // an unescaped / in the password
		"redis://u:hunter2@h:1/0?bogus=1",
		"http://u:hunter2@h:1/0",
		// A password that parses as a port and a path or a query: url.Parse succeeds without user info.
		"redis://worker:/hunter2@redis:6379",
		"redis://worker:42?hunter2@redis:6379/0",
		"redis://worker:?hunter2@redis:6379/0",
	} {
		_, err := config.RedisOptions(url)
		if err == nil || strings.Contains(err.Error(), "hunter2") {
			t.Errorf("%s: %v, want an error without the password", url, err)
		}
		_, err = config.RedisURLs("redis://h:1/0," + url)
		if err == nil || strings.Contains(err.Error(), "hunter2") {
			t.Errorf("RedisURLs with %s: %v, want an error without the password", url, err)
		}
	}
}

// A comma in a password is part of it: the list is split only where a new URL starts, so the password is
// neither cut in two nor shown.
func TestRedisURLsWithACommaInAPassword(t *testing.T) {
	const list = "redis://w:hunter,2@a:1/0,redis://w:x@b:1/0"
	opts, err := config.RedisURLs(list)
	if err != nil || len(opts) != 2 || opts[0].Password != "hunter,2" || opts[1].Addr != "b:1" {
		t.Fatalf("RedisURLs(%q) = %v, %v; want two URLs, the first with the password hunter,2", list, opts, err)
	}
	if got := config.RedactURLs(list); got != "redis://w:xxxxx@a:1/0,redis://w:xxxxx@b:1/0" {
		t.Fatalf("RedactURLs = %q", got)
	}
}
