package node

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/meerkatd/meerkatd/identity"
	"github.com/meerkatd/meerkatd/internal/testutil"
)

// WaitLocalOffer picks up an offer left while it waits, and gives up
// after its bound when none comes.
func TestWaitLocalOffer(t *testing.T) {
	testutil.CheckGoroutines(t)
	dir := t.TempDir()
	kp, err := identity.GenerateKeypair()
	if err != nil {
		t.Fatal(err)
	}
	a := Announcement{Name: "alice", Key: kp.ID().String()}
	if _, err := WaitLocalOffer(dir, a, 200*time.Millisecond); CodeOf(err) != CodePairFailed {
		t.Fatalf("with no offer: %v, want %s", err, CodePairFailed)
	}
	const line = "meerkat-pair/1 7QKD-M2ZT-XW4H-ABN6-YJ3C-PL5E-RA uds:///tmp/alice.sock"
	written := make(chan error, 1)
	go func() {
		time.Sleep(300 * time.Millisecond) // WaitLocalOffer is polling by now
		written <- os.WriteFile(filepath.Join(dir, kp.ID().UUID().String()+".offer"), []byte(line+"\n"), 0o600)
	}()
	got, err := WaitLocalOffer(dir, a, 30*time.Second)
	if werr := <-written; werr != nil {
		t.Fatal(werr)
	}
	if err != nil || got != line {
		t.Fatalf("WaitLocalOffer = %q, %v; want the line", got, err)
	}
}
