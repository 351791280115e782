package node

import (
	"context"
	"encoding/json"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/meerkatd/meerkatd/comms"
	"github.com/meerkatd/meerkatd/comms/wire"
	"github.com/meerkatd/meerkatd/config"
	"github.com/meerkatd/meerkatd/identity"
	"github.com/meerkatd/meerkatd/inbox/store"
)

// arriveAt is arrive with a receipt time.
func arriveAt(t *testing.T, m *Node, from *identity.Keypair, kind wire.Kind, at time.Time) wire.Envelope {
	t.Helper()
	e, err := wire.Seal(from, identity.NewUUID(), m.h.Key.ID(), kind)
	if err != nil {
		t.Fatal(err)
	}
	if err := m.inbox.Push(comms.Item{Type: comms.ItemExternal, Received: at, Envelope: e, PeerName: "bob"}); err != nil {
		t.Fatal(err)
	}
	return e
}

func mustMap(t *testing.T, members ...wire.Member) wire.Value {
	t.Helper()
	v, err := wire.Map(members...)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

func hitIDs(r SearchResult) []string {
	var out []string
	for _, h := range r.Hits {
		out = append(out, h.Message.ID)
	}
	return out
}

func TestSearchText(t *testing.T) {
	params := mustMap(t, wire.Member{Key: "pr", Value: wire.Int(42)}, wire.Member{Key: "files", Value: wire.Array(wire.Text("main.go"), wire.Float(2.5))})
	chat := mustMap(t,
		wire.Member{Key: "type", Value: wire.Text(wire.TypeMEUP)},
		wire.Member{Key: "space", Value: wire.Text("ops")},
		wire.Member{Key: "envelope", Value: mustMap(t,
			wire.Member{Key: "kind", Value: wire.Text("chat")},
			wire.Member{Key: "payload", Value: mustMap(t, wire.Member{Key: "text", Value: wire.Text("standup at ten")})},
		)},
	)
	meupKind, err := wire.NewKind(chat)
	if err != nil {
		t.Fatal(err)
	}
	kp, _ := identity.GenerateKeypair()
	for _, c := range []struct {
		kind      wire.Kind
		has, hasn []string
	}{
		{wire.Message("Hello there"), []string{"bob", "Hello there"}, []string{"message"}},
		{wire.Request("review", params), []string{"review", "pr 42", "files main.go 2.5"}, []string{"request"}},
		{wire.Response(identity.NewUUID(), wire.StatusCompleted, wire.Text("all green")), []string{"completed", "all green"}, []string{"in_reply_to"}},
		{meupKind, []string{"ops", "chat", "payload text standup at ten"}, []string{"meup"}},
	} {
		e, err := wire.Seal(kp, identity.NewUUID(), kp.ID(), c.kind)
		if err != nil {
			t.Fatal(err)
		}
		text := searchText(e, "bob")
		for _, s := range c.has {
			if !strings.Contains(text, s) {
				t.Errorf("%s: text %q lacks %q", c.kind.Type(), text, s)
			}
		}
		for _, s := range c.hasn {
			if strings.Contains(text, s) {
				t.Errorf("%s: text %q has %q", c.kind.Type(), text, s)
			}
		}
		// What the store indexes, from the stored record, is the
		// envelope's text.
		rec, err := (&durableMail{}).record(comms.Item{Type: comms.ItemExternal, Envelope: e, PeerName: "bob"})
		if err != nil {
			t.Fatal(err)
		}
		if recordText(rec) != text {
			t.Errorf("%s: indexed text %q, want %q", c.kind.Type(), recordText(rec), text)
		}
		// The record carries the same text, so admission need not
		// decode the payload again to find it.
		if rec.Text != text {
			t.Errorf("%s: record carries text %q, want %q", c.kind.Type(), rec.Text, text)
		}
	}
	big := wire.Message(strings.Repeat("x ", store.MaxSearchText))
	e, err := wire.Seal(kp, identity.NewUUID(), kp.ID(), wire.Request("i", wire.Array(big.Value(), big.Value(), big.Value())))
	if err != nil {
		t.Fatal(err)
	}
	if n := len(searchText(e, "bob")); n > store.MaxSearchText {
		t.Fatalf("text of %d bytes, want at most %d (memory-mode search scans it whole)", n, store.MaxSearchText)
	}
}

// With the SQLite inbox, Search finds unacknowledged and acknowledged
// items by body, intent, params and result, newest first, pages without
// skipping or repeating, and filters by peer, kind and time.
func TestSearchDurable(t *testing.T) {
	h, bob := testHome(t, "alice", nil)
	if h.Config.Store.Mode != config.StoreSQLite {
		t.Fatalf("store mode %q", h.Config.Store.Mode)
	}
	m := startTest(t, h, ModeServe)
	ctx := context.Background()
	t0 := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	var deploy []string // ids of the items that mention deploy, oldest first
	for i := range 25 {
		body := "routine chatter"
		if i%2 == 0 {
			body = "the Deploy of build " + string(rune('a'+i)) + " is done"
		}
		e := arriveAt(t, m, bob, wire.Message(body), t0.Add(time.Duration(i)*time.Minute))
		if i%2 == 0 {
			deploy = append(deploy, e.ID.String())
		}
	}
	req := arriveAt(t, m, bob, wire.Request("deploy-now", mustMap(t, wire.Member{Key: "target", Value: wire.Text("staging")})), t0.Add(time.Hour))
	resp := arriveAt(t, m, bob, wire.Response(identity.NewUUID(), wire.StatusFailed, wire.Text("disk full on staging")), t0.Add(2*time.Hour))
	// Acknowledge the first ten: they are history now.
	b, err := m.Receive(ctx, Query{Limit: 10})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := m.Ack(ctx, AckRequest{UpTo: b.Cursor}); err != nil {
		t.Fatal(err)
	}

	r, err := m.Search(ctx, SearchQuery{Query: "DEPLOY"})
	if err != nil {
		t.Fatal(err)
	}
	if !r.History || len(r.Hits) != 14 || r.More || r.Cursor != "" {
		t.Fatalf("deploy: history %v, %d hits, more %v, cursor %q", r.History, len(r.Hits), r.More, r.Cursor)
	}
	// The request's intent deploy-now holds the word too.
	want := slices.Clone(deploy)
	slices.Reverse(want)
	want = append([]string{req.ID.String()}, want...)
	if got := hitIDs(r); !slices.Equal(got, want) {
		t.Fatalf("deploy hits %v\nwant %v", got, want)
	}
	last := r.Hits[len(r.Hits)-1]
	if !last.Acked || r.Hits[0].Acked || !strings.Contains(last.Snippet, "«Deploy»") || last.Message.Body != "the Deploy of build a is done" ||
		!last.Message.Untrusted || last.Message.Peer != "bob" || last.Message.Kind != "message" {
		t.Fatalf("oldest hit %+v", last)
	}

	// Pages of 5 cover the same hits, in order, once each.
	var paged []string
	q := SearchQuery{Query: "deploy*", Limit: 5}
	for pages := 0; ; pages++ {
		if pages > 10 {
			t.Fatal("paging does not end")
		}
		r, err := m.Search(ctx, q)
		if err != nil {
			t.Fatal(err)
		}
		if len(r.Hits) > 5 {
			t.Fatalf("a page of %d hits", len(r.Hits))
		}
		paged = append(paged, hitIDs(r)...)
		if !r.More {
			break
		}
		q.Cursor = r.Cursor
	}
	if !slices.Equal(paged, want) {
		t.Fatalf("paged %v\nwant %v", paged, want)
	}

	for _, c := range []struct {
		name string
		q    SearchQuery
		want []string
	}{
		{"phrase", SearchQuery{Query: `"disk full"`}, []string{resp.ID.String()}},
		{"params", SearchQuery{Query: "staging target"}, []string{req.ID.String()}},
		{"kind", SearchQuery{Query: "staging", Kinds: []string{"response"}}, []string{resp.ID.String()}},
		{"kinds repeated", SearchQuery{Query: "staging", Kinds: slices.Repeat([]string{"response", "request"}, 50)}, []string{resp.ID.String(), req.ID.String()}},
		{"peer by name", SearchQuery{Query: "staging", Peer: "bob"}, []string{resp.ID.String(), req.ID.String()}},
		{"peer by key", SearchQuery{Query: "staging", Peer: bob.ID().String()}, []string{resp.ID.String(), req.ID.String()}},
		{"peer by uuid", SearchQuery{Query: "staging", Peer: bob.ID().UUID().String()}, []string{resp.ID.String(), req.ID.String()}},
		{"another key", SearchQuery{Query: "staging", Peer: peerN(9).String()}, nil},
		{"since", SearchQuery{Query: "deploy", Since: t0.Add(20 * time.Minute)}, []string{req.ID.String(), deploy[12], deploy[11], deploy[10]}},
		{"until", SearchQuery{Query: "deploy", Until: t0.Add(2 * time.Minute)}, []string{deploy[1], deploy[0]}},
		{"nothing", SearchQuery{Query: "kubernetes"}, nil},
	} {
		r, err := m.Search(ctx, c.q)
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		if got := hitIDs(r); !slices.Equal(got, c.want) {
			t.Errorf("%s: %v, want %v", c.name, got, c.want)
		}
	}
}

// Bad arguments fail with their codes.
func TestSearchArgumentErrors(t *testing.T) {
	m, _ := mcpTestNode(t)
	ctx := context.Background()
	for _, c := range []struct {
		q    SearchQuery
		code string
	}{
		{SearchQuery{}, CodeBadArgument},
		{SearchQuery{Query: "*** ---"}, CodeBadArgument},
		{SearchQuery{Query: strings.Repeat("x", 2000)}, CodeBadArgument},
		{SearchQuery{Query: "x", Limit: 101}, CodeBadArgument},
		{SearchQuery{Query: "x", Limit: -1}, CodeBadArgument},
		{SearchQuery{Query: "x", Kinds: []string{"ack"}}, CodeBadArgument},
		{SearchQuery{Query: "x", Cursor: "abc"}, CodeBadArgument},
		{SearchQuery{Query: "x", Cursor: "0"}, CodeBadArgument},
		{SearchQuery{Query: "x", Since: time.Now(), Until: time.Now().Add(-time.Hour)}, CodeBadArgument},
		{SearchQuery{Query: "x", Peer: "carol"}, CodeUnknownPeer},
	} {
		if _, err := m.Search(ctx, c.q); codeOfErr(err) != c.code {
			t.Errorf("%+v: %v, want %s", c.q, err, c.code)
		}
	}
}

// In memory mode Search matches the unacknowledged items
// case-insensitively; acknowledged ones are gone.
func TestSearchMemory(t *testing.T) {
	m, bob := mcpTestNode(t)
	ctx := context.Background()
	var ids []string
	for i, body := range []string{"Quarterly REPORT ready", "nothing here", "report draft attached", "the reporter called", "Report final"} {
		e := arriveAt(t, m, bob, wire.Message(body), time.Now().Add(time.Duration(i)*time.Second))
		ids = append(ids, e.ID.String())
	}
	r, err := m.Search(ctx, SearchQuery{Query: "report"})
	if err != nil {
		t.Fatal(err)
	}
	if r.History || !slices.Equal(hitIDs(r), []string{ids[4], ids[2], ids[0]}) {
		t.Fatalf("history %v, hits %v", r.History, hitIDs(r))
	}
	if s := r.Hits[2].Snippet; !strings.Contains(s, "«REPORT»") || r.Hits[2].Acked {
		t.Fatalf("hit %+v", r.Hits[2])
	}
	r, err = m.Search(ctx, SearchQuery{Query: "report*", Limit: 2})
	if err != nil || !r.More || !slices.Equal(hitIDs(r), []string{ids[4], ids[3]}) {
		t.Fatalf("prefix page 1: %v %v %v", hitIDs(r), r.More, err)
	}
	r, err = m.Search(ctx, SearchQuery{Query: "report*", Limit: 2, Cursor: r.Cursor})
	if err != nil || r.More || !slices.Equal(hitIDs(r), []string{ids[2], ids[0]}) {
		t.Fatalf("prefix page 2: %v %v %v", hitIDs(r), r.More, err)
	}
	if _, err := m.Ack(ctx, AckRequest{IDs: []string{ids[0]}}); err != nil {
		t.Fatal(err)
	}
	r, err = m.Search(ctx, SearchQuery{Query: `"report ready"`})
	if err != nil || len(r.Hits) != 0 {
		t.Fatalf("an acknowledged item found in memory mode: %v %v", hitIDs(r), err)
	}
}

// A command without a daemon searches the home's database read only; a
// memory-mode home has nothing to search without its daemon.
func TestSearchWithoutDaemon(t *testing.T) {
	h, bob := testHome(t, "alice", nil)
	m, err := Start(h, Options{Mode: ModeServe})
	if err != nil {
		t.Fatal(err)
	}
	e := arriveAt(t, m, bob, wire.Message("archived needle"), time.Now())
	if _, err := m.Ack(context.Background(), AckRequest{IDs: []string{e.ID.String()}}); err != nil {
		t.Fatal(err)
	}
	m.Close()
	cmd := startTest(t, h, ModeSend)
	r, err := cmd.Search(context.Background(), SearchQuery{Query: "needle"})
	if err != nil {
		t.Fatal(err)
	}
	if !r.History || len(r.Hits) != 1 || r.Hits[0].Message.ID != e.ID.String() || !r.Hits[0].Acked {
		t.Fatalf("%+v", r)
	}
	hm, _ := testHome(t, "carol", func(c *config.Config) { c.Store.Mode = config.StoreMemory })
	if _, err := startTest(t, hm, ModeSend).Search(context.Background(), SearchQuery{Query: "x"}); codeOfErr(err) != CodeNoDaemon {
		t.Fatalf("memory home without daemon: %v", err)
	}
	cmd.Close()
	if _, err := cmd.Search(context.Background(), SearchQuery{Query: "x"}); codeOfErr(err) != CodeUnavailable {
		t.Fatalf("after close: %v", err)
	}
}

// A SearchResult's JSON names its fields as documented.
func TestSearchResultJSON(t *testing.T) {
	b, err := json.Marshal(SearchResult{Hits: []SearchHit{{Message: Message{Seq: 3, ID: "x"}, Acked: true, Snippet: "«a»"}}, More: true, Cursor: "3"})
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range []string{`"hits":[{"message":{"seq":3`, `"acked":true`, `"snippet":"«a»"`, `"more":true`, `"cursor":"3"`, `"history":false`} {
		if !strings.Contains(string(b), s) {
			t.Errorf("%s lacks %s", b, s)
		}
	}
	var q SearchQuery
	if err := json.Unmarshal([]byte(`{"query":"a","since":"2026-01-02T03:04:05Z"}`), &q); err != nil || q.Since.IsZero() || !q.Until.IsZero() {
		t.Fatalf("%+v %v", q, err)
	}
	if b, _ := json.Marshal(SearchQuery{Query: "a"}); string(b) != `{"query":"a"}` {
		t.Fatalf("%s", b)
	}
}

// A NUL in a body does not end its searchable text: what follows it is
// found and shown in the snippet (SQLite's text functions would stop at
// the NUL).
func TestSearchTextWithNUL(t *testing.T) {
	h, bob := testHome(t, "alice", nil)
	m := startTest(t, h, ModeServe)
	e := arrive(t, m, bob, wire.Message("alpha\x00beta gamma delta"))
	for _, q := range []string{"gamma", "alpha"} {
		r, err := m.Search(context.Background(), SearchQuery{Query: q})
		if err != nil {
			t.Fatal(err)
		}
		if len(r.Hits) != 1 || r.Hits[0].Message.ID != e.ID.String() || !strings.Contains(r.Hits[0].Snippet, "beta") || !strings.Contains(r.Hits[0].Snippet, "delta") {
			t.Fatalf("search %q: %+v", q, r.Hits)
		}
	}
}

// A hit is the item as a read shows it: a note of the node's person is a
// user item, not untrusted, and a notice of the node's own keeps its class
// and notice, in both stores.
func TestSearchLocalItems(t *testing.T) {
	for _, mode := range []string{config.StoreSQLite, config.StoreMemory} {
		t.Run(mode, func(t *testing.T) {
			h, _ := testHome(t, "alice", func(c *config.Config) { c.Store.Mode = mode })
			m := startTest(t, h, ModeServe)
			ctx := context.Background()
			if _, err := m.Tell(ctx, "finish the review zebra"); err != nil {
				t.Fatal(err)
			}
			m.raiseNotice(Notice{Event: NoticeDeadLetter, Peer: "carol", ID: identity.NewUUID().String(), Text: "a zebra notice"})
			var read Batch
			waitFor(t, 10*time.Second, "the note and the notice", func() bool {
				var err error
				read, err = m.Receive(ctx, Query{})
				return err == nil && len(read.Messages) == 2
			})
			r, err := m.Search(ctx, SearchQuery{Query: "zebra"})
			if err != nil || len(r.Hits) != 2 {
				t.Fatalf("search: %+v, %v", r, err)
			}
			for _, hit := range r.Hits {
				got := hit.Message
				i := slices.IndexFunc(read.Messages, func(x Message) bool { return x.Seq == got.Seq })
				if i < 0 {
					t.Fatalf("hit %+v was not read", got)
				}
				want := read.Messages[i]
				if got.Class != want.Class || got.Untrusted || (got.Notice == nil) != (want.Notice == nil) || want.Class != ClassUser && want.Class != ClassSystem {
					t.Fatalf("hit %+v, as read %+v", got, want)
				}
			}
		})
	}
}
