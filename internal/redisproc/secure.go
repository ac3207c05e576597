package redisproc

import (
	"net/url"

	"github.com/redis/go-redis/v9"

	"github.com/stockflow/stockflow/internal/config"
)

// TLS is the TLS setup of a server that serves TLS only.
type TLS struct {
	// CertFile and KeyFile are the server's certificate and private key (PEM).
	CertFile, KeyFile string
	// CAFile holds the CA certificates that verify the clients' certificates, and the server's for its own
	// checks.
	CAFile string
	// ClientCertFile and ClientKeyFile are a client certificate signed by a CA of CAFile. With them the
	// server requires every client to present a certificate (tls-auth-clients yes), and its own checks
	// present this one; without them it asks for none.
	ClientCertFile, ClientKeyFile string
}

// listenArgs: plain TCP on port, or TLS only (port 0) on port.
func (s *Server) listenArgs(port string) []string {
	t := s.opts.TLS
	if t == nil {
		return []string{"--port", port}
	}
	authClients := "no"
	if t.ClientCertFile != "" {
		authClients = "yes"
	}
	return []string{"--port", "0", "--tls-port", port, "--tls-cert-file", t.CertFile, "--tls-key-file", t.KeyFile,
		"--tls-ca-cert-file", t.CAFile, "--tls-auth-clients", authClients}
}

// aclArgs load the ACL file, if any.
func (s *Server) aclArgs() []string {
	if s.opts.ACLFile == "" {
		return nil
	}
	return []string{"--aclfile", s.opts.ACLFile}
}

// URL is the server's URL, database 0: rediss:// with TLS, and with User and Password when set.
func (s *Server) URL() string {
	u := url.URL{Scheme: "redis", Host: s.Addr, Path: "/0"}
	if s.opts.TLS != nil {
		u.Scheme = "rediss"
	}
	if s.opts.User != "" || s.opts.Password != "" {
		u.User = url.UserPassword(s.opts.User, s.opts.Password)
	}
	return u.String()
}

// ClientOptions are the options of a client of the server, as the binaries make them: its URL, with the
// CA and the client certificate of its TLS.
func (s *Server) ClientOptions() (*redis.Options, error) { return s.ClientTLS().RedisOptions(s.URL()) }

// ClientTLS are the TLS files a client of the server uses (REDIS_TLS_*): none without TLS.
func (s *Server) ClientTLS() config.TLSFiles {
	if s.opts.TLS == nil {
		return config.TLSFiles{}
	}
	return config.TLSFiles{CAFile: s.opts.TLS.CAFile, CertFile: s.opts.TLS.ClientCertFile, KeyFile: s.opts.TLS.ClientKeyFile}
}
