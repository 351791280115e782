package main

import (
	"bufio"
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/meerkatd/meerkatd/comms/node"
)

// background is a meerkatd command left running, e.g. pair offer.
type background struct {
	cmd    *exec.Cmd
	cancel context.CancelFunc
	stdout *bufio.Reader
	stderr bytes.Buffer // written by exec until the command is waited for
	rest   bytes.Buffer
	once   sync.Once
	err    error
}

// startBackground runs meerkatd args --home <home> without waiting; the
// test's end kills it if it still runs.
func (n *testNode) startBackground(args ...string) *background {
	t := n.t
	t.Helper()
	args = append(args[:len(args):len(args)], "--home", n.home)
	ctx, cancel := context.WithTimeout(context.Background(), cmdTimeout)
	cmd := exec.CommandContext(ctx, binary(t), args...)
	cmd.Env = append(baseEnv(), n.env...)
	cmd.WaitDelay = 5 * time.Second
	out, err := cmd.StdoutPipe()
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	b := &background{cmd: cmd, cancel: cancel, stdout: bufio.NewReader(out)}
	cmd.Stderr = &b.stderr
	if err := cmd.Start(); err != nil {
		cancel()
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cancel()
		b.finish()
		if t.Failed() {
			t.Logf("background %v, stderr:\n%s", args, b.stderr.String())
		}
	})
	return b
}

// finish reads the rest of its stdout and waits for it to exit, once;
// after it, stderr is complete and safe to read.
func (b *background) finish() error {
	b.once.Do(func() {
		b.rest.ReadFrom(b.stdout)
		b.err = b.cmd.Wait()
	})
	return b.err
}

// line reads the next line of its stdout.
func (b *background) line(t *testing.T) string {
	t.Helper()
	s, err := b.stdout.ReadString('\n')
	if err != nil {
		b.cancel()
		b.finish()
		t.Fatalf("reading %v: %v; stderr:\n%s", b.cmd.Args, err, b.stderr.String())
	}
	return strings.TrimSpace(s)
}

// wait waits for it to exit and returns its status and remaining stdout.
func (b *background) wait(t *testing.T) (int, string) {
	t.Helper()
	err := b.finish()
	if ee, ok := err.(*exec.ExitError); ok {
		return ee.ExitCode(), b.rest.String()
	} else if err != nil {
		t.Fatalf("%v: %v", b.cmd.Args, err)
	}
	return 0, b.rest.String()
}

// peerAddr returns the address n's trust list has for peer name.
func peerAddr(t *testing.T, n *testNode, name string) string {
	t.Helper()
	var ps []struct {
		Name string `json:"name"`
		Addr string `json:"addr"`
	}
	n.okJSON(&ps, "peers", "list", "--json")
	for _, p := range ps {
		if p.Name == name {
			return p.Addr
		}
	}
	t.Fatalf("%s does not trust %s", n.name, name)
	return ""
}

func peerNames(t *testing.T, n *testNode) map[string]string {
	t.Helper()
	var ps []struct {
		Name   string `json:"name"`
		PubKey string `json:"pubkey"`
	}
	n.okJSON(&ps, "peers", "list", "--json")
	out := map[string]string{}
	for _, p := range ps {
		out[p.Name] = p.PubKey
	}
	return out
}

