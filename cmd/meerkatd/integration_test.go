package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/meerkatd/meerkatd/comms/node"
	"github.com/meerkatd/meerkatd/internal/testutil"
)

// Integration tests: they build the meerkatd binary once per test binary
// and drive real processes with temporary homes, over Unix sockets and TCP
// on 127.0.0.1.

const (
	cmdTimeout   = 60 * time.Second // bound on any one meerkatd invocation
	readyTimeout = 30 * time.Second // bound on a daemon becoming ready
	stopTimeout  = 15 * time.Second // bound on a daemon exiting after SIGTERM
	pollTimeout  = 20 * time.Second // bound on waiting for a condition
	testAckSecs  = 5                // comms.ack_timeout_secs of test nodes
)

// binary is the meerkatd the tests run: built once per test process,
// with -race when the tests run with it.
func binary(t *testing.T) string { return testutil.Meerkatd(t) }

// meerkatdBinary is binary for callers without a t.
func meerkatdBinary() (string, error) { return testutil.MeerkatdErr() }

// baseEnv is the environment of every meerkatd process the tests start:
// childEnv, with local discovery in a directory of this test run.
func baseEnv() []string {
	env := childEnv()
	if bin, err := meerkatdBinary(); err == nil {
		// Daemons announce themselves for local discovery: in a directory
		// of this test run, not the user's own runtime directory.
		rt := filepath.Join(filepath.Dir(bin), "run")
		os.MkdirAll(rt, 0o700)
		env = append(env, "XDG_RUNTIME_DIR="+rt)
	}
	return env
}

// result is what one meerkatd invocation produced.
type result struct {
	args           []string
	stdout, stderr string
	code           int
}

func (r result) String() string {
	return fmt.Sprintf("meerkatd %s: exit %d\nstdout: %s\nstderr: %s", strings.Join(r.args, " "), r.code, r.stdout, r.stderr)
}

// The CLI's JSON output as documented, decoded with this file's own
// field names so that a renamed key fails the tests.
type (
	cliItem struct {
		Seq       uint64          `json:"seq"`
		ID        string          `json:"id"`
		Kind      string          `json:"kind"`
		From      string          `json:"from"`
		Peer      string          `json:"peer"`
		Body      string          `json:"body"`
		Intent    string          `json:"intent"`
		Params    json.RawMessage `json:"params"`
		InReplyTo string          `json:"request_id"`
		Status    string          `json:"status"`
		Result    json.RawMessage `json:"result"`
	}
	cliSend struct {
		ID        string    `json:"id"`
		Peer      string    `json:"peer"`
		Delivery  string    `json:"delivery"`
		Responses []cliItem `json:"responses"`
	}
	cliStatus struct {
		Daemon   bool              `json:"running"`
		Listen   []string          `json:"listen"`
		Peers    int               `json:"peers"`
		Accepted uint64            `json:"accepted"`
		AcksSent uint64            `json:"acks_sent"`
		Rejected map[string]uint64 `json:"rejected"`
	}
)

// testNode is one meerkatd home.
type testNode struct {
	t    *testing.T
	name string
	home string
	env  []string // extra environment, e.g. MEERKAT_COMMS_ACK_TIMEOUT
	key  string   // public key, from id --json
	addr string   // the address peers use to reach it
	d    *daemon  // the running daemon, if any
}

// newNode creates a home in a short temporary directory (Unix socket paths
// must stay under about 100 bytes) and initialises it with the given name.
// Its daemon will listen on <home>/meerkat.sock.
func newNode(t *testing.T, name string) *testNode {
	t.Helper()
	home, err := os.MkdirTemp("", "mk")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(home) })
	n := &testNode{t: t, name: name, home: home, addr: "uds://" + filepath.Join(home, "meerkat.sock"),
		env: []string{"MEERKAT_COMMS_ACK_TIMEOUT=" + strconv.Itoa(testAckSecs)}}
	n.ok("init", "--name", name)
	var id struct {
		Name   string   `json:"name"`
		PubKey string   `json:"pubkey"`
		Listen []string `json:"listen"`
	}
	n.okJSON(&id, "id", "--json")
	if id.Name != name || !strings.HasPrefix(id.PubKey, "ed25519:") || len(id.Listen) != 1 || id.Listen[0] != n.addr {
		t.Fatalf("id --json of %s: %+v", name, id)
	}
	n.key = id.PubKey
	return n
}

// run runs meerkatd args --home <home> and returns what it did; a process
// that cannot be run at all gives code -1. It is safe to call from any
// goroutine.
func (n *testNode) run(args ...string) result {
	return runIn(n.env, "", nil, append(args[:len(args):len(args)], "--home", n.home)...)
}

