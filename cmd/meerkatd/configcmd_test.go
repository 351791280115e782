package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/meerkatd/meerkatd/config"
)

// runEnviron is run with the process environment given as vars, so the
// unknown-variable checks see them.
func runEnviron(t *testing.T, vars map[string]string, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	var out, errb bytes.Buffer
	e := newEnv(&out, &errb, mapEnv(vars))
	e.environ = func() []string {
		var kv []string
		for k, v := range vars {
			kv = append(kv, k+"="+v)
		}
		return kv
	}
	code = e.main(args)
	return code, out.String(), errb.String()
}

// config check fails on a MEERKAT_* variable that is no setting, naming
// the nearest one; MEERKAT_HOME, which the command reads itself, is not
// reported.
func TestConfigCheckUnknownVariable(t *testing.T) {
	home := t.TempDir()
	if code, _, errOut := run(t, nil, "init", "--home", home); code != exitOK {
		t.Fatalf("init: %d %s", code, errOut)
	}
	vars := map[string]string{"MEERKAT_HOME": home, "MEERKAT_COMMS_ACK_TIMEOUT": "5"}
	if code, out, errOut := runEnviron(t, vars, "config", "check"); code != exitOK || !strings.HasPrefix(out, "ok: ") {
		t.Fatalf("config check with known variables: code %d, %q, %q", code, out, errOut)
	}
	vars["MEERKAT_COMMS_ACK_TIMOUT"] = "5"
	code, out, errOut := runEnviron(t, vars, "config", "check")
	want := "MEERKAT_COMMS_ACK_TIMOUT: unknown setting; did you mean MEERKAT_COMMS_ACK_TIMEOUT?"
	if code == exitOK || !strings.Contains(errOut, want) || strings.Contains(errOut, "MEERKAT_HOME") || out != "" {
		t.Fatalf("config check with a misspelt variable: code %d, stdout %q, stderr %q", code, out, errOut)
	}
	code, out, _ = runEnviron(t, vars, "config", "check", "--json")
	if code != exitError || !strings.Contains(out, want) || !strings.Contains(out, `"code": "bad_config"`) {
		t.Fatalf("config check --json: code %d, %q; want exit %d, code bad_config", code, out, exitError)
	}
	// Other commands warn and go on.
	code, out, errOut = runEnviron(t, vars, "id")
	if code != exitOK || !strings.Contains(errOut, "warning: "+want) || !strings.Contains(out, "ed25519:") {
		t.Fatalf("id: code %d, stdout %q, stderr %q", code, out, errOut)
	}
	// config show warns but shows.
	code, out, errOut = runEnviron(t, vars, "config", "show")
	if code != exitOK || !strings.Contains(errOut, "warning: "+want) || !strings.Contains(out, "comms.ack_timeout_secs") {
		t.Fatalf("config show: code %d, stdout %q, stderr %q", code, out, errOut)
	}
}

