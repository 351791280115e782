package natsrelay

import (
	"context"
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
