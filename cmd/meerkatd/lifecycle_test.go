package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/meerkatd/meerkatd/identity"
)

// The request lifecycle across two real daemons, through the CLI: a
// deadline passes and both sides show it, a cancel reaches the holder,
// and accepted responses are progress, not the answer.

// lifecycleItem is an inbox item with the lifecycle fields, decoded with
// this file's own field names.
type lifecycleItem struct {
	ID        string     `json:"id"`
	Kind      string     `json:"kind"`
	Intent    string     `json:"intent"`
	Status    string     `json:"status"`
	RequestID string     `json:"request_id"`
	Deadline  *time.Time `json:"deadline"`
	Class     string     `json:"class"`
	Notice    *struct {
		Event string `json:"event"`
		ID    string `json:"id"`
	} `json:"notice"`
	Cancelled *struct {
		At     time.Time `json:"at"`
		Reason string    `json:"reason"`
		Note   string    `json:"note"`
	} `json:"cancelled"`
}

type sentRequestJSON struct {
	ID          string     `json:"id"`
	Peer        string     `json:"peer"`
	Intent      string     `json:"intent"`
	Deadline    *time.Time `json:"deadline"`
	State       string     `json:"state"`
	Note        string     `json:"note"`
	ResponseID  string     `json:"response_id"`
	FinalStatus string     `json:"final_status"`
}

func (n *testNode) lifecycleInbox() []lifecycleItem {
	n.t.Helper()
	var b struct {
		Messages []lifecycleItem `json:"messages"`
	}
	n.okJSON(&b, "inbox", "--json")
	return b.Messages
}

func (n *testNode) held(id string) *lifecycleItem {
	n.t.Helper()
	for _, it := range n.lifecycleInbox() {
		if it.ID == id {
			return &it
		}
	}
	return nil
}

// notice reports whether n's inbox holds a system notice of event about
// the envelope or request id.
func (n *testNode) notice(event, id string) bool {
	n.t.Helper()
	for _, it := range n.lifecycleInbox() {
		if it.Class == "system" && it.Notice != nil && it.Notice.Event == event && it.Notice.ID == id {
			return true
		}
	}
	return false
}

func (n *testNode) sentRequest(id string) sentRequestJSON {
	n.t.Helper()
	var rs []sentRequestJSON
	n.okJSON(&rs, "requests", "--json")
	for _, r := range rs {
		if r.ID == id {
			return r
		}
	}
	n.t.Fatalf("%s: request %s not in meerkatd requests: %+v", n.name, id, rs)
	return sentRequestJSON{}
}