// config show prints every key with its value and its source: default,
// meerkat.toml, a variable or a flag, the later winning.
func TestConfigShow(t *testing.T) {
	home := t.TempDir()
	if code, _, errOut := run(t, nil, "init", "--home", home); code != exitOK {
		t.Fatalf("init: %d %s", code, errOut)
	}
	path := filepath.Join(home, config.FileName)
	// A file setting three keys only, so the others are defaults.
	if err := os.WriteFile(path, []byte("name = \"n1\"\n[comms]\nack_timeout_secs = 9\nlisten_tcp = \"127.0.0.1:4300\"\n[log]\nlevel = \"debug\"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	vars := map[string]string{"MEERKAT_LOG_LEVEL": "warn", "MEERKAT_COMMS_INBOX_MAX": "77"}
	code, out, errOut := runEnviron(t, vars, "config", "show", "--home", home, "--json", "--listen-tcp", "127.0.0.1:4400", "--log-format", "json")
	if code != exitOK || errOut != "" {
		t.Fatalf("config show: code %d, stderr %q", code, errOut)
	}
	var got struct {
		Config   string           `json:"config"`
		Settings []config.Setting `json:"settings"`
	}
	if err := json.Unmarshal([]byte(out), &got); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	if got.Config != path || len(got.Settings) != len(config.Keys()) {
		t.Fatalf("config %q, %d settings (want %d)", got.Config, len(got.Settings), len(config.Keys()))
	}
	want := map[string][2]string{
		"name":                   {`"n1"`, path},
		"comms.ack_timeout_secs": {"9", path},
		"comms.listen_tcp":       {`"127.0.0.1:4400"`, "--listen-tcp"},
		"comms.inbox_max":        {"77", "MEERKAT_COMMS_INBOX_MAX"},
		"log.level":              {`"warn"`, "MEERKAT_LOG_LEVEL"},
		"log.format":             {`"json"`, "--log-format"},
		"comms.listen_uds":       {`""`, config.SourceDefault},
		"store.mode":             {`"sqlite"`, config.SourceDefault},
	}
	for _, s := range got.Settings {
		if w, ok := want[s.Key]; ok {
			if s.Value != w[0] || s.Source != w[1] {
				t.Errorf("%s = %s from %s, want %s from %s", s.Key, s.Value, s.Source, w[0], w[1])
			}
			delete(want, s.Key)
		}
	}
	if len(want) > 0 {
		t.Errorf("keys not shown: %v", want)
	}
	// The table has a row per key with its source.
	code, out, _ = runEnviron(t, vars, "config", "show", "--home", home)
	if code != exitOK || !strings.Contains(out, "KEY") || !strings.Contains(out, "MEERKAT_COMMS_INBOX_MAX") ||
		strings.Count(out, "\n") != len(config.Keys())+1 {
		t.Fatalf("config show table: code %d:\n%s", code, out)
	}
	for _, args := range [][]string{
		{"config", "show", "--home", home, "--log-level", "loud"},
		{"config", "show", "--home", home, "--log-format", "xml"},
		{"config", "check", "--home", home, "--log-level", "debug"},
		{"config", "dump", "--home", home},
	} {
		if code, _, _ := runEnviron(t, nil, args...); code != exitUsage {
			t.Errorf("%v: code %d, want %d", args, code, exitUsage)
		}
	}
}

// config show prints the settings also when they do not validate, then
// fails naming the variable the bad value came from.
func TestConfigShowInvalid(t *testing.T) {
	home := t.TempDir()
	if code, _, errOut := run(t, nil, "init", "--home", home); code != exitOK {
		t.Fatalf("init: %d %s", code, errOut)
	}
	vars := map[string]string{"MEERKAT_COMMS_ACK_TIMEOUT": "0"}
	want := "MEERKAT_COMMS_ACK_TIMEOUT: comms.ack_timeout_secs: must be between 1 and 604800, got 0"
	code, out, errOut := runEnviron(t, vars, "config", "show", "--home", home)
	if code != exitError || !strings.Contains(errOut, want) || strings.Count(out, "\n") != len(config.Keys())+1 ||
		!strings.Contains(out, "MEERKAT_COMMS_ACK_TIMEOUT") {
		t.Fatalf("config show: code %d, stdout %q, stderr %q", code, out, errOut)
	}
	code, out, errOut = runEnviron(t, vars, "config", "show", "--home", home, "--json")
	var got struct {
		Settings []config.Setting `json:"settings"`
		Error    struct {
			Code, Message string
		} `json:"error"`
	}
	if err := json.Unmarshal([]byte(out), &got); err != nil || code != exitError || len(got.Settings) != len(config.Keys()) || !strings.Contains(errOut+got.Error.Message, want) || got.Error.Code != "bad_config" {
		t.Fatalf("config show --json: code %d, %v, stdout %q, stderr %q", code, err, out, errOut)
	}
}

// config check refuses a spaces.json that run refuses.
func TestConfigCheckSpaces(t *testing.T) {
	home := t.TempDir()
	if code, _, errOut := run(t, nil, "init", "--home", home); code != exitOK {
		t.Fatalf("init: %d %s", code, errOut)
	}
	bad := `{"spaces": [{"name": "s", "members": [{"id": "a", "key": "ed25519:AAAA"}]}]}`
	if err := os.WriteFile(filepath.Join(home, "spaces.json"), []byte(bad), 0o600); err != nil {
		t.Fatal(err)
	}
	code, out, errOut := run(t, nil, "config", "check", "--home", home)
	if code != exitError || out != "" || !strings.Contains(errOut, "key must be 32 bytes") || !strings.Contains(errOut, "spaces.json") {
		t.Fatalf("config check: code %d, stdout %q, stderr %q", code, out, errOut)
	}
}

// config check of a home whose meerkat.toml went missing passes (the
// defaults apply) but says that the node now runs on them, under the
// default name, also beside another note; with the file there, no such
// note.
func TestConfigCheckMissingConfig(t *testing.T) {
	home := t.TempDir()
	if code, _, errOut := run(t, nil, "init", "--home", home, "--name", "alice"); code != exitOK {
		t.Fatalf("init: %d %s", code, errOut)
	}
	const note = `meerkat.toml is absent though the home has an identity: the node runs on the defaults and MEERKAT_* variables, named `
	if code, out, errOut := run(t, nil, "config", "check", "--home", home); code != exitOK || strings.Contains(out, note) {
		t.Fatalf("config check with meerkat.toml: code %d, stdout %q, stderr %q", code, out, errOut)
	}
	if err := os.Remove(filepath.Join(home, "meerkat.toml")); err != nil {
		t.Fatal(err)
	}
	code, out, errOut := run(t, nil, "config", "check", "--home", home)
	if code != exitOK || !strings.Contains(out, "(absent: the defaults apply)") || !strings.Contains(out, "note: "+note+`"meerkat"`) {
		t.Fatalf("config check without meerkat.toml: code %d, stdout %q, stderr %q", code, out, errOut)
	}
	// Another note (plaintext refused) does not push it out.
	vars := map[string]string{"MEERKAT_HOME": home, "MEERKAT_COMMS_TCP_PLAINTEXT": "refuse", "MEERKAT_NAME": "bob"}
	if code, out, errOut := runEnviron(t, vars, "config", "check"); code != exitOK || !strings.Contains(out, note+`"bob"`) {
		t.Fatalf("config check without meerkat.toml, plaintext refused: code %d, stdout %q, stderr %q", code, out, errOut)
	}
}

// A configuration or a home file that stops config check stops the
// other commands with the same code: the message ends (bad_config) and
// --json has the code, exit 1.
func TestBadConfigCodeEverywhere(t *testing.T) {
	home := t.TempDir()
	if code, _, errOut := run(t, nil, "init", "--home", home); code != exitOK {
		t.Fatalf("init: %d %s", code, errOut)
	}
	vars := map[string]string{"MEERKAT_AUDIT_MAX_BYTES": "600"}
	for _, args := range [][]string{{"run"}, {"status"}, {"inbox"}, {"send", "message", "nobody", "hi"}} {
		args = append(args, "--home", home)
		code, _, errOut := runEnviron(t, vars, args...)
		if code != exitError || !strings.Contains(errOut, "audit.max_bytes") || !strings.HasSuffix(strings.TrimSpace(errOut), "(bad_config)") {
			t.Errorf("%v with a bad variable: code %d, stderr %q; want exit %d ending (bad_config)", args, code, errOut, exitError)
		}
		if args[0] == "run" {
			continue // run has no --json
		}
		code, out, _ := runEnviron(t, vars, append(args, "--json")...)
		if code != exitError || !strings.Contains(out, `"code": "bad_config"`) {
			t.Errorf("%v --json with a bad variable: code %d, stdout %q", args, code, out)
		}
	}
	key := filepath.Join(home, "identity.key")
	if err := os.Chmod(key, 0o644); err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{{"run"}, {"status"}} {
		code, _, errOut := run(t, nil, append(args, "--home", home)...)
		if code != exitError || !strings.Contains(errOut, "chmod 600") || !strings.HasSuffix(strings.TrimSpace(errOut), "(bad_config)") {
			t.Errorf("%v with a key open to others: code %d, stderr %q", args, code, errOut)
		}
	}
}

// A UDS listener in a directory that does not exist (or is a file) fails
// config check, as run would fail to bind it, and run says why.
func TestConfigCheckSocketDir(t *testing.T) {
	home := t.TempDir()
	if code, _, errOut := run(t, nil, "init", "--home", home); code != exitOK {
		t.Fatalf("init: %d %s", code, errOut)
	}
	file := filepath.Join(home, "f")
	if err := os.WriteFile(file, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct{ sock, want string }{
		{filepath.Join(home, "nodir", "x.sock"), "does not exist"},
		{filepath.Join(file, "x.sock"), "is not a directory"},
	} {
		vars := map[string]string{"MEERKAT_COMMS_LISTEN_UDS": c.sock}
		for _, cmd := range []string{"config check", "run"} {
			code, _, errOut := runEnviron(t, vars, append(strings.Fields(cmd), "--home", home)...)
			if code != exitError || !strings.Contains(errOut, "comms.listen_uds: ") || !strings.Contains(errOut, c.want) {
				t.Errorf("%s with listen_uds %s: code %d, stderr %q; want exit %d saying %q", cmd, c.sock, code, errOut, exitError, c.want)
			}
		}
	}
	vars := map[string]string{"MEERKAT_COMMS_LISTEN_UDS": filepath.Join(home, "s.sock")}
	if code, out, errOut := runEnviron(t, vars, "config", "check", "--home", home); code != exitOK || !strings.HasPrefix(out, "ok: ") {
		t.Errorf("config check with the socket in the home: code %d, %q %q", code, out, errOut)
	}
}

// config check of a missing home whose path is too long for its sockets
// says the path is too long (bad_argument), not to create it with an
// init that would refuse the same path.
func TestConfigCheckMissingLongHome(t *testing.T) {
	home := filepath.Join(t.TempDir(), strings.Repeat("x", 120))
	code, _, errOut := run(t, nil, "config", "check", "--home", home)
	if code != exitUsage || !strings.Contains(errOut, "too long") || !strings.HasSuffix(strings.TrimSpace(errOut), "(bad_argument)") || strings.Contains(errOut, "meerkatd init") {
		t.Errorf("config check of a missing, too long home: code %d, stderr %q", code, errOut)
	}
	// Nor do the other commands that need a home.
	for _, cmd := range []string{"status", "id", "peers list", "inbox"} {
		code, _, errOut := run(t, nil, append(strings.Fields(cmd), "--home", home)...)
		if code == exitOK || !strings.Contains(errOut, "none can be made there") || !strings.Contains(errOut, "too long") || strings.Contains(errOut, "meerkatd init") {
			t.Errorf("%s of a missing, too long home: code %d, stderr %q", cmd, code, errOut)
		}
	}
}

// An empty or damaged meerkat.db stops config check and run alike,
// saying what to do, where config check said ok and run started over
// with an empty store (an empty file) or failed without a fix.
func TestConfigCheckDatabase(t *testing.T) {
	home := t.TempDir()
	if code, _, errOut := run(t, nil, "init", "--home", home); code != exitOK {
		t.Fatalf("init: %d %s", code, errOut)
	}
	db := filepath.Join(home, "meerkat.db")
	for _, c := range []struct {
		content []byte
		want    string
	}{
		{nil, "the database file is empty"},
		{[]byte(strings.Repeat("not a database ", 500)), "the database is damaged"},
	} {
		if err := os.WriteFile(db, c.content, 0o600); err != nil {
			t.Fatal(err)
		}
		for _, cmd := range []string{"config check", "run", "inbox"} {
			code, _, errOut := run(t, nil, append(strings.Fields(cmd), "--home", home)...)
			if code != exitError || !strings.Contains(errOut, c.want) || !strings.Contains(errOut, "backup") || !strings.HasSuffix(strings.TrimSpace(errOut), "(bad_config)") {
				t.Errorf("%s with %q: code %d, stderr %q", cmd, c.want, code, errOut)
			}
		}
		if b, _ := os.ReadFile(db); string(b) != string(c.content) {
			t.Errorf("the %s file was changed", c.want)
		}
	}
	// A -wal without its database.
	os.Remove(db)
	if err := os.WriteFile(db+"-wal", []byte(strings.Repeat("log ", 100)), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, cmd := range []string{"config check", "run", "inbox"} {
		code, _, errOut := run(t, nil, append(strings.Fields(cmd), "--home", home)...)
		if code != exitError || !strings.Contains(errOut, "missing but its -wal file is there") || !strings.HasSuffix(strings.TrimSpace(errOut), "(bad_config)") {
			t.Errorf("%s with a -wal alone: code %d, stderr %q", cmd, code, errOut)
		}
	}
	if _, err := os.Stat(db); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("a database was made beside the -wal: %v", err)
	}
}

// With a daemon serving the home, config check opens the database but
// does not read it through (that would hold up the daemon's checkpoints),
// and says so; without one it says nothing of the kind.
func TestConfigCheckNotesServedDatabase(t *testing.T) {
	t.Parallel()
	n := newNode(t, "alice")
	if out := n.ok("config", "check"); strings.Contains(out, "note:") {
		t.Errorf("config check without a daemon: %q", out)
	}
	n.start()
	out := n.ok("config", "check")
	if !strings.HasPrefix(out, "ok: ") || !strings.Contains(out, "note: a daemon serves this home") {
		t.Errorf("config check with a daemon: %q", out)
	}
	var j struct {
		OK   bool   `json:"ok"`
		Note string `json:"note"`
	}
	n.okJSON(&j, "config", "check", "--json")
	if !j.OK || !strings.Contains(j.Note, "stop the daemon for the full check") {
		t.Errorf("config check --json with a daemon: %+v", j)
	}
}

// Without a daemon, inbox reads the stored inbox and says so; a home
// whose inbox lives in the daemon's memory has none to read, and inbox
// (outbox, deadletters) says only that.
func TestInboxWithoutDaemonNamesItsSource(t *testing.T) {
	home := t.TempDir()
	if code, _, errOut := run(t, nil, "init", "--home", home); code != exitOK {
		t.Fatalf("init: %d %s", code, errOut)
	}
	vars := map[string]string{"MEERKAT_HOME": home}
	if code, _, errOut := runEnviron(t, vars, "inbox"); code != exitOK || !strings.Contains(errOut, "reading the stored inbox") {
		t.Fatalf("inbox of a SQLite home without a daemon: exit %d, stderr %q", code, errOut)
	}
	vars["MEERKAT_STORE_MODE"] = "memory"
	code, _, errOut := runEnviron(t, vars, "inbox")
	if code != exitNoDaemon || strings.Contains(errOut, "reading the stored inbox") || !strings.Contains(errOut, "lives in the daemon's memory") {
		t.Fatalf("inbox of a memory home without a daemon: exit %d, stderr %q", code, errOut)
	}
	// So do the outbox and the dead letters: a listing, not a send.
	for _, cmd := range []string{"outbox", "deadletters"} {
		code, _, errOut := runEnviron(t, vars, cmd)
		if code != exitNoDaemon || strings.Contains(errOut, "reliable send") || !strings.Contains(errOut, "live in the daemon's memory") {
			t.Errorf("%s of a memory home without a daemon: exit %d, stderr %q", cmd, code, errOut)
		}
	}
}
