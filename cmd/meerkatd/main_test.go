package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/meerkatd/meerkatd/config"
	"github.com/meerkatd/meerkatd/identity"
	"github.com/meerkatd/meerkatd/trust"
)

// run executes meerkatd with args in a fresh env whose variables are vars.
func run(t *testing.T, vars map[string]string, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	var out, errb bytes.Buffer
	e := newEnv(&out, &errb, mapEnv(vars))
	code = e.main(args)
	return code, out.String(), errb.String()
}

// id needs a home: on a missing one it says how to make it and creates
// nothing (a mistyped --home must not mint an identity); after init it
// prints the same identity every time.
func TestIDNeedsHomeThenReuses(t *testing.T) {
	home := filepath.Join(t.TempDir(), "node")
	code, _, errOut := run(t, nil, "id", "--home", home)
	if code != exitUsage || !strings.Contains(errOut, "meerkatd init --home "+home) {
		t.Fatalf("id on a missing home: code %d, stderr %q", code, errOut)
	}
	if _, err := os.Stat(home); !os.IsNotExist(err) {
		t.Fatalf("id on a missing home created it: %v", err)
	}
	code, out1, errOut := run(t, nil, "init", "--home", home)
	if code != exitOK || !strings.Contains(errOut, "created") {
		t.Fatalf("init: code %d, stderr %q", code, errOut)
	}
	kp, err := identity.LoadKeypair(home)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{kp.ID().String(), kp.ID().UUID().String(), home} {
		if !strings.Contains(out1, want) {
			t.Errorf("id output %q lacks %q", out1, want)
		}
	}
	for range 2 {
		code, out2, errOut := run(t, nil, "id", "--home", home)
		// init printed the identity id prints, then the next steps.
		if code != exitOK || !strings.HasPrefix(out1, out2+"\nnext steps") || errOut != "" {
			t.Fatalf("id: code %d, out %q (init printed %q), stderr %q", code, out2, out1, errOut)
		}
	}
}

// init of a home made already keeps its meerkat.toml: --name warns
// only when it differs from the name there.
func TestInitAgainWithName(t *testing.T) {
	home := filepath.Join(t.TempDir(), "node")
	if code, _, errOut := run(t, nil, "init", "--home", home, "--name", "alice"); code != exitOK {
		t.Fatalf("init: %d %s", code, errOut)
	}
	for _, c := range []struct {
		name, warn string
	}{{"alice", ""}, {"bob", "warning: --name bob not used"}} {
		code, _, errOut := run(t, nil, "init", "--home", home, "--name", c.name)
		if code != exitOK || !strings.Contains(errOut, "already initialised") || strings.Contains(errOut, "warning") != (c.warn != "") || !strings.Contains(errOut, c.warn) {
			t.Errorf("init --name %s again: code %d, stderr %q, want warning %q", c.name, code, errOut, c.warn)
		}
	}
}

func TestKeygen(t *testing.T) {
	home := t.TempDir()
	if code, _, errOut := run(t, nil, "keygen", "--home", home); code != exitOK {
		t.Fatalf("keygen: %d %s", code, errOut)
	}
	first, err := identity.LoadKeypair(home)
	if err != nil {
		t.Fatal(err)
	}
	code, _, errOut := run(t, nil, "keygen", "--home", home)
	if code != exitUsage || !strings.Contains(errOut, "--force") || !strings.Contains(errOut, "bad_argument") {
		t.Fatalf("keygen over an identity: code %d, stderr %q", code, errOut)
	}
	if again, _ := identity.LoadKeypair(home); again.ID() != first.ID() {
		t.Fatal("refused keygen still replaced the key")
	}
	code, _, errOut = run(t, nil, "keygen", "--home", home, "--force")
	if code != exitOK {
		t.Fatalf("keygen --force: %d %s", code, errOut)
	}
	// The replaced key is named, with what replacing it means.
	if !strings.Contains(errOut, "replaced the identity "+first.ID().String()) || !strings.Contains(errOut, "refuse this node") {
		t.Errorf("keygen --force said %q; want the old key named", errOut)
	}
	if again, _ := identity.LoadKeypair(home); again.ID() == first.ID() {
		t.Fatal("keygen --force kept the old key")
	}
}

