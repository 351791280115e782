package natsrelay

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nkeys"

	"github.com/meerkatd/meerkatd/internal/testutil"
)

// A node authenticates with an nkey seed file; a server that knows only
// another nkey refuses it, and Start says so.
func TestNKeySeedFile(t *testing.T) {
	testutil.CheckGoroutines(t)
	user, err := nkeys.CreateUser()
	if err != nil {
		t.Fatal(err)
	}
	pub, _ := user.PublicKey()
	seed, _ := user.Seed()
	dir := t.TempDir()
	seedFile := filepath.Join(dir, "node.nk")
	if err := os.WriteFile(seedFile, seed, 0o600); err != nil {
		t.Fatal(err)
	}
	s := startServer(t, "s1", "authorization {\n  users: [ {nkey: \""+pub+"\"} ]\n}\n", nil, "")
	nodes := newNodes(t, 2)
	a, b := nodes[0], nodes[1]
	a.connect(t, s.ClientURL(), Options{NKeySeedFile: seedFile})
	b.connect(t, s.ClientURL(), Options{NKeySeedFile: seedFile})
	if _, err := a.r.SendMessage(ctxT(t), "n1", "signed in with an nkey"); err != nil {
		t.Fatal(err)
	}
	if got := waitItems(t, b, 1)[0].Envelope.Kind.Body(); got != "signed in with an nkey" {
		t.Fatalf("b read %q", got)
	}

	other, _ := nkeys.CreateUser()
	otherSeed, _ := other.Seed()
	wrong := filepath.Join(dir, "other.nk")
	if err := os.WriteFile(wrong, otherSeed, 0o600); err != nil {
		t.Fatal(err)
	}
	c := newNodes(t, 1)[0]
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := Start(ctx, c.r, Options{Servers: []string{s.ClientURL()}, NKeySeedFile: wrong}); err == nil || !strings.Contains(strings.ToLower(err.Error()), "authorization") {
		t.Fatalf("Start with an nkey the server does not know: %v", err)
	}
	if _, err := Start(ctx, c.r, Options{Servers: []string{s.ClientURL()}, NKeySeedFile: filepath.Join(dir, "missing.nk")}); err == nil {
		t.Fatal("Start with a missing seed file succeeded")
	}
	if _, err := Start(ctx, c.r, Options{Servers: []string{s.ClientURL()}, NKeySeedFile: seedFile, User: "u", Password: "p"}); err == nil {
		t.Fatal("Start with two ways to authenticate succeeded")
	}
}

// pemCA is a throwaway CA that signs certificates for 127.0.0.1 and for
// clients, written as PEM files in dir.
type pemCA struct {
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
	file string
}

func newPEMCA(t *testing.T, dir string) *pemCA {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "test CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, _ := x509.ParseCertificate(der)
	ca := &pemCA{cert: cert, key: key, file: filepath.Join(dir, "ca.pem")}
	writePEM(t, ca.file, "CERTIFICATE", der)
	return ca
}

// issue writes a certificate for name (a server for 127.0.0.1, or a
// client) and its key; it returns the two file paths.
func (ca *pemCA) issue(t *testing.T, dir, name string, server bool) (certFile, keyFile string) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(time.Now().UnixNano()), Subject: pkix.Name{CommonName: name},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour), KeyUsage: x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}
	if server {
		tmpl.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}
		tmpl.IPAddresses = []net.IP{net.ParseIP("127.0.0.1")}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &key.PublicKey, ca.key)
	if err != nil {
		t.Fatal(err)
	}
	kb, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	certFile, keyFile = filepath.Join(dir, name+".pem"), filepath.Join(dir, name+"-key.pem")
	writePEM(t, certFile, "CERTIFICATE", der)
	writePEM(t, keyFile, "EC PRIVATE KEY", kb)
	return certFile, keyFile
}

func writePEM(t *testing.T, path, typ string, der []byte) {
	t.Helper()
	if err := os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
}

// A node reaches a server that requires TLS with a client certificate,
// given tls_ca, tls_cert and tls_key; without the certificate it is
// refused.
func TestTLSToTheServer(t *testing.T) {
	testutil.CheckGoroutines(t)
	dir := t.TempDir()
	ca := newPEMCA(t, dir)
	srvCert, srvKey := ca.issue(t, dir, "server", true)
	cliCert, cliKey := ca.issue(t, dir, "node", false)
	conf := fmt.Sprintf("tls {\n  cert_file: %q\n  key_file: %q\n  ca_file: %q\n  verify: true\n}\n", srvCert, srvKey, ca.file)
	s := startServer(t, "s1", conf, nil, "")
	url := s.ClientURL()
	if !strings.HasPrefix(url, "tls://") {
		t.Fatalf("the server does not require TLS: %s", url)
	}
	nodes := newNodes(t, 2)
	a, b := nodes[0], nodes[1]
	withTLS := Options{TLSCA: ca.file, TLSCert: cliCert, TLSKey: cliKey}
	a.connect(t, url, withTLS)
	b.connect(t, url, withTLS)
	if _, err := a.r.SendMessage(ctxT(t), "n1", "over TLS to the broker"); err != nil {
		t.Fatal(err)
	}
	if got := waitItems(t, b, 1)[0].Envelope.Kind.Body(); got != "over TLS to the broker" {
		t.Fatalf("b read %q", got)
	}
	c := newNodes(t, 1)[0]
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := Start(ctx, c.r, Options{Servers: []string{url}, TLSCA: ca.file}); err == nil {
		t.Fatal("Start without the client certificate the server requires succeeded")
	}
	if _, err := Start(ctx, c.r, Options{Servers: []string{url}, TLSCA: ca.file, TLSCert: cliCert}); err == nil {
		t.Fatal("Start with a certificate and no key succeeded")
	}
}