// Pairing over a TCP port gives both sides tls:// entries: both speak
// TLS. With "tls-only" both also refuse plaintext TCP, so the messages
// after the pairing can only have gone over TLS.
func TestPairTwoDaemons(t *testing.T) {
	t.Parallel()
	for _, name := range []string{"uds", "tcp", "tls-only"} {
		t.Run(name, func(t *testing.T) {
			alice, bob := newNode(t, "alice"), newNode(t, "bob")
			carol := newNode(t, "carol")
			if name != "uds" {
				for _, n := range []*testNode{alice, bob, carol} {
					port := strconv.Itoa(freeTCPPort(t))
					n.addr = "tls://127.0.0.1:" + port
					n.env = append(n.env, "MEERKAT_COMMS_LISTEN_TCP=127.0.0.1:"+port)
					if name == "tls-only" {
						n.env = append(n.env, "MEERKAT_COMMS_TCP_PLAINTEXT=refuse")
					}
				}
			}
			alice.start(alice.runArgs()...)
			bob.start(bob.runArgs()...)

			offer := alice.startBackground("pair", "offer", "--ttl", "1m")
			line := offer.line(t)
			if !strings.HasPrefix(line, "meerkat-pair/1 ") || !strings.HasSuffix(line, alice.addr) {
				t.Fatalf("offer line %q (alice listens on %s)", line, alice.addr)
			}
			out := bob.ok("pair", "accept", line)
			if !strings.Contains(out, "trusting alice ("+alice.key+")") {
				t.Fatalf("bob: %q", out)
			}
			code, rest := offer.wait(t)
			if code != 0 || !strings.Contains(rest, "trusting bob ("+bob.key+") at "+bob.addr) {
				t.Fatalf("offer exit %d, stdout %q, stderr %s", code, rest, offer.stderr.String())
			}
			if a, b := peerNames(t, alice), peerNames(t, bob); a["bob"] != bob.key || b["alice"] != alice.key {
				t.Fatalf("trust after pairing: alice %v, bob %v", a, b)
			}
			if a, b := peerAddr(t, alice, "bob"), peerAddr(t, bob, "alice"); a != bob.addr || b != alice.addr {
				t.Fatalf("addresses after pairing: alice has bob at %s, bob has alice at %s; want %s and %s", a, b, bob.addr, alice.addr)
			}
			// Both daemons use the new trust at once: a message each way.
			alice.ok("send", "message", "bob", "hello bob")
			bob.ok("send", "message", "alice", "hello alice")
			// Bob's agent is told of the pairing (a system notice, read
			// first), then alice's message.
			var got []classItem
			waitUntil(t, "bob's two items", func() bool { got = bob.classInbox().Messages; return len(got) >= 2 })
			if len(got) != 2 || got[0].Class != "system" || got[0].Notice == nil || got[0].Notice.Event != "paired" ||
				got[0].Notice.Peer != "alice" || got[1].Body != "hello bob" {
				t.Fatalf("bob's inbox %+v", got)
			}

			// The code works once: a third node cannot reuse it.
			carol.wantCode(exitPairFailed, []string{"no such offer"}, "pair", "accept", line)
			if len(peerNames(t, carol)) != 0 || len(peerNames(t, alice)) != 1 {
				t.Fatal("a reused code changed trust")
			}
		})
	}
}

func TestPairFailuresLeaveTrustAlone(t *testing.T) {
	t.Parallel()
	alice, bob := newNode(t, "alice"), newNode(t, "bob")
	alice.start()
	var info struct {
		Line    string    `json:"line"`
		Expires time.Time `json:"expires"`
	}
	alice.okJSON(&info, "pair", "offer", "--no-wait", "--json", "--ttl", "1m")
	// A wrong code: one character changed.
	f := strings.Fields(info.Line)
	wrong := []byte(f[1])
	if wrong[0] == 'A' {
		wrong[0] = 'B'
	} else {
		wrong[0] = 'A'
	}
	bob.wantCode(exitPairFailed, []string{"no such offer"}, "pair", "accept", f[0], string(wrong), f[2])
	bob.wantCode(exitUsage, []string{"pairing code line"}, "pair", "accept", "meerkat-pair/1", "short", f[2])
	// Expired.
	var short struct {
		Line string `json:"line"`
	}
	alice.okJSON(&short, "pair", "offer", "--no-wait", "--json", "--ttl", "1s")
	time.Sleep(1100 * time.Millisecond) // let the offer expire (its TTL is the thing under test)
	bob.wantCode(exitPairFailed, []string{"expired"}, "pair", "accept", short.Line)
	if a, b := peerNames(t, alice), peerNames(t, bob); len(a)+len(b) != 0 {
		t.Fatalf("failed pairings changed trust: alice %v, bob %v", a, b)
	}
	// The first offer still works after the failures.
	bob.ok("pair", "accept", info.Line)
	if peerNames(t, alice)["bob"] != bob.key {
		t.Fatal("alice does not trust bob")
	}
}