// keygen refuses, --force or not, while a daemon serves the home: the
// daemon would go on with the old key, id and status would disagree, and
// its next start would switch identity. Stopped, the daemon is gone and
// keygen --force works.
func TestKeygenRefusedWhileServed(t *testing.T) {
	t.Parallel()
	n := newNode(t, "solo")
	n.start("--listen-uds", "off")
	for _, args := range [][]string{{"keygen", "--force"}, {"keygen"}} {
		n.wantCode(exitError, []string{"a node serves this home", "stop it first", "(unavailable)"}, args...)
	}
	var id struct {
		PubKey string `json:"pubkey"`
	}
	n.okJSON(&id, "id", "--json")
	if id.PubKey != n.key {
		t.Fatalf("a refused keygen changed the key: %s, was %s", id.PubKey, n.key)
	}
	n.stop()
	n.ok("keygen", "--force")
	n.okJSON(&id, "id", "--json")
	if id.PubKey == n.key {
		t.Fatal("keygen --force with the daemon stopped kept the key")
	}
}

// init refuses a home whose path leaves no room for its sockets under
// the system's limit, says to choose a shorter one, and creates nothing.
func TestInitLongHome(t *testing.T) {
	parent, err := os.MkdirTemp("", "mk")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(parent) })
	home := filepath.Join(parent, strings.Repeat("h", 100))
	code, out, errOut := run(t, nil, "init", "--home", home)
	if code != exitUsage || out != "" || !strings.Contains(errOut, "too long") || !strings.Contains(errOut, "at most") || !strings.Contains(errOut, "--home") {
		t.Fatalf("init of a long home: code %d, stdout %q, stderr %q", code, out, errOut)
	}
	if _, err := os.Lstat(home); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("init of a long home created it (%v)", err)
	}
}

func TestHomeResolution(t *testing.T) {
	tests := []struct {
		name string
		vars map[string]string
		flag string
		want string
	}{
		{"flag wins", map[string]string{"MEERKAT_HOME": "/m", "XDG_CONFIG_HOME": "/x", "HOME": "/h"}, "/f", "/f"},
		{"MEERKAT_HOME", map[string]string{"MEERKAT_HOME": "/m", "XDG_CONFIG_HOME": "/x", "HOME": "/h"}, "", "/m"},
		{"XDG_CONFIG_HOME", map[string]string{"XDG_CONFIG_HOME": "/x", "HOME": "/h"}, "", "/x/meerkat"},
		{"relative XDG_CONFIG_HOME is ignored", map[string]string{"XDG_CONFIG_HOME": "x", "HOME": "/h"}, "", "/h/.config/meerkat"},
		{"HOME", map[string]string{"HOME": "/h"}, "", "/h/.config/meerkat"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(nil, nil, mapEnv(tc.vars))
			got, err := e.homeDir(tc.flag)
			if err != nil || got != tc.want {
				t.Fatalf("homeDir = %q, %v; want %q", got, err, tc.want)
			}
		})
	}
	e := newEnv(nil, nil, mapEnv(nil))
	if _, err := e.homeDir(""); err == nil || !strings.Contains(err.Error(), "--home") {
		t.Fatalf("no home at all: %v", err)
	}
}

func TestUsageErrors(t *testing.T) {
	tests := []struct {
		args   []string
		code   int
		stderr string
	}{
		{nil, exitUsage, "commands:"},
		{[]string{"frobnicate"}, exitUsage, `unknown command "frobnicate"`},
		{[]string{"id", "extra"}, exitUsage, "want no arguments"},
		{[]string{"id", "--bogus"}, exitUsage, "unknown flag --bogus"},
		{[]string{"id", "--jsno"}, exitUsage, "unknown flag --jsno (did you mean --json?)"},
		{[]string{"sned", "message", "bob", "hi"}, exitUsage, `unknown command "sned": did you mean send?`},
		{[]string{"help", "nope"}, exitUsage, `unknown command "nope"`},
		// A revoke that names nothing to take back is the command line's
		// fault, with the usage line, as a grant without capabilities is.
		{[]string{"space", "revoke", "build", "proposer"}, exitUsage, "space revoke needs --grant-id ID or the capabilities to take back\nusage: meerkatd space "},
		{[]string{"space", "grant", "build", "proposer"}, exitUsage, "\nusage: meerkatd space "},
	}
	for _, tc := range tests {
		code, _, errOut := run(t, nil, tc.args...)
		if code != tc.code || !strings.Contains(errOut, tc.stderr) {
			t.Errorf("%q: code %d, stderr %q; want %d and %q", tc.args, code, errOut, tc.code, tc.stderr)
		}
	}
}

