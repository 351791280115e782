package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"unicode/utf8"

	"github.com/meerkatd/meerkatd/comms/node"
	"github.com/meerkatd/meerkatd/comms/wire"
	"github.com/meerkatd/meerkatd/identity"
)

// The CLI's acceptance tests: help, the home, large and hostile bodies,
// error messages and the untrusted-sender hint, each driven through the
// built binary.

// mkTemp returns a new empty directory with a short path (Unix socket
// paths under it must stay short), removed at the end of the test.
func mkTemp(t *testing.T) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "mk")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	return dir
}

// runIn runs meerkatd args with baseEnv() plus env (later entries win),
// stdin (nil: empty) and working directory dir ("": this one). Unlike
// testNode.run it adds no --home. It is safe to call from any goroutine.
func runIn(env []string, dir string, stdin io.Reader, args ...string) result {
	bin, err := meerkatdBinary()
	if err != nil {
		return result{args: args, code: -1, stderr: err.Error()}
	}
	ctx, cancel := context.WithTimeout(context.Background(), cmdTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Env = append(baseEnv(), env...)
	cmd.Dir = dir
	cmd.Stdin = stdin
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err = cmd.Run()
	r := result{args: args, stdout: out.String(), stderr: errb.String()}
	var ee *exec.ExitError
	switch {
	case err == nil:
	case errors.As(err, &ee) && ee.Exited():
		r.code = ee.ExitCode()
	default:
		r.code = -1
		r.stderr += "\n(test harness: " + err.Error() + ")"
	}
	return r
}

// runStdin runs meerkatd args --home <home> with stdin.
func (n *testNode) runStdin(stdin io.Reader, args ...string) result {
	return runIn(n.env, "", stdin, append(args[:len(args):len(args)], "--home", n.home)...)
}

// dirEntries lists everything under root (relative paths), for checking
// that a command created nothing.
func dirEntries(t *testing.T, root string) []string {
	t.Helper()
	var out []string
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if p != root {
			rel, _ := filepath.Rel(root, p)
			out = append(out, rel)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// subcommands are the subcommands of the commands that have them; the
// help test covers each.
var subcommands = map[string][]string{
	"peers":       {"list", "add", "remove", "discover"},
	"send":        {"message", "request", "response"},
	"deadletters": {"list", "retry", "drop"},
	"pair":        {"offer", "accept"},
	"config":      {"check"},
	"task":        {"list", "complete", "wait"}, // broadcast and tasks slice
}

// Every way of asking for help, on every command and subcommand, exits 0,
// prints the usage to stdout and creates nothing: not the home (from
// MEERKAT_HOME, XDG_CONFIG_HOME or HOME), not a --home given, not the
// runtime directory, nothing in the working directory.
func TestHelpEverywhereCreatesNothing(t *testing.T) {
	t.Parallel()
	table := commandTable()
	for cmd, subs := range subcommands {
		for _, sub := range subs {
			if !strings.Contains(table[cmd].usage, sub) {
				t.Fatalf("subcommands lists %s %s, which the command table's usage of %q does not show", cmd, sub, cmd)
			}
		}
	}
	root := mkTemp(t)
	missing := filepath.Join(root, "given-home")
	env := []string{
		"HOME=" + filepath.Join(root, "home"),
		"XDG_CONFIG_HOME=" + filepath.Join(root, "config"),
		"MEERKAT_HOME=" + filepath.Join(root, "meerkat"),
		"XDG_RUNTIME_DIR=" + filepath.Join(root, "run"),
	}

	type helpCase struct {
		args  []string
		usage string // the usage line stdout must start with ("": the global usage)
		flags bool   // stdout lists the flags
	}
	cases := []helpCase{
		{args: []string{"--help"}},
		{args: []string{"-h"}},
		{args: []string{"help"}},
		{args: []string{"help", "--help"}},
		{args: []string{"help", "-h"}},
		{args: []string{"--home", missing, "--help"}},
	}
	forms := func(words []string, usage string, flags bool) {
		with := func(pre []string, post ...string) []string {
			return append(append(slices.Clone(pre), words...), post...)
		}
		for _, args := range [][]string{
			with(nil, "--help"),
			with(nil, "-h"),
			with([]string{"help"}),
			with(nil, "--help", "--home", missing),
			with([]string{"--home", missing}, "-h"),
			with([]string{"--home", missing, "help"}),
		} {
			cases = append(cases, helpCase{args: args, usage: usage, flags: flags})
		}
	}
	names := make([]string, 0, len(table))
	for name := range table {
		names = append(names, name)
	}
	slices.Sort(names)
	for _, name := range names {
		if name == "help" {
			// help --help and help -h show the global usage (above);
			// help help shows help's.
			cases = append(cases, helpCase{args: []string{"help", "help"}, usage: table[name].usage})
			continue
		}
		forms([]string{name}, table[name].usage, true)
		for _, sub := range subcommands[name] {
			forms([]string{name, sub}, table[name].usage, true)
		}
	}

	var wg sync.WaitGroup
	sem := make(chan struct{}, 4)
	for _, c := range cases {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer func() { <-sem; wg.Done() }()
			r := runIn(env, root, nil, c.args...)
			switch {
			case r.code != exitOK:
				t.Errorf("want exit 0\n%s", r)
			case r.stderr != "":
				t.Errorf("help wrote to stderr\n%s", r)
			case c.usage == "" && !strings.Contains(r.stdout, "\nusage: meerkatd [--home DIR] COMMAND"):
				t.Errorf("stdout lacks the global usage\n%s", r)
			case c.usage != "" && !strings.HasPrefix(r.stdout, "usage: "+c.usage+"\n"):
				t.Errorf("stdout does not start with the command's usage %q\n%s", c.usage, r)
			case c.flags && strings.Contains(c.usage, "--") != strings.Contains(r.stdout, "\nflags:\n"):
				// a flags section lists the flags the usage names, and a
				// command without flags has no empty one
				t.Errorf("the usage names flags: %v; stdout has a flags section: %v\n%s", strings.Contains(c.usage, "--"), strings.Contains(r.stdout, "\nflags:\n"), r)
			}
			// Every flag the section lists is in the usage line, which
			// the shell completion is made from.
			_, section, _ := strings.Cut(r.stdout, "\nflags:\n")
			for _, l := range strings.Split(section, "\n") {
				if f, ok := strings.CutPrefix(l, "  --"); ok {
					if f, _, _ = strings.Cut(f, " "); !strings.Contains(c.usage, "--"+f) {
						t.Errorf("%v: the usage does not name --%s", c.args, f)
					}
				}
			}
		}()
	}
	wg.Wait()
	if got := dirEntries(t, root); len(got) > 0 {
		t.Fatalf("asking for help created %q in %s", got, root)
	}
	t.Logf("%d help invocations", len(cases))
}

// --home before the command and --home after it are the same, with and
// without a daemon; ~/ in --home and MEERKAT_HOME is $HOME.
func TestHomeFlagAnywhere(t *testing.T) {
	t.Parallel()
	n := newNode(t, "solo")
	same := func(wantCode int) {
		t.Helper()
		for _, extra := range [][]string{nil, {"--json"}} {
			before := runIn(n.env, "", nil, append([]string{"--home", n.home, "status"}, extra...)...)
			after := runIn(n.env, "", nil, append(append([]string{"status"}, extra...), "--home", n.home)...)
			equals := runIn(n.env, "", nil, append([]string{"--home=" + n.home, "status"}, extra...)...)
			if before.code != wantCode {
				t.Fatalf("want exit %d\n%s", wantCode, before)
			}
			if !strings.Contains(before.stdout, n.home) {
				t.Fatalf("status does not show the home %s\n%s", n.home, before)
			}
			for _, r := range []result{after, equals} {
				if r.code != before.code || r.stdout != before.stdout || r.stderr != before.stderr {
					t.Fatalf("the position of --home changes status:\n%s\n---\n%s", before, r)
				}
			}
		}
	}
	same(exitNoDaemon)
	n.start()
	same(exitOK)

	h := mkTemp(t)
	want := filepath.Join(h, "h")
	homeOf := func(r result) string {
		t.Helper()
		var self struct {
			Home string `json:"home"`
		}
		if r.code != exitOK || json.Unmarshal([]byte(r.stdout), &self) != nil {
			t.Fatalf("want exit 0 and JSON\n%s", r)
		}
		return self.Home
	}
	if got := homeOf(runIn([]string{"HOME=" + h}, h, nil, "init", "--home", "~/h", "--json")); got != want {
		t.Fatalf("init --home ~/h with HOME=%s made %s, want %s", h, got, want)
	}
	if _, err := os.Stat(filepath.Join(want, identity.KeyFile)); err != nil {
		t.Fatalf("init --home ~/h: %v", err)
	}
	for _, args := range [][]string{
		{"id", "--json", "--home", "~/h"},
		{"--home", "~/h", "id", "--json"},
		{"id", "--json", "--home=~/h"},
	} {
		if got := homeOf(runIn([]string{"HOME=" + h}, h, nil, args...)); got != want {
			t.Errorf("%q with HOME=%s: home %s, want %s", args, h, got, want)
		}
	}
	if got := homeOf(runIn([]string{"HOME=" + h, "MEERKAT_HOME=~/h"}, h, nil, "id", "--json")); got != want {
		t.Errorf("MEERKAT_HOME=~/h with HOME=%s: home %s, want %s", h, got, want)
	}
	if entries := dirEntries(t, h); slices.ContainsFunc(entries, func(e string) bool { return strings.HasPrefix(e, "~") }) {
		t.Errorf("a literal ~ directory was created: %q", entries)
	}
}

// Commands that use a home do not create a missing one (a mistyped --home
// must not mint an identity): they exit 2 and say how to create it. init,
// run and mcp create it.
func TestMissingHome(t *testing.T) {
	t.Parallel()
	root := mkTemp(t)
	missing := filepath.Join(root, "nohome")
	hint := "meerkatd init --home " + missing
	for _, args := range [][]string{
		{"status"},
		{"status", "--json"},
		{"send", "message", "bob", "hi"},
		{"send", "request", "bob", "add", "{}"},
		{"peers", "list"},
		{"peers", "add", "bob", "ed25519:l/ZtuuU6Zi3XcvTfx4o0FeUNo33QBkizPveY3vGCWZA=", "uds:///tmp/bob.sock"},
		{"peers", "remove", "bob"},
		{"peers", "discover"},
		{"inbox"},
		{"inbox", "--ack"},
		{"outbox"},
		{"deadletters"},
		{"audit"},
		{"pair", "offer"},
		{"id"},
	} {
		for _, r := range []result{
			runIn(nil, root, nil, append(args, "--home", missing)...),
			runIn([]string{"MEERKAT_HOME=" + missing}, root, nil, args...),
		} {
			if r.code != exitUsage || !strings.Contains(r.stderr, hint) {
				t.Errorf("want exit %d and %q in stderr\n%s", exitUsage, hint, r)
			}
		}
		if got := dirEntries(t, root); len(got) > 0 {
			t.Fatalf("%q on a missing home created %q", args, got)
		}
	}

	t.Run("init", func(t *testing.T) {
		home := filepath.Join(mkTemp(t), "h")
		if r := runIn(nil, "", nil, "init", "--home", home); r.code != exitOK {
			t.Fatalf("%s", r)
		}
		if _, err := os.Stat(filepath.Join(home, identity.KeyFile)); err != nil {
			t.Fatal(err)
		}
	})
	t.Run("run", func(t *testing.T) {
		n := &testNode{t: t, name: "fresh", home: filepath.Join(mkTemp(t), "h")}
		n.start() // waits until status says the daemon runs
		if _, err := os.Stat(filepath.Join(n.home, identity.KeyFile)); err != nil {
			t.Fatal(err)
		}
		n.stop()
		if !strings.Contains(n.d.log(), "initialised "+n.home) {
			t.Errorf("run did not say it created the home:\n%s", n.d.log())
		}
	})
	t.Run("mcp", func(t *testing.T) {
		home := filepath.Join(mkTemp(t), "h")
		r := runIn(nil, "", strings.NewReader(""), "mcp", "--home", home) // stdin closed: mcp exits
		if r.code != exitOK || !strings.Contains(r.stderr, "initialised "+home) {
			t.Fatalf("%s", r)
		}
		if _, err := os.Stat(filepath.Join(home, identity.KeyFile)); err != nil {
			t.Fatal(err)
		}
	})
}

// textBody returns a body of exactly size bytes of valid UTF-8 text, with
// multi-byte characters, quotes, tabs and newlines, different at every
// line (so a dropped, repeated or reordered chunk shows), starting with
// tag and ending with a newline (so a trimmed one shows).
func textBody(tag string, size int) string {
	var b strings.Builder
	b.WriteString(tag)
	for i := 0; b.Len() < size; i++ {
		b.WriteString(strconv.Itoa(i))
		b.WriteString("\thé \"wörld\" 日本語 🦦 \\ <&> ")
		b.WriteString(strings.Repeat("abcdefghij", i%7))
		b.WriteString("\n")
	}
	s := b.String()[:size-1]
	for !utf8.ValidString(s) { // cut at a rune boundary, pad with ASCII
		s = s[:len(s)-1]
	}
	return s + strings.Repeat(".", size-1-len(s)) + "\n"
}

// A 900 KB body arrives intact from stdin, from @FILE and from
// --body-file, without and with a daemon on the sender's side; a body
// over the 1 MiB envelope limit is refused with exit 2 and says why.
func TestLargeBodies(t *testing.T) {
	t.Parallel()
	alice, bob := twoNodes(t, "uds")
	bob.start()
	dir := mkTemp(t)
	const size = 900 << 10
	want := map[string]string{} // id → body
	send := func(body string, stdin io.Reader, args ...string) {
		t.Helper()
		r := alice.runStdin(stdin, args...)
		if r.code != exitOK {
			t.Fatalf("%s", r)
		}
		want[strings.TrimSpace(r.stdout)] = body
	}
	file := func(name, body string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}

	// Standalone: alice's CLI runs the node for the send.
	body := textBody("stdin standalone\n", size)
	send(body, strings.NewReader(body), "send", "message", "bob", "-")
	// Through alice's daemon, over the control socket.
	alice.start()
	body = textBody("@file daemon\n", size)
	send(body, nil, "send", "message", "bob", "@"+file("at", body))
	body = textBody("--body-file daemon\n", size)
	send(body, nil, "send", "message", "bob", "--body-file", file("bf", body))

	got := map[string]string{}
	for _, it := range bob.inbox() {
		got[it.ID] = it.Body
	}
	for id, body := range want {
		if g, ok := got[id]; !ok {
			t.Errorf("message %s is not in bob's inbox", id)
		} else if g != body {
			t.Errorf("message %s arrived changed: %d bytes, want %d", id, len(g), len(body))
		}
	}
	if len(got) != len(want) {
		t.Errorf("bob's inbox holds %d items, want %d", len(got), len(want))
	}

	// Too large: over what the CLI reads (refused before any node is
	// asked), and within it but too large for the envelope (refused by
	// the node: the daemon's, then one in the CLI's process).
	over := textBody("over", node.MaxInput+1)
	exact := textBody("exact", node.MaxInput)
	exactJSON := `"` + strings.Repeat("j", node.MaxInput-2) + `"`
	tooLarge := func(why, stdin string, args ...string) {
		t.Helper()
		var in io.Reader
		if stdin != "" {
			in = strings.NewReader(stdin)
		}
		r := alice.runStdin(in, args...)
		if r.code != exitUsage || !strings.Contains(r.stderr, why) || !strings.Contains(r.stderr, "(body_too_large)") {
			t.Errorf("want exit %d and %q in the error\n%s", exitUsage, why, r)
		}
	}
	const overInput = "is longer than 1048576 bytes, the envelope limit"
	tooLarge(overInput, over, "send", "message", "bob", "-")
	tooLarge(overInput, "", "send", "message", "bob", "@"+file("over", over))
	tooLarge(overInput, "", "send", "message", "bob", "--body-file", file("over", over))
	exactFit := func() {
		t.Helper()
		const overFrame = "the envelope would exceed the 1 MiB frame limit"
		tooLarge(overFrame, "", "send", "message", "bob", "@"+file("exact", exact))
		tooLarge(overFrame, exactJSON, "send", "request", "bob", "big", "--body-file", "-")
	}
	exactFit() // through alice's daemon
	alice.stop()
	exactFit() // standalone
	r := alice.runStdin(strings.NewReader("caf\xe9"), "send", "message", "bob", "-")
	if r.code != exitUsage || !strings.Contains(r.stderr, "UTF-8") {
		t.Errorf("a body that is not UTF-8: want exit %d\n%s", exitUsage, r)
	}
	var st struct {
		Inbox int `json:"inbox"`
	}
	bob.okJSON(&st, "status", "--json")
	if st.Inbox != len(want) {
		t.Errorf("after the refused sends bob's inbox holds %d items, want %d", st.Inbox, len(want))
	}
}

// A peer's text cannot drive the terminal or forge lines of meerkatd's
// own: inbox shows control characters escaped and indents continuation
// lines; --json gives the text unchanged.
func TestInboxEscapesPeerText(t *testing.T) {
	t.Parallel()
	alice, bob := twoNodes(t, "uds")
	bob.start()
	body := "clear\x1b[2J title\x1b]0;pwned\x07 back\rover rtl\u202eevil\n" +
		"#99 2025-01-01T00:00:00Z message from alice (" + alice.key + ") id 00000000-0000-0000-0000-000000000000\n" +
		"  fake body\ttabbed"
	intent := "do\x1b[31mred\u202e\r\n#98 forged"
	alice.ok("send", "message", "bob", body)
	// meerkatd refuses to send such an intent; another peer's software
	// may: the request comes as a raw envelope signed with alice's key.
	params, err := wire.ParseJSON([]byte(`{"x":"\u001b[2J"}`))
	if err != nil {
		t.Fatal(err)
	}
	deliverRaw(t, bob, rawEnvelope(t, alice, bob, wire.Request(intent, params)))

	for items, text := range map[int]string{2: bob.ok("inbox"), 1: bob.ok("inbox", "--kind", "message")} {
		for _, raw := range []string{"\x1b", "\r", "\x07", "\u202e"} {
			if strings.Contains(text, raw) {
				t.Errorf("inbox printed a raw %q:\n%s", raw, text)
			}
		}
		for _, esc := range []string{`\x1b[2J`, `\x1b]0;pwned\x07`, `\x0d`, `\u202e`} {
			if !strings.Contains(text, esc) {
				t.Errorf("inbox lacks the escaped form %s:\n%s", esc, text)
			}
		}
		// Only meerkatd's own item lines start in the first column
		// ("#SEQ TIME KIND from …"); every line of a peer's is indented.
		var heads []string
		for _, line := range strings.Split(strings.TrimSuffix(text, "\n"), "\n") {
			if !strings.HasPrefix(line, "  ") {
				heads = append(heads, line)
			}
		}
		if len(heads) != items || !strings.HasPrefix(heads[0], "#1 ") || items == 2 && !strings.HasPrefix(heads[1], "#2 ") {
			t.Errorf("lines in the first column: %q\n%s", heads, text)
		}
		if !strings.Contains(text, "\n  #99 ") {
			t.Errorf("the forged line is not shown indented:\n%s", text)
		}
	}
	items := bob.inbox() // --json
	if len(items) != 2 {
		t.Fatalf("bob's inbox: %s", jsonText(items))
	}
	if items[0].Body != body || items[1].Intent != intent {
		t.Errorf("--json changed the peer's text: body %q, intent %q", items[0].Body, items[1].Intent)
	}
}

// stackedPrefix returns a word that an error line repeats as a prefix
// ("meerkatd pair: pair: …", "trust: peer: trust: …"), or "".
func stackedPrefix(line string) string {
	rest, ok := strings.CutPrefix(line, "meerkatd ")
	if !ok {
		return ""
	}
	seen := map[string]bool{}
	segs := strings.Split(rest, ": ")
	for _, s := range segs[:len(segs)-1] {
		if s == "" || strings.IndexFunc(s, func(r rune) bool { return r < 'a' || r > 'z' }) >= 0 {
			continue // not a one-word prefix
		}
		if seen[s] {
			return s
		}
		seen[s] = true
	}
	return ""
}

func TestStackedPrefix(t *testing.T) {
	for line, want := range map[string]string{
		"meerkatd pair: pair: not a pairing code line":                                  "pair",
		`meerkatd peers: trust: peer ("x"): pubkey: trust: duplicate peer key`:          "trust",
		"meerkatd send: comms: peer bob offline: connection refused or failed: x":       "",
		"meerkatd send: dial uds:///a.sock: dial unix /a.sock: connect: no such file":   "",
		"meerkatd pair: not a pairing code line: it must start with \"meerkat-pair/1\"": "",
	} {
		if got := stackedPrefix(line); got != want {
			t.Errorf("stackedPrefix(%q) = %q, want %q", line, got, want)
		}
	}
}

// Error messages say each thing once: no "meerkatd pair: pair:", no
// "trust: … trust:"; a duration without a unit says to add one. The same
// error through a daemon reads the same.
func TestErrorMessages(t *testing.T) {
	t.Parallel()
	alice, bob := twoNodes(t, "uds")
	other, err := identity.GenerateKeypair()
	if err != nil {
		t.Fatal(err)
	}
	const uuid = "550e8400-e29b-41d4-a716-446655440000"
	type errCase struct {
		args   []string
		code   int
		want   string // in stderr
		viaAPI bool   // reaches the node: the same through alice's daemon
	}
	cases := []errCase{
		{[]string{"pair", "accept", "garbage"}, exitUsage, "pairing code line", false},
		{[]string{"pair", "accept", "meerkat-pair/1", "x", "y", "z"}, exitUsage, "pairing code line", false},
		{[]string{"pair", "accept", "meerkat-pair/1 AAAA-AAAA-AAAA-AAAA-AAAA-AAAA-AA uds:///nonexistent-meerkat-dir/meerkat.sock"}, exitPeerOffline, "cannot reach the offer's address", false},
		{[]string{"pair", "accept", "meerkat-pair/1 AAAA-AAAA-AAAA-AAAA-AAAA-AAAA-AB uds:///nonexistent-meerkat-dir/meerkat.sock"}, exitUsage, "a typo?", false},
		{[]string{"send", "request", "bob", "x", "--wait", "5"}, exitUsage, "a duration needs a unit: 5s", false},
		{[]string{"send", "request", "bob", "x", "--wait", "0s"}, exitUsage, "--wait applies to requests only and must be positive", false},
		{[]string{"send", "message", "bob", "@"}, exitUsage, "@ needs a file name", false},
		{[]string{"send", "message", "bob", "@/"}, exitUsage, "/ is a directory, not a file", false},
		{[]string{"send", "message", "bob", "--body-file", "/"}, exitUsage, "/ is a directory, not a file", false},
		{[]string{"send", "message", "bob", "@/nonexistent-meerkat-file"}, exitUsage, "no such file", false},
		{[]string{"send", "message", "bob", "x", "--wait", "0s"}, exitUsage, "--wait applies to requests only and must be positive", false},
		{[]string{"send", "message", "bob", "hi", "--reliable", "--ttl", "90"}, exitUsage, "a duration needs a unit: 90s", false},
		{[]string{"inbox", "--wait", "2"}, exitUsage, "a duration needs a unit: 2s", false},
		{[]string{"pair", "offer", "--ttl", "1.5"}, exitUsage, "a duration needs a unit: 1.5s", false},
		{[]string{"peers", "add", "bob2", bob.key, "uds:///tmp/x.sock"}, exitUsage, "same pubkey as", false},
		{[]string{"peers", "add", "BOB", other.ID().String(), "uds:///tmp/x.sock"}, exitUsage, "names are unique", false},
		{[]string{"peers", "add", "x", "ed25519:zzz", "uds:///tmp/x.sock"}, exitUsage, "32 bytes", false},
		{[]string{"peers", "remove", "nobody"}, exitUnknownPeer, "nobody", false},
		{[]string{"card", "edit", "--add-intent", ""}, exitUsage, "--add-intent must not be empty", false},
		{[]string{"card", "edit", "--remove-intent="}, exitUsage, "--remove-intent must not be empty", false},
		{[]string{"peers", "add", "nobody", other.ID().String(), "uds:///tmp/x.sock", "--replace"}, exitUnknownPeer, "no trusted peer called \"nobody\"", false},
		{[]string{"peers", "add", "bob", other.ID().String(), "uds:///tmp/x.sock", "--replace"}, exitUsage, "another key", false},
		{[]string{"audit", "--since", "yesterday"}, exitUsage, "yesterday", false},
		{[]string{"keygen"}, exitUsage, "--force", false},
		{[]string{"send", "message", "carol", "hi"}, exitUnknownPeer, "carol", true},
		{[]string{"inbox", "--from", "carol"}, exitUnknownPeer, "carol", true},
		{[]string{"send", "response", "bob", uuid, "completed"}, exitUsage, "no request " + uuid, true},
		{[]string{"deadletters", "retry", "123"}, exitUsage, "not an envelope id", true},
		// Flags before the subcommand: the subcommand is still the subcommand.
		{[]string{"deadletters", "--json", "retry", "123"}, exitUsage, "not an envelope id", true},
		{[]string{"space", "--json", "add", "build", "bob"}, exitUsage, "wrong number of arguments", false},
		{[]string{"send", "message", "bob", "hi", "--reliable", "--ttl", "9999h"}, exitUsage, "ttl", true},
		{[]string{"space", "shout"}, exitUsage, "unknown space subcommand", false},
		{[]string{"space", "--json", "shout"}, exitUsage, "unknown space subcommand \"shout\"", false},
		{[]string{"outbox", "--json", "shout"}, exitUsage, "shout", false},
		{[]string{"outbox", "drop"}, exitUsage, "give 1 to 100 ids of queued sends to drop", false},
		{[]string{"outbox", "drop", "123"}, exitUsage, "not an envelope id", true},
		{[]string{"outbox", "drop", uuid}, exitNoDaemon, "dropping queued sends needs the running daemon", false},
		{[]string{"space", "add", "build", "bob"}, exitUsage, "wrong number of arguments", false},
		{[]string{"space", "chat", "build", "hi", "--direct", "--ttl", "1m"}, exitUsage, "--ttl", false},
		{[]string{"space", "create", "build", "--as", "a", "--cap", "[1]"}, exitUsage, "JSON array of capability objects", false},
		{[]string{"space", "send", "build", "chat", "{nope"}, exitUsage, "not valid JSON", false},
		{[]string{"space", "create", "build", "--as", "a", "--cap", `{"kind":`}, exitUsage, "not a JSON capability object", false},
		{[]string{"space", "fulfill", "build", "p1", "--correlation-id", "x"}, exitUsage, "apply to space send, chat and propose", false},
		{[]string{"send", "message", "bob", "hi", "--idempotency-key", ""}, exitUsage, "--idempotency-key must not be empty", false},
		{[]string{"broadcast", "hi", "--task", ""}, exitUsage, "--task must not be empty", false},
		{[]string{"send", "message", "bob", "hi", "--task="}, exitUsage, "--task must not be empty", false},
		{[]string{"space", "reject", "build", "p1", "--context", "c"}, exitUsage, "apply to space send, chat and propose", false},
		{[]string{"space", "create", "build"}, exitUsage, "participant id", true},
		{[]string{"space", "add", "nowhere", "bob", "worker"}, exitError, "no space \"nowhere\"", true},
		{[]string{"space", "show", "nowhere"}, exitError, "no space \"nowhere\"", true},
		// Broadcast and tasks.
		{[]string{"task", "bogus"}, exitUsage, "unknown task subcommand", false},
		{[]string{"requests", "--state", "bogus"}, exitUsage, `"bogus" is not open`, false},
		{[]string{"status", "--wait", "-1s"}, exitUsage, "--wait must not be negative", false},
		{[]string{"task", "wait"}, exitUsage, "wrong number of arguments", false},
		{[]string{"task", "list", "--wait", "1s"}, exitUsage, "--wait", false},
		{[]string{"task", "complete", "t", "{nope"}, exitUsage, "not valid JSON", false},
		{[]string{"broadcast", "x", "--direct", "--ttl", "1m"}, exitUsage, "--ttl", false},
		{[]string{"broadcast"}, exitUsage, "want BODY", false},
		{[]string{"task", "wait", "nope"}, exitError, "no task \"nope\"", true},
		{[]string{"broadcast", "x", "--group", "qa"}, exitUsage, "no group \"qa\"", true},
		{[]string{"send", "message", "bob", "hi", "--task", "a\tb"}, exitUsage, "task id", true},
	}
	check := func(c errCase, via string) result {
		t.Helper()
		r := alice.run(c.args...)
		if r.code != c.code || !strings.Contains(r.stderr, c.want) {
			t.Errorf("%s: want exit %d and %q in stderr\n%s", via, c.code, c.want, r)
		}
		for _, line := range strings.Split(r.stderr, "\n") {
			if p := stackedPrefix(line); p != "" {
				t.Errorf("%s: %q is repeated in %q", via, p+":", line)
			}
		}
		return r
	}
	// errLines is the error lines of stderr (standalone inbox first says
	// that it reads the stored inbox).
	errLines := func(stderr string) string {
		var out []string
		for _, l := range strings.Split(stderr, "\n") {
			if strings.HasPrefix(l, "meerkatd ") {
				out = append(out, l)
			}
		}
		return strings.Join(out, "\n")
	}
	standalone := map[int]string{}
	for i, c := range cases {
		standalone[i] = errLines(check(c, "standalone").stderr)
	}

	// A trust file with two rows of one key: config check and every
	// command reading it report it without repeating "trust:".
	list := `{"peers": [
		{"name": "bob", "pubkey": "` + bob.key + `", "addr": "uds:///tmp/b.sock"},
		{"name": "bobby", "pubkey": "` + bob.key + `", "addr": "uds:///tmp/b2.sock"}]}`
	broken := newNode(t, "broken")
	if err := os.WriteFile(filepath.Join(broken.home, "trusted_peers.json"), []byte(list), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{{"config", "check"}, {"peers", "list"}} {
		r := broken.run(args...)
		if r.code == exitOK || !strings.Contains(r.stderr, "same pubkey as") {
			t.Errorf("want a failure naming the duplicate key\n%s", r)
		}
		if p := stackedPrefix(strings.TrimSpace(r.stderr)); p != "" {
			t.Errorf("%q is repeated in %q", p+":", r.stderr)
		}
	}

	alice.start()
	for i, c := range cases {
		if !c.viaAPI {
			continue
		}
		if got := errLines(check(c, "daemon").stderr); got != standalone[i] {
			t.Errorf("the error differs through the daemon:\nstandalone: %s\ndaemon:     %s", standalone[i], got)
		}
	}
}

// A sender whose envelopes a peer refuses because it does not trust the
// sender's key is told that this is the likely cause; the peer logs the
// key once a minute, not once per envelope.
func TestUntrustedSenderHint(t *testing.T) {
	t.Parallel()
	alice, bob := newNode(t, "alice"), newNode(t, "bob")
	alice.trusts(bob) // bob does not trust alice
	bob.start()
	const hint = "may not trust this node's key"
	for i := range 3 {
		// bob answered: the error does not call him offline.
		r := alice.wantCode(exitPeerOffline, []string{hint, "peer bob did not take the envelope: connection closed before the ack"}, "send", "message", "bob", "hello "+strconv.Itoa(i))
		if strings.Contains(r.stderr, "bob offline") {
			t.Errorf("a refusal reads as the peer offline: %s", r.stderr)
		}
	}
	alice.start() // the same through alice's daemon
	alice.wantCode(exitPeerOffline, []string{hint}, "send", "message", "bob", "hello again")
	alice.wantCode(exitPeerOffline, []string{hint}, "send", "request", "bob", "add", "{}")

	// bob refused all five (a direct send tries a second connection when
	// the first closes before the ack: up to two refusals each) but
	// logged alice's key once.
	var s cliStatus
	bob.okJSON(&s, "status", "--json")
	if n := s.Rejected["untrusted"]; n < 5 || n > 10 {
		t.Errorf("bob refused %d untrusted envelopes, want 5 to 10 (%v)", n, s.Rejected)
	}
	logged := 0
	for _, line := range strings.Split(bob.d.log(), "\n") {
		if strings.Contains(line, "key not in the trust list") {
			logged++
			if !strings.Contains(line, "level=INFO") || !strings.Contains(line, alice.key) {
				t.Errorf("the refusal is not logged at info with alice's key %s: %q", alice.key, line)
			}
		}
	}
	if logged != 1 {
		t.Errorf("bob logged the untrusted key %d times, want once a minute:\n%s", logged, bob.d.log())
	}
	if items := bob.inbox(); len(items) != 0 {
		t.Errorf("bob holds refused envelopes: %s", jsonText(items))
	}
}

// A peer that takes no envelope as large as the one sent closes the
// connection without an ack: the sender's error names that cause too,
// and the peer counts a rejected frame.
func TestTooLargeForPeerHint(t *testing.T) {
	t.Parallel()
	alice, bob := newNode(t, "alice"), newNode(t, "bob")
	alice.trusts(bob)
	bob.trusts(alice)
	bob.env = append(bob.env, "MEERKAT_COMMS_MAX_MESSAGE_BYTES=1024")
	bob.start()
	alice.wantCode(exitPeerOffline, []string{"takes no envelope that large (its comms.max_message_bytes)"}, "send", "message", "bob", strings.Repeat("x", 2000))
	if n := bob.status().Rejected["frame"]; n < 1 {
		t.Errorf("bob counted %d rejected frames, want at least 1 (%v)", n, bob.status().Rejected)
	}
	if items := bob.inbox(); len(items) != 0 {
		t.Errorf("bob holds the refused envelope: %s", jsonText(items))
	}
}

// A bad value of an inbox flag is named in the error.
func TestInboxBadFlagNamed(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--limit", "-1"}, "--limit must not be negative"},
		{[]string{"--wait", "-1s"}, "--wait must not be negative"},
		{[]string{"--page", "0"}, "--page is from 1 to 1000"},
		{[]string{"--page", "1001"}, "--page is from 1 to 1000"},
		{[]string{"--order", "newest"}, "--order is priority or arrival"},
	} {
		r := runIn(nil, mkTemp(t), nil, append([]string{"inbox"}, tc.args...)...)
		if r.code != exitUsage || !strings.Contains(r.stderr, tc.want) {
			t.Errorf("inbox %q: want exit %d and %q in stderr\n%s", tc.args, exitUsage, tc.want, r)
		}
	}
}

// meerkatd id shows the addresses the running daemon listens on, its
// --listen flags included, not only those of meerkat.toml.
func TestIDShowsTheDaemonsAddresses(t *testing.T) {
	t.Parallel()
	n := newNode(t, "alice")
	want := "tcp://127.0.0.1:" + strconv.Itoa(freeTCPPort(t))
	var before struct{ Listen []string }
	n.okJSON(&before, "id", "--json")
	if slices.Contains(before.Listen, want) {
		t.Fatalf("id before the daemon: %v", before.Listen)
	}
	n.start("--listen-tcp", strings.TrimPrefix(want, "tcp://"))
	var after struct{ Listen []string }
	n.okJSON(&after, "id", "--json")
	if !slices.Contains(after.Listen, want) {
		t.Fatalf("id with the daemon on %s: %v", want, after.Listen)
	}
}

// outbox drop that fails before it drops anything prints the error
// alone: no empty result before it, with --json one error document.
func TestOutboxDropErrorAlone(t *testing.T) {
	t.Parallel()
	n := newNode(t, "alice")
	for _, args := range [][]string{{"outbox", "drop", "123"}, {"outbox", "drop", "123", "--json"}, {"outbox", "drop", "550e8400-e29b-41d4-a716-446655440000", "--json"}} {
		r := n.run(args...)
		if r.code == exitOK || strings.Contains(r.stdout, "dropped") || strings.Count(r.stdout, "{") > 2 {
			t.Errorf("%v: %s", args, r)
		}
	}
}

// With a daemon running, peers list shows the peers it kept when
// trusted_peers.json no longer loads, and says so.
func TestPeersListWithBrokenTrustFile(t *testing.T) {
	t.Parallel()
	alice, bob := newNode(t, "alice"), newNode(t, "bob")
	alice.trusts(bob)
	alice.start()
	if err := os.WriteFile(filepath.Join(alice.home, "trusted_peers.json"), []byte("{ broken"), 0o600); err != nil {
		t.Fatal(err)
	}
	r := alice.run("peers", "list")
	if r.code != exitOK || !strings.Contains(r.stdout, "bob") || !strings.Contains(r.stderr, "warning: trusted_peers.json does not load") || !strings.Contains(r.stderr, "the running node kept") {
		t.Fatalf("peers list with a broken trust file:\n%s", r)
	}
}