// Neither node runs a daemon: pair offer listens itself while it waits.
func TestPairWithoutDaemons(t *testing.T) {
	t.Parallel()
	alice, bob := newNode(t, "alice"), newNode(t, "bob")
	offer := alice.startBackground("pair", "offer", "--name-for-peer", "robert")
	line := offer.line(t)
	bob.ok("pair", "accept", line, "--name", "al")
	if code, rest := offer.wait(t); code != 0 || !strings.Contains(rest, "trusting robert") {
		t.Fatalf("offer: %d %q %s", code, rest, offer.stderr.String())
	}
	if peerNames(t, alice)["robert"] != bob.key || peerNames(t, bob)["al"] != alice.key {
		t.Fatal("names for the peers not used")
	}
	alice.start()
	bob.ok("send", "message", "al", "via the paired trust")
	if got := alice.inbox(); len(got) != 1 {
		t.Fatalf("alice's inbox %+v", got)
	}
}

// pairLocally runs pair offer --local on offerer and pair accept --local
// ref on accepter, and checks that each trusts the other: the accepter
// under wantName.
func pairLocally(t *testing.T, offerer, accepter *testNode, ref, wantName string) {
	t.Helper()
	offer := offerer.startBackground("pair", "offer", "--local")
	offer.line(t) // printed once the offer is left in the directory
	if out := accepter.ok("pair", "accept", "--local", ref); !strings.Contains(out, "trusting "+wantName+" ("+offerer.key+")") {
		t.Fatalf("%s: %q", accepter.name, out)
	}
	if code, rest := offer.wait(t); code != 0 || !strings.Contains(rest, "trusting "+accepter.name) {
		t.Fatalf("%s's offer: %d %q %s", offerer.name, code, rest, offer.stderr.String())
	}
}

// shareRuntime gives nodes one runtime directory (a stand-in for
// $XDG_RUNTIME_DIR), returned, as one user's nodes on one host have.
func shareRuntime(t *testing.T, nodes ...*testNode) string {
	rt := t.TempDir()
	for _, n := range nodes {
		n.env = append(n.env, "XDG_RUNTIME_DIR="+rt)
	}
	return rt
}

// Two nodes of one user on one host find each other and pair without a
// code changing hands: the runtime directory's permissions are the proof.
func TestPairLocal(t *testing.T) {
	t.Parallel()
	alice, bob := newNode(t, "alice"), newNode(t, "bob")
	rt := shareRuntime(t, alice, bob)
	alice.start()
	bob.start()
	var found []node.Announcement
	bob.okJSON(&found, "peers", "discover", "--json")
	if len(found) != 1 || found[0].Name != "alice" || found[0].Key != alice.key || found[0].Addr != alice.addr {
		t.Fatalf("bob discovers %+v", found)
	}
	bob.wantCode(exitPairFailed, []string{"no local offer"}, "pair", "accept", "--local", "alice")

	pairLocally(t, alice, bob, "alice", "alice")
	alice.ok("send", "message", "bob", "found you locally")
	bob.ok("send", "message", "alice", "likewise")

	// A discovery directory other users could read is refused.
	if err := os.Chmod(filepath.Join(rt, "meerkat"), 0o755); err != nil {
		t.Fatal(err)
	}
	bob.wantCode(exitError, []string{"open to other users"}, "peers", "discover")
}