func TestHelp(t *testing.T) {
	code, out, _ := run(t, nil, "--help")
	if code != exitOK {
		t.Fatalf("--help exit %d", code)
	}
	for name := range commandTable() {
		if !strings.Contains(out, "  "+name+" ") {
			t.Errorf("help does not list %q", name)
		}
	}
	code, out, _ = run(t, nil, "help", "keygen")
	if code != exitOK || !strings.Contains(out, "--force") {
		t.Fatalf("help keygen: %d %q", code, out)
	}
	code, out, _ = run(t, nil, "keygen", "-h")
	if code != exitOK || !strings.Contains(out, "-force") {
		t.Fatalf("keygen -h: %d %q", code, out)
	}
	code, out, _ = run(t, nil, "version")
	if code != exitOK || !strings.HasPrefix(out, "meerkatd ") {
		t.Fatalf("version: %d %q", code, out)
	}
}

// help COMMAND SUBCOMMAND with a subcommand COMMAND does not have fails
// like help with an unknown command and like COMMAND with an unknown
// subcommand: exit 2, bad_argument, no help on stdout; with --json the
// JSON error. Known subcommands still get the command's help.
func TestHelpUnknownSubcommand(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"help", "peers", "bogus"}, `unknown peers subcommand "bogus" (want list, add, remove or discover)`},
		{[]string{"help", "send", "telegram"}, `unknown send subcommand "telegram" (want message, request or response)`},
		{[]string{"help", "tell", "x"}, `tell has no subcommands, got "x"`},
	} {
		code, out, errOut := run(t, nil, tc.args...)
		if code != exitUsage || out != "" || !strings.HasPrefix(errOut, "meerkatd help: "+tc.want+"\nusage: meerkatd help ") {
			t.Errorf("%q: exit %d, stdout %q, stderr %q; want exit %d and %q", tc.args, code, out, errOut, exitUsage, tc.want)
		}
		code, out, errOut = run(t, nil, append(tc.args, "--json")...)
		var doc struct {
			Error struct{ Code, Message string } `json:"error"`
		}
		if err := json.Unmarshal([]byte(out), &doc); err != nil || code != exitUsage || doc.Error.Code != "bad_argument" || doc.Error.Message != tc.want {
			t.Errorf("%q --json: exit %d, stdout %q (%v), stderr %q; want exit %d and a bad_argument JSON error", tc.args, code, out, err, errOut, exitUsage)
		}
	}
	for _, args := range [][]string{{"help", "peers", "list"}, {"help", "send", "message"}, {"help", "completion", "zsh"}, {"help", "space", "proposals"}, {"help", "peers", "--json"}} {
		if code, out, errOut := run(t, nil, args...); code != exitOK || !strings.HasPrefix(out, "usage: meerkatd "+args[1]+" ") || errOut != "" {
			t.Errorf("%q: exit %d, stdout %q, stderr %q; want the command's help", args, code, out, errOut)
		}
	}
}

func TestUnsafeKeyFileIsReported(t *testing.T) {
	home := t.TempDir()
	if code, _, _ := run(t, nil, "init", "--home", home); code != exitOK {
		t.Fatal("init failed")
	}
	if err := os.Chmod(filepath.Join(home, identity.KeyFile), 0o644); err != nil {
		t.Fatal(err)
	}
	code, _, errOut := run(t, nil, "id", "--home", home)
	if code != exitError || !strings.Contains(errOut, "chmod 600") {
		t.Fatalf("world-readable key: code %d, stderr %q", code, errOut)
	}
}

