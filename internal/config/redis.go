package config

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// Names of the TLS settings, shared by every binary that talks to Redis.
const (
	EnvTLSCAFile   = "REDIS_TLS_CA_FILE"
	EnvTLSCertFile = "REDIS_TLS_CERT_FILE"
	EnvTLSKeyFile  = "REDIS_TLS_KEY_FILE"
)

// TLSFiles are the files of the TLS connections to Redis: REDIS_TLS_CA_FILE, REDIS_TLS_CERT_FILE and
// REDIS_TLS_KEY_FILE. They apply to every rediss:// URL of a binary (REDIS_URL and each of REDLOCK_URLS);
// a redis:// URL with any of them set is refused rather than connected to in clear text. All empty (the
// default): the system's CAs verify the server, and no client certificate is presented.
type TLSFiles struct {
	// CAFile is a PEM file of the CA certificates that verify the servers, instead of the system's.
	CAFile string
	// CertFile and KeyFile are a PEM client certificate and its key, for servers that require one
	// (tls-auth-clients yes). Both or neither.
	CertFile, KeyFile string
}

// TLSFlags defines the TLS settings on s.
func TLSFlags(s *Set, t *TLSFiles) {
	s.String(&t.CAFile, EnvTLSCAFile, "", "PEM file of the CA certificates that verify Redis on rediss:// URLs (empty: the system's)")
	s.String(&t.CertFile, EnvTLSCertFile, "", "PEM client certificate presented on rediss:// URLs, for a Redis that requires one (with REDIS_TLS_KEY_FILE)")
	s.String(&t.KeyFile, EnvTLSKeyFile, "", "PEM private key of REDIS_TLS_CERT_FILE")
}

// Validate loads the files and reports the first that cannot be used, naming its setting.
func (t TLSFiles) Validate() error {
	_, err := t.load()
	return err
}

// RedisOptions parses a redis:// or rediss:// URL (user, password and database included) into the options
// of a client; on rediss:// it trusts CAFile and presents CertFile, with TLS 1.2 at least. This is the one
// place where the binaries' client options are made. The client honours context deadlines, which the
// locks rely on: without it go-redis waits out its own timeouts on a stalled server. Errors never show the
// URL's password.
func (t TLSFiles) RedisOptions(url string) (*redis.Options, error) {
	opts, err := redis.ParseURL(url)
	if err != nil {
		return nil, redactError(err, url)
	}
	opts.ContextTimeoutEnabled = true
	// No CLIENT SETINFO on connect (Redis 7.2+): the least-privilege users may not run it, and it is noise.
	opts.DisableIdentity = true
	if opts.TLSConfig, err = t.secure(opts.TLSConfig, url); err != nil {
		return nil, err
	}
	return opts, nil
}

// ClusterOptions parses a Redis Cluster URL, redis://[user:pass@]host:port?addr=host2:port2&addr=host3:port3
// (as redis.ParseClusterURL reads it: a few nodes are enough, the client finds the others), into the
// options of a cluster client, with the settings and checks of RedisOptions.
func (t TLSFiles) ClusterOptions(url string) (*redis.ClusterOptions, error) {
	opts, err := redis.ParseClusterURL(url)
	if err != nil {
		return nil, redactError(err, url)
	}
	opts.ContextTimeoutEnabled = true
	opts.DisableIdentity = true
	// go-redis reloads the slot map on a MOVED reply, but a dead master sends none: without a periodic
	// reload (60 s by default) the client keeps dialing it long after its replica took over.
	opts.ClusterStateReloadInterval = time.Second
	// A node cut off would hold each new connection for go-redis's default 5 s (a waiter's sharded
	// subscription among them); ?dial_timeout= in the URL overrides.
	if opts.DialTimeout == 0 {
		opts.DialTimeout = time.Second
	}
	if opts.TLSConfig, err = t.secure(opts.TLSConfig, url); err != nil {
		return nil, err
	}
	return opts, nil
}

