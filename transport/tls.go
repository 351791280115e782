package transport

import (
	"context"
	"crypto"
	"crypto/ed25519"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"errors"
	"fmt"
	"math/big"
	"net"
	"time"
)

// TLS between nodes: TLS 1.3 only, each side presenting a self-signed
// certificate made from its node's Ed25519 key, each side accepting the
// other by that key alone (the dialer: exactly the key it dials, the
// listener: a key it trusts). No CA, no names, no expiry: the key is the
// identity, as in the signed envelopes the link carries.

// TLSRecordByte is the first byte of a TLS handshake record: on the node's
// TCP port it tells a TLS client from a frame (0x00) or pairing ('M').
const TLSRecordByte = 0x16

// ALPN is the application protocol both sides name in the handshake.
const ALPN = "meerkat/1"

// Errors from the handshake's key check.
var (
	// ErrTLSPeerKey means the other side presented no certificate, more
	// than one, or one whose key is not Ed25519.
	ErrTLSPeerKey = errors.New("transport: the TLS peer did not present one Ed25519 certificate")
	// ErrTLSWrongKey means a dialled node presented another key than the
	// one dialled.
	ErrTLSWrongKey = errors.New("transport: the TLS peer presented another key than the one dialled")
)

// NodeCert makes the TLS certificate of the node whose key is key (a
// [crypto.Signer] whose public key is Ed25519).
func NodeCert(key crypto.Signer) (tls.Certificate, error) {
	pub, ok := key.Public().(ed25519.PublicKey)
	if !ok {
		return tls.Certificate{}, fmt.Errorf("transport: a node certificate needs an Ed25519 key, not %T", key.Public())
	}
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	if err != nil {
		return tls.Certificate{}, fmt.Errorf("transport: certificate serial: %w", err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: serial,
		Subject:      pkix.Name{CommonName: "meerkat node"},
		// Validity is not checked (the key is pinned), but must be set.
		NotBefore:   time.Now().Add(-time.Hour),
		NotAfter:    time.Now().AddDate(100, 0, 0),
		KeyUsage:    x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, pub, key)
	if err != nil {
		return tls.Certificate{}, fmt.Errorf("transport: create certificate: %w", err)
	}
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}, nil
}

// TLSPeerKey returns the Ed25519 key of the one certificate the other side
// presented.
func TLSPeerKey(cs tls.ConnectionState) (ed25519.PublicKey, error) {
	if len(cs.PeerCertificates) != 1 {
		return nil, ErrTLSPeerKey
	}
	pub, ok := cs.PeerCertificates[0].PublicKey.(ed25519.PublicKey)
	if !ok || len(pub) != ed25519.PublicKeySize {
		return nil, ErrTLSPeerKey
	}
	return pub, nil
}

// baseTLS is what both sides share.
func baseTLS(cert tls.Certificate, check func(ed25519.PublicKey) error) *tls.Config {
	return &tls.Config{
		MinVersion:   tls.VersionTLS13,
		MaxVersion:   tls.VersionTLS13,
		Certificates: []tls.Certificate{cert},
		NextProtos:   []string{ALPN},
		// Every connection runs the full handshake, so the key check
		// below sees the certificate and today's trust list each time.
		SessionTicketsDisabled: true,
		VerifyConnection: func(cs tls.ConnectionState) error {
			pub, err := TLSPeerKey(cs)
			if err != nil {
				return err
			}
			return check(pub)
		},
	}
}

// TLSServerConfig is the listener's configuration: it presents cert,
// requires a client certificate and admits the connection only if accept
// returns nil for its key.
func TLSServerConfig(cert tls.Certificate, accept func(ed25519.PublicKey) error) *tls.Config {
	c := baseTLS(cert, accept)
	// RequireAnyClientCert skips chain verification; VerifyConnection
	// checks the key instead.
	c.ClientAuth = tls.RequireAnyClientCert
	return c
}

// TLSClientConfig is a dialer's configuration for reaching the node whose
// key is want: it presents cert and accepts only want.
func TLSClientConfig(cert tls.Certificate, want ed25519.PublicKey) *tls.Config {
	want = append(ed25519.PublicKey(nil), want...)
	c := baseTLS(cert, func(got ed25519.PublicKey) error {
		if !got.Equal(want) {
			return ErrTLSWrongKey
		}
		return nil
	})
	// No CA and no host names: the chain is not verified, the key is
	// pinned by VerifyConnection (which runs either way).
	c.InsecureSkipVerify = true
	return c
}

// TLSClient runs the client handshake on c (a stream from [Dial]) within
// ctx and returns the TLS connection. On failure c is closed.
func TLSClient(ctx context.Context, c net.Conn, cfg *tls.Config) (*tls.Conn, error) {
	tc := tls.Client(c, cfg)
	if err := tc.HandshakeContext(ctx); err != nil {
		c.Close()
		return nil, fmt.Errorf("transport: TLS handshake with %s: %w", c.RemoteAddr(), err)
	}
	return tc, nil
}

// TLSServer runs the server handshake on c within ctx. fr is the frame
// reader that peeked at c's first bytes: the TLS connection reads c
// through fr's read-ahead, starting with what fr holds (fr is the TLS
// connection's from then on; read frames from a new Reader over the TLS
// connection). On failure the caller closes c.
func TLSServer(ctx context.Context, c net.Conn, fr *Reader, cfg *tls.Config) (*tls.Conn, error) {
	tc := tls.Server(&prefixedConn{Conn: c, fr: fr}, cfg)
	if err := tc.HandshakeContext(ctx); err != nil {
		return nil, err
	}
	return tc, nil
}

// prefixedConn is c read through fr's read-ahead: first what fr buffered
// while peeking, then, for the life of the connection, the stream in reads
// of up to the read-ahead's size. TLS reads a record at a time, often
// asking for little more than the record: through the read-ahead, one
// system call takes every record that has arrived (up to 16 KiB), and
// TLS then reads those records without one, even under a read deadline
// already passed (which a receiver sets to take, without waiting, what
// it has read; under such a deadline Go does not read the socket).
type prefixedConn struct {
	net.Conn
	fr *Reader
}

func (p *prefixedConn) Read(b []byte) (int, error) { return p.fr.br.Read(b) }
