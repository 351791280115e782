package main

import (
	"bufio"
	"bytes"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

// Broadcast and tasks across real daemons, driven through the CLI.

type (
	// bcItem is an inbox item with the fields of broadcasts and tasks.
	bcItem struct {
		ID          string `json:"id"`
		Kind        string `json:"kind"`
		Peer        string `json:"peer"`
		Body        string `json:"body"`
		Intent      string `json:"intent"`
		TaskID      string `json:"task_id"`
		BroadcastID string `json:"broadcast_id"`
		Untrusted   bool   `json:"untrusted"`
	}
	bcCopy struct {
		Peer      string `json:"peer"`
		PubKey    string `json:"pubkey"`
		ID        string `json:"id"`
		Delivery  string `json:"delivery"`
		LastError string `json:"last_error"`
		Marked    bool   `json:"marked"`
		Code      string `json:"code"`
	}
	bcResult struct {
		ID     string   `json:"broadcast_id"`
		TaskID string   `json:"task_id"`
		Copies []bcCopy `json:"copies"`
	}
	cliTask struct {
		ID           string `json:"id"`
		State        string `json:"state"`
		Participants []struct {
			Peer   string `json:"peer"`
			PubKey string `json:"pubkey"`
		} `json:"participants"`
		CompletedBy string          `json:"completed_by"`
		Result      json.RawMessage `json:"result"`
	}
	cliTaskWait struct {
		Task     cliTask `json:"task"`
		TimedOut bool    `json:"timed_out"`
	}
)

// bcInbox returns n's inbox items.
// bcInbox lists what peers sent to n (its own notices, such as the
// pairing's, left out), oldest first.
func bcInbox(n *testNode) []bcItem {
	n.t.Helper()
	var b struct {
		Messages []bcItem `json:"messages"`
	}
	n.okJSON(&b, "inbox", "--order", "arrival", "--json")
	var out []bcItem
	for _, m := range b.Messages {
		if m.Untrusted {
			out = append(out, m)
		}
	}
	return out
}

// refPeer is the Python reference-style peer (testdata/refpeer.py): it
// takes one envelope on a Unix socket, verifies it as the Rust
// reference would, acks it and reports.
type refPeer struct {
	key    string // ed25519:…
	addr   string // uds://…
	cmd    *exec.Cmd
	report chan string // its JSON report line
}

func startRefPeer(t *testing.T, sender string) *refPeer {
	t.Helper()
	py, err := exec.LookPath("python3")
	if err != nil {
		t.Fatalf("python3 is needed for the reference-style peer: %v", err)
	}
	seed := make([]byte, ed25519.SeedSize)
	rand.Read(seed)
	pub := ed25519.NewKeyFromSeed(seed).Public().(ed25519.PublicKey)
	dir, err := os.MkdirTemp("", "mkref")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	sock := filepath.Join(dir, "ref.sock")
	cmd := exec.Command(py, filepath.Join("testdata", "refpeer.py"), sock, hex.EncodeToString(seed), sender)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	p := &refPeer{key: "ed25519:" + base64.StdEncoding.EncodeToString(pub), addr: "uds://" + sock, cmd: cmd, report: make(chan string, 2)}
	lines := make(chan string, 2)
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			lines <- sc.Text()
		}
		close(lines)
	}()
	select {
	case l := <-lines:
		// Its own Ed25519 derives the key Go's does from the same seed.
		if l != "READY "+p.key {
			t.Fatalf("reference peer says %q, want READY %s", l, p.key)
		}
	case <-time.After(pollTimeout):
		t.Fatal("the reference peer did not start")
	}
	go func() {
		for l := range lines {
			p.report <- l
		}
	}()
	return p
}

