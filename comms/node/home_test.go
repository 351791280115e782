package node

import (
	"errors"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/meerkatd/meerkatd/comms/audit"
	"github.com/meerkatd/meerkatd/config"
	"github.com/meerkatd/meerkatd/identity"
	"github.com/meerkatd/meerkatd/transport"
	"github.com/meerkatd/meerkatd/trust"
)

// shortTemp is a new directory whose path is short enough for a home's
// sockets, removed at the test's end.
func shortTemp(t *testing.T) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "mkh")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	return dir
}

// holdHomeLock takes the lock a process serving dir holds (flock(2) on the
// directory, as comms/control takes it) and returns its release.
func holdHomeLock(t *testing.T, dir string) (release func()) {
	t.Helper()
	f, err := os.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		f.Close()
		t.Fatal(err)
	}
	return func() { f.Close() }
}

// keygen refuses, with or without force, while a node serves the home:
// that node would go on signing with the old key, and the next start
// would switch identity without a word. Once the node is gone it works.
func TestKeygenRefusedWhileServed(t *testing.T) {
	dir := filepath.Join(shortTemp(t), "home")
	if _, err := InitHome(dir, ""); err != nil {
		t.Fatal(err)
	}
	before, err := identity.LoadKeypair(dir)
	if err != nil {
		t.Fatal(err)
	}
	release := holdHomeLock(t, dir)
	for _, force := range []bool{true, false} {
		err := Keygen(dir, force)
		if CodeOf(err) != CodeUnavailable || !strings.Contains(UserText(err), "a node serves this home") || !strings.Contains(UserText(err), "stop it first") {
			t.Errorf("keygen (force %v) while served: %v (code %s)", force, err, CodeOf(err))
		}
		if kp, err := identity.LoadKeypair(dir); err != nil || kp.ID() != before.ID() {
			t.Fatalf("keygen (force %v) while served replaced the key (%v)", force, err)
		}
	}
	release()
	if err := Keygen(dir, true); err != nil {
		t.Fatalf("keygen --force once the node is gone: %v", err)
	}
	if kp, err := identity.LoadKeypair(dir); err != nil || kp.ID() == before.ID() {
		t.Fatalf("keygen --force kept the old key (%v)", err)
	}
	// Nothing serves a home that does not exist yet: keygen makes it.
	if err := Keygen(filepath.Join(filepath.Dir(dir), "new"), false); err != nil {
		t.Fatalf("keygen of a new home: %v", err)
	}
}

// A home's path leaves room for its sockets (control.sock, meerkat.sock)
// under the system's limit on a socket path, or it is refused with what
// to do: a shorter home, at most so many bytes.
func TestCheckHomePath(t *testing.T) {
	room := transport.MaxUDSPath - len("/"+ControlSocketName) // the longest home
	home := func(n int) string { return "/" + strings.Repeat("h", n-1) }
	for _, tc := range []struct {
		name string
		dir  string
		ok   bool
	}{
		{"short", "/home/u/.config/meerkat", true},
		{"at the limit", home(room), true},
		{"a byte over", home(room + 1), false},
		{"far over", home(room + 40), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := CheckHomePath(tc.dir)
			if tc.ok {
				if err != nil {
					t.Fatalf("%d-byte home: %v", len(tc.dir), err)
				}
				return
			}
			sock := filepath.Join(tc.dir, ControlSocketName)
			msg := UserText(err)
			for _, want := range []string{"too long", sock, strconv.Itoa(len(sock)) + " bytes", "limit of " + strconv.Itoa(transport.MaxUDSPath), "at most " + strconv.Itoa(room) + " bytes", "--home"} {
				if !strings.Contains(msg, want) {
					t.Errorf("%d-byte home: %q lacks %q", len(tc.dir), msg, want)
				}
			}
			if CodeOf(err) != CodeBadArgument || !errors.Is(err, transport.ErrPathTooLong) {
				t.Errorf("%d-byte home: code %s, %v", len(tc.dir), CodeOf(err), err)
			}
		})
	}
}

