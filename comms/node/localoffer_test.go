package node

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
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

// fakeLocal announces a running node (this process) named name in the
// discovery directory dir, as Announce would.
func fakeLocal(t *testing.T, dir, name string) Announcement {
	t.Helper()
	kp, err := identity.GenerateKeypair()
	if err != nil {
		t.Fatal(err)
	}
	home := filepath.Join(t.TempDir(), name)
	a := Announcement{Name: name, Key: kp.ID().String(), Addr: "uds://" + home + "/meerkat.sock", PID: os.Getpid(), Home: home}
	b, err := json.Marshal(a)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(announcePath(dir, &Home{Key: kp}), b, 0o600); err != nil {
		t.Fatal(err)
	}
	return a
}

// offerLocal leaves a local offer of the node a, as pair offer --local
// does, and returns its line.
func offerLocal(t *testing.T, dir string, a Announcement) string {
	t.Helper()
	path, line := localOfferFile(t, dir, a)
	if err := os.WriteFile(path, []byte(line+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	return line
}

// localOfferFile is where a local offer of a goes, and a line for it.
func localOfferFile(t *testing.T, dir string, a Announcement) (path, line string) {
	t.Helper()
	id, err := identity.ParsePeerID(a.Key)
	if err != nil {
		t.Fatal(err)
	}
	return filepath.Join(dir, id.UUID().String()+".offer"), "meerkat-pair/1 7QKD-M2ZT-XW4H-ABN6-YJ3C-PL5E-RA " + a.Addr
}

func TestMatchLocal(t *testing.T) {
	dir := t.TempDir()
	erin, gina, alice := fakeLocal(t, dir, "meerkat"), fakeLocal(t, dir, "meerkat"), fakeLocal(t, dir, "alice")
	as := []Announcement{erin, gina, alice}
	id, err := identity.ParsePeerID(gina.Key)
	if err != nil {
		t.Fatal(err)
	}
	uuid := id.UUID().String()
	other, err := identity.GenerateKeypair()
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		ref  string
		want []Announcement
	}{
		{"meerkat", []Announcement{erin, gina}},
		{"alice", []Announcement{alice}},
		{gina.Key, []Announcement{gina}},
		{uuid, []Announcement{gina}},
		{strings.ToUpper(uuid), []Announcement{gina}},
		{other.ID().String(), nil},
		{other.ID().UUID().String(), nil},
		{"Meerkat", nil},
		{"bob", nil},
		{"", nil},
		{"ed25519:", nil},
	} {
		if got := matchLocal(as, tc.ref); !slices.Equal(got, tc.want) {
			t.Errorf("matchLocal(%q) = %+v, want %+v", tc.ref, got, tc.want)
		}
	}
}

// Every home made without --name is "meerkat": pair accept --local
// meerkat takes the offer of the one such node that has one open, and
// with two open (or none) it names them all, to pick one by key.
func TestAcceptLocalLineSharedName(t *testing.T) {
	testutil.CheckGoroutines(t)
	kp, err := identity.GenerateKeypair()
	if err != nil {
		t.Fatal(err)
	}
	self := &Home{Key: kp}
	setup := func(t *testing.T) (dir string, erin, gina Announcement) {
		dir = t.TempDir()
		erin, gina = fakeLocal(t, dir, "meerkat"), fakeLocal(t, dir, "meerkat")
		fakeLocal(t, dir, "alice")
		return dir, erin, gina
	}
	// Whichever of the two Discover lists first, the one offering wins.
	for _, ginaFirst := range []bool{true, false} {
		t.Run(fmt.Sprintf("only one offering/gina listed first=%v", ginaFirst), func(t *testing.T) {
			dir, erin, gina := setup(t)
			if (gina.Key < erin.Key) != ginaFirst {
				erin, gina = gina, erin
			}
			want := offerLocal(t, dir, gina)
			line, name, err := AcceptLocalLine(dir, self, "meerkat")
			if err != nil || line != want || name != "meerkat" {
				t.Fatalf("AcceptLocalLine = %q, %q, %v; want gina's offer %q", line, name, err, want)
			}
		})
	}
	t.Run("both offering", func(t *testing.T) {
		dir, erin, gina := setup(t)
		offerLocal(t, dir, erin)
		offerLocal(t, dir, gina)
		_, _, err := AcceptLocalLine(dir, self, "meerkat")
		if CodeOf(err) != CodeBadArgument {
			t.Fatalf("AcceptLocalLine: %v, want %s", err, CodeBadArgument)
		}
		for _, s := range []string{`2 running nodes named "meerkat"`, erin.Key, erin.Home, gina.Key, gina.Home, "pair accept --local KEY"} {
			if !strings.Contains(err.Error(), s) {
				t.Errorf("error %q does not name %q", err, s)
			}
		}
		// By key or peer UUID, the node is the one meant.
		line, name, err := AcceptLocalLine(dir, self, gina.Key)
		if err != nil || line != offerLocal(t, dir, gina) || name != "meerkat" {
			t.Fatalf("by key: %q, %q, %v", line, name, err)
		}
		id, _ := identity.ParsePeerID(erin.Key)
		line, _, err = AcceptLocalLine(dir, self, id.UUID().String())
		if err != nil || line != offerLocal(t, dir, erin) {
			t.Fatalf("by UUID: %q, %v", line, err)
		}
	})
	t.Run("none offering", func(t *testing.T) {
		dir, erin, gina := setup(t)
		as, err := FindLocal(dir, self, "meerkat")
		if err != nil || len(as) != 2 {
			t.Fatalf("FindLocal = %+v, %v", as, err)
		}
		_, _, err = waitLocalOffers(dir, "meerkat", as, 200*time.Millisecond)
		if CodeOf(err) != CodePairFailed {
			t.Fatalf("waitLocalOffers: %v, want %s", err, CodePairFailed)
		}
		for _, s := range []string{"none of the 2", erin.Key, erin.Home, gina.Key, gina.Home, "pair offer --local", "pair accept --local KEY"} {
			if !strings.Contains(err.Error(), s) {
				t.Errorf("error %q does not name %q", err, s)
			}
		}
		// An offer that comes while it waits is taken.
		path, want := localOfferFile(t, dir, gina)
		written := make(chan error, 1)
		go func() {
			time.Sleep(300 * time.Millisecond) // waitLocalOffers is polling by now
			written <- os.WriteFile(path, []byte(want+"\n"), 0o600)
		}()
		a, line, err := waitLocalOffers(dir, "meerkat", as, 30*time.Second)
		if werr := <-written; werr != nil {
			t.Fatal(werr)
		}
		if err != nil || a.Key != gina.Key || line != want {
			t.Fatalf("waitLocalOffers = %+v, %q, %v; want gina's offer", a, line, err)
		}
	})
	t.Run("unknown", func(t *testing.T) {
		dir, _, _ := setup(t)
		if _, _, err := AcceptLocalLine(dir, self, "bob"); CodeOf(err) != CodeUnknownPeer {
			t.Fatalf("AcceptLocalLine(bob): %v, want %s", err, CodeUnknownPeer)
		}
	})
}