// A broadcast reaches each trusted peer exactly once: the meerkatd peers
// (paired, and added with the meerkatd mark) see it marked with the
// broadcast id, and the reference-style peer verifies it as a plain
// message over the Rust reference's fields only, and acks it.
func TestBroadcastThreeDaemons(t *testing.T) {
	t.Parallel()
	alice, bob, carol := newNode(t, "alice"), newNode(t, "bob"), newNode(t, "carol")
	for _, n := range []*testNode{alice, bob, carol} {
		n.start()
	}
	// alice and bob pair: each marks the other as running meerkatd.
	offer := alice.startBackground("pair", "offer", "--ttl", "1m")
	bob.ok("pair", "accept", offer.line(t))
	if code, _ := offer.wait(t); code != 0 {
		t.Fatalf("pair offer exited %d", code)
	}
	// carol is added by hand, in group ops and marked as meerkatd.
	alice.ok("peers", "add", "carol", carol.key, carol.addr, "--meta", `{"software":"meerkatd","groups":["ops"]}`)
	carol.trusts(alice)
	ref := startRefPeer(t, alice.key)
	alice.ok("peers", "add", "ref", ref.key, ref.addr)
	waitUntil(t, "alice's daemon to trust bob, carol and ref", func() bool { return alice.status().Peers == 3 })
	// carol's daemon reads its trust file by polling: until it has, it
	// refuses alice's envelopes.
	waitUntil(t, "carol's daemon to trust alice", func() bool { return carol.status().Peers == 1 })

	var res bcResult
	alice.okJSON(&res, "broadcast", "standup in five", "--json")
	if res.ID == "" || len(res.Copies) != 3 {
		t.Fatalf("broadcast: %+v", res)
	}
	for _, c := range res.Copies {
		wantMark := c.Peer != "ref"
		if c.Delivery != "acked" || c.Marked != wantMark || c.ID == "" {
			t.Errorf("copy to %s: %+v, want acked, marked %v", c.Peer, c, wantMark)
		}
	}
	select {
	case line := <-ref.report:
		var r struct {
			Verified bool     `json:"verified"`
			Type     string   `json:"type"`
			Fields   []string `json:"fields"`
			Body     string   `json:"body"`
			Error    string   `json:"error"`
		}
		if err := json.Unmarshal([]byte(line), &r); err != nil {
			t.Fatalf("reference peer report %q: %v", line, err)
		}
		if !r.Verified || r.Type != "message" || r.Body != "standup in five" || !slices.Equal(r.Fields, []string{"body", "type"}) {
			t.Fatalf("reference peer: %+v: want a verified plain message", r)
		}
	case <-time.After(pollTimeout):
		t.Fatal("no report from the reference peer")
	}
	for _, n := range []*testNode{bob, carol} {
		items := bcInbox(n)
		if len(items) != 1 || items[0].BroadcastID != res.ID || items[0].Body != "standup in five" || items[0].Peer != "alice" {
			t.Fatalf("%s's inbox: %+v: want the broadcast once, marked %s", n.name, items, res.ID)
		}
	}

	// A group, and an unknown one.
	alice.okJSON(&res, "broadcast", "ops only", "--group", "ops", "--direct", "--json")
	if len(res.Copies) != 1 || res.Copies[0].Peer != "carol" || res.Copies[0].Delivery != "acked" {
		t.Fatalf("group ops: %+v", res)
	}
	alice.wantCode(exitUsage, []string{`no group "qa"`, "ops"}, "broadcast", "x", "--group", "qa")
	// A copy that fails makes the command fail: the reference peer took
	// its one envelope and is gone.
	r := alice.wantCode(exitError, []string{"1 of 1 copies failed"}, "broadcast", "gone", "--direct", "--peer", "ref")
	if !strings.Contains(r.stdout, "failed") {
		t.Fatalf("the failed copy is not listed:\n%s", r)
	}
	if n := len(bcInbox(carol)); n != 2 {
		t.Fatalf("carol holds %d items, want 2", n)
	}
	if n := len(bcInbox(bob)); n != 1 {
		t.Fatalf("bob holds %d items, want 1 (not in group ops)", n)
	}
}