// ok runs meerkatd and requires exit status 0; it returns stdout.
func (n *testNode) ok(args ...string) string {
	n.t.Helper()
	r := n.run(args...)
	if r.code != exitOK {
		n.t.Fatalf("%s", r)
	}
	return r.stdout
}

// okJSON runs meerkatd, requires exit status 0 and decodes stdout into v.
func (n *testNode) okJSON(v any, args ...string) {
	n.t.Helper()
	out := n.ok(args...)
	if err := json.Unmarshal([]byte(out), v); err != nil {
		n.t.Fatalf("meerkatd %s: stdout is not the JSON expected: %v\n%s", strings.Join(args, " "), err, out)
	}
}

// wantCode runs meerkatd and requires the given exit status and, in
// stderr, each of the given strings.
func (n *testNode) wantCode(code int, stderrHas []string, args ...string) result {
	n.t.Helper()
	r := n.run(args...)
	if r.code != code {
		n.t.Fatalf("want exit %d\n%s", code, r)
	}
	for _, s := range stderrHas {
		if !strings.Contains(r.stderr, s) {
			n.t.Fatalf("stderr lacks %q\n%s", s, r)
		}
	}
	return r
}

// trusts makes n trust other at other's address.
func (n *testNode) trusts(other *testNode) {
	n.t.Helper()
	out := n.ok("peers", "add", other.name, other.key, other.addr)
	if !strings.Contains(out, "added "+other.name) {
		n.t.Fatalf("peers add: %q", out)
	}
}

// status returns `status --json`.
func (n *testNode) status() cliStatus {
	n.t.Helper()
	var s cliStatus
	n.okJSON(&s, "status", "--json")
	return s
}

// inbox returns the items of `inbox --json`.
func (n *testNode) inbox() []cliItem {
	n.t.Helper()
	var b struct {
		Messages []cliItem `json:"messages"`
	}
	n.okJSON(&b, "inbox", "--json")
	return b.Messages
}

// daemon is a running `meerkatd run`.
type daemon struct {
	cmd     *exec.Cmd
	logPath string
	done    chan struct{} // closed when the process has exited
	stopped bool
}

func (d *daemon) log() string {
	b, _ := os.ReadFile(d.logPath)
	return string(b)
}

func (d *daemon) exited() bool {
	select {
	case <-d.done:
		return true
	default:
		return false
	}
}