// Without daemons, pair offer --local is the node the other finds: it
// announces itself while it waits, and a node naming itself is a usage
// error.
func TestPairLocalWithoutDaemons(t *testing.T) {
	t.Parallel()
	alice, bob := newNode(t, "alice"), newNode(t, "bob")
	shareRuntime(t, alice, bob)
	bob.wantCode(exitUsage, []string{"cannot pair with itself"}, "pair", "accept", "--local", "bob")
	// The accept may start first: it waits for the offer's node to show.
	accept := bob.startBackground("pair", "accept", "--local", "alice")
	offer := alice.startBackground("pair", "offer", "--local")
	if code, rest := accept.wait(t); code != 0 || !strings.Contains(rest, "trusting alice") {
		t.Fatalf("accept started before the offer: %d %q %s", code, rest, accept.stderr.String())
	}
	if code, rest := offer.wait(t); code != 0 || !strings.Contains(rest, "trusting bob") {
		t.Fatalf("offer: %d %q %s", code, rest, offer.stderr.String())
	}
	bob.ok("peers", "remove", "alice")
	alice.ok("peers", "remove", "bob")
	pairLocally(t, alice, bob, "alice", "alice")
	// The entry went with the command.
	if out := bob.ok("peers", "discover"); strings.Contains(out, alice.key) {
		t.Fatalf("alice still announced after her offer ended: %q", out)
	}
}

// A node named so that the name rule refuses it as a peer's name
// ("_al") is found by that name, and trusted under the usable form of
// it, as a line from it would be.
func TestPairLocalUnusableName(t *testing.T) {
	t.Parallel()
	al, bob := newNode(t, "_al"), newNode(t, "bob")
	shareRuntime(t, al, bob)
	al.start()
	bob.start()
	pairLocally(t, al, bob, "_al", "al")
}

// Every home made without --name is "meerkat": pair accept --local
// meerkat takes the offer of the one such node that has one open; with
// two open it names both, and the key picks one.
func TestPairLocalSharedName(t *testing.T) {
	t.Parallel()
	erin, gina, frank := newNode(t, "meerkat"), newNode(t, "meerkat"), newNode(t, "frank")
	if gina.key < erin.key {
		erin, gina = gina, erin // gina, the one to offer, is listed second
	}
	shareRuntime(t, erin, gina, frank)
	for _, n := range []*testNode{erin, gina, frank} {
		n.start()
	}
	pairLocally(t, gina, frank, "meerkat", "meerkat")

	erinOffer, ginaOffer := erin.startBackground("pair", "offer", "--local"), gina.startBackground("pair", "offer", "--local")
	erinOffer.line(t)
	ginaOffer.line(t)
	frank.wantCode(exitUsage, []string{`2 running nodes named "meerkat" have a local offer open`, erin.key, erin.home, gina.key, gina.home, "pass the key"},
		"pair", "accept", "--local", "meerkat")
	if out := frank.ok("pair", "accept", "--local", erin.key, "--name", "erin"); !strings.Contains(out, "trusting erin ("+erin.key+")") {
		t.Fatalf("frank: %q", out)
	}
	if code, rest := erinOffer.wait(t); code != 0 || !strings.Contains(rest, "trusting frank") {
		t.Fatalf("erin's offer: %d %q %s", code, rest, erinOffer.stderr.String())
	}
	if got := peerNames(t, frank); len(got) != 2 || got["erin"] != erin.key || got["meerkat"] != gina.key {
		t.Fatalf("frank trusts %v", got)
	}
}

// Five failed attempts from one source within a minute lock it out, even
// with the right code; the daemon's trust is untouched.
func TestPairRateLimited(t *testing.T) {
	t.Parallel()
	alice, bob := newNode(t, "alice"), newNode(t, "bob")
	alice.addr = "tcp://127.0.0.1:" + strconv.Itoa(freeTCPPort(t))
	bob.env = append(bob.env, "MEERKAT_COMMS_LISTEN_TCP=127.0.0.1:"+strconv.Itoa(freeTCPPort(t)))
	alice.start(alice.runArgs()...)
	var info struct {
		Line string `json:"line"`
	}
	alice.okJSON(&info, "pair", "offer", "--no-wait", "--json")
	f := strings.Fields(info.Line)
	wrong := []byte(f[1])
	wrong[5] = map[bool]byte{true: 'C', false: 'D'}[wrong[5] == 'D']
	for range 5 {
		bob.wantCode(exitPairFailed, []string{"no such offer"}, "pair", "accept", f[0], string(wrong), f[2])
	}
	bob.wantCode(exitPairFailed, []string{"too many pairing attempts"}, "pair", "accept", info.Line)
	if a, b := peerNames(t, alice), peerNames(t, bob); len(a)+len(b) != 0 {
		t.Fatalf("trust changed: alice %v, bob %v", a, b)
	}
}

