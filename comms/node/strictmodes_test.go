//go:build unix

package node

import (
	"context"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/meerkatd/meerkatd/config"
	"github.com/meerkatd/meerkatd/identity"
	"github.com/meerkatd/meerkatd/internal/filemode"
	"github.com/meerkatd/meerkatd/internal/testutil"
	"github.com/meerkatd/meerkatd/transport"
	"github.com/meerkatd/meerkatd/trust"
)

// A group-writable home is refused at start, with the fix.
func TestOpenHomeRefusesGroupWritableHome(t *testing.T) {
	h, _ := testHome(t, "n", nil)
	if err := os.Chmod(h.Dir, 0o770); err != nil {
		t.Fatal(err)
	}
	_, _, err := OpenHome(h.Dir, OpenOptions{})
	if !errors.Is(err, filemode.ErrUnsafe) || !strings.Contains(err.Error(), "fix with: chmod 700 "+h.Dir) {
		t.Fatalf("OpenHome(0770 home) = %v, want ErrUnsafe with the chmod 700 fix", err)
	}
	if err := os.Chmod(h.Dir, 0o700); err != nil {
		t.Fatal(err)
	}
	if _, _, err := OpenHome(h.Dir, OpenOptions{}); err != nil {
		t.Fatalf("OpenHome after the fix: %v", err)
	}
}

// Every file of the home that decides whom the node trusts or what it
// holds is checked at start, and every problem is reported at once.
func TestCheckHomeReportsEveryFile(t *testing.T) {
	h, _ := testHome(t, "n", nil)
	for _, name := range homeFiles {
		p := filepath.Join(h.Dir, name)
		if _, err := os.Stat(p); errors.Is(err, os.ErrNotExist) {
			if err := os.WriteFile(p, nil, 0o600); err != nil {
				t.Fatal(err)
			}
		}
		if err := os.Chmod(p, 0o620); err != nil {
			t.Fatal(err)
		}
	}
	err := CheckHome(h.Dir)
	if !errors.Is(err, filemode.ErrUnsafe) {
		t.Fatalf("CheckHome = %v, want ErrUnsafe", err)
	}
	for _, name := range homeFiles {
		if want := "chmod 600 " + filepath.Join(h.Dir, name); !strings.Contains(err.Error(), want) {
			t.Errorf("CheckHome does not say %q:\n%v", want, err)
		}
	}
}

// A group-writable trust file is refused at start: by OpenHome, and by
// Start for a Home opened before the file changed.
func TestStartRefusesGroupWritableTrustFile(t *testing.T) {
	h, _ := testHome(t, "n", nil)
	if err := os.Chmod(h.TrustPath(), 0o664); err != nil {
		t.Fatal(err)
	}
	want := "fix with: chmod 600 " + h.TrustPath()
	if _, _, err := OpenHome(h.Dir, OpenOptions{}); !errors.Is(err, filemode.ErrUnsafe) || !strings.Contains(err.Error(), want) {
		t.Fatalf("OpenHome = %v, want ErrUnsafe with %q", err, want)
	}
	n, err := Start(h, Options{Mode: ModeSend})
	if err == nil {
		n.Close()
	}
	if !errors.Is(err, trust.ErrUnsafeFile) || !strings.Contains(err.Error(), want) {
		t.Fatalf("Start = %v, want trust.ErrUnsafeFile with %q", err, want)
	}
}