// start runs `meerkatd run --home <home> extra...` in the background and
// waits until its control socket answers. The daemon is stopped (and its
// clean exit checked) at the end of the test.
func (n *testNode) start(extra ...string) {
	t := n.t
	t.Helper()
	if n.d != nil && !n.d.stopped {
		t.Fatalf("%s's daemon already runs", n.name)
	}
	logf, err := os.Create(filepath.Join(t.TempDir(), n.name+"-daemon.log"))
	if err != nil {
		t.Fatal(err)
	}
	defer logf.Close() // the child has its own descriptor
	args := append([]string{"run", "--home", n.home}, extra...)
	cmd := exec.Command(binary(t), args...)
	cmd.Env = append(baseEnv(), n.env...)
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	d := &daemon{cmd: cmd, logPath: logf.Name(), done: make(chan struct{})}
	go func() {
		cmd.Wait()
		close(d.done)
	}()
	n.d = d
	t.Cleanup(func() {
		if !d.stopped {
			n.stop()
		}
		if t.Failed() {
			t.Logf("%s daemon log:\n%s", n.name, d.log())
		}
	})
	deadline := time.Now().Add(readyTimeout)
	for {
		if d.exited() {
			t.Fatalf("%s's daemon exited early (%v):\n%s", n.name, cmd.ProcessState, d.log())
		}
		r := n.run("status", "--json")
		var s cliStatus
		if r.code == exitOK && json.Unmarshal([]byte(r.stdout), &s) == nil && s.Daemon {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s's daemon not ready after %v; last status:\n%s\nlog:\n%s", n.name, readyTimeout, r, d.log())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// stop sends SIGTERM to the daemon, waits for it (SIGKILL after a bound)
// and checks that it exited 0 and removed its sockets.
func (n *testNode) stop() {
	t := n.t
	t.Helper()
	d := n.d
	if !n.signal(syscall.SIGTERM) {
		d.cmd.Process.Kill()
		<-d.done
		t.Errorf("%s's daemon did not exit within %v of SIGTERM; killed", n.name, stopTimeout)
		return
	}
	if code := d.cmd.ProcessState.ExitCode(); code != 0 {
		t.Errorf("%s's daemon exited with %v, want 0; log:\n%s", n.name, d.cmd.ProcessState, d.log())
	}
	for _, f := range []string{"meerkat.sock", node.ControlSocketName} {
		if _, err := os.Lstat(filepath.Join(n.home, f)); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("after %s's daemon stopped, %s remains (%v)", n.name, f, err)
		}
	}
}

// signal sends sig to n's running daemon and waits up to stopTimeout for
// it to exit; it reports whether it did.
func (n *testNode) signal(sig syscall.Signal) bool {
	t := n.t
	t.Helper()
	d := n.d
	if d == nil || d.stopped {
		t.Fatalf("%s has no running daemon", n.name)
	}
	d.stopped = true
	if err := d.cmd.Process.Signal(sig); err != nil && !d.exited() {
		t.Errorf("%v to %s's daemon: %v", sig, n.name, err)
	}
	select {
	case <-d.done:
		return true
	case <-time.After(stopTimeout):
		return false
	}
}

// waitUntil polls cond (which may run meerkatd) until it holds or
// pollTimeout passes.
func waitUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	waitUntilWithin(t, pollTimeout, what, cond)
}

// waitUntilWithin is waitUntil with its own bound d, for progress that
// depends on how busy the machine is.
func waitUntilWithin(t *testing.T, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", d, what)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// freeTCPPort returns a port on 127.0.0.1 that was free a moment ago.
func freeTCPPort(t testing.TB) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

// twoNodes creates alice and bob, trusting each other, over network:
// "uds" (their Unix sockets), "tcp" (plaintext TCP ports on 127.0.0.1) or
// "tls" (the same ports over TLS, each node refusing plaintext TCP).
// Start them with runArgs().
func twoNodes(t *testing.T, network string) (alice, bob *testNode) {
	t.Helper()
	alice, bob = newNode(t, "alice"), newNode(t, "bob")
	if network != "uds" {
		for _, n := range []*testNode{alice, bob} {
			n.addr = network + "://127.0.0.1:" + strconv.Itoa(freeTCPPort(t))
			if network == "tls" {
				n.env = append(n.env, "MEERKAT_COMMS_TCP_PLAINTEXT=refuse")
			}
		}
	}
	alice.trusts(bob)
	bob.trusts(alice)
	return alice, bob
}

// runArgs returns the `run` flags that make the daemon listen on n.addr.
func (n *testNode) runArgs() []string {
	if hp, ok := tcpHostPort(n.addr); ok {
		return []string{"--listen-tcp", hp, "--listen-uds", "off"}
	}
	return nil
}

// tcpHostPort returns the host:port of a tcp:// or tls:// address.
func tcpHostPort(addr string) (string, bool) {
	for _, p := range []string{"tcp://", "tls://"} {
		if hp, ok := strings.CutPrefix(addr, p); ok {
			return hp, true
		}
	}
	return "", false
}

// jsonText formats v for a failure message.
func jsonText(v any) string {
	b, err := json.Marshal(v)
	if err != nil {
		return fmt.Sprintf("%+v", v)
	}
	return string(b)
}

// findItem returns the first inbox item of the given kind whose predicate
// holds.
func findItem(items []cliItem, kind string, match func(cliItem) bool) (cliItem, bool) {
	for _, it := range items {
		if it.Kind == kind && match(it) {
			return it, true
		}
	}
	return cliItem{}, false
}

// exchange sends a message and a request from alice to bob, and bob's
// response back, all through the daemons.
func exchange(t *testing.T, alice, bob *testNode) {
	var sent cliSend
	alice.okJSON(&sent, "send", "message", "bob", "hello", "--json")
	if sent.ID == "" || sent.Peer != "bob" || sent.Delivery != "acked" {
		t.Fatalf("send message result: %+v", sent)
	}
	msg, ok := findItem(bob.inbox(), "message", func(it cliItem) bool { return it.ID == sent.ID })
	if !ok {
		t.Fatalf("message %s not in bob's inbox", sent.ID)
	}
	if msg.Body != "hello" || msg.Peer != "alice" || msg.From != alice.key {
		t.Fatalf("bob's inbox item: %s", jsonText(msg))
	}

	// The request waits for its response in the background.
	reqDone := make(chan result, 1)
	go func() {
		reqDone <- alice.run("send", "request", "bob", "add", `{"a":1,"b":2}`, "--wait", "20s", "--json")
	}()
	var req cliItem
	waitUntil(t, "the request in bob's inbox", func() bool {
		select {
		case r := <-reqDone:
			t.Fatalf("send request ended before bob answered:\n%s", r)
		default:
		}
		var found bool
		req, found = findItem(bob.inbox(), "request", func(it cliItem) bool { return it.Intent == "add" })
		return found
	})
	var params map[string]int
	if err := json.Unmarshal(req.Params, &params); err != nil || params["a"] != 1 || params["b"] != 2 || len(params) != 2 || req.Peer != "alice" {
		t.Fatalf("request in bob's inbox: %s (params %v, %v)", jsonText(req), params, err)
	}
	var answered cliSend
	bob.okJSON(&answered, "send", "response", "alice", req.ID, "completed", `{"sum":3}`, "--json")
	if answered.Delivery != "written" || answered.Peer != "alice" {
		t.Fatalf("send response result: %+v", answered)
	}
	var r result
	select {
	case r = <-reqDone:
	case <-time.After(cmdTimeout + 5*time.Second): // run's own timeout ends it first
		t.Fatal("send request --wait did not return")
	}
	if r.code != exitOK {
		t.Fatalf("send request --wait:\n%s", r)
	}
	var got cliSend
	if err := json.Unmarshal([]byte(r.stdout), &got); err != nil {
		t.Fatalf("send request output: %v\n%s", err, r.stdout)
	}
	if got.ID != req.ID || len(got.Responses) != 1 {
		t.Fatalf("send request output: id %s (bob saw %s), %d responses\n%s", got.ID, req.ID, len(got.Responses), r.stdout)
	}
	resp := got.Responses[0]
	var sum map[string]int
	if err := json.Unmarshal(resp.Result, &sum); err != nil || resp.Status != "completed" || resp.InReplyTo != req.ID || len(sum) != 1 || sum["sum"] != 3 {
		t.Fatalf("response: %s", jsonText(resp))
	}
	// The response is in alice's inbox too.
	if _, ok := findItem(alice.inbox(), "response", func(it cliItem) bool { return it.InReplyTo == req.ID }); !ok {
		t.Fatal("the response is not in alice's inbox")
	}
}

func TestTwoDaemons(t *testing.T) {
	t.Parallel()
	for _, network := range []string{"uds", "tcp", "tls"} {
		t.Run(network, func(t *testing.T) {
			alice, bob := twoNodes(t, network)
			alice.start(alice.runArgs()...)
			bob.start(bob.runArgs()...)
			// A TCP listener is shown as tcp://; it speaks TLS as well.
			listen := strings.Replace(bob.addr, "tls://", "tcp://", 1)
			if s := bob.status(); len(s.Listen) != 1 || s.Listen[0] != listen || s.Peers != 1 {
				t.Fatalf("bob's status: listen %v, %d peers", s.Listen, s.Peers)
			}
			exchange(t, alice, bob)
			if s := bob.status(); s.Accepted != 2 || s.AcksSent != 2 || len(s.Rejected) != 0 {
				t.Fatalf("bob's counters after a message and a request: %s", jsonText(s))
			}
		})
	}
}

// A send with no daemon on the sender's side runs a node in the CLI
// process for the duration of the send.
func TestStandaloneSend(t *testing.T) {
	t.Parallel()
	alice, bob := twoNodes(t, "uds")
	bob.start()
	out := alice.ok("send", "message", "bob", "from a plain CLI")
	id := strings.TrimSpace(out)
	if _, ok := findItem(bob.inbox(), "message", func(it cliItem) bool {
		return it.ID == id && it.Body == "from a plain CLI" && it.Peer == "alice"
	}); !ok {
		t.Fatalf("message %q not in bob's inbox", id)
	}
	if _, err := os.Lstat(filepath.Join(alice.home, "meerkat.sock")); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("the standalone send left a socket behind: %v", err)
	}
}

func TestExitCodes(t *testing.T) {
	t.Parallel()
	alice, bob := twoNodes(t, "uds")
	const uuid = "550e8400-e29b-41d4-a716-446655440000"

	// No daemon anywhere.
	alice.wantCode(exitUnknownPeer, []string{"carol"}, "send", "message", "carol", "hi")
	// Without a daemon, inbox reads the stored inbox (read only), status
	// shows what is on disk and says no daemon runs.
	alice.wantCode(exitOK, []string{"no daemon"}, "inbox")
	alice.wantCode(exitNoDaemon, []string{"no daemon"}, "inbox", "--ack")
	alice.wantCode(exitNoDaemon, []string{"no daemon"}, "inbox", "--json", "--ack")
	alice.wantCode(exitNoDaemon, []string{"no daemon"}, "status")
	alice.wantCode(exitPeerOffline, []string{"offline"}, "send", "message", "bob", "anyone?")
	usage := [][]string{
		{"send", "message", "bob"},
		{"send", "message", "bob", "hi", "--wait", "1s"},
		{"send", "response", "bob", "notauuid", "completed", "null"},
		{"send", "response", "bob", uuid, "done", "null"},
		{"send", "request", "bob", "add", `{"a":`},
		{"send", "telegram", "bob", "hi"},
		{"inbox", "extra"},
		{"run", "--log-level", "loud"},
	}
	for _, args := range usage {
		alice.wantCode(exitUsage, nil, args...)
	}

	// Through the daemons.
	bob.start()
	alice.start()
	alice.ok("send", "message", "bob", "hi")
	alice.wantCode(exitUnknownPeer, []string{"carol"}, "send", "message", "carol", "hi")
	alice.wantCode(exitUsage, nil, "send", "response", "bob", "notauuid", "completed", "null")
	alice.wantCode(exitUsage, nil, "send", "response", "bob", uuid, "done", "null")
	t.Run("bad JSON through the daemon", func(t *testing.T) {
		// Standalone, bad JSON is exit 2 (above); through the daemon it
		// must be too.
		for _, args := range [][]string{
			{"send", "request", "bob", "add", `{"a":`},
			{"send", "response", "bob", uuid, "completed", `{"a":`},
		} {
			r := alice.run(args...)
			if r.code != exitUsage || !strings.Contains(r.stderr, "not valid JSON") {
				t.Fatalf("want exit %d\n%s", exitUsage, r)
			}
		}
	})

	// The receiver goes away: the send fails as soon as the connection
	// does, well within the ack timeout.
	bob.stop()
	for _, via := range []string{"daemon", "standalone"} {
		if via == "standalone" {
			alice.stop()
		}
		start := time.Now()
		alice.wantCode(exitPeerOffline, []string{"offline"}, "send", "message", "bob", "still there?")
		if el := time.Since(start); el > testAckSecs*time.Second+5*time.Second {
			t.Errorf("%s: peer offline reported after %v; ack timeout is %ds", via, el, testAckSecs)
		}
	}
	alice.wantCode(exitNoDaemon, nil, "inbox", "--ack")
	// Nothing can arrive without a daemon: --wait does not pretend to wait.
	alice.wantCode(exitNoDaemon, []string{"--wait needs it"}, "inbox", "--wait", "30s")
	// The status that was read, with the error that ended the command.
	r := alice.wantCode(exitNoDaemon, nil, "status", "--json")
	var st struct {
		Running *bool `json:"running"`
		Error   struct {
			Code string `json:"code"`
		} `json:"error"`
	}
	if err := json.Unmarshal([]byte(r.stdout), &st); err != nil || st.Running == nil || *st.Running || st.Error.Code != "no_daemon" {
		t.Fatalf("status --json without a daemon: %v\n%s", err, r.stdout)
	}
}

// Removing a peer from the trust file takes effect in a running daemon
// without a restart, and so does adding it back.
func TestTrustHotReload(t *testing.T) {
	t.Parallel()
	alice, bob := twoNodes(t, "uds")
	alice.start()
	bob.start()
	alice.ok("send", "message", "bob", "before")
	if s := bob.status(); s.Rejected["untrusted"] != 0 {
		t.Fatalf("bob rejected %d untrusted envelopes already", s.Rejected["untrusted"])
	}

	// Named in other letters: the output names the entry removed.
	if out := bob.ok("peers", "remove", "ALICE"); out != "removed alice "+alice.key+"\n" {
		t.Fatalf("peers remove ALICE printed %q", out)
	}
	var last result
	i := 0
	waitUntil(t, "bob to refuse alice", func() bool {
		i++
		last = alice.run("send", "message", "bob", fmt.Sprintf("probe %d", i))
		switch last.code {
		case exitOK:
			return false // the trust file is not reloaded yet
		case exitPeerOffline:
			return true
		}
		t.Fatalf("send during the reload:\n%s", last)
		return false
	})
	if !strings.Contains(last.stderr, "offline") {
		t.Fatalf("refused send:\n%s", last)
	}
	s := bob.status()
	if s.Rejected["untrusted"] == 0 || s.Peers != 0 {
		t.Fatalf("bob after removing alice: %d peers, rejected %v", s.Peers, s.Rejected)
	}
	refused := fmt.Sprintf("probe %d", i)
	if _, ok := findItem(bob.inbox(), "message", func(it cliItem) bool { return it.Body == refused }); ok {
		t.Fatalf("bob refused %q but it is in his inbox", refused)
	}

	bob.trusts(alice)
	waitUntil(t, "bob to accept alice again", func() bool {
		last = alice.run("send", "message", "bob", "after")
		switch last.code {
		case exitOK:
			return true
		case exitPeerOffline:
			return false
		}
		t.Fatalf("send during the reload:\n%s", last)
		return false
	})
	if _, ok := findItem(bob.inbox(), "message", func(it cliItem) bool { return it.Body == "after" && it.Peer == "alice" }); !ok {
		t.Fatal(`"after" is not in bob's inbox`)
	}
	if alice.d.exited() || bob.d.exited() {
		t.Fatal("a daemon exited during the reloads")
	}
}

// With a daemon running, peers add and peers remove are in force in it
// once they return: the very next send goes by the edited trust list.
func TestPeersEditsInForceAtOnce(t *testing.T) {
	t.Parallel()
	alice, bob := twoNodes(t, "uds")
	alice.start()
	bob.start()
	for i := range 2 {
		alice.ok("peers", "remove", "bob")
		if r := alice.run("send", "message", "bob", fmt.Sprintf("to a removed peer %d", i)); r.code != exitUnknownPeer {
			t.Fatalf("send right after peers remove:\n%s", r)
		}
		alice.trusts(bob)
		alice.ok("send", "message", "bob", fmt.Sprintf("to a peer just added %d", i))
		bob.ok("peers", "remove", "alice")
		if r := alice.run("send", "message", "bob", fmt.Sprintf("from a removed peer %d", i)); r.code != exitPeerOffline {
			t.Fatalf("send to a daemon that just removed the sender:\n%s", r)
		}
		bob.trusts(alice)
		alice.ok("send", "message", "bob", fmt.Sprintf("from a peer just added %d", i))
	}
}

func TestConfigCheck(t *testing.T) {
	t.Parallel()
	n := newNode(t, "checked")
	if out := n.ok("config", "check"); !strings.HasPrefix(out, "ok: ") {
		t.Fatalf("config check on a fresh home: %q", out)
	}
	path := filepath.Join(n.home, "meerkat.toml")
	orig, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, append([]byte("colour_scheme = \"dark\"\n"), orig...), 0o600); err != nil {
		t.Fatal(err)
	}
	r := n.run("config", "check")
	if r.code == exitOK || !strings.Contains(r.stderr, "colour_scheme") || strings.Contains(r.stdout, "ok:") {
		t.Fatalf("config check with an unknown key:\n%s", r)
	}
}

