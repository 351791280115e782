package main

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/meerkatd/meerkatd/identity"
)

// The CLI's JSON for sends with a key and for meerkatd sent, decoded with
// this file's own field names.
type (
	cliKeyedSend struct {
		ID       string `json:"id"`
		Delivery string `json:"delivery"`
		Replayed bool   `json:"replayed"`
	}
	cliSendStatus struct {
		ID        string `json:"id"`
		State     string `json:"state"`
		Peer      string `json:"peer"`
		Kind      string `json:"kind"`
		Intent    string `json:"intent"`
		RequestID string `json:"request_id"`
		Reliable  bool   `json:"reliable"`
		AckedAt   string `json:"acked_at"`
		Reason    string `json:"reason"`
		Answer    *struct {
			ResponseID string `json:"response_id"`
			Status     string `json:"status"`
		} `json:"answer"`
		Progress *struct {
			Accepted   int    `json:"accepted"`
			ResponseID string `json:"response_id"`
		} `json:"progress"`
	}
)

// sentStatus returns `meerkatd sent ID --json` for one id.
func (n *testNode) sentStatus(id string) cliSendStatus {
	n.t.Helper()
	var st []cliSendStatus
	n.okJSON(&st, "sent", id, "--json")
	if len(st) != 1 || st[0].ID != id {
		n.t.Fatalf("sent %s: %+v", id, st)
	}
	return st[0]
}

// A send retried with the same idempotency key is delivered once and
// returns the first result: through the daemon, after the daemon
// restarted, and from a command run without a daemon.
func TestIdempotentSendAcrossRestart(t *testing.T) {
	t.Parallel()
	alice, bob := twoNodes(t, "uds")
	alice.start()
	bob.start()
	send := func() cliKeyedSend {
		t.Helper()
		var s cliKeyedSend
		alice.okJSON(&s, "send", "message", "bob", "deploy v2 once", "--reliable", "--idempotency-key", "deploy-v2", "--json")
		return s
	}
	first := send()
	if first.ID == "" || first.Delivery != "acked" || first.Replayed {
		t.Fatalf("first send: %+v", first)
	}
	if again := send(); !again.Replayed || again.ID != first.ID || again.Delivery != "acked" {
		t.Fatalf("retry: %+v", again)
	}
	alice.stop()
	alice.start()
	if again := send(); !again.Replayed || again.ID != first.ID {
		t.Fatalf("retry after a restart: %+v", again)
	}
	alice.stop()
	r := alice.run("send", "message", "bob", "deploy v2 once", "--reliable", "--idempotency-key", "deploy-v2")
	if r.code != exitOK || strings.TrimSpace(r.stdout) != first.ID || !strings.Contains(r.stderr, "replayed") {
		t.Fatalf("retry without a daemon:\n%s", r)
	}
	// Other arguments under the key are refused.
	if r := alice.run("send", "message", "bob", "deploy v3", "--reliable", "--idempotency-key", "deploy-v2", "--json"); r.code != exitError || !strings.Contains(r.stdout, `"idempotency_conflict"`) {
		t.Fatalf("another body under the key:\n%s", r)
	}
	n := 0
	for _, it := range bob.inbox() {
		if it.Kind == "message" {
			n++
			if it.ID != first.ID {
				t.Errorf("bob got another message %s", it.ID)
			}
		}
	}
	if n != 1 {
		t.Fatalf("bob got %d messages, want exactly 1", n)
	}
	if st := alice.sentStatus(first.ID); st.State != "acked" || st.Peer != "bob" || !st.Reliable || st.AckedAt == "" {
		t.Fatalf("sent without a daemon: %+v", st)
	}
}

// meerkatd sent follows a request through acked, progress and answered,
// and a reliable send to a peer that never answers to dead.
func TestSentFollowsRequestAndDeadLetter(t *testing.T) {
	t.Parallel()
	alice, bob := twoNodes(t, "uds")
	alice.env = append(alice.env, "MEERKAT_OUTBOX_BACKOFF=100ms")
	carol, err := identity.GenerateKeypair()
	if err != nil {
		t.Fatal(err)
	}
	alice.ok("peers", "add", "carol", carol.ID().String(), "uds://"+filepath.Join(alice.home, "nobody.sock"))
	alice.start()
	bob.start()

	var req cliKeyedSend
	alice.okJSON(&req, "send", "request", "bob", "review", `{"pr":7}`, "--reliable", "--json")
	if st := alice.sentStatus(req.ID); st.State != "acked" || st.Kind != "request" || st.Intent != "review" {
		t.Fatalf("request after its ack: %+v", st)
	}
	var acc cliKeyedSend
	bob.okJSON(&acc, "send", "response", "alice", req.ID, "accepted", "--json")
	var st cliSendStatus
	waitUntil(t, "the accepted response to show as progress", func() bool {
		st = alice.sentStatus(req.ID)
		return st.Progress != nil
	})
	if st.State != "acked" || st.Progress.Accepted != 1 || st.Progress.ResponseID != acc.ID || st.Answer != nil {
		t.Fatalf("after accepted: %+v", st)
	}
	var done cliKeyedSend
	bob.okJSON(&done, "send", "response", "alice", req.ID, "completed", `{"ok":true}`, "--json")
	waitUntil(t, "the request to be answered", func() bool {
		st = alice.sentStatus(req.ID)
		return st.State == "answered"
	})
	if st.Answer == nil || st.Answer.ResponseID != done.ID || st.Answer.Status != "completed" {
		t.Fatalf("answered: %+v", st)
	}
	if s := bob.sentStatus(done.ID); s.State != "written" || s.RequestID != req.ID {
		t.Fatalf("bob's response: %+v", s)
	}

	var lost cliKeyedSend
	alice.okJSON(&lost, "send", "message", "carol", "anyone?", "--reliable", "--ttl", "1s", "--no-wait", "--json")
	if lost.Delivery != "queued" {
		t.Fatalf("send to carol: %+v", lost)
	}
	waitUntil(t, "the send to carol to die", func() bool {
		st = alice.sentStatus(lost.ID)
		return st.State == "dead"
	})
	if !strings.HasPrefix(st.Reason, "expired") {
		t.Fatalf("dead: %+v", st)
	}
	// The table lists the newest first.
	out := alice.ok("sent")
	if i, j := strings.Index(out, lost.ID), strings.Index(out, req.ID); i < 0 || j < 0 || i > j || !strings.Contains(out, "answered") || !strings.Contains(out, "dead") {
		t.Fatalf("meerkatd sent:\n%s", out)
	}
	alice.wantCode(exitUsage, nil, "sent", req.ID, "--limit", "3")
}
