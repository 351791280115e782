package transport

import (
	"context"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/meerkatd/meerkatd/internal/testutil"
)

func newTestCert(t *testing.T) (tls.Certificate, ed25519.PublicKey) {
	t.Helper()
	pub, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := NodeCert(priv)
	if err != nil {
		t.Fatal(err)
	}
	return cert, pub
}

// tlsPair runs a server handshake (after peeking at the first byte, as the
// router does) and a client handshake over loopback TCP. It returns both
// sides' errors and, when both succeed, the connections.
func tlsPair(t *testing.T, srv, cli *tls.Config) (sc, cc *tls.Conn, serr, cerr error) {
	t.Helper()
	same := func(c net.Conn) net.Conn { return c }
	return tlsPairOver(t, srv, cli, same, same)
}

// tlsPairOver is tlsPair with the server's and the client's raw
// connections wrapped by wrapSrv and wrapCli.
func tlsPairOver(t *testing.T, srv, cli *tls.Config, wrapSrv, wrapCli func(net.Conn) net.Conn) (sc, cc *tls.Conn, serr, cerr error) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	type result struct {
		c     *tls.Conn
		first byte
		err   error
	}
	done := make(chan result, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			done <- result{err: err}
			return
		}
		c = wrapSrv(c)
		fr := NewReader(c, 0)
		b, err := fr.PeekByte()
		if err != nil {
			c.Close()
			done <- result{err: err}
			return
		}
		tc, err := TLSServer(ctx, c, fr, srv)
		if err != nil {
			c.Close()
		}
		done <- result{tc, b, err}
	}()
	raw, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	cc, cerr = TLSClient(ctx, wrapCli(raw), cli)
	if cerr != nil {
		raw.Close()
	}
	r := <-done
	if r.err == nil && r.first != TLSRecordByte {
		t.Errorf("a TLS client's first byte is %#x, want %#x", r.first, TLSRecordByte)
	}
	return r.c, cc, r.err, cerr
}

func TestTLSPinnedKeys(t *testing.T) {
	srvCert, srvPub := newTestCert(t)
	cliCert, cliPub := newTestCert(t)
	otherCert, _ := newTestCert(t)
	trusts := func(keys ...ed25519.PublicKey) func(ed25519.PublicKey) error {
		return func(k ed25519.PublicKey) error {
			for _, w := range keys {
				if k.Equal(w) {
					return nil
				}
			}
			return errors.New("untrusted key")
		}
	}
	t.Run("both trust each other", func(t *testing.T) {
		sc, cc, serr, cerr := tlsPair(t, TLSServerConfig(srvCert, trusts(cliPub)), TLSClientConfig(cliCert, srvPub))
		if serr != nil || cerr != nil {
			t.Fatalf("server %v, client %v", serr, cerr)
		}
		defer sc.Close()
		defer cc.Close()
		for _, cs := range []tls.ConnectionState{sc.ConnectionState(), cc.ConnectionState()} {
			if cs.Version != tls.VersionTLS13 || cs.NegotiatedProtocol != ALPN || cs.DidResume {
				t.Fatalf("version %#x, ALPN %q, resumed %v", cs.Version, cs.NegotiatedProtocol, cs.DidResume)
			}
		}
		if k, err := TLSPeerKey(sc.ConnectionState()); err != nil || !k.Equal(cliPub) {
			t.Fatalf("server sees %x, %v; want the client's key", k, err)
		}
		if k, err := TLSPeerKey(cc.ConnectionState()); err != nil || !k.Equal(srvPub) {
			t.Fatalf("client sees %x, %v; want the server's key", k, err)
		}
		go WriteFrame(cc, []byte("over tls"))
		sc.SetReadDeadline(time.Now().Add(10 * time.Second))
		if p, err := ReadFrame(sc, 0); err != nil || string(p) != "over tls" {
			t.Fatalf("read %q, %v", p, err)
		}
	})
	t.Run("server does not trust the client", func(t *testing.T) {
		_, _, serr, _ := tlsPair(t, TLSServerConfig(srvCert, trusts(srvPub)), TLSClientConfig(otherCert, srvPub))
		if serr == nil {
			t.Fatal("the server admitted a client whose key it does not trust")
		}
	})
	t.Run("client reaches another key than it dialled", func(t *testing.T) {
		_, _, serr, cerr := tlsPair(t, TLSServerConfig(otherCert, trusts(cliPub)), TLSClientConfig(cliCert, srvPub))
		if !errors.Is(cerr, ErrTLSWrongKey) {
			t.Fatalf("client error %v, want ErrTLSWrongKey", cerr)
		}
		if serr == nil {
			t.Fatal("the server's handshake completed though the client refused it")
		}
	})
	t.Run("client without a certificate", func(t *testing.T) {
		cfg := TLSClientConfig(cliCert, srvPub)
		cfg.Certificates = nil
		_, _, serr, _ := tlsPair(t, TLSServerConfig(srvCert, trusts(cliPub)), cfg)
		if serr == nil {
			t.Fatal("the server admitted a client without a certificate")
		}
	})
	t.Run("TLS 1.2 client", func(t *testing.T) {
		cfg := TLSClientConfig(cliCert, srvPub)
		cfg.MinVersion, cfg.MaxVersion = tls.VersionTLS12, tls.VersionTLS12
		_, _, serr, cerr := tlsPair(t, TLSServerConfig(srvCert, trusts(cliPub)), cfg)
		if serr == nil || cerr == nil {
			t.Fatalf("a TLS 1.2 handshake went through: server %v, client %v", serr, cerr)
		}
	})
}