// init (and run, mcp and keygen, which create a missing home) refuse a
// home whose sockets would not fit, before creating anything; a home
// made before is refused by run and config check too.
func TestLongHomeRefused(t *testing.T) {
	parent := shortTemp(t)
	long := filepath.Join(parent, strings.Repeat("d", transport.MaxUDSPath-len(parent)-len(ControlSocketName)))
	for name, create := range map[string]func() error{
		"InitHome": func() error { _, err := InitHome(long, "n"); return err },
		"OpenHome": func() error { _, _, err := OpenHome(long, OpenOptions{Create: true}); return err },
		"Keygen":   func() error { return Keygen(long, false) },
	} {
		if err := create(); CodeOf(err) != CodeBadArgument || !errors.Is(err, transport.ErrPathTooLong) {
			t.Errorf("%s of a %d-byte home: %v", name, len(long), err)
		}
		if _, err := os.Lstat(long); !errors.Is(err, fs.ErrNotExist) {
			t.Fatalf("%s of a too-long home created it (%v)", name, err)
		}
	}
	// A home made by hand (or by an older meerkatd) at that path.
	if err := os.Mkdir(long, 0o700); err != nil {
		t.Fatal(err)
	}
	kp, err := identity.GenerateKeypair()
	if err != nil {
		t.Fatal(err)
	}
	if err := kp.Save(long); err != nil {
		t.Fatal(err)
	}
	if _, _, err := OpenHome(long, OpenOptions{Create: true}); !errors.Is(err, transport.ErrPathTooLong) {
		t.Errorf("run of an existing too-long home: %v", err)
	}
	if _, err := CheckConfig(long, nil, nil); !errors.Is(err, transport.ErrPathTooLong) {
		t.Errorf("config check of a too-long home: %v", err)
	}
}

// config check refuses the spaces file the node refuses at start, with
// the same error.
func TestCheckConfigSpaces(t *testing.T) {
	h, _ := testHome(t, "alice", func(c *config.Config) { c.Store.Mode = config.StoreMemory })
	if _, err := CheckConfig(h.Dir, nil, nil); err != nil {
		t.Fatalf("config check of a good home: %v", err)
	}
	// A member key that is not 32 bytes.
	bad := `{"spaces": [{"name": "s", "members": [{"id": "a", "key": "ed25519:AAAA"}]}]}`
	if err := os.WriteFile(h.SpacesPath(), []byte(bad), 0o600); err != nil {
		t.Fatal(err)
	}
	_, checkErr := CheckConfig(h.Dir, nil, nil)
	if checkErr == nil {
		t.Fatal("config check passed a spaces file the node refuses")
	}
	n, startErr := Start(h, Options{Mode: ModeServe})
	if startErr == nil {
		n.Close()
		t.Fatal("the node started with a bad spaces file")
	}
	if UserText(checkErr) != UserText(startErr) || !strings.Contains(UserText(checkErr), SpacesFileName) {
		t.Fatalf("config check says %q, the node %q", UserText(checkErr), UserText(startErr))
	}
}