// The line can come on stdin (no process list, no shell history), and an
// interrupted offer is withdrawn.
func TestPairStdinAndInterrupt(t *testing.T) {
	t.Parallel()
	alice, bob := newNode(t, "alice"), newNode(t, "bob")
	alice.start()
	offer := alice.startBackground("pair", "offer")
	line := offer.line(t)
	if err := offer.cmd.Process.Signal(os.Interrupt); err != nil {
		t.Fatal(err)
	}
	if code, _ := offer.wait(t); code == 0 || !strings.Contains(offer.stderr.String(), "withdrawn") {
		t.Fatalf("interrupted offer: exit %d, stderr %s", code, offer.stderr.String())
	}
	bob.wantCode(exitPairFailed, []string{"no such offer"}, "pair", "accept", line)

	// The terminal closed (SIGHUP): the same.
	hup := alice.startBackground("pair", "offer")
	hupLine := hup.line(t)
	if err := hup.cmd.Process.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	if code, _ := hup.wait(t); code != exitInterrupted || !strings.Contains(hup.stderr.String(), "withdrawn") {
		t.Fatalf("offer after SIGHUP: exit %d, stderr %s", code, hup.stderr.String())
	}
	bob.wantCode(exitPairFailed, []string{"no such offer"}, "pair", "accept", hupLine)

	var info struct {
		Line string `json:"line"`
	}
	alice.okJSON(&info, "pair", "offer", "--no-wait", "--json")
	cmd := exec.Command(binary(t), "pair", "accept", "--home", bob.home)
	cmd.Env = append(baseEnv(), bob.env...)
	cmd.Stdin = strings.NewReader(info.Line + "\n")
	out, err := cmd.CombinedOutput()
	if err != nil || !strings.Contains(string(out), "trusting alice") {
		t.Fatalf("accept from stdin: %v\n%s", err, out)
	}
}

// pair offer ended by SIGINT withdraws the offer and exits 130, with and
// without a daemon.
func TestPairOfferInterrupted(t *testing.T) {
	t.Parallel()
	for _, daemon := range []bool{false, true} {
		n := newNode(t, "alice")
		if daemon {
			n.start()
		}
		cmd := exec.Command(binary(t), "pair", "offer", "--home", n.home)
		cmd.Env = append(baseEnv(), n.env...)
		stdout, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		line, err := bufio.NewReader(stdout).ReadString('\n') // the offer is open
		if err != nil || !strings.HasPrefix(line, "meerkat-pair/1 ") {
			cmd.Process.Kill()
			cmd.Wait()
			t.Fatalf("daemon %v: offer line %q, %v", daemon, line, err)
		}
		cmd.Process.Signal(syscall.SIGINT)
		cmd.Wait()
		if code := cmd.ProcessState.ExitCode(); code != exitInterrupted || !strings.Contains(stderr.String(), "the offer is withdrawn") {
			t.Fatalf("daemon %v: exit %d, stderr %q; want %d, the offer withdrawn", daemon, code, stderr.String(), exitInterrupted)
		}
	}
}

// pair accept with a name the trust list cannot hold fails at once as a
// usage error, before anything is dialled.
func TestPairAcceptBadNameAtOnce(t *testing.T) {
	t.Parallel()
	n := newNode(t, "bob")
	const line = "meerkat-pair/1 7QKD-M2ZT-XW4H-ABN6-YJ3C-PL5E-RA uds:///nonexistent/alice.sock"
	n.wantCode(exitUsage, []string{"the name for the peer", "(bad_argument)"}, "pair", "accept", line, "--name", "bad name")
}