func TestNodeCertNeedsEd25519(t *testing.T) {
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := NodeCert(k); err == nil {
		t.Fatal("NodeCert took an ECDSA key")
	}
}

func TestTLSPeerKeyRefusesOtherCertificates(t *testing.T) {
	cert, pub := newTestCert(t)
	parsed, err := x509.ParseCertificate(cert.Certificate[0])
	if err != nil {
		t.Fatal(err)
	}
	leaf := []*x509.Certificate{parsed}
	if k, err := TLSPeerKey(tls.ConnectionState{PeerCertificates: leaf}); err != nil || !k.Equal(pub) {
		t.Fatalf("one Ed25519 certificate: %x, %v", k, err)
	}
	ecKey, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	ecLeaf := *leaf[0]
	ecLeaf.PublicKey = &ecKey.PublicKey
	for name, certs := range map[string][]*x509.Certificate{
		"none":  nil,
		"two":   append(leaf, leaf[0]),
		"ecdsa": {&ecLeaf},
	} {
		if _, err := TLSPeerKey(tls.ConnectionState{PeerCertificates: certs}); !errors.Is(err, ErrTLSPeerKey) {
			t.Errorf("%s: %v, want ErrTLSPeerKey", name, err)
		}
	}
}

func TestAddrSchemes(t *testing.T) {
	a, err := ParseAddr("tls://127.0.0.1:4300")
	if err != nil {
		t.Fatal(err)
	}
	if !a.OverTCP() || a.Network() != "tcp" || a.Address() != "127.0.0.1:4300" {
		t.Fatalf("%v: OverTCP %v, Network %q, Address %q", a, a.OverTCP(), a.Network(), a.Address())
	}
	if got := a.WithScheme(SchemeTCP).String(); got != "tcp://127.0.0.1:4300" {
		t.Fatalf("WithScheme(tcp) = %s", got)
	}
	u, _ := ParseAddr("uds:///tmp/x.sock")
	if u.OverTCP() || u.WithScheme(SchemeTLS) != u {
		t.Fatalf("a uds address changed scheme or claims TCP")
	}
}

// readCounter counts the reads that reach a connection.
type readCounter struct {
	net.Conn
	n atomic.Int64
}

func (c *readCounter) Read(b []byte) (int, error) {
	c.n.Add(1)
	return c.Conn.Read(b)
}

// A TLS server reads its socket through the frame reader's read-ahead:
// records that arrived together take one read of the socket, and those
// after the first can be read under a deadline already passed, as a
// receiver does to make a batch of what has arrived.
func TestTLSServerReadsAhead(t *testing.T) {
	srvCert, srvPub := newTestCert(t)
	cliCert, cliPub := newTestCert(t)
	accept := func(k ed25519.PublicKey) error {
		if !k.Equal(cliPub) {
			return errors.New("untrusted key")
		}
		return nil
	}
	var rc *readCounter
	var wh *testutil.WriteHolder
	sc, cc, serr, cerr := tlsPairOver(t, TLSServerConfig(srvCert, accept), TLSClientConfig(cliCert, srvPub),
		func(c net.Conn) net.Conn { rc = &readCounter{Conn: c}; return rc },
		func(c net.Conn) net.Conn { wh = &testutil.WriteHolder{Conn: c}; return wh })
	if serr != nil || cerr != nil {
		t.Fatalf("server %v, client %v", serr, cerr)
	}
	defer sc.Close()
	defer cc.Close()

	const records = 8
	pad := strings.Repeat("x", 1536)
	wh.Hold()
	for i := range records {
		if err := WriteFrame(cc, fmt.Appendf(nil, "frame %d%s", i, pad)); err != nil { // a record each
			t.Fatal(err)
		}
	}
	before := rc.n.Load()
	if err := wh.Release(); err != nil {
		t.Fatal(err)
	}
	fr := NewReader(sc, 0)
	sc.SetReadDeadline(time.Now().Add(10 * time.Second))
	for i := range records {
		if i == 1 {
			sc.SetReadDeadline(time.Now()) // passed: take only what has arrived
		}
		for !fr.FrameBuffered() && fr.ReadMore() {
		}
		if i > 0 && !fr.FrameBuffered() {
			t.Fatalf("frame %d of %d, sent with the others, cannot be read under a passed deadline", i, records)
		}
		p, err := fr.ReadFrame()
		if err != nil || string(p) != fmt.Sprintf("frame %d%s", i, pad) {
			t.Fatalf("frame %d: %q, %v", i, p, err)
		}
	}
	if reads := rc.n.Load() - before; reads > 2 {
		t.Errorf("%d reads of the socket for %d records that arrived together, want at most 2", reads, records)
	}
}