func TestRequestLifecycleDaemons(t *testing.T) {
	t.Parallel()
	alice, bob := twoNodes(t, "uds")
	alice.start(alice.runArgs()...)
	bob.start(bob.runArgs()...)

	// A deadline passes: alice marks the request timed out, bob's item
	// shows the cancellation with reason deadline.
	var sent cliSend
	alice.okJSON(&sent, "send", "request", "bob", "review", `{"pr":7}`, "--deadline", "2s", "--json")
	if r := alice.sentRequest(sent.ID); r.State != "open" || r.Deadline == nil || r.Intent != "review" {
		t.Fatalf("before the deadline: %+v", r)
	}
	waitUntil(t, "bob holds the request", func() bool { return bob.held(sent.ID) != nil })
	waitUntil(t, "alice times it out", func() bool { return alice.sentRequest(sent.ID).State == "timed_out" })
	waitUntil(t, "bob sees the deadline cancellation", func() bool { return bob.held(sent.ID).Cancelled != nil })
	if c := bob.held(sent.ID).Cancelled; c.Reason != "deadline" || c.At.IsZero() {
		t.Fatalf("bob's item: %+v", c)
	}
	// Each agent is told by a system notice.
	waitUntil(t, "alice's notice of the timeout", func() bool { return alice.notice("request_timed_out", sent.ID) })
	waitUntil(t, "bob's notice of the cancellation", func() bool { return bob.notice("request_cancelled", sent.ID) })
	// Answering it is still allowed; alice gets the answer, the state stays.
	var resp cliSend
	bob.okJSON(&resp, "send", "response", "alice", sent.ID, "completed", `"late"`, "--json")
	waitUntil(t, "alice records the late answer", func() bool { return alice.sentRequest(sent.ID).ResponseID == resp.ID })
	if r := alice.sentRequest(sent.ID); r.State != "timed_out" || r.FinalStatus != "completed" {
		t.Fatalf("after the late answer: %+v", r)
	}
	// Neither inbox holds the nodes' own cancel traffic.
	for _, n := range []*testNode{alice, bob} {
		for _, it := range n.lifecycleInbox() {
			if strings.HasPrefix(it.Intent, "meerkat.") || it.Kind == "response" && it.RequestID != sent.ID {
				t.Fatalf("%s's inbox holds %+v", n.name, it)
			}
		}
	}

	// A cancel reaches the holder.
	var sent2 cliSend
	alice.okJSON(&sent2, "send", "request", "bob", "build", "--json")
	waitUntil(t, "bob holds the second request", func() bool { return bob.held(sent2.ID) != nil })
	var c struct {
		Request sentRequestJSON `json:"request"`
		Cancel  cliSend         `json:"cancel"`
	}
	alice.okJSON(&c, "cancel", sent2.ID, "--reason", "not needed any more", "--json")
	if c.Request.State != "cancelled" || c.Request.Note != "not needed any more" || c.Cancel.Delivery != "acked" {
		t.Fatalf("cancel --json: %+v", c)
	}
	waitUntil(t, "bob sees the cancel", func() bool { return bob.held(sent2.ID).Cancelled != nil })
	if h := bob.held(sent2.ID).Cancelled; h.Reason != "cancelled" || h.Note != "not needed any more" {
		t.Fatalf("bob's item: %+v", h)
	}
	waitUntil(t, "bob's notice of the cancel", func() bool { return bob.notice("request_cancelled", sent2.ID) })
	if out := bob.ok("inbox"); !strings.Contains(out, "cancelled by the sender (cancelled)") || !strings.Contains(out, "not needed any more") {
		t.Fatalf("bob's inbox text lacks the cancellation:\n%s", out)
	}
	// A second cancel is refused: it is not open any more.
	alice.wantCode(exitUsage, []string{"not open"}, "cancel", sent2.ID)
	out := alice.ok("requests", "--state", "cancelled")
	if !strings.Contains(out, sent2.ID) || strings.Contains(out, sent.ID) {
		t.Fatalf("requests --state cancelled:\n%s", out)
	}

	// Once alice knows bob runs meerkatd (his verified card says so), the
	// deadline travels with the request: bob's agent sees it before it
	// passes.
	alice.ok("card", "fetch", "bob")
	var sent3 cliSend
	alice.okJSON(&sent3, "send", "request", "bob", "review", "--deadline", "10m", "--json")
	waitUntil(t, "bob holds the third request", func() bool { return bob.held(sent3.ID) != nil })
	if d := bob.held(sent3.ID).Deadline; d == nil || time.Until(*d) < 5*time.Minute || time.Until(*d) > 10*time.Minute {
		t.Fatalf("bob's item shows deadline %v, want about 10 minutes from now", d)
	}
	if out := bob.ok("inbox"); !strings.Contains(out, "  deadline ") {
		t.Fatalf("bob's inbox text lacks the deadline:\n%s", out)
	}
	alice.ok("cancel", sent3.ID)

	// Accepted is progress: send --wait prints it and waits on for the
	// final response; the request stays open meanwhile.
	done := make(chan result, 1)
	go func() { done <- alice.run("send", "request", "bob", "work", "--wait", "60s", "--json") }()
	var id string
	waitUntil(t, "bob holds the fourth request", func() bool {
		for _, it := range bob.lifecycleInbox() {
			if it.Intent == "work" {
				id = it.ID
			}
		}
		return id != ""
	})
	bob.ok("send", "response", "alice", id, "accepted", `{"eta":"soon"}`)
	waitUntil(t, "alice holds the accepted response", func() bool {
		for _, it := range alice.lifecycleInbox() {
			if it.RequestID == id && it.Status == "accepted" {
				return true
			}
		}
		return false
	})
	if r := alice.sentRequest(id); r.State != "open" || r.ResponseID != "" {
		t.Fatalf("after accepted: %+v", r)
	}
	select {
	case r := <-done:
		t.Fatalf("send --wait returned on an accepted response:\n%s", r)
	default:
	}
	bob.ok("send", "response", "alice", id, "completed", `{"done":true}`)
	r := <-done
	var w cliSend
	if r.code != exitOK || json.Unmarshal([]byte(r.stdout), &w) != nil || len(w.Responses) != 2 || w.Responses[0].Status != "accepted" || w.Responses[1].Status != "completed" {
		t.Fatalf("send --wait:\n%s", r)
	}
	if r := alice.sentRequest(id); r.State != "answered" || r.FinalStatus != "completed" {
		t.Fatalf("after completed: %+v", r)
	}
}