// config show has the settings also when they do not validate or a
// variable cannot be read, with the error naming where each bad value
// came from.
func TestShowConfigInvalid(t *testing.T) {
	dir := filepath.Join(shortTemp(t), "home")
	if _, err := InitHome(dir, ""); err != nil {
		t.Fatal(err)
	}
	value := func(settings []config.Setting, key string) (string, string) {
		for _, s := range settings {
			if s.Key == key {
				return s.Value, s.Source
			}
		}
		t.Fatalf("no setting %s", key)
		return "", ""
	}
	for _, tc := range []struct {
		name          string
		env           map[string]string
		want          string // in the error
		ack, ackSrc   string
		level, lvlSrc string
	}{
		{"out of range", map[string]string{"MEERKAT_COMMS_ACK_TIMEOUT": "0", "MEERKAT_LOG_LEVEL": "debug"},
			"MEERKAT_COMMS_ACK_TIMEOUT: comms.ack_timeout_secs: must be between 1 and", "0", "MEERKAT_COMMS_ACK_TIMEOUT", `"debug"`, "MEERKAT_LOG_LEVEL"},
		// The variables that can be read still apply.
		{"unreadable", map[string]string{"MEERKAT_COMMS_ACK_TIMEOUT": "soon", "MEERKAT_LOG_LEVEL": "debug"},
			"MEERKAT_COMMS_ACK_TIMEOUT: comms.ack_timeout_secs:", "30", filepath.Join(dir, config.FileName), `"debug"`, "MEERKAT_LOG_LEVEL"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			lookup := func(k string) (string, bool) { v, ok := tc.env[k]; return v, ok }
			settings, err := ShowConfig(dir, OpenOptions{LookupEnv: lookup})
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %v, want one with %q", err, tc.want)
			}
			if len(settings) != len(config.Keys()) {
				t.Fatalf("%d settings, want %d", len(settings), len(config.Keys()))
			}
			if v, src := value(settings, "comms.ack_timeout_secs"); v != tc.ack || src != tc.ackSrc {
				t.Errorf("comms.ack_timeout_secs = %s from %s, want %s from %s", v, src, tc.ack, tc.ackSrc)
			}
			if v, src := value(settings, "log.level"); v != tc.level || src != tc.lvlSrc {
				t.Errorf("log.level = %s from %s, want %s from %s", v, src, tc.level, tc.lvlSrc)
			}
			// What run would say names the variable too.
			if _, _, err := OpenHome(dir, OpenOptions{LookupEnv: lookup}); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("open: %v, want an error with %q", err, tc.want)
			}
		})
	}
	// A bad file value names the file.
	path := filepath.Join(dir, config.FileName)
	if err := os.WriteFile(path, []byte("[comms]\nack_timeout_secs = 0\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	settings, err := ShowConfig(dir, OpenOptions{})
	if want := path + ": comms.ack_timeout_secs: must be"; err == nil || !strings.Contains(err.Error(), want) || settings == nil {
		t.Fatalf("%d settings, %v; want the settings and an error with %q", len(settings), err, want)
	}
	if _, err := ShowConfig(filepath.Join(dir, "none"), OpenOptions{}); CodeOf(err) != CodeNoHome {
		t.Fatalf("no home: %v", err)
	}
}

// InitHome names every file it made, and makes nothing it does not name
// (lock files aside); a second run makes and names nothing.
func TestInitHomeNamesWhatItMade(t *testing.T) {
	dir := filepath.Join(shortTemp(t), "home")
	created, err := InitHome(dir, "alice")
	if err != nil {
		t.Fatal(err)
	}
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var made []string
	for _, e := range ents {
		if !strings.HasSuffix(e.Name(), ".lock") {
			made = append(made, e.Name())
		}
	}
	slices.Sort(made)
	named := slices.Sorted(slices.Values(created))
	if !slices.Equal(made, named) || !slices.Contains(named, identity.PubFile) {
		t.Fatalf("InitHome named %v, made %v", named, made)
	}
	if again, err := InitHome(dir, "alice"); err != nil || len(again) != 0 {
		t.Fatalf("second InitHome: %v, %v", again, err)
	}
}

// A home whose identity.key went missing (its identity.pub or database
// still there) gets no new identity by init, run or keygen without
// --force, and is not taken for no home at all; a home provisioned with
// a meerkat.toml and a trust list before its first init gets its key.
func TestLostKeyNotReplaced(t *testing.T) {
	dir := filepath.Join(shortTemp(t), "home")
	if _, err := InitHome(dir, "alice"); err != nil {
		t.Fatal(err)
	}
	old, err := identity.LoadKeypair(dir)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(filepath.Join(dir, identity.KeyFile)); err != nil {
		t.Fatal(err)
	}
	lost := func(what string, err error) {
		t.Helper()
		if CodeOf(err) != CodeBadConfig || !strings.Contains(err.Error(), "identity.key is missing from "+dir) || !strings.Contains(err.Error(), "keygen --force") {
			t.Fatalf("%s: %v, want bad_config naming the missing key", what, err)
		}
		if _, err := os.Lstat(filepath.Join(dir, identity.KeyFile)); !errors.Is(err, fs.ErrNotExist) {
			t.Fatalf("%s made a key", what)
		}
	}
	_, err = InitHome(dir, "")
	lost("InitHome", err)
	_, _, err = OpenHome(dir, OpenOptions{Create: true})
	lost("OpenHome with Create", err)
	lost("RequireHome", RequireHome(dir))
	lost("Keygen", Keygen(dir, false))
	// The database alone is a sign too.
	if err := os.Remove(filepath.Join(dir, identity.PubFile)); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, DBFileName), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	_, err = InitHome(dir, "")
	lost("InitHome with a database", err)
	// And the audit log alone (a memory store keeps no database).
	if err := os.Remove(filepath.Join(dir, DBFileName)); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "audit.log"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	_, err = InitHome(dir, "")
	lost("InitHome with an audit log", err)
	if err := Keygen(dir, true); err != nil {
		t.Fatalf("keygen --force: %v", err)
	}
	if kp, err := identity.LoadKeypair(dir); err != nil || kp.ID() == old.ID() {
		t.Fatalf("after keygen --force: %v", err)
	}

	fresh := filepath.Join(shortTemp(t), "provisioned")
	if err := os.MkdirAll(fresh, 0o700); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{config.FileName, trust.FileName} {
		if err := os.WriteFile(filepath.Join(fresh, f), []byte(map[string]string{config.FileName: "name = \"bob\"\n", trust.FileName: `{"peers":[]}`}[f]), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	if created, err := InitHome(fresh, ""); err != nil || !slices.Contains(created, identity.KeyFile) {
		t.Fatalf("InitHome of a provisioned home: %v, %v", created, err)
	}
}

// A new home under a directory others may write in is refused before
// anything is made: no directory, no identity left where another user
// could replace them.
func TestInitHomeRefusesAnOpenParent(t *testing.T) {
	open := filepath.Join(shortTemp(t), "open")
	if err := os.Mkdir(open, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(open, 0o777); err != nil {
		t.Fatal(err)
	}
	for _, dir := range []string{filepath.Join(open, "home"), filepath.Join(open, "a", "b", "home")} {
		if _, err := InitHome(dir, ""); CodeOf(err) != CodeBadConfig || !strings.Contains(err.Error(), "chmod go-w "+open) {
			t.Errorf("InitHome(%s) under a mode 0777 directory: %v, want %s naming the fix", dir, err, CodeBadConfig)
		}
	}
	if ents, err := os.ReadDir(open); err != nil || len(ents) != 0 {
		t.Fatalf("left in the open directory: %v, %v", ents, err)
	}
}

// A command's node that listens for its answers (ModeReplies: a pairing
// offer, a request's answer) holds the home: keygen refuses meanwhile, as
// does a second such node, and both work once it is gone.
func TestRepliesNodeHoldsTheHome(t *testing.T) {
	h, _ := testHome(t, "alice", nil)
	n := startTest(t, h, ModeReplies)
	if err := Keygen(h.Dir, true); CodeOf(err) != CodeUnavailable {
		t.Fatalf("keygen while a command listens for the home: %v, want %s", err, CodeUnavailable)
	}
	if _, err := Start(h, Options{Mode: ModeReplies}); CodeOf(err) != CodeUnavailable {
		t.Fatalf("a second listening command: %v, want %s", err, CodeUnavailable)
	}
	n.Close()
	second, err := Start(h, Options{Mode: ModeReplies})
	if err != nil {
		t.Fatalf("once the first is gone: %v", err)
	}
	second.Close()
	if err := Keygen(h.Dir, true); err != nil {
		t.Fatalf("keygen once nothing listens: %v", err)
	}
	// A node started on the identity read before the keygen refuses.
	if _, err := Start(h, Options{Mode: ModeReplies}); CodeOf(err) != CodeUnavailable {
		t.Fatalf("a node on the old identity: %v, want %s", err, CodeUnavailable)
	}
}

// peers remove names the peer by its name in any letter case, its key or
// its peer UUID.
func TestRemovePeerByAnyName(t *testing.T) {
	h, bob := testHome(t, "alice", nil) // trusts bob
	for _, ref := range []string{"BOB", bob.ID().String(), strings.ToUpper(bob.ID().UUID().String())} {
		if _, err := AddPeer(h, "bob", bob.ID().String(), "uds:///nonexistent/bob.sock", false, ""); err != nil && !strings.Contains(err.Error(), "same") {
			t.Fatal(err)
		}
		if p, err := RemovePeer(h, ref); err != nil || p.Name != "bob" || p.PubKey != bob.ID().String() {
			t.Fatalf("remove %q: %+v, %v; want bob's entry", ref, p, err)
		}
		l, err := trust.LoadOrEmpty(h.TrustPath())
		if err != nil || l.Len() != 0 {
			t.Fatalf("after removing %q: %d peers, %v", ref, l.Len(), err)
		}
	}
	if _, err := RemovePeer(h, "nobody"); CodeOf(err) != CodeUnknownPeer {
		t.Fatalf("remove nobody: %v", err)
	}
}

// config check refuses what run refuses of the identity and the audit
// log: a seed of the wrong size, a public key file that does not match
// it, an audit.log that is not a regular file.
func TestCheckConfigIdentityAndAudit(t *testing.T) {
	for _, tc := range []struct {
		name  string
		spoil func(dir string) error
	}{
		{"short seed", func(dir string) error {
			return os.WriteFile(filepath.Join(dir, identity.KeyFile), make([]byte, 10), 0o600)
		}},
		{"public key of another", func(dir string) error {
			other, err := identity.GenerateKeypair()
			if err != nil {
				return err
			}
			id := other.ID()
			return os.WriteFile(filepath.Join(dir, identity.PubFile), id[:], 0o644)
		}},
		{"audit.log a directory", func(dir string) error { return os.Mkdir(filepath.Join(dir, audit.FileName), 0o700) }},
		{"audit.log a symbolic link", func(dir string) error {
			return os.Symlink(filepath.Join(dir, "elsewhere"), filepath.Join(dir, audit.FileName))
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h, _ := testHome(t, "alice", func(c *config.Config) { c.Store.Mode = config.StoreMemory })
			if _, err := CheckConfig(h.Dir, nil, nil); err != nil {
				t.Fatalf("config check of a good home: %v", err)
			}
			if err := tc.spoil(h.Dir); err != nil {
				t.Fatal(err)
			}
			if _, err := CheckConfig(h.Dir, nil, nil); err == nil {
				t.Fatal("config check passed")
			}
			// And run refuses it.
			h2, _, err := OpenHome(h.Dir, OpenOptions{})
			if err == nil {
				n, startErr := Start(h2, Options{Mode: ModeServe})
				if startErr == nil {
					n.Close()
					t.Fatal("the node started: the case does not show what run refuses")
				}
			}
		})
	}
}

// config check reads the files [nats] names: a CA file that is missing or
// holds no PEM certificate, a client certificate without its key, a seed
// or credentials file that holds none, fails it (naming the key), where a
// running node would only log every failed connection attempt.
func TestCheckConfigNATSFiles(t *testing.T) {
	h, _ := testHome(t, "alice", func(c *config.Config) { c.Store.Mode = config.StoreMemory })
	notPEM := filepath.Join(h.Dir, "ca.txt")
	if err := os.WriteFile(notPEM, []byte("not a certificate\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	// A seed made for this test (a user's nkey, trusted by nothing), and a
	// credentials file around it (config check does not verify the JWT).
	const seed = "SUAFELEQKDYMAU5QPPLZUSEUQMN3TS3WKLSAHXYL6JXYZGKBDLE5MDOUVI"
	creds := "-----BEGIN NATS USER JWT-----\neyJ0eXAiOiJKV1QifQ.eyJzdWIiOiJVIn0.c2ln\n------END NATS USER JWT------\n\n-----BEGIN USER NKEY SEED-----\n" + seed + "\n------END USER NKEY SEED------\n"
	for name, mode := range map[string]os.FileMode{"private.nk": 0o600, "shown.nk": 0o644, "group.creds": 0o640, "groupw.creds": 0o660, "bad.nk": 0o600, "bad.creds": 0o600} {
		content := seed + "\n"
		switch {
		case strings.HasPrefix(name, "bad"):
			content = "SUAEXAMPLE\n"
		case strings.HasSuffix(name, ".creds"):
			content = creds
		}
		if err := os.WriteFile(filepath.Join(h.Dir, name), []byte(content), mode); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(filepath.Join(h.Dir, name), mode); err != nil { // whatever the umask
			t.Fatal(err)
		}
	}
	for _, tc := range []struct {
		name string
		env  map[string]string
		want string // in the error; "" for none
	}{
		{"no files", map[string]string{}, ""},
		{"CA missing", map[string]string{"MEERKAT_NATS_TLS_CA": "missing-ca.pem"}, "nats.tls_ca"},
		{"CA not PEM", map[string]string{"MEERKAT_NATS_TLS_CA": notPEM}, "holds no PEM certificate"},
		{"creds missing", map[string]string{"MEERKAT_NATS_CREDS_FILE": "gone.creds"}, "nats.creds_file"},
		{"seed file private", map[string]string{"MEERKAT_NATS_NKEY_SEED_FILE": "private.nk"}, ""},
		{"seed file others may read", map[string]string{"MEERKAT_NATS_NKEY_SEED_FILE": "shown.nk"}, "nats.nkey_seed_file: " + filepath.Join(h.Dir, "shown.nk") + " holds a secret and others may read it or the group write it (mode 0644)"},
		{"creds file the group may read", map[string]string{"MEERKAT_NATS_CREDS_FILE": "group.creds"}, ""},
		{"creds file the group may write", map[string]string{"MEERKAT_NATS_CREDS_FILE": "groupw.creds"}, "chmod 600 " + filepath.Join(h.Dir, "groupw.creds")},
		{"seed file holding no seed", map[string]string{"MEERKAT_NATS_NKEY_SEED_FILE": "bad.nk"}, "nats.nkey_seed_file: " + filepath.Join(h.Dir, "bad.nk") + ": nkeys: "},
		{"creds file holding no credentials", map[string]string{"MEERKAT_NATS_CREDS_FILE": "bad.creds"}, "nats.creds_file: " + filepath.Join(h.Dir, "bad.creds") + " holds no user JWT"},
		{"client certificate not a certificate", map[string]string{"MEERKAT_NATS_TLS_CERT": notPEM, "MEERKAT_NATS_TLS_KEY": notPEM}, "nats.tls_cert and nats.tls_key"},
		{"TLS key others may read", map[string]string{"MEERKAT_NATS_TLS_CERT": notPEM, "MEERKAT_NATS_TLS_KEY": "shown.nk"}, "nats.tls_key: " + filepath.Join(h.Dir, "shown.nk") + " holds a secret and others may read it"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			env := map[string]string{"MEERKAT_NATS_SERVERS": "nats://127.0.0.1:4222"}
			for k, v := range tc.env {
				env[k] = v
			}
			lookup := func(k string) (string, bool) { v, ok := env[k]; return v, ok }
			_, err := CheckConfig(h.Dir, lookup, nil)
			switch {
			case tc.want == "" && err != nil:
				t.Fatalf("config check: %v", err)
			case tc.want != "" && (CodeOf(err) != CodeBadConfig || !strings.Contains(err.Error(), tc.want)):
				t.Fatalf("config check: %v (%s), want %s naming %q", err, CodeOf(err), CodeBadConfig, tc.want)
			}
			if !strings.Contains(tc.want, "secret") {
				return
			}
			// And the node does not start with it (run refuses it).
			h2, _, err := OpenHome(h.Dir, OpenOptions{LookupEnv: lookup})
			if err != nil {
				t.Fatal(err)
			}
			if n, err := Start(h2, Options{Mode: ModeServe}); err == nil || CodeOf(err) != CodeBadConfig || !strings.Contains(err.Error(), tc.want) {
				if n != nil {
					n.Close()
				}
				t.Fatalf("start with the file: %v, want %s naming %q", err, CodeBadConfig, tc.want)
			}
		})
	}
}

// A node that refuses plaintext TCP runs with peers at tcp:// addresses
// in its trust file, and every send to them fails: config check says
// which, as a note (the daemon would run).
func TestCheckConfigPlaintextPeers(t *testing.T) {
	h, _ := testHome(t, "alice", func(c *config.Config) { c.Store.Mode = config.StoreMemory })
	carol, err := identity.GenerateKeypair()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := AddPeer(h, "carol", carol.ID().String(), "tcp://192.0.2.30:4200", false, ""); err != nil {
		t.Fatal(err)
	}
	env := func(refuse bool) func(string) (string, bool) {
		return func(k string) (string, bool) {
			if refuse && k == "MEERKAT_COMMS_TCP_PLAINTEXT" {
				return "refuse", true
			}
			return "", false
		}
	}
	ck, err := CheckConfig(h.Dir, env(true), nil)
	if err != nil || !strings.Contains(ck.Note, "carol") || !strings.Contains(ck.Note, "comms.tcp_plaintext") || strings.Contains(ck.Note, "bob") {
		t.Fatalf("refusing plaintext: %+v, %v; want a note naming carol (not bob, at a socket)", ck, err)
	}
	if ck, err := CheckConfig(h.Dir, env(false), nil); err != nil || ck.Note != "" {
		t.Fatalf("allowing plaintext: %+v, %v; want no note", ck, err)
	}
}

// Peers reached through NATS on a node with no NATS servers: config
// check says which (the daemon would run, and every send to them fail).
func TestCheckConfigNATSPeersWithoutServers(t *testing.T) {
	h, _ := testHome(t, "alice", func(c *config.Config) { c.Store.Mode = config.StoreMemory })
	for _, p := range []struct {
		name, addr string
		alsoNATS   bool
	}{{"dave", "nats:", false}, {"erin", "tcp://192.0.2.31:4200", true}} {
		kp, err := identity.GenerateKeypair()
		if err == nil {
			_, err = AddPeer(h, p.name, kp.ID().String(), p.addr, p.alsoNATS, "")
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	env := func(servers string) func(string) (string, bool) {
		return func(k string) (string, bool) {
			if k == "MEERKAT_NATS_SERVERS" && servers != "" {
				return servers, true
			}
			return "", false
		}
	}
	ck, err := CheckConfig(h.Dir, env(""), nil)
	if err != nil || !strings.Contains(ck.Note, "reaches dave through NATS (nats:), but nats.servers is empty (in this environment)") ||
		!strings.Contains(ck.Note, "lets erin fall back to NATS") || strings.Contains(ck.Note, "bob") || strings.HasPrefix(ck.Note, ";") {
		t.Fatalf("without NATS servers: %+v, %v; want notes naming dave and erin (not bob)", ck, err)
	}
	if ck, err := CheckConfig(h.Dir, env("nats://127.0.0.1:4222"), nil); err != nil || ck.Note != "" {
		t.Fatalf("with NATS servers: %+v, %v; want no note", ck, err)
	}
}

// A listen address another program holds stops the node with the setting
// to change named.
func TestListenInUseNamesTheSetting(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	h, _ := testHome(t, "alice", func(c *config.Config) {
		c.Store.Mode = config.StoreMemory
		c.Comms.ListenTCP = ln.Addr().String()
	})
	n, err := Start(h, Options{Mode: ModeServe})
	if err == nil {
		n.Close()
		t.Fatal("the node started on a port another listener holds")
	}
	if !strings.Contains(err.Error(), "comms.listen_tcp") {
		t.Fatalf("error %q does not name comms.listen_tcp", err)
	}
}

// A home open to others is reported by config check as by run: bad_config.
func TestCheckConfigHomeModeIsBadConfig(t *testing.T) {
	h, _ := testHome(t, "alice", func(c *config.Config) { c.Store.Mode = config.StoreMemory })
	if err := os.Chmod(h.Dir, 0o777); err != nil {
		t.Fatal(err)
	}
	defer os.Chmod(h.Dir, 0o700)
	_, err := CheckConfig(h.Dir, nil, nil)
	if CodeOf(err) != CodeBadConfig || !strings.Contains(err.Error(), "chmod 700") {
		t.Fatalf("config check of a home open to others: %v (code %s), want %s with the fix", err, CodeOf(err), CodeBadConfig)
	}
	if _, _, err := OpenHome(h.Dir, OpenOptions{}); CodeOf(err) != CodeBadConfig {
		t.Fatalf("opening it: %v (code %s), want %s as config check says", err, CodeOf(err), CodeBadConfig)
	}
}

// A file that is not a socket at the Unix socket's path fails config
// check: run would refuse it (the listener never removes such a file).
// A socket left there (a killed node's) is fine: run replaces it.
func TestCheckConfigNonSocketAtSocketPath(t *testing.T) {
	h, _ := testHome(t, "alice", func(c *config.Config) { c.Store.Mode = config.StoreMemory })
	sock := filepath.Join(h.Dir, "meerkat.sock")
	if _, err := CheckConfig(h.Dir, nil, nil); err != nil {
		t.Fatalf("config check with nothing at %s: %v", sock, err)
	}
	if err := os.WriteFile(sock, []byte("precious"), 0o600); err != nil {
		t.Fatal(err)
	}
	_, err := CheckConfig(h.Dir, nil, nil)
	if CodeOf(err) != CodeBadConfig || !strings.Contains(err.Error(), sock+" exists and is not a socket") || !strings.Contains(err.Error(), "comms.listen_uds") {
		t.Fatalf("config check with a regular file at %s: %v (%s)", sock, err, CodeOf(err))
	}
	os.Remove(sock)
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	if _, err := CheckConfig(h.Dir, nil, nil); err != nil {
		t.Fatalf("config check with a socket at %s: %v", sock, err)
	}
}

// A Unix socket path whose directory does not exist fails config check
// and the start, naming where the path came from: the variable.
func TestCheckConfigSocketDirNamesItsSource(t *testing.T) {
	h, _ := testHome(t, "alice", func(c *config.Config) { c.Store.Mode = config.StoreMemory })
	env := map[string]string{"MEERKAT_COMMS_LISTEN_UDS": "/nonexistent-meerkat-dir/x.sock"}
	lookup := func(k string) (string, bool) { v, ok := env[k]; return v, ok }
	want := "MEERKAT_COMMS_LISTEN_UDS: comms.listen_uds: the socket's directory /nonexistent-meerkat-dir does not exist"
	if _, err := CheckConfig(h.Dir, lookup, nil); CodeOf(err) != CodeBadConfig || !strings.Contains(err.Error(), want) {
		t.Fatalf("config check: %v, want %q", err, want)
	}
	h2, _, err := OpenHome(h.Dir, OpenOptions{LookupEnv: lookup})
	if err != nil {
		t.Fatal(err)
	}
	if n, err := Start(h2, Options{Mode: ModeServe}); err == nil || !strings.Contains(err.Error(), want) {
		if n != nil {
			n.Close()
		}
		t.Fatalf("start: %v, want %q", err, want)
	}
}