// quickstart is the README's quickstart, verbatim: TestQuickstart runs it.
// Lines starting with "#" are comments; a trailing " &" runs a command in
// the background, as job 1, 2, … of the shell.
var quickstart = []string{
	"# In a clone of meerkatd: build it and put it on PATH (or: make install)",
	"make build",
	"PATH=$PWD/bin:$PATH",
	"# Two nodes, alice and bob, with their homes in a temporary directory:",
	"D=$(mktemp -d)",
	"meerkatd init --name alice --home $D/alice",
	"meerkatd init --name bob --home $D/bob",
	"# Run both daemons in the background, and wait until they serve:",
	"meerkatd run --log-level warn --home $D/alice &",
	"meerkatd run --log-level warn --home $D/bob &",
	"meerkatd status --wait 10s --home $D/alice",
	"meerkatd status --wait 10s --home $D/bob",
	"# Pair them: alice leaves a one-time code for her user's other nodes, bob takes it:",
	"meerkatd pair offer --local --home $D/alice &",
	"meerkatd pair accept --local alice --home $D/bob",
	"# Alice sends a message; bob reads his inbox:",
	"meerkatd send message bob 'hello from alice' --home $D/alice",
	"meerkatd inbox --home $D/bob",
	"# Stop both daemons (jobs 1 and 2 of this shell):",
	"kill %1 %2",
}

