package main

import (
	"encoding/json"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// searchOut is `search --json`.
type searchOut struct {
	Hits []struct {
		Message struct {
			Seq  uint64 `json:"seq"`
			ID   string `json:"id"`
			Kind string `json:"kind"`
			Peer string `json:"peer"`
			Body string `json:"body"`
		} `json:"message"`
		Acked   bool   `json:"acked"`
		Snippet string `json:"snippet"`
	} `json:"hits"`
	More    bool   `json:"more"`
	Cursor  string `json:"cursor"`
	History bool   `json:"history"`
}

func (s searchOut) ids() []string {
	var out []string
	for _, h := range s.Hits {
		out = append(out, h.Message.ID)
	}
	return out
}

// Real daemons: search finds a word in the inbox and its history, pages
// with the cursor, filters by kind, peer and time, and works read only
// once the daemon is stopped.
func TestSearchDaemons(t *testing.T) {
	t.Parallel()
	alice, bob := newNode(t, "alice"), newNode(t, "bob")
	alice.trusts(bob)
	bob.trusts(alice)
	alice.start()
	var deploy []string // ids of the items that mention deploy, oldest first
	send := func(args ...string) string {
		t.Helper()
		var s struct {
			ID string `json:"id"`
		}
		bob.okJSON(&s, append([]string{"send"}, append(args, "--json")...)...)
		return s.ID
	}
	for i := range 7 {
		if i%2 == 0 {
			deploy = append(deploy, send("message", "alice", "Deploy number "+strconv.Itoa(i)+" went out"))
		} else {
			send("message", "alice", "lunch at noon?")
		}
	}
	req := send("request", "alice", "deploy-now", `{"target": "production"}`)
	deploy = append(deploy, req)
	// The first three items are read and acknowledged: history.
	if r := alice.run("inbox", "--limit", "3", "--ack"); r.code != exitOK || !strings.Contains(r.stderr, "more items follow those shown: raise --limit") {
		t.Fatalf("inbox --limit 3 --ack does not say more follow:\n%s", r)
	}
	if n := len(alice.inbox()); n != 5 {
		t.Fatalf("%d items left in the inbox, want 5", n)
	}
	want := slices.Clone(deploy)
	slices.Reverse(want)

	var r searchOut
	alice.okJSON(&r, "search", "deploy", "--json")
	if !slices.Equal(r.ids(), want) || r.More || !r.History {
		t.Fatalf("search deploy: %v (more %v, history %v), want %v", r.ids(), r.More, r.History, want)
	}
	oldest := r.Hits[len(r.Hits)-1]
	if !oldest.Acked || r.Hits[0].Acked || oldest.Message.Body != "Deploy number 0 went out" || !strings.Contains(oldest.Snippet, "«Deploy»") {
		t.Fatalf("oldest hit %+v", oldest)
	}

	// Pages of two, following the cursor, give the same hits once each.
	var paged []string
	args := []string{"search", "deploy", "--limit", "2", "--json"}
	for pages := 0; ; pages++ {
		if pages > 5 {
			t.Fatal("paging does not end")
		}
		var p searchOut
		alice.okJSON(&p, args...)
		if len(p.Hits) > 2 {
			t.Fatalf("a page of %d hits", len(p.Hits))
		}
		paged = append(paged, p.ids()...)
		if !p.More {
			break
		}
		args = []string{"search", "deploy", "--limit", "2", "--json", "--cursor", p.Cursor}
	}
	if !slices.Equal(paged, want) {
		t.Fatalf("paged %v, want %v", paged, want)
	}

	for _, c := range []struct {
		args []string
		want []string
	}{
		{[]string{"production", "--kind", "request"}, []string{req}},
		{[]string{"production", "--kind", "message"}, nil},
		// Repeated, the kinds add up (both orders).
		{[]string{"production", "--kind", "message", "--kind", "request"}, []string{req}},
		{[]string{"production", "--kind", "request", "--kind", "message"}, []string{req}},
		{[]string{`"number 4"`, "--peer", "bob"}, []string{deploy[2]}},
		{[]string{"deploy", "--peer", bob.key, "--limit", "1"}, []string{req}},
		{[]string{"deploy", "--since", "2099-01-01T00:00:00Z"}, nil},
		{[]string{"deploy", "--until", "1h"}, nil},
		{[]string{"lunch", "noon"}, nil}, // found below by count, not id
	} {
		var got searchOut
		alice.okJSON(&got, append(append([]string{"search"}, c.args...), "--json")...)
		if c.args[0] == "lunch" {
			if len(got.Hits) != 3 {
				t.Errorf("lunch noon: %d hits, want 3", len(got.Hits))
			}
			continue
		}
		if !slices.Equal(got.ids(), c.want) {
			t.Errorf("search %v: %v, want %v", c.args, got.ids(), c.want)
		}
	}

	out := alice.ok("search", "went", "out")
	if strings.Count(out, "«went» «out»") != 4 || !strings.Contains(out, "(acknowledged)") {
		t.Fatalf("text output:\n%s", out)
	}
	alice.wantCode(exitUsage, []string{"no words to search for"}, "search", "***")
	alice.wantCode(exitUnknownPeer, []string{"carol"}, "search", "deploy", "--peer", "carol")
	alice.wantCode(exitUsage, []string{"--since"}, "search", "deploy", "--since", "yesterday")

	// Without the daemon, the database is searched read only.
	alice.stop()
	var offline searchOut
	alice.okJSON(&offline, "search", "deploy", "--json")
	if !slices.Equal(offline.ids(), want) {
		t.Fatalf("without the daemon: %v, want %v", offline.ids(), want)
	}
	var errOut struct {
		Error struct {
			Code string `json:"code"`
		} `json:"error"`
	}
	r2 := alice.run("search", "--json", "--limit", "500", "x")
	if json.Unmarshal([]byte(r2.stdout), &errOut) != nil || errOut.Error.Code != "bad_argument" || r2.code != exitUsage {
		t.Fatalf("limit 500: %s", r2)
	}
}