// secure completes the TLS settings of a rediss:// URL (nil c: a redis:// one, which must not come with
// TLS files): CAFile trusted, CertFile presented, TLS 1.2 at least, certificate checks on.
func (t TLSFiles) secure(c *tls.Config, url string) (*tls.Config, error) {
	if c == nil {
		if set := t.names(); len(set) > 0 {
			return nil, fmt.Errorf("%s set, but the URL %s is not rediss://: the TLS settings apply to rediss:// URLs only "+
				"(use rediss://, or unset them)", strings.Join(set, " and "), RedactURL(url))
		}
		return nil, nil
	}
	if c.InsecureSkipVerify {
		return nil, fmt.Errorf("the URL %s turns certificate checking off (skip_verify): not allowed; give the CA "+
			"that signed the server's certificate with %s instead", RedactURL(url), EnvTLSCAFile)
	}
	c.MinVersion = max(c.MinVersion, tls.VersionTLS12)
	m, err := t.load()
	if err != nil {
		return nil, err
	}
	c.RootCAs, c.Certificates = m.roots, m.certs
	return c, nil
}

// RedisURLs parses a comma-separated list of Redis URLs as RedisOptions does; empty gives none.
func (t TLSFiles) RedisURLs(list string) ([]*redis.Options, error) {
	var out []*redis.Options
	for _, u := range splitURLs(list) {
		if u = strings.TrimSpace(u); u == "" {
			continue
		}
		opts, err := t.RedisOptions(u)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", RedactURL(u), err)
		}
		out = append(out, opts)
	}
	return out, nil
}

// RedisOptions parses a URL as TLSFiles.RedisOptions does, without TLS files.
func RedisOptions(url string) (*redis.Options, error) { return TLSFiles{}.RedisOptions(url) }

// RedisURLs parses a comma-separated list of URLs as TLSFiles.RedisURLs does, without TLS files.
func RedisURLs(list string) ([]*redis.Options, error) { return TLSFiles{}.RedisURLs(list) }

// names lists the settings that are set.
func (t TLSFiles) names() []string {
	var set []string
	for _, f := range []struct{ name, value string }{{EnvTLSCAFile, t.CAFile}, {EnvTLSCertFile, t.CertFile}, {EnvTLSKeyFile, t.KeyFile}} {
		if f.value != "" {
			set = append(set, f.name)
		}
	}
	return set
}

// tlsMaterial is what the files hold: nil roots for the system's, no certificates for none.
type tlsMaterial struct {
	roots *x509.CertPool
	certs []tls.Certificate
}

func (t TLSFiles) load() (tlsMaterial, error) {
	var m tlsMaterial
	if t.CAFile != "" {
		pem, err := os.ReadFile(t.CAFile)
		if err != nil {
			return m, fmt.Errorf("invalid %s: %w", EnvTLSCAFile, err)
		}
		m.roots = x509.NewCertPool()
		if !m.roots.AppendCertsFromPEM(pem) {
			return m, fmt.Errorf("invalid %s %q: no PEM certificate in it", EnvTLSCAFile, t.CAFile)
		}
	}
	cert, err := t.clientCert()
	if cert != nil {
		m.certs = []tls.Certificate{*cert}
	}
	return m, err
}

// clientCert loads the client certificate, nil when none is set.
func (t TLSFiles) clientCert() (*tls.Certificate, error) {
	switch {
	case t.CertFile == "" && t.KeyFile == "":
		return nil, nil
	case t.KeyFile == "":
		return nil, fmt.Errorf("invalid %s: set without %s (a client certificate needs its private key)", EnvTLSCertFile, EnvTLSKeyFile)
	case t.CertFile == "":
		return nil, fmt.Errorf("invalid %s: set without %s (a private key needs its client certificate)", EnvTLSKeyFile, EnvTLSCertFile)
	}
	for _, f := range []struct{ name, path string }{{EnvTLSCertFile, t.CertFile}, {EnvTLSKeyFile, t.KeyFile}} {
		file, err := os.Open(f.path) // to name the setting of a file that cannot be read
		if err != nil {
			return nil, fmt.Errorf("invalid %s: %w", f.name, err)
		}
		_ = file.Close()
	}
	cert, err := tls.LoadX509KeyPair(t.CertFile, t.KeyFile)
	if err != nil {
		return nil, fmt.Errorf("invalid %s %q or %s %q: %w", EnvTLSCertFile, t.CertFile, EnvTLSKeyFile, t.KeyFile, err)
	}
	return &cert, nil
}
