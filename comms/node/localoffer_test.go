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

	"github.com/meerkatd/meerkatd/config"
	"github.com/meerkatd/meerkatd/identity"
	"github.com/meerkatd/meerkatd/internal/testutil"
	"github.com/meerkatd/meerkatd/trust/pair"
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
		written <- writeOffer(filepath.Join(dir, kp.ID().UUID().String()+".offer"), line, os.Getpid(), time.Now().Add(time.Minute))
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
	if err := writeOffer(path, line, os.Getpid(), time.Now().Add(time.Minute)); err != nil {
		t.Fatal(err)
	}
	return line
}

// writeOffer writes an offer file at path: line, waited on by process
// pid, ending at expires.
func writeOffer(path, line string, pid int, expires time.Time) error {
	b, err := json.Marshal(localOffer{Line: line, PID: pid, Expires: expires})
	if err != nil {
		return err
	}
	return os.WriteFile(path, b, 0o600)
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
			line, err := AcceptLocalLine(dir, self, "meerkat")
			if err != nil || line != want {
				t.Fatalf("AcceptLocalLine = %q, %v; want gina's offer %q", line, err, want)
			}
		})
	}
	t.Run("both offering", func(t *testing.T) {
		dir, erin, gina := setup(t)
		offerLocal(t, dir, erin)
		offerLocal(t, dir, gina)
		_, err := AcceptLocalLine(dir, self, "meerkat")
		if CodeOf(err) != CodeBadArgument {
			t.Fatalf("AcceptLocalLine: %v, want %s", err, CodeBadArgument)
		}
		for _, s := range []string{`2 running nodes named "meerkat"`, erin.Key, erin.Home, gina.Key, gina.Home, "pair accept --local KEY"} {
			if !strings.Contains(err.Error(), s) {
				t.Errorf("error %q does not name %q", err, s)
			}
		}
		// By key or peer UUID, the node is the one meant.
		line, err := AcceptLocalLine(dir, self, gina.Key)
		if err != nil || line != offerLocal(t, dir, gina) {
			t.Fatalf("by key: %q, %v", line, err)
		}
		id, _ := identity.ParsePeerID(erin.Key)
		line, err = AcceptLocalLine(dir, self, id.UUID().String())
		if err != nil || line != offerLocal(t, dir, erin) {
			t.Fatalf("by UUID: %q, %v", line, err)
		}
	})
	t.Run("this node itself", func(t *testing.T) {
		dir, _, _ := setup(t)
		me := &Home{Key: kp, Config: config.Config{Name: "selfie"}}
		for _, ref := range []string{"selfie", kp.ID().String(), kp.ID().UUID().String()} {
			if _, err := FindLocal(dir, me, ref); CodeOf(err) != CodeBadArgument || !strings.Contains(err.Error(), "cannot pair with itself") {
				t.Errorf("FindLocal(%q) of this node: %v, want %s saying it cannot pair with itself", ref, err, CodeBadArgument)
			}
		}
		if _, err := FindLocal(dir, me, ""); CodeOf(err) != CodeBadArgument {
			t.Errorf("FindLocal of no name: %v, want %s", err, CodeBadArgument)
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
			written <- writeOffer(path, want, os.Getpid(), time.Now().Add(time.Minute))
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
		if _, err := AcceptLocalLine(dir, self, "bob"); CodeOf(err) != CodeUnknownPeer {
			t.Fatalf("AcceptLocalLine(bob): %v, want %s", err, CodeUnknownPeer)
		}
	})
}