// splitShell splits a quickstart line into words: spaces separate, single
// quotes group, $NAME is replaced from vars.
func splitShell(t *testing.T, line string, vars map[string]string) []string {
	t.Helper()
	var words []string
	var cur strings.Builder
	inWord, quoted := false, false
	for i := 0; i < len(line); i++ {
		c := line[i]
		switch {
		case quoted && c == '\'':
			quoted = false
		case quoted:
			cur.WriteByte(c)
		case c == '\'':
			quoted, inWord = true, true
		case c == ' ':
			if inWord {
				words = append(words, cur.String())
				cur.Reset()
				inWord = false
			}
		case c == '$':
			j := i + 1
			for j < len(line) && (line[j] == '_' || line[j] >= 'A' && line[j] <= 'Z') {
				j++
			}
			v, ok := vars[line[i+1:j]]
			if !ok {
				t.Fatalf("quickstart line %q: unknown variable $%s", line, line[i+1:j])
			}
			cur.WriteString(v)
			inWord = true
			i = j - 1
		default:
			cur.WriteByte(c)
			inWord = true
		}
	}
	if quoted {
		t.Fatalf("quickstart line %q: unterminated quote", line)
	}
	if inWord {
		words = append(words, cur.String())
	}
	return words
}

// TestQuickstart runs the quickstart: each meerkatd line as it stands
// (with the meerkatd these tests built: "make build" and the PATH line
// are what puts one on a user's PATH, and TestMakeInstall runs make), the
// temporary directory made by the test, and kill as SIGTERM to the jobs
// named, each of which must exit 0.
func TestQuickstart(t *testing.T) {
	t.Parallel()
	vars := map[string]string{}
	nodes := map[string]*testNode{} // by home
	rt := t.TempDir()               // the runtime directory of this run's nodes: local pairing finds only them
	type job struct {
		n  *testNode   // a daemon
		bg *background // any other command
	}
	var jobs []job
	invocations := 0
	var outputs []result
	nodeFor := func(home string) *testNode {
		if nodes[home] == nil {
			nodes[home] = &testNode{t: t, name: filepath.Base(home), home: home, env: []string{"XDG_RUNTIME_DIR=" + rt}}
		}
		return nodes[home]
	}
	for _, line := range quickstart {
		switch name, value, assign := strings.Cut(line, "="); {
		case strings.HasPrefix(line, "#"):
			continue
		case line == "make build":
			continue // the tests run the meerkatd they built
		case assign && name == "PATH":
			continue // the same
		case assign && value == "$(mktemp -d)":
			dir, err := os.MkdirTemp("", "mk") // short: socket paths are limited
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { os.RemoveAll(dir) })
			vars[name] = dir
			continue
		case strings.HasPrefix(line, "kill "):
			for _, w := range strings.Fields(line)[1:] {
				i, err := strconv.Atoi(strings.TrimPrefix(w, "%"))
				if err != nil || i < 1 || i > len(jobs) || jobs[i-1].n == nil {
					t.Fatalf("quickstart line %q: %s is not a daemon's job", line, w)
				}
				jobs[i-1].n.stop() // SIGTERM; it must exit 0 and remove its sockets
			}
			continue
		}
		invocations++
		background := strings.HasSuffix(line, " &")
		words := splitShell(t, strings.TrimSuffix(line, " &"), vars)
		// Every command names its home with --home.
		var n *testNode
		var args []string
		for j := 1; j < len(words); j++ {
			if words[j] == "--home" && j+1 < len(words) {
				n = nodeFor(words[j+1])
				j++
				continue
			}
			args = append(args, words[j])
		}
		if words[0] != "meerkatd" || n == nil || len(args) == 0 {
			t.Fatalf("quickstart line %q is not meerkatd ... --home HOME", line)
		}
		switch {
		case background && args[0] == "run":
			n.start(args[1:]...)
			jobs = append(jobs, job{n: n})
			continue
		case background:
			jobs = append(jobs, job{bg: n.startBackground(args...)})
			continue
		}
		r := n.run(args...)
		if r.code != exitOK {
			t.Fatalf("quickstart line %q:\n%s", line, r)
		}
		outputs = append(outputs, r)
		if args[0] == "init" && !strings.Contains(r.stdout, "meerkatd pair offer --local --home '"+n.home+"'") {
			t.Errorf("init does not show the next steps:\n%s", r.stdout)
		}
	}
	if invocations > 12 {
		t.Errorf("the quickstart runs meerkatd %d times; keep it to 12", invocations)
	}
	for _, j := range jobs {
		if j.bg == nil {
			if !j.n.d.stopped {
				t.Errorf("the quickstart leaves %s's daemon running", j.n.name)
			}
			continue
		}
		if code, rest := j.bg.wait(t); code != 0 || !strings.Contains(rest, "trusting bob") {
			t.Errorf("background command: exit %d, %q\n%s", code, rest, j.bg.stderr.String())
		}
	}
	// The last command shows bob's inbox: alice's message.
	last := outputs[len(outputs)-1]
	for _, want := range []string{"message from alice", "hello from alice"} {
		if !strings.Contains(last.stdout, want) {
			t.Errorf("bob's inbox lacks %q:\n%s", want, last.stdout)
		}
	}
}

