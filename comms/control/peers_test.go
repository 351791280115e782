package control

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/meerkatd/meerkatd/comms/node"
	"github.com/meerkatd/meerkatd/comms/wire"
	"github.com/meerkatd/meerkatd/identity"
	"github.com/meerkatd/meerkatd/internal/testutil"
	"github.com/meerkatd/meerkatd/transport"
	"github.com/meerkatd/meerkatd/trust"
)

// A peer added while a node serves the home is usable as soon as
// AddPeer returns (its messages are accepted, sends to it resolve), and
// a peer removed is refused as soon as RemovePeer returns: neither waits
// for the node's watcher to notice the edited file.
func TestPeerEditsApplyAtOnce(t *testing.T) {
	h, bob := sessionHome(t)
	sv, err := ServeHome(h, HostOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(sv.Close)
	c := NewClient(h.ControlPath())
	ctx, cancel := context.WithTimeout(context.Background(), callTimeout)
	defer cancel()
	deliver(t, h, bob, "bob is trusted")
	for i := range 3 {
		name := fmt.Sprintf("carol%d", i)
		carol, _ := identity.GenerateKeypair()
		if _, err := AddPeer(h, name, carol.ID().String(), "uds:///nonexistent/carol.sock", false, ""); err != nil {
			t.Fatal(err)
		}
		if err := tryDeliver(h, carol, "hi from "+name); err != nil {
			t.Fatalf("a message from the peer just added: %v", err)
		}
		if _, err := c.SendMessage(ctx, name, "hi", node.SendOptions{}); codeOf(err) != node.CodePeerOffline {
			t.Fatalf("a send to the peer just added: %v, want %s (it is trusted, and down)", err, node.CodePeerOffline)
		}
		if _, err := RemovePeer(h, name); err != nil {
			t.Fatal(err)
		}
		if _, err := c.SendMessage(ctx, name, "hi", node.SendOptions{}); codeOf(err) != node.CodeUnknownPeer {
			t.Fatalf("a send to the peer just removed: %v, want %s", err, node.CodeUnknownPeer)
		}
		if err := tryDeliver(h, carol, "after removal"); err == nil {
			t.Fatal("a message from the peer just removed was accepted")
		}
	}
	if _, err := RemovePeer(h, "bob"); err != nil {
		t.Fatal(err)
	}
	if err := tryDeliver(h, bob, "bob is not"); err == nil {
		t.Fatal("a message from the peer just removed was accepted")
	}
}

// A trust file the serving node cannot use makes the edit fail, saying
// that the node did not take it in; the node keeps the peers it had.
func TestPeerEditRefusedByNode(t *testing.T) {
	h, bob := sessionHome(t)
	sv, err := ServeHome(h, HostOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(sv.Close)
	if err := os.WriteFile(h.TrustPath(), []byte("{"), 0o600); err != nil {
		t.Fatal(err)
	}
	err = applyTrust(h, "carol is added to "+trust.FileName)
	if codeOf(err) != node.CodeUnavailable || !strings.Contains(err.Error(), "carol is added to "+trust.FileName+", but the node serving this home did not take it in") {
		t.Fatalf("a file the node refuses: %v (code %q)", err, codeOf(err))
	}
	deliver(t, h, bob, "still trusted")
}

// With no node serving the home, an edit only writes the file; a node
// without the operation (an earlier version) is left to its watcher.
func TestPeerEditWithoutDaemon(t *testing.T) {
	h := testHome(t)
	carol, _ := identity.GenerateKeypair()
	if _, err := AddPeer(h, "carol", carol.ID().String(), "uds:///nonexistent/carol.sock", false, ""); err != nil {
		t.Fatal(err)
	}
	if _, err := RemovePeer(h, "bob"); err != nil {
		t.Fatal(err)
	}
	serveAt(t, h.ControlPath(), waitForever{}, Options{})
	if _, err := RemovePeer(h, "carol"); err != nil {
		t.Fatalf("with a node that lacks the operation: %v", err)
	}
	l, err := trust.Load(h.TrustPath())
	if err != nil || l.Len() != 0 {
		t.Fatalf("the trust file after the edits: %v, %v", l, err)
	}
	if _, err := RemovePeer(h, "carol"); codeOf(err) != node.CodeUnknownPeer {
		t.Fatalf("removing a peer not there: %v", err)
	}
}

// A peer changed with ReplacePeer while a node serves the home is
// reached at its new address by the next send: ReplacePeer returns once
// the node uses the new file.
func TestPeerReplaceAppliesAtOnce(t *testing.T) {
	h, bob := sessionHome(t)
	sv, err := ServeHome(h, HostOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(sv.Close)
	ln, sock := listenAsBob(t)
	if _, err := ReplacePeer(h, "bob", bob.ID().String(), "uds://"+sock, false, ""); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), callTimeout)
	defer cancel()
	sent := make(chan error, 1)
	go func() {
		_, err := NewClient(h.ControlPath()).SendMessage(ctx, "bob", "at the new address", node.SendOptions{})
		sent <- err
	}()
	c, e := firstEnvelope(t, ln)
	if e.To != bob.ID() {
		t.Fatalf("what came to bob's new address is to %v", e.To)
	}
	ln.Close() // no ack, and nothing there any more: the send fails at once
	c.Close()
	if err := <-sent; err == nil {
		t.Fatal("a send nobody acknowledged succeeded")
	}
}

// A reliable send that failed at a peer's old address (waiting for its
// backoff, its breaker counting) is tried at the new address as soon as
// ReplacePeer returns, not after the wait.
func TestPeerReplaceRetriesTheQueue(t *testing.T) {
	h, bob := sessionHome(t)
	h.Config.Outbox.Backoff = "1h" // without a kick, an hour
	sv, err := ServeHome(h, HostOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(sv.Close)
	ctx, cancel := context.WithTimeout(context.Background(), callTimeout)
	defer cancel()
	c := NewClient(h.ControlPath())
	sent, err := c.SendMessage(ctx, "bob", "queued for bob", node.SendOptions{Reliable: true})
	if err != nil {
		t.Fatal(err)
	}
	testutil.WaitFor(t, 10*time.Second, "the first attempt to fail", func() bool {
		st, err := c.MessageStatus(ctx, []string{sent.ID})
		return err == nil && len(st) == 1 && st[0].State == node.StateQueued && st[0].Attempts >= 1
	})
	ln, sock := listenAsBob(t)
	if _, err := ReplacePeer(h, "bob", bob.ID().String(), "uds://"+sock, false, ""); err != nil {
		t.Fatal(err)
	}
	conn, e := firstEnvelope(t, ln)
	defer conn.Close()
	if e.ID.String() != sent.ID {
		t.Fatalf("what came to bob's new address: id %v, want %s", e.ID, sent.ID)
	}
}

// listenAsBob listens on a Unix socket in a short temporary directory,
// where a test moves bob; the listener closes at the test's end.
func listenAsBob(t *testing.T) (*net.UnixListener, string) {
	t.Helper()
	dir, err := os.MkdirTemp("", "mkr")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	sock := filepath.Join(dir, "bob.sock")
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: sock, Net: "unix"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	return ln, sock
}

// firstEnvelope accepts the node's connection on ln and reads the
// envelope it sends first, within callTimeout.
func firstEnvelope(t *testing.T, ln *net.UnixListener) (net.Conn, wire.Envelope) {
	t.Helper()
	ln.SetDeadline(time.Now().Add(callTimeout))
	c, err := ln.Accept()
	if err != nil {
		t.Fatalf("the node never dialled bob's new address: %v", err)
	}
	c.SetDeadline(time.Now().Add(callTimeout))
	payload, err := transport.ReadFrame(c, 0)
	if err != nil {
		t.Fatal(err)
	}
	e, err := wire.Open(payload)
	if err != nil {
		t.Fatalf("what came to bob's new address: %v", err)
	}
	return c, e
}