// A task resolves only on task_complete: waits before it time out with
// the task open, also after the daemon restarts; a participant's
// completion resolves it, and a later wait finds it resolved.
func TestTaskThreeDaemons(t *testing.T) {
	t.Parallel()
	alice, bob, carol := newNode(t, "alice"), newNode(t, "bob"), newNode(t, "carol")
	for _, n := range []*testNode{alice, bob, carol} {
		for _, o := range []*testNode{alice, bob, carol} {
			if o != n {
				n.trusts(o)
			}
		}
		n.start()
	}
	alice.ok("send", "request", "bob", "build", `{"target":"all"}`, "--task", "release-1")
	var res bcResult
	alice.okJSON(&res, "broadcast", "release work starts", "--peer", "carol", "--task", "release-1", "--json")
	if res.TaskID != "release-1" || len(res.Copies) != 1 || res.Copies[0].Delivery != "acked" {
		t.Fatalf("broadcast under the task: %+v", res)
	}
	items := bcInbox(bob)
	if len(items) != 1 || items[0].TaskID != "release-1" || items[0].Intent != "build" {
		t.Fatalf("bob's inbox %+v", items)
	}
	waitOpen := func(n *testNode, extra ...string) {
		t.Helper()
		r := n.run(append([]string{"task", "wait", "release-1", "--json"}, extra...)...)
		var w struct {
			cliTaskWait
			Error struct{ Code string } `json:"error"`
		}
		if r.code != exitError || json.Unmarshal([]byte(r.stdout), &w) != nil || !w.TimedOut || w.Task.State != "open" || w.Error.Code != "timed_out" {
			t.Fatalf("a wait on the open task: %s", r)
		}
	}
	waitOpen(alice, "--wait", "200ms")
	var ts []cliTask
	alice.okJSON(&ts, "task", "list", "--json")
	if len(ts) != 1 || ts[0].State != "open" || len(ts[0].Participants) != 2 {
		t.Fatalf("alice's tasks %+v: want release-1 open with bob and carol", ts)
	}
	// A list that fails prints the error, not an empty result.
	var fail struct {
		Error struct{ Code string } `json:"error"`
	}
	if r := alice.run("task", "list", "--state", "done", "--json"); r.code != exitUsage || json.Unmarshal([]byte(r.stdout), &fail) != nil || fail.Error.Code != "bad_argument" {
		t.Fatalf("task list with a bad state, --json:\n%s", r)
	}

	alice.stop()
	alice.start()
	waitOpen(alice) // after a restart: still open, still known

	// carol completes it: alice (whom carol dealt with) resolves it, and
	// passes it on to bob.
	done := alice.startBackground("task", "wait", "release-1", "--wait", "1m", "--json")
	out := carol.ok("task", "complete", "release-1", `{"tag":"v1.0"}`)
	if !strings.HasPrefix(out, "release-1 completed by self") {
		t.Fatalf("task complete: %q", out)
	}
	code, rest := done.wait(t)
	var w cliTaskWait
	if code != exitOK || json.Unmarshal([]byte(rest), &w) != nil || w.TimedOut || w.Task.State != "completed" || w.Task.CompletedBy != "carol" || compactJSON(w.Task.Result) != `{"tag":"v1.0"}` {
		t.Fatalf("alice's wait: exit %d, %s", code, rest)
	}
	// Later, and after another restart, it stays resolved.
	alice.stop()
	alice.start()
	alice.okJSON(&w, "task", "wait", "release-1", "--json")
	if w.Task.State != "completed" || w.TimedOut {
		t.Fatalf("a later wait: %+v", w)
	}
	waitUntil(t, "bob to hear of the completion", func() bool {
		var bw cliTaskWait
		r := bob.run("task", "wait", "release-1", "--json")
		return json.Unmarshal([]byte(r.stdout), &bw) == nil && bw.Task.State == "completed" && bw.Task.CompletedBy == "alice"
	})
	// The agents see the completion requests in their inboxes too.
	found := false
	for _, it := range bcInbox(alice) {
		found = found || it.Intent == "meerkat.task_complete" && it.TaskID == "release-1" && it.Peer == "carol"
	}
	if !found {
		t.Fatal("alice's inbox lacks carol's meerkat.task_complete")
	}
	alice.wantCode(exitError, []string{"no task"}, "task", "wait", "nope")
	alice.wantCode(exitUsage, []string{"task id"}, "send", "message", "bob", "hi", "--task", "bad\tid")
}

func compactJSON(raw json.RawMessage) string {
	var b bytes.Buffer
	if json.Compact(&b, raw) != nil {
		return string(raw)
	}
	return b.String()
}