// The README shows the quickstart verbatim, so what users copy is what the
// test runs.
func TestREADMEQuickstart(t *testing.T) {
	readme, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(readme), "```sh\n"+strings.Join(quickstart, "\n")+"\n```") {
		t.Fatal("README.md does not show the quickstart lines verbatim; copy them from the quickstart variable")
	}
}

// The quickstart as a person pastes it: the README's lines, unchanged, run
// by bash, with the meerkatd these tests built on PATH. Only make is a
// stand-in (the binary is built already); after the lines the test waits
// for the daemons the last line stopped and removes the temporary homes.
func TestQuickstartInBash(t *testing.T) {
	t.Parallel()
	bash, err := exec.LookPath("bash")
	if err != nil {
		t.Skip("no bash on this machine")
	}
	bin := testutil.Meerkatd(t)
	script := "set -e\nmake() { :; }\n" + strings.Join(quickstart, "\n") + "\nwait\nrm -rf \"$D\"\n"
	cmd := exec.Command(bash, "-c", script)
	cmd.Dir = t.TempDir() // no ./bin/meerkatd of a checkout to run instead
	env := []string{"PATH=" + filepath.Dir(bin) + ":" + os.Getenv("PATH"), "XDG_RUNTIME_DIR=" + t.TempDir(), "HOME=" + t.TempDir()}
	for _, kv := range childEnv() {
		if !strings.HasPrefix(kv, "PATH=") && !strings.HasPrefix(kv, "XDG_RUNTIME_DIR=") && !strings.HasPrefix(kv, "HOME=") {
			env = append(env, kv)
		}
	}
	cmd.Env = env
	var out, errOut strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &errOut
	done := make(chan error, 1)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { done <- cmd.Wait() }()
	select {
	case err = <-done:
	case <-time.After(2 * time.Minute):
		cmd.Process.Kill()
		<-done
		t.Fatalf("the quickstart did not finish in 2 minutes\nstdout:\n%s\nstderr:\n%s", out.String(), errOut.String())
	}
	if err != nil {
		t.Fatalf("the quickstart failed: %v\nstdout:\n%s\nstderr:\n%s", err, out.String(), errOut.String())
	}
	if !strings.Contains(out.String(), "hello from alice") {
		t.Fatalf("bob's inbox is not in the output:\n%s\nstderr:\n%s", out.String(), errOut.String())
	}
}

