package main

import (
	"strings"
	"testing"
)

// classItem is an inbox item with its class and notice, decoded with this
// file's own field names.
type classItem struct {
	Seq       uint64 `json:"seq"`
	ID        string `json:"id"`
	Body      string `json:"body"`
	Class     string `json:"class"`
	Untrusted bool   `json:"untrusted"`
	Notice    *struct {
		Event string `json:"event"`
		Peer  string `json:"peer"`
		ID    string `json:"id"`
	} `json:"notice"`
}

type classBatch struct {
	Messages       []classItem    `json:"messages"`
	More           bool           `json:"more"`
	PendingByClass map[string]int `json:"pending_by_class"`
}

// peerInbox is the inbox without the node's system notices: what peers
// sent and notes.
func (n *testNode) peerInbox() []classItem {
	n.t.Helper()
	var out []classItem
	for _, m := range n.classInbox().Messages {
		if m.Class != "system" {
			out = append(out, m)
		}
	}
	return out
}

func (n *testNode) classInbox(args ...string) classBatch {
	n.t.Helper()
	var b classBatch
	n.okJSON(&b, append([]string{"inbox", "--json"}, args...)...)
	return b
}

// Between real daemons: an interrupt sent after ten ordinary messages is
// read first; in arrival order it is last; the text listing names each
// item's class.
func TestInterruptReadFirst(t *testing.T) {
	t.Parallel()
	alice, bob := twoNodes(t, "uds")
	bob.start()
	for i := range 10 {
		alice.ok("send", "message", "bob", "ordinary "+string(rune('a'+i)))
	}
	alice.ok("send", "message", "bob", "stop what you are doing", "--interrupt")
	b := bob.classInbox("--limit", "1")
	if len(b.Messages) != 1 || b.Messages[0].Body != "stop what you are doing" || b.Messages[0].Class != "interrupt" || !b.Messages[0].Untrusted {
		t.Fatalf("bob's first item: %+v", b)
	}
	if b.PendingByClass["interrupt"] != 1 || b.PendingByClass["normal"] != 10 {
		t.Fatalf("pending by class: %v", b.PendingByClass)
	}
	if a := bob.classInbox("--order", "arrival"); len(a.Messages) != 11 || a.Messages[0].Body != "ordinary a" || a.Messages[10].Class != "interrupt" {
		t.Fatalf("arrival order: %+v", a)
	}
	text := bob.ok("inbox")
	first, _, _ := strings.Cut(text, "\n")
	if !strings.HasPrefix(first, "#11 ") || !strings.HasSuffix(first, "[interrupt]") || strings.Count(text, "[normal]") != 10 {
		t.Fatalf("inbox text:\n%s", text)
	}
	// A listing longer than a page still shows every item once.
	if all := bob.ok("inbox", "--page", "3"); strings.Count(all, "[normal]") != 10 || strings.Count(all, "[interrupt]") != 1 {
		t.Fatalf("paged listing:\n%s", all)
	}
	bob.wantCode(exitUsage, []string{"--interrupt"}, "send", "response", "alice", "00000000-0000-0000-0000-000000000000", "completed", "--interrupt")
	bob.wantCode(exitUsage, []string{"--order"}, "inbox", "--order", "newest")
}

// A reliable send to a peer that is down, with a short time-to-live,
// dies; the dead-letter notice that tells the agent comes before
// everything else in its inbox: the person's note, a peer's interrupt,
// ordinary messages. A note needs the daemon.
func TestDeadLetterNoticeFirst(t *testing.T) {
	t.Parallel()
	alice, bob := twoNodes(t, "uds")
	alice.wantCode(exitNoDaemon, []string{"no daemon", "meerkatd run"}, "tell", "hello")
	alice.start()
	bob.start()
	bob.ok("send", "message", "alice", "ordinary")
	bob.ok("send", "message", "alice", "urgent", "--interrupt")
	alice.ok("tell", "the person speaks")
	bob.stop()
	var sent struct {
		ID string `json:"id"`
	}
	alice.okJSON(&sent, "send", "message", "bob", "never delivered", "--reliable", "--ttl", "1s", "--no-wait", "--json")
	var b classBatch
	waitUntil(t, "the dead-letter notice", func() bool {
		b = alice.classInbox()
		for _, m := range b.Messages {
			if m.Notice != nil && m.Notice.Event == "dead_letter" {
				return true
			}
		}
		return false
	})
	// The breaker's notice may be there too: system items first, then the
	// note, the interrupt, the ordinary message.
	sys := b.PendingByClass["system"]
	if sys < 1 || len(b.Messages) != sys+3 {
		t.Fatalf("alice's inbox: %+v", b)
	}
	var dead *classItem
	for i, m := range b.Messages[:sys] {
		if m.Class != "system" || m.Untrusted {
			t.Fatalf("item %d: %+v", i, m)
		}
		if m.Notice.Event == "dead_letter" {
			dead = &b.Messages[i]
		}
	}
	if dead == nil || dead.Notice.Peer != "bob" || dead.Notice.ID != sent.ID || strings.Contains(dead.Body, "never delivered") {
		t.Fatalf("the dead-letter notice: %+v", dead)
	}
	rest := b.Messages[sys:]
	if rest[0].Class != "user" || rest[0].Body != "the person speaks" || rest[0].Untrusted ||
		rest[1].Class != "interrupt" || rest[1].Body != "urgent" || rest[2].Class != "normal" {
		t.Fatalf("after the notices: %+v", rest)
	}
}
