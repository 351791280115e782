package node

import (
	"context"
	"errors"
	"log/slog"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/meerkatd/meerkatd/config"
	"github.com/meerkatd/meerkatd/identity"
	"github.com/meerkatd/meerkatd/internal/testutil"
	"github.com/meerkatd/meerkatd/trust"
)

// ApplyTrust takes an edit of the trust file in before it returns: a
// peer just added can be sent to and a peer just removed is refused,
// without waiting for the watcher. The watcher noticing the same edit
// later logs no second reload; a file the node cannot use is refused
// with why (logged once), and the node keeps the peers it had.
func TestApplyTrustAtOnce(t *testing.T) {
	h, bob := testHome(t, "n", func(c *config.Config) { c.Store.Mode = config.StoreMemory })
	var logs testutil.SyncBuffer
	n, err := Start(h, Options{Mode: ModeServe, Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { n.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	count := func(s string) int { return strings.Count(logs.String(), s) }

	carol, _ := identity.GenerateKeypair()
	if _, err := AddPeer(h, "carol", carol.ID().String(), "uds:///nonexistent/carol.sock", false, ""); err != nil {
		t.Fatal(err)
	}
	if err := n.ApplyTrust(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := n.SendMessage(ctx, "carol", "hi", SendOptions{}); codeOfErr(err) != CodePeerOffline {
		t.Fatalf("a send to the peer just added: %v, want %s (it is trusted, and down)", err, CodePeerOffline)
	}
	if _, err := RemovePeer(h, "bob"); err != nil {
		t.Fatal(err)
	}
	if err := n.ApplyTrust(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := n.SendMessage(ctx, "bob", "hi", SendOptions{}); codeOfErr(err) != CodeUnknownPeer {
		t.Fatalf("a send to the peer just removed: %v, want %s", err, CodeUnknownPeer)
	}
	if _, ok := n.r.Trust().Lookup(bob.ID()); ok {
		t.Fatal("the Router still trusts the peer just removed")
	}
	if got := count("trusted peers reloaded"); got != 2 {
		t.Fatalf("%d reloads logged, want 2:\n%s", got, logs.String())
	}
	n.trustChanged(nil, nil) // the watcher, seeing the same edits
	if got := count("trusted peers reloaded"); got != 2 {
		t.Fatalf("the watcher logged an edit already taken in:\n%s", logs.String())
	}

	if err := os.WriteFile(h.TrustPath(), []byte("{"), 0o600); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		err := n.ApplyTrust(ctx)
		if codeOfErr(err) != CodeUnavailable || !strings.Contains(err.Error(), trust.FileName) {
			t.Fatalf("a broken trust file: %v, want %s naming %s", err, CodeUnavailable, trust.FileName)
		}
	}
	if got := count("trusted peers file not reloaded"); got != 1 {
		t.Fatalf("the same refusal logged %d times, want once:\n%s", got, logs.String())
	}
	if _, ok := n.r.Trust().Lookup(carol.ID()); !ok {
		t.Fatal("the node dropped its list for a file it cannot use")
	}

	// A SIGHUP is answered even when nothing changed.
	if err := os.Remove(h.TrustPath()); err != nil {
		t.Fatal(err)
	}
	if _, err := AddPeer(h, "carol", carol.ID().String(), "uds:///nonexistent/carol.sock", false, ""); err != nil {
		t.Fatal(err)
	}
	if err := n.ApplyTrust(ctx); err != nil {
		t.Fatal(err)
	}
	before := count("trusted peers reloaded")
	n.ReloadTrust()
	waitFor(t, 10*time.Second, "the SIGHUP reload logged", func() bool { return count("trusted peers reloaded") > before })

	n.Close()
	if err := n.ApplyTrust(ctx); codeOfErr(err) != CodeUnavailable || !errors.Is(err, ErrClosed) {
		t.Fatalf("ApplyTrust after Close: %v", err)
	}
}