// An offer left by a process that is gone (killed before it could remove
// its file) or whose time is up is no offer: pair accept --local says so
// instead of pairing with a code nobody waits on.
func TestLocalOfferStale(t *testing.T) {
	dir := t.TempDir()
	a := fakeLocal(t, dir, "alice")
	path, line := localOfferFile(t, dir, a)
	const gone = 1<<31 - 1 // above any pid the kernel hands out
	for _, c := range []struct {
		name    string
		pid     int
		expires time.Time
		live    bool
	}{
		{"live", os.Getpid(), time.Now().Add(time.Minute), true},
		{"its process is gone", gone, time.Now().Add(time.Minute), false},
		{"its time is up", os.Getpid(), time.Now().Add(-time.Second), false},
	} {
		if err := writeOffer(path, line, c.pid, c.expires); err != nil {
			t.Fatal(err)
		}
		got, err := LocalOffer(dir, a)
		switch {
		case c.live && (err != nil || got != line):
			t.Errorf("%s: LocalOffer = %q, %v; want the line", c.name, got, err)
		case !c.live && (CodeOf(err) != CodePairFailed || !strings.Contains(err.Error(), "has no local offer open")):
			t.Errorf("%s: LocalOffer = %q, %v; want no offer open (%s)", c.name, got, err, CodePairFailed)
		}
	}
	// A file that is not an offer (a bare line, as an older version
	// left) is no offer open either, and the error names it.
	if err := os.WriteFile(path, []byte(line+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := LocalOffer(dir, a); CodeOf(err) != CodePairFailed || !strings.Contains(err.Error(), path) {
		t.Errorf("a bare line: %v, want no offer open (%s), naming %s", err, CodePairFailed, path)
	}
}

func TestParseLocalOffer(t *testing.T) {
	const line = "meerkat-pair/1 7QKD-M2ZT-XW4H-ABN6-YJ3C-PL5E-RA uds:///tmp/alice.sock"
	for _, c := range []struct {
		name, in string
		ok       bool
	}{
		{"complete", `{"line":"` + line + `","pid":42,"expires":"2026-11-29T05:00:00Z"}`, true},
		{"space around the line", `{"line":"  ` + line + ` ","pid":42,"expires":"2026-11-29T05:00:00Z"}`, true},
		{"a bare line", line, false},
		{"empty", ``, false},
		{"no pid", `{"line":"` + line + `","expires":"2026-11-29T05:00:00Z"}`, false},
		{"negative pid", `{"line":"` + line + `","pid":-1,"expires":"2026-11-29T05:00:00Z"}`, false},
		{"no end", `{"line":"` + line + `","pid":42}`, false},
		{"not a pairing line", `{"line":"hello","pid":42,"expires":"2026-11-29T05:00:00Z"}`, false},
		{"a bad end", `{"line":"` + line + `","pid":42,"expires":"soon"}`, false},
		{"too long", `{"line":"` + line + `","pid":42,"expires":"2026-11-29T05:00:00Z","x":"` + strings.Repeat("a", maxLocalOffer) + `"}`, false},
	} {
		o, err := parseLocalOffer([]byte(c.in))
		if (err == nil) != c.ok {
			t.Errorf("%s: %+v, %v; want ok %v", c.name, o, err, c.ok)
		}
	}
}

func FuzzParseLocalOffer(f *testing.F) {
	f.Add([]byte(`{"line":"meerkat-pair/1 7QKD-M2ZT-XW4H-ABN6-YJ3C-PL5E-RA uds:///tmp/a.sock","pid":42,"expires":"2026-11-29T05:00:00Z"}`))
	f.Add([]byte(`{"line":"","pid":0}`))
	f.Add([]byte("meerkat-pair/1"))
	f.Fuzz(func(t *testing.T, b []byte) {
		o, err := parseLocalOffer(b)
		if err != nil {
			return
		}
		if o.PID <= 0 || o.Expires.IsZero() || len(b) > maxLocalOffer {
			t.Fatalf("accepted %q as %+v", b, o)
		}
		if _, err := pair.ParseLine(o.Line); err != nil {
			t.Fatalf("accepted line %q: %v", o.Line, err)
		}
	})
}

// The discovery directory is made under $XDG_RUNTIME_DIR, which must be
// there: a runtime directory that does not exist is not made, and one
// open to other users is refused.
func TestRuntimeDir(t *testing.T) {
	base := t.TempDir()
	dir, err := RuntimeDir(base)
	if err != nil || dir != filepath.Join(base, "meerkat") {
		t.Fatalf("RuntimeDir = %q, %v", dir, err)
	}
	if again, err := RuntimeDir(base); err != nil || again != dir {
		t.Fatalf("again: %q, %v", again, err)
	}
	gone := filepath.Join(base, "no", "such")
	if _, err := RuntimeDir(gone); err == nil {
		t.Fatal("a runtime directory that does not exist was taken")
	}
	if _, err := os.Stat(filepath.Join(base, "no")); !os.IsNotExist(err) {
		t.Fatalf("RuntimeDir made parts of a runtime directory that was not there: %v", err)
	}
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if _, err := RuntimeDir(base); err == nil || !strings.Contains(err.Error(), "open to other users") {
		t.Fatalf("a discovery directory others may read: %v", err)
	}
}