// send request --wait prints the request id once the peer acknowledged
// it, before it waits: interrupted (exit 130), the id is there to follow
// up with.
func TestRequestWaitPrintsIDFirst(t *testing.T) {
	t.Parallel()
	for _, daemon := range []bool{false, true} {
		alice, bob := twoNodes(t, "uds")
		bob.start()
		if daemon {
			alice.start()
		}
		cmd := exec.Command(binary(t), "send", "request", "bob", "build", "{}", "--wait", "2m", "--home", alice.home)
		cmd.Env = append(baseEnv(), alice.env...)
		stdout, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		line, err := bufio.NewReader(stdout).ReadString('\n')
		id := strings.TrimSpace(line)
		if _, perr := identity.ParseUUID(id); err != nil || perr != nil {
			cmd.Process.Kill()
			cmd.Wait()
			t.Fatalf("daemon %v: first line %q, %v: want the request id", daemon, line, err)
		}
		cmd.Process.Signal(syscall.SIGINT)
		cmd.Wait()
		if code := cmd.ProcessState.ExitCode(); code != exitInterrupted {
			t.Fatalf("daemon %v: exit %d, want %d", daemon, code, exitInterrupted)
		}
		// The request is bob's to answer: it reached him under that id.
		waitUntil(t, "bob holds the request", func() bool {
			return strings.Contains(bob.ok("inbox", "--json"), id)
		})
	}
}

// An interrupted send request --wait --json says so in its document: the
// code interrupted, not internal, with exit 130 and the request's id.
func TestRequestWaitInterruptedJSON(t *testing.T) {
	t.Parallel()
	alice, bob := twoNodes(t, "uds")
	bob.start()
	cmd := exec.Command(binary(t), "send", "request", "bob", "build", "{}", "--wait", "2m", "--json", "--home", alice.home)
	cmd.Env = append(baseEnv(), alice.env...)
	var stdout bytes.Buffer
	cmd.Stdout = &stdout
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, "bob holds the request", func() bool {
		in := strings.ReplaceAll(bob.ok("inbox", "--json"), " ", "")
		return strings.Contains(in, `"kind":"request"`)
	})
	cmd.Process.Signal(syscall.SIGINT)
	cmd.Wait()
	if code := cmd.ProcessState.ExitCode(); code != exitInterrupted {
		t.Fatalf("exit %d, want %d", code, exitInterrupted)
	}
	var doc struct {
		ID    string `json:"id"`
		Error struct {
			Code string `json:"code"`
		} `json:"error"`
	}
	if err := json.Unmarshal(stdout.Bytes(), &doc); err != nil || doc.Error.Code != "interrupted" || doc.ID == "" {
		t.Fatalf("document %s (%v): want the id and error code interrupted", stdout.String(), err)
	}
}