// At reload, a trust file or spaces file that
// group or others may write is refused on SIGHUP; the node keeps the list
// and the rosters it had and logs the fix.
func TestReloadRefusesGroupWritableFiles(t *testing.T) {
	h, bob := testHome(t, "n", func(c *config.Config) { c.Store.Mode = config.StoreMemory })
	var logs testutil.SyncBuffer
	n, err := Start(h, Options{Mode: ModeServe, Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { n.Close() })

	mallory, _ := identity.GenerateKeypair()
	theirs, err := trust.New(trust.Peer{Name: "mallory", ID: mallory.ID(), Addr: transport.Addr{Scheme: transport.SchemeUDS, Path: "/nonexistent/m.sock"}})
	if err != nil {
		t.Fatal(err)
	}
	// Each file is made group-writable before it takes its place: the
	// node's watcher must never see it in a safe mode.
	if err := theirs.Save(h.TrustPath() + ".new"); err != nil {
		t.Fatal(err)
	}
	roster := `{"spaces": [{"name": "s", "members": [{"key": "` + mallory.ID().String() + `", "id": "m", "capabilities": [{"kind": "*"}]}]}]}`
	if err := os.WriteFile(h.SpacesPath()+".new", []byte(roster), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{h.TrustPath(), h.SpacesPath()} {
		if err := os.Chmod(p+".new", 0o666); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(p+".new", p); err != nil {
			t.Fatal(err)
		}
	}
	n.ReloadTrust()
	waitFor(t, 5*time.Second, "both refusals logged", func() bool {
		s := logs.String()
		return strings.Contains(s, "trusted peers file not reloaded") && strings.Contains(s, "spaces file not reloaded")
	})
	for _, want := range []string{"chmod 600 " + h.TrustPath(), "chmod 600 " + h.SpacesPath()} {
		if !strings.Contains(logs.String(), want) {
			t.Errorf("the log does not give the fix %q:\n%s", want, logs.String())
		}
	}
	if _, ok := n.r.Trust().Lookup(mallory.ID()); ok {
		t.Error("the node trusts the key of a group-writable trust file")
	}
	if _, ok := n.r.Trust().Lookup(bob.ID()); !ok {
		t.Error("the node dropped its previous trust list")
	}
	if sp, err := n.Spaces(context.Background()); err != nil || len(sp) != 0 {
		t.Errorf("spaces after refusing the file: %+v, %v; want none", sp, err)
	}
}

// An identity.key that is a link to nothing (a volume not mounted) is an
// error at start, never a reason to make a new identity in its place.
func TestDanglingKeyLinkMakesNoNewIdentity(t *testing.T) {
	h, _ := testHome(t, "n", nil)
	key := filepath.Join(h.Dir, identity.KeyFile)
	if err := os.Remove(key); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(filepath.Join(t.TempDir(), "not-mounted", identity.KeyFile), key); err != nil {
		t.Fatal(err)
	}
	if _, _, err := OpenHome(h.Dir, OpenOptions{Create: true}); err == nil {
		t.Fatal("OpenHome with a dangling identity.key link: no error")
	}
	if _, err := InitHome(h.Dir, ""); err == nil {
		t.Fatal("InitHome with a dangling identity.key link: no error")
	}
	if fi, err := os.Lstat(key); err != nil || fi.Mode()&os.ModeSymlink == 0 {
		t.Fatalf("identity.key after: %v, %v; want the link left as it was", fi, err)
	}
}

// A reload (SIGHUP) of a home that never had a spaces file says nothing
// of one: there was none, and is none. One that had a file and lost it
// warns.
func TestReloadWithoutSpacesFileQuiet(t *testing.T) {
	h, _ := testHome(t, "n", func(c *config.Config) { c.Store.Mode = config.StoreMemory })
	var logs testutil.SyncBuffer
	n, err := Start(h, Options{Mode: ModeServe, Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { n.Close() })
	if n.spaces == nil {
		t.Fatal("a serving node runs its spaces engine")
	}
	n.spaces.reload()
	if strings.Contains(logs.String(), "spaces file is gone") {
		t.Fatalf("reload with no spaces file ever: %s", logs.String())
	}
	if _, err := n.SpaceEdit(context.Background(), SpaceEdit{Op: SpaceCreate, Space: "lab", As: "me"}); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(h.SpacesPath()); err != nil {
		t.Fatal(err)
	}
	n.spaces.reload()
	if !strings.Contains(logs.String(), "spaces file is gone") {
		t.Fatalf("reload after the file went: no warning in %s", logs.String())
	}
}

// The spaces file's watcher sees a chmod alone (no edit): a file opened
// to group or others is refused at the next poll, not at the next edit.
func TestSpacesWatcherSeesAChmod(t *testing.T) {
	h, _ := testHome(t, "n", func(c *config.Config) { c.Store.Mode = config.StoreMemory })
	if err := os.WriteFile(h.SpacesPath(), []byte(`{"spaces": []}`), 0o600); err != nil {
		t.Fatal(err)
	}
	var logs testutil.SyncBuffer
	n, err := Start(h, Options{Mode: ModeServe, Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { n.Close() })
	// Edits until the watcher is seen to apply one: it polls from then on
	// (an edit made before it took its first look would go unseen).
	pad := ""
	waitFor(t, 20*time.Second, "an edit applied", func() bool {
		pad += " "
		if err := os.WriteFile(h.SpacesPath(), []byte(`{"spaces": []`+pad+`}`), 0o600); err != nil {
			t.Fatal(err)
		}
		time.Sleep(200 * time.Millisecond)
		return strings.Contains(logs.String(), "spaces reloaded")
	})
	if err := os.Chmod(h.SpacesPath(), 0o666); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 10*time.Second, "the group-writable spaces file refused", func() bool {
		return strings.Contains(logs.String(), "spaces file not reloaded") && strings.Contains(logs.String(), "chmod 600 "+h.SpacesPath())
	})
}
