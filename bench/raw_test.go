package bench

import (
	"bufio"
	"bytes"
	"errors"
	"net"
	"testing"
	"time"

	"github.com/meerkatd/meerkatd/identity"
	"github.com/meerkatd/meerkatd/transport"
)

// newKeypair is a fresh identity.Keypair, the node's signing key.
func newKeypair(t testing.TB) *identity.Keypair {
	t.Helper()
	kp, err := identity.GenerateKeypair()
	if err != nil {
		t.Fatal(err)
	}
	return kp
}

func TestRawFrames(t *testing.T) {
	kp := newKeypair(t)
	pub, otherPub := kp.ID(), newKeypair(t).ID()
	msg := []byte("the signing input of an envelope")
	frame, err := rawSigned(nil, kp, msg)
	if err != nil {
		t.Fatal(err)
	}
	payload, err := transport.ReadFrame(bytes.NewReader(frame), 0)
	if err != nil {
		t.Fatal(err)
	}
	corrupt := bytes.Clone(payload)
	corrupt[3] ^= 1
	for _, tc := range []struct {
		name    string
		pub     identity.PeerID
		payload []byte
		ok      bool
	}{
		{"genuine", pub, payload, true},
		{"corrupted signature", pub, corrupt, false},
		{"another key", otherPub, payload, false},
		{"message changed", pub, append(bytes.Clone(payload), 'x'), false},
		{"signature only", pub, payload[:sigSize], false},
		{"too short", pub, payload[:10], false},
		{"empty", pub, nil, false},
	} {
		got, err := rawOpen(tc.pub, tc.payload)
		if tc.ok != (err == nil) {
			t.Errorf("%s: rawOpen error %v, want ok=%v", tc.name, err, tc.ok)
		}
		if tc.ok && !bytes.Equal(got, msg) {
			t.Errorf("%s: rawOpen = %q, want %q", tc.name, got, msg)
		}
	}
	for _, tc := range []struct {
		in  string
		key string
		ok  bool
	}{
		{string(rawHello) + "KEY", "KEY", true},
		{string(rawHello), "", true},
		{"meerkatd-bench-raw/2 KEY", "", false},
		{"", "", false},
		{"ping", "", false},
	} {
		key, ok := isRawHello([]byte(tc.in))
		if ok != tc.ok || (ok && string(key) != tc.key) {
			t.Errorf("isRawHello(%q) = %q, %v; want %q, %v", tc.in, key, ok, tc.key, tc.ok)
		}
	}
}

func FuzzRawOpen(f *testing.F) {
	kp := newKeypair(f)
	pub := kp.ID()
	frame, err := rawSigned(nil, kp, []byte("seed message"))
	if err != nil {
		f.Fatal(err)
	}
	f.Add(frame[transport.HeaderSize:])
	f.Add([]byte{})
	f.Add(make([]byte, sigSize))
	f.Fuzz(func(t *testing.T, payload []byte) {
		msg, err := rawOpen(pub, payload)
		if err != nil {
			return
		}
		// Accepted: it must be a valid signature over what it returns.
		if len(payload) < sigSize || !bytes.Equal(msg, payload[sigSize:]) ||
			!pub.Verify(msg, payload[:sigSize]) {
			t.Fatalf("rawOpen accepted %x", payload)
		}
	})
}

// TestServeRawCrypto: the echo process's crypto side answers each frame
// signed with the key it announced, and drops a connection whose frame
// does not verify under the client's key.
func TestServeRawCrypto(t *testing.T) {
	client, stranger := newKeypair(t), newKeypair(t)
	clientPub := client.ID()
	for _, tc := range []struct {
		name   string
		signer *identity.Keypair
		ok     bool
	}{{"client's key", client, true}, {"another key", stranger, false}} {
		t.Run(tc.name, func(t *testing.T) {
			srv, cli := net.Pipe()
			defer cli.Close()
			served := make(chan error, 1)
			go func() {
				defer srv.Close()
				served <- serveRawCrypto(srv, bufio.NewReader(srv), clientPub[:])
			}()
			cli.SetDeadline(time.Now().Add(10 * time.Second))
			keyBytes, err := transport.ReadFrame(cli, 0)
			if err != nil {
				t.Fatalf("server key: %v", err)
			}
			key, err := identity.PeerIDFromBytes(keyBytes)
			if err != nil {
				t.Fatalf("server key %x: %v", keyBytes, err)
			}
			msg := []byte("exchange")
			for i := range 3 {
				frame, err := rawSigned(nil, tc.signer, msg)
				if err != nil {
					t.Fatal(err)
				}
				if _, err := cli.Write(frame); err != nil {
					if tc.ok {
						t.Fatalf("write %d: %v", i, err)
					}
					break
				}
				answer, err := transport.ReadFrame(cli, 0)
				if !tc.ok {
					if err == nil {
						t.Fatalf("answer to a frame signed by another key: %x", answer)
					}
					break
				}
				if err != nil {
					t.Fatalf("answer %d: %v", i, err)
				}
				if got, err := rawOpen(key, answer); err != nil || !bytes.Equal(got, msg) {
					t.Fatalf("answer %d: %q, %v", i, got, err)
				}
			}
			cli.Close()
			err = <-served
			if tc.ok && err != nil {
				t.Errorf("serveRawCrypto: %v", err)
			}
			if !tc.ok && (err == nil || errors.Is(err, net.ErrClosed)) {
				t.Errorf("serveRawCrypto: %v, want the bad signature", err)
			}
		})
	}
}