// A name asked for that the pairing could not use is pointed out: the
// peer is trusted under another.
func TestPairAcceptNameNotUsedNoted(t *testing.T) {
	t.Parallel()
	alice, bob := newNode(t, "alice"), newNode(t, "bob")
	bob.trusts(alice) // as "alice"
	alice.start()
	var info struct {
		Line string `json:"line"`
	}
	alice.okJSON(&info, "pair", "offer", "--no-wait", "--json")
	r := bob.run("pair", "accept", info.Line, "--name", "alice2")
	if r.code != exitOK || !strings.Contains(r.stderr, "note: trusted as alice, not alice2") {
		t.Fatalf("accept with --name for a key trusted already: %s", r)
	}
}

// pair cancel withdraws the daemon's open offers: one by its line or id,
// or all; a withdrawn line no longer pairs. Without a daemon there is
// nothing to withdraw (exit 5); with none open it fails (exit 6).
func TestPairCancel(t *testing.T) {
	t.Parallel()
	alice, bob := newNode(t, "alice"), newNode(t, "bob")
	alice.wantCode(exitNoDaemon, []string{"no daemon is running"}, "pair", "cancel")
	alice.start()
	alice.wantCode(exitPairFailed, []string{"no open offer"}, "pair", "cancel")
	alice.wantCode(exitUsage, []string{"--ttl is for pair offer"}, "pair", "cancel", "--ttl", "1m")
	// A zero given is no way to ask for the default (the longest code).
	alice.wantCode(exitUsage, []string{"--ttl must be positive"}, "pair", "offer", "--no-wait", "--ttl", "0")
	alice.wantCode(exitUsage, []string{"--ttl must be positive"}, "send", "message", "bob", "hi", "--reliable", "--ttl", "0s")
	var first, second, third struct {
		ID   string `json:"id"`
		Line string `json:"line"`
	}
	alice.okJSON(&first, "pair", "offer", "--no-wait", "--json")
	alice.okJSON(&second, "pair", "offer", "--no-wait", "--json")
	alice.okJSON(&third, "pair", "offer", "--no-wait", "--json")
	if out := alice.ok(append([]string{"pair", "cancel"}, strings.Fields(first.Line)...)...); !strings.Contains(out, "withdrew 1 offer") {
		t.Fatalf("pair cancel LINE printed %q", out)
	}
	bob.wantCode(exitPairFailed, []string{"no such offer"}, "pair", "accept", first.Line)
	alice.wantCode(exitPairFailed, []string{"no such offer"}, "pair", "cancel", first.Line)
	var got struct {
		Withdrawn int `json:"withdrawn"`
	}
	alice.okJSON(&got, "pair", "cancel", second.ID, "--json")
	if got.Withdrawn != 1 {
		t.Fatalf("pair cancel ID withdrew %d", got.Withdrawn)
	}
	alice.wantCode(exitUsage, []string{"neither an offer's line nor its id"}, "pair", "cancel", "bogus")
	// The line in any form pair accept takes: the code in lower case.
	var fourth struct {
		Line string `json:"line"`
	}
	alice.okJSON(&fourth, "pair", "offer", "--no-wait", "--json")
	f := strings.Fields(fourth.Line)
	alice.okJSON(&got, "pair", "cancel", f[0], strings.ToLower(f[1]), f[2], "--json")
	if got.Withdrawn != 1 {
		t.Fatalf("pair cancel with the code in lower case withdrew %d", got.Withdrawn)
	}
	alice.okJSON(&got, "pair", "cancel", "--json")
	if got.Withdrawn != 1 {
		t.Fatalf("pair cancel (all) withdrew %d, want the one left", got.Withdrawn)
	}
	bob.wantCode(exitPairFailed, []string{"no such offer"}, "pair", "accept", third.Line)
	if a, b := peerNames(t, alice), peerNames(t, bob); len(a)+len(b) != 0 {
		t.Fatalf("withdrawn offers changed trust: alice %v, bob %v", a, b)
	}
}