// A meerkat.toml that no longer parses (an edit under way) does not make
// status fail while the daemon that read the good one runs: status
// answers from it, with a warning naming the problem; without a daemon
// it is bad_config, as before. The same for inbox, send and card.
func TestStatusWithABadConfigWhileTheDaemonRuns(t *testing.T) {
	t.Parallel()
	n := newNode(t, "alice")
	n.start()
	path := filepath.Join(n.home, "meerkat.toml")
	good, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, append(slices.Clone(good), "\n[comms\n"...), 0o600); err != nil {
		t.Fatal(err)
	}
	r := n.run("status", "--json")
	var s cliStatus
	if r.code != exitOK || json.Unmarshal([]byte(r.stdout), &s) != nil || !s.Daemon || !strings.Contains(r.stderr, "warning: ") || !strings.Contains(r.stderr, "meerkat.toml") {
		t.Fatalf("status with a bad meerkat.toml while the daemon runs:\n%s", r)
	}
	// The inbox too: it is the daemon's; and send and card go through it.
	if r := n.run("inbox", "--json"); r.code != exitOK || !strings.Contains(r.stderr, "warning: ") || !json.Valid([]byte(r.stdout)) {
		t.Fatalf("inbox with a bad meerkat.toml while the daemon runs:\n%s", r)
	}
	if r := n.run("send", "message", "nobody", "hi"); r.code != exitUnknownPeer || !strings.Contains(r.stderr, "warning: ") {
		t.Fatalf("send with a bad meerkat.toml while the daemon runs (the daemon's unknown_peer, not bad_config):\n%s", r)
	}
	if r := n.run("card", "show", "--json"); r.code != exitOK || !strings.Contains(r.stderr, "warning: ") || !json.Valid([]byte(r.stdout)) {
		t.Fatalf("card with a bad meerkat.toml while the daemon runs:\n%s", r)
	}
	if err := os.WriteFile(path, good, 0o600); err != nil { // the daemon stops cleanly with it
		t.Fatal(err)
	}
	n.stop()
	if err := os.WriteFile(path, append(slices.Clone(good), "\n[comms\n"...), 0o600); err != nil {
		t.Fatal(err)
	}
	if r := n.run("status"); r.code != exitError || !strings.Contains(r.stderr, "bad_config") {
		t.Fatalf("status with a bad meerkat.toml and no daemon:\n%s", r)
	}
	if r := n.run("inbox"); r.code != exitError || !strings.Contains(r.stderr, "bad_config") {
		t.Fatalf("inbox with a bad meerkat.toml and no daemon:\n%s", r)
	}
}
