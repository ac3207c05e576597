package redistest

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stockflow/stockflow/internal/redisproc"
)

// WithTLS serves TLS only (no plain port) with the server certificate of certs. With clientCerts the server
// requires every client to present a certificate signed by certs' CA, and the test's own clients (Client,
// the readiness check) present certs' client certificate.
func WithTLS(certs *Certs, clientCerts bool) Option {
	return func(o *redisproc.Options) {
		o.TLS = &redisproc.TLS{CertFile: certs.ServerCertFile, KeyFile: certs.ServerKeyFile, CAFile: certs.CAFile}
		if clientCerts {
			o.TLS.ClientCertFile, o.TLS.ClientKeyFile = certs.ClientCertFile, certs.ClientKeyFile
		}
	}
}

// WithACL loads the ACL file at path (its users are the only ones); the test's own clients log in as user
// with password, whom the file must enable.
func WithACL(path, user, password string) Option {
	return func(o *redisproc.Options) { o.ACLFile, o.User, o.Password = path, user, password }
}

// Certs are PEM files made for one test: a CA, a server certificate it signed for 127.0.0.1, ::1 and
// localhost, and a client certificate it signed. Each NewCerts makes a new CA, so the files of two Certs
// do not trust each other.
type Certs struct {
	CAFile                        string
	ServerCertFile, ServerKeyFile string
	ClientCertFile, ClientKeyFile string
}

// NewCerts makes the files in a temporary directory of t (ECDSA P-256, valid for a day).
func NewCerts(t testing.TB) *Certs {
	t.Helper()
	dir := t.TempDir()
	c := &Certs{
		CAFile:         filepath.Join(dir, "ca.pem"),
		ServerCertFile: filepath.Join(dir, "server.pem"), ServerKeyFile: filepath.Join(dir, "server-key.pem"),
		ClientCertFile: filepath.Join(dir, "client.pem"), ClientKeyFile: filepath.Join(dir, "client-key.pem"),
	}
	ca := issue(t, &x509.Certificate{Subject: pkix.Name{CommonName: "stockflow test CA"}, IsCA: true,
		BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign}, nil, c.CAFile, "")
	issue(t, &x509.Certificate{Subject: pkix.Name{CommonName: "localhost"}, DNSNames: []string{"localhost"},
		IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1), net.IPv6loopback}, KeyUsage: x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}, ca, c.ServerCertFile, c.ServerKeyFile)
	issue(t, &x509.Certificate{Subject: pkix.Name{CommonName: "stockflow test client"}, KeyUsage: x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}, ca, c.ClientCertFile, c.ClientKeyFile)
	return c
}

// signer is a certificate with its key.
type signer struct {
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
}

// issue fills in tmpl's key, serial and validity, signs it with parent (itself when nil) and writes the
// certificate to certFile and, unless keyFile is empty, its key to keyFile.
func issue(t testing.TB, tmpl *x509.Certificate, parent *signer, certFile, keyFile string) *signer {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 62))
	if err != nil {
		t.Fatal(err)
	}
	tmpl.SerialNumber, tmpl.NotBefore, tmpl.NotAfter = serial, time.Now().Add(-time.Hour), time.Now().Add(24*time.Hour)
	if parent == nil {
		parent = &signer{cert: tmpl, key: key}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, parent.cert, &key.PublicKey, parent.key)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	writePEM(t, certFile, "CERTIFICATE", der)
	if keyFile != "" {
		b, err := x509.MarshalPKCS8PrivateKey(key)
		if err != nil {
			t.Fatal(err)
		}
		writePEM(t, keyFile, "PRIVATE KEY", b)
	}
	return &signer{cert: cert, key: key}
}

func writePEM(t testing.TB, path, typ string, der []byte) {
	t.Helper()
	if err := os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
}
