package mcpserver

import (
	"context"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/meerkatd/meerkatd/comms/node"
)

// Search answers with one hit, or bad_argument for the query "bad".
func (f *fakeNode) Search(_ context.Context, q node.SearchQuery) (node.SearchResult, error) {
	f.mu.Lock()
	f.searches = append(f.searches, q)
	f.mu.Unlock()
	if q.Query == "bad" {
		return node.SearchResult{}, &node.Error{Code: node.CodeBadArgument, Msg: "query: no words to search for"}
	}
	return node.SearchResult{Hits: []node.SearchHit{{
		Message: node.Message{Seq: 7, ID: "m-7", Kind: "message", From: "ed25519:AgICAgICAgICAgICAgICAgICAgICAgICAgICAgICAgI=", Peer: "bob", Body: "the deploy is done", Untrusted: true},
		Acked:   true, Snippet: "the «deploy» is done",
	}}, More: true, Cursor: "7", History: true}, nil
}

// search_messages carries its arguments to the node's Search and returns
// its hits with pending; a node error is a tool error with its code.
func TestSearchTool(t *testing.T) { bothEras(t, testSearchTool) }

func testSearchTool(t *testing.T, era string) {
	f := newFakeNode()
	c, _ := startClient(t, f, era)
	res, out, err := call(t, c, "search_messages", map[string]any{"query": `deploy "build a"`, "peer": "bob", "kind": "request",
		"since": "2026-03-01T12:00:00Z", "until": "2026-03-02T12:00:00+02:00", "limit": 5, "cursor": "42"})
	if err != nil || res.IsError {
		t.Fatalf("search: %v %s", err, text(res))
	}
	f.mu.Lock()
	got := f.searches[len(f.searches)-1]
	f.mu.Unlock()
	want := node.SearchQuery{Query: `deploy "build a"`, Peer: "bob", Kinds: []string{"request"},
		Since: time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC), Until: time.Date(2026, 3, 2, 10, 0, 0, 0, time.UTC), Limit: 5, Cursor: "42"}
	if !got.Since.Equal(want.Since) || !got.Until.Equal(want.Until) {
		t.Fatalf("times %v %v", got.Since, got.Until)
	}
	got.Since, got.Until, want.Since, want.Until = time.Time{}, time.Time{}, time.Time{}, time.Time{}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("query %+v, want %+v", got, want)
	}
	hits, _ := out["hits"].([]any)
	if len(hits) != 1 || out["more"] != true || out["cursor"] != "7" || out["history"] != true || out["pending"] == nil {
		t.Fatalf("result %v", out)
	}
	hit := hits[0].(map[string]any)
	if hit["acked"] != true || hit["snippet"] != "the «deploy» is done" || hit["message"].(map[string]any)["body"] != "the deploy is done" {
		t.Fatalf("hit %v", hit)
	}
	res, _, err = call(t, c, "search_messages", map[string]any{"query": "bad"})
	if err != nil || !res.IsError || !strings.HasPrefix(text(res), "bad_argument: ") {
		t.Fatalf("bad query: %v %s", err, text(res))
	}
}

func TestSearchArgs(t *testing.T) {
	for _, a := range []map[string]any{
		{},
		{"query": ""},
		{"query": 3},
		{"query": "x", "kind": "ack"},
		{"query": "x", "kind": []any{"message"}},
		{"query": "x", "since": "yesterday"},
		{"query": "x", "until": "2026-03-01"},
		{"query": "x", "limit": 0.0},
		{"query": "x", "limit": 101.0},
		{"query": "x", "limit": 2.5},
		{"query": "x", "cursor": 5},
		{"query": "x", "peer": true},
	} {
		if err := checkArgs("search_messages", a); err == nil {
			t.Errorf("%v: want invalid params", a)
		}
	}
	if err := checkArgs("search_messages", map[string]any{"query": "x", "kind": "meup", "limit": 100.0, "since": "2026-03-01T00:00:00Z"}); err != nil {
		t.Error(err)
	}
}
