package node

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/meerkatd/meerkatd/config"
	"github.com/meerkatd/meerkatd/identity"
	"github.com/meerkatd/meerkatd/trust"
)

// A running node's status says what it runs despite: meerkat.toml keys
// changed since it started (it keeps what it read), a meerkat.toml that
// does not load, a trust file it could not take in or that went away
// (it keeps its peers), a spaces file it could not take in. None of it
// is a problem (/readyz).
func TestStatusWarnings(t *testing.T) {
	dir := filepath.Join(shortTemp(t), "home")
	if _, err := InitHome(dir, "n"); err != nil {
		t.Fatal(err)
	}
	cfgPath := filepath.Join(dir, config.FileName)
	if err := os.WriteFile(cfgPath, []byte("name = \"n\"\n[store]\nmode = \"memory\"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	bob, _ := identity.GenerateKeypair()
	h, _, err := OpenHome(dir, OpenOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := AddPeer(h, "bob", bob.ID().String(), "uds:///nonexistent/bob.sock", false, ""); err != nil {
		t.Fatal(err)
	}
	n := startTest(t, h, ModeServe)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	warnings := func() []string {
		t.Helper()
		s, err := n.Status(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if len(s.Problems) != 0 {
			t.Fatalf("problems %q: warnings are no problems", s.Problems)
		}
		return s.Warnings
	}
	has := func(ws []string, part string) bool {
		for _, w := range ws {
			if strings.Contains(w, part) {
				return true
			}
		}
		return false
	}
	if ws := warnings(); len(ws) != 0 {
		t.Fatalf("warnings of a node as it started: %q", ws)
	}

	if err := os.WriteFile(cfgPath, []byte("name = \"n\"\n[store]\nmode = \"memory\"\n[log]\nlevel = \"debug\"\n[outbox]\nmax_attempts = 7\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if ws := warnings(); len(ws) != 1 || !strings.Contains(ws[0], "restart it to apply outbox.max_attempts, log.level") {
		t.Fatalf("after an edit of meerkat.toml: %q", ws)
	}
	if err := os.WriteFile(cfgPath, []byte("name = \"n\"\n[store\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if ws := warnings(); len(ws) != 1 || !strings.Contains(ws[0], "meerkat.toml does not load now") {
		t.Fatalf("with meerkat.toml cut short: %q", ws)
	}
	if err := os.WriteFile(cfgPath, []byte("name = \"n\"\n[store]\nmode = \"memory\"\n"), 0o600); err != nil {
		t.Fatal(err)
	}

	// The trust file moved away: the peers stay, and status says why.
	moved := h.TrustPath() + ".moved"
	if err := os.Rename(h.TrustPath(), moved); err != nil {
		t.Fatal(err)
	}
	if err := n.ApplyTrust(ctx); err == nil || !strings.Contains(err.Error(), "is gone") {
		t.Fatalf("ApplyTrust with the trust file gone: %v", err)
	}
	if _, ok := n.r.Trust().Lookup(bob.ID()); !ok {
		t.Fatal("the peers went with the trust file")
	}
	if ws := warnings(); len(ws) != 1 || !strings.Contains(ws[0], trust.FileName+" was not taken in") || !strings.Contains(ws[0], "keeps the peers it had") {
		t.Fatalf("with the trust file gone: %q", ws)
	}
	if err := os.Rename(moved, h.TrustPath()); err != nil {
		t.Fatal(err)
	}
	if err := n.ApplyTrust(ctx); err != nil {
		t.Fatal(err)
	}
	if ws := warnings(); len(ws) != 0 {
		t.Fatalf("with the trust file back: %q", ws)
	}
	// An empty list, written, is taken: nobody trusted.
	var none *trust.List
	if err := none.Save(h.TrustPath()); err != nil {
		t.Fatal(err)
	}
	if err := n.ApplyTrust(ctx); err != nil || n.r.Trust().Len() != 0 {
		t.Fatalf("an empty trust list written: %v, %d peers", err, n.r.Trust().Len())
	}

	// A spaces file that does not parse.
	if err := os.WriteFile(filepath.Join(dir, SpacesFileName), []byte(`{"spaces": [`), 0o600); err != nil {
		t.Fatal(err)
	}
	n.ReloadTrust()
	if ws := warnings(); !has(ws, SpacesFileName+" was not taken in") {
		t.Fatalf("with spaces.json cut short: %q", ws)
	}
}