// config check reports the files of the home that another user could
// write, each with its fix, as the daemon refuses them at start.
func TestConfigCheckReportsUnsafeFiles(t *testing.T) {
	home := t.TempDir()
	if code, _, _ := run(t, nil, "init", "--home", home); code != exitOK {
		t.Fatal("init failed")
	}
	if code, out, errOut := run(t, nil, "config", "check", "--home", home); code != exitOK {
		t.Fatalf("config check of a fresh home: %d %q %q", code, out, errOut)
	}
	for _, name := range []string{trust.FileName, config.FileName} {
		if err := os.Chmod(filepath.Join(home, name), 0o664); err != nil {
			t.Fatal(err)
		}
	}
	code, _, errOut := run(t, nil, "config", "check", "--home", home)
	for _, name := range []string{trust.FileName, config.FileName} {
		if want := "chmod 600 " + filepath.Join(home, name); code != exitError || !strings.Contains(errOut, want) {
			t.Errorf("config check with a group-writable %s: code %d, stderr %q, want %q", name, code, errOut, want)
		}
	}
	for _, name := range []string{trust.FileName, config.FileName} {
		if err := os.Chmod(filepath.Join(home, name), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Chmod(home, 0o777); err != nil {
		t.Fatal(err)
	}
	code, _, errOut = run(t, nil, "config", "check", "--home", home)
	if want := "chmod 700 " + home; code != exitError || !strings.Contains(errOut, want) {
		t.Fatalf("config check of a world-writable home: code %d, stderr %q, want %q", code, errOut, want)
	}
}

func mapEnv(vars map[string]string) func(string) (string, bool) {
	return func(k string) (string, bool) {
		v, ok := vars[k]
		return v, ok
	}
}

func TestCPUProfileVariable(t *testing.T) {
	dir := t.TempDir()
	code, _, stderr := run(t, map[string]string{"MEERKATD_CPUPROFILE": filepath.Join(dir, "p-%p.prof")}, "version")
	if code != exitOK {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	matches, _ := filepath.Glob(filepath.Join(dir, "p-*.prof"))
	if len(matches) != 1 || strings.Contains(matches[0], "%p") {
		t.Fatalf("profiles written: %v", matches)
	}
	if fi, err := os.Stat(matches[0]); err != nil || fi.Size() == 0 {
		t.Fatalf("profile %v, %v", fi, err)
	}
	code, _, stderr = run(t, map[string]string{"MEERKATD_CPUPROFILE": filepath.Join(dir, "missing", "p.prof")}, "version")
	if code != exitError || !strings.Contains(stderr, "MEERKATD_CPUPROFILE") {
		t.Fatalf("unwritable profile path: exit %d, %s", code, stderr)
	}
}

// With --json every failure is also a JSON object on stdout, with the
// API's error code, printed once.
func TestJSONErrors(t *testing.T) {
	home := t.TempDir()
	if code, _, errOut := run(t, nil, "init", "--home", home); code != exitOK {
		t.Fatalf("init: %s", errOut)
	}
	for _, tc := range []struct {
		args []string
		exit int
		code string
	}{
		{[]string{"peers", "remove", "nobody"}, exitUnknownPeer, "unknown_peer"},
		{[]string{"id", "extra"}, exitUsage, "bad_argument"},
		{[]string{"send", "message", "carol", "hi"}, exitUnknownPeer, "unknown_peer"},
		{[]string{"inbox", "--ack"}, exitNoDaemon, "no_daemon"},
		{[]string{"status", "--home", filepath.Join(home, "missing")}, exitUsage, "no_home"},
	} {
		args := append(tc.args, "--json")
		if !slices.Contains(args, "--home") {
			args = append(args, "--home", home)
		}
		code, out, errOut := run(t, nil, args...)
		var got struct {
			Error struct{ Code, Message string } `json:"error"`
		}
		dec := json.NewDecoder(strings.NewReader(out))
		if err := dec.Decode(&got); err != nil || dec.More() {
			t.Errorf("%q: stdout is not one JSON object (%v): %q", args, err, out)
			continue
		}
		if code != tc.exit || got.Error.Code != tc.code || got.Error.Message == "" {
			t.Errorf("%q: exit %d, %+v (stderr %q); want exit %d, code %s", args, code, got, errOut, tc.exit, tc.code)
		}
	}
}

// A command that fails with --json prints {"error": {"code", "message"}}
// on stdout (docs/cli.md), whichever command it is and however it fails.
func TestJSONFailures(t *testing.T) {
	home := t.TempDir()
	if code, _, errOut := run(t, nil, "init", "--home", home); code != exitOK {
		t.Fatalf("init: %s", errOut)
	}
	missing := filepath.Join(t.TempDir(), "nohome")
	for _, tc := range []struct {
		args []string
		code string
		exit int
	}{
		{[]string{"peers", "list", "--json", "--home", missing}, "no_home", exitUsage},
		{[]string{"outbox", "--home", missing, "--json=true"}, "no_home", exitUsage},
		{[]string{"config", "check", "--json", "--home", missing}, "no_home", exitUsage},
		{[]string{"id", "--json", "--home", ""}, "bad_argument", exitUsage},
		{[]string{"bogus", "--json"}, "bad_argument", exitUsage},
		{[]string{"task", "wait", "t1", "--wait", "20m", "--json", "--home", home}, "bad_argument", exitUsage},
		{[]string{"config", "show", "--listen-tcp", "bogus", "--json", "--home", home}, "bad_argument", exitUsage},
		{[]string{"config", "show", "--listen-uds", "relative.sock", "--json", "--home", home}, "bad_argument", exitUsage},
		{[]string{"init", "--name", "bad name", "--json", "--home", missing}, "bad_argument", exitUsage},
		{[]string{"init", "--json", "--home="}, "bad_argument", exitUsage},
		{[]string{"config", "show", "--json", "--home", missing}, "no_home", exitUsage},
		{[]string{"deadletters", "retry", "not-an-id", "--json", "--home", home}, "bad_argument", exitUsage},
		{[]string{"outbox", "retry", "--json", "--home", home}, "no_daemon", exitNoDaemon},
		{[]string{"outbox", "retry", "a", "b", "--json", "--home", home}, "bad_argument", exitUsage},
		{[]string{"outbox", "flush", "--json", "--home", home}, "bad_argument", exitUsage},
		{[]string{"peers", "remove", "nobody", "--json", "--home", home}, "unknown_peer", exitUnknownPeer},
		{[]string{"id", "extra", "-json", "--home", home}, "bad_argument", exitUsage},
		{[]string{"send", "message", "bob", "--json", "--home", home}, "bad_argument", exitUsage},
	} {
		code, out, errOut := run(t, nil, tc.args...)
		var doc struct {
			Error struct {
				Code    string `json:"code"`
				Message string `json:"message"`
			} `json:"error"`
		}
		if err := json.Unmarshal([]byte(out), &doc); err != nil || code != tc.exit || doc.Error.Code != tc.code || doc.Error.Message == "" {
			t.Errorf("%q: exit %d, stdout %q (%v), stderr %q; want exit %d and a JSON error %s", tc.args, code, out, err, errOut, tc.exit, tc.code)
		}
	}
	if _, err := os.Stat(missing); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("commands on a missing home created it (%v)", err)
	}
	// Without --json, and after --, stdout stays empty.
	for _, args := range [][]string{{"peers", "remove", "nobody", "--home", home}, {"send", "message", "bob", "--home", home, "--", "--json"}} {
		if _, out, _ := run(t, nil, args...); out != "" {
			t.Errorf("%q printed %q on stdout", args, out)
		}
	}
}

// An empty --home is refused, before or after the command, rather than
// taken for the default home ($MEERKAT_HOME here); a dangling link in
// place of the key is reported as such, not as a missing home.
func TestEmptyHomeAndDanglingKey(t *testing.T) {
	home := t.TempDir()
	if code, _, errOut := run(t, nil, "init", "--home", home); code != exitOK {
		t.Fatalf("init: %s", errOut)
	}
	vars := map[string]string{"MEERKAT_HOME": home}
	for _, args := range [][]string{{"--home", "", "id"}, {"--home=", "id"}, {"id", "--home", ""}, {"id", "--home="}} {
		code, out, errOut := run(t, vars, args...)
		if code != exitUsage || out != "" || !strings.Contains(errOut, "not an empty string") {
			t.Errorf("%q: exit %d, stdout %q, stderr %q; want exit %d refusing the empty home", args, code, out, errOut, exitUsage)
		}
	}
	dir := filepath.Join(t.TempDir(), "broken")
	if err := os.Mkdir(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(filepath.Join(dir, "gone"), filepath.Join(dir, identity.KeyFile)); err != nil {
		t.Fatal(err)
	}
	code, _, errOut := run(t, nil, "id", "--home", dir)
	if code != exitError || !strings.Contains(errOut, "symbolic link") {
		t.Errorf("dangling key link: exit %d, stderr %q; want exit %d naming the link", code, errOut, exitError)
	}
}

// A send that fails after its envelope got an id prints, with --json, one
// object holding both: the id (to look it up later) and the error's code
// and message.
func TestJSONSendFailureCarriesTheError(t *testing.T) {
	home := t.TempDir()
	if code, _, errOut := run(t, nil, "init", "--home", home); code != exitOK {
		t.Fatalf("init: %s", errOut)
	}
	peer, err := identity.GenerateKeypair()
	if err != nil {
		t.Fatal(err)
	}
	nobody := "uds://" + filepath.Join(t.TempDir(), "nobody.sock")
	if code, _, errOut := run(t, nil, "peers", "add", "bob", peer.ID().String(), nobody, "--home", home); code != exitOK {
		t.Fatalf("peers add: %s", errOut)
	}
	code, out, errOut := run(t, nil, "send", "message", "bob", "hi", "--json", "--home", home)
	var got struct {
		ID    string `json:"id"`
		Error struct{ Code, Message string }
	}
	dec := json.NewDecoder(strings.NewReader(out))
	if err := dec.Decode(&got); err != nil || dec.More() {
		t.Fatalf("stdout is not one JSON object (%v): %q (stderr %q)", err, out, errOut)
	}
	if code != exitPeerOffline || got.ID == "" || got.Error.Code != "peer_offline" || got.Error.Message == "" {
		t.Fatalf("exit %d, %+v; want exit %d, the envelope's id and error peer_offline", code, got, exitPeerOffline)
	}
}

// run with a bad flag value exits 2 and leaves no home behind.
func TestRunBadFlagCreatesNothing(t *testing.T) {
	missing := filepath.Join(t.TempDir(), "nohome")
	for _, args := range [][]string{{"--listen-tcp", "bogus"}, {"--listen-tcp", "127.0.0.1:99999"}, {"--listen-uds", "relative.sock"}} {
		code, _, errOut := run(t, nil, append([]string{"run", "--home", missing}, args...)...)
		if code != exitUsage || !strings.Contains(errOut, "bad_argument") {
			t.Errorf("run %q: exit %d, stderr %q; want exit %d, bad_argument", args, code, errOut, exitUsage)
		}
		if _, err := os.Stat(missing); !errors.Is(err, fs.ErrNotExist) {
			t.Fatalf("run %q created the home (%v)", args, err)
		}
	}
}

// config check reports a seed that other users may read, as the node
// refuses it at start.
func TestConfigCheckReportsReadableKey(t *testing.T) {
	home := t.TempDir()
	if code, _, errOut := run(t, nil, "init", "--home", home); code != exitOK {
		t.Fatalf("init: %s", errOut)
	}
	key := filepath.Join(home, identity.KeyFile)
	if err := os.Chmod(key, 0o640); err != nil {
		t.Fatal(err)
	}
	code, _, errOut := run(t, nil, "config", "check", "--home", home)
	if code == exitOK || !strings.Contains(errOut, key) || !strings.Contains(errOut, "chmod 600") {
		t.Fatalf("config check with a group-readable key: exit %d, stderr %q", code, errOut)
	}
}
