package node

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/meerkatd/meerkatd/comms"
	"github.com/meerkatd/meerkatd/comms/card"
	"github.com/meerkatd/meerkatd/comms/wire"
	"github.com/meerkatd/meerkatd/config"
	"github.com/meerkatd/meerkatd/identity"
	"github.com/meerkatd/meerkatd/transport"
	"github.com/meerkatd/meerkatd/trust"
)

func strp(s string) *string { return &s }

func TestCardEditAndDefault(t *testing.T) {
	n, _ := mcpTestNode(t)
	ctx := context.Background()
	own, err := n.Card(ctx)
	if err != nil || !own.Default || own.Name != "alice" || len(own.Intents) != 0 || own.PubKey != n.h.Key.ID().String() {
		t.Fatalf("default card: %+v, %v", own, err)
	}
	schema := json.RawMessage(`{"type":"object","properties":{"url":{"type":"string"}}}`)
	edits := []struct {
		name string
		e    CardEdit
		code string
	}{
		{"describe", CardEdit{Name: strp("Alice's reviewer"), Description: strp("Reviews PRs.\nCarefully."), Contact: strp("alice@example.org")}, ""},
		{"add intent", CardEdit{AddIntent: &CardIntentEdit{Name: "review-pr", Description: "review one PR", ParamsSchema: schema}}, ""},
		{"add second", CardEdit{AddIntent: &CardIntentEdit{Name: "ping"}}, ""},
		{"replace intent", CardEdit{AddIntent: &CardIntentEdit{Name: "ping", Description: "answers pong"}}, ""},
		{"reserved intent", CardEdit{AddIntent: &CardIntentEdit{Name: "meerkat.card"}}, CodeBadArgument},
		{"bad intent name", CardEdit{AddIntent: &CardIntentEdit{Name: "two words"}}, CodeBadArgument},
		{"schema not object", CardEdit{AddIntent: &CardIntentEdit{Name: "x", ParamsSchema: json.RawMessage(`[1]`)}}, CodeBadArgument},
		{"schema not json", CardEdit{AddIntent: &CardIntentEdit{Name: "x", ParamsSchema: json.RawMessage(`{`)}}, CodeBadArgument},
		{"empty name", CardEdit{Name: strp("")}, CodeBadArgument},
		{"remove missing", CardEdit{RemoveIntent: "nope"}, CodeBadArgument},
	}
	for _, c := range edits {
		_, err := n.CardEdit(ctx, c.e)
		if c.code == "" && err != nil || c.code != "" && CodeOf(err) != c.code {
			t.Fatalf("%s: %v, want code %q", c.name, err, c.code)
		}
	}
	own, err = n.Card(ctx)
	if err != nil || own.Default || own.Name != "Alice's reviewer" || len(own.Intents) != 2 || own.Intents[1].Description != "answers pong" {
		t.Fatalf("edited card: %+v, %v", own, err)
	}
	st, err := os.Stat(n.h.CardPath())
	if err != nil || st.Mode().Perm() != 0o600 {
		t.Fatalf("card.json: %v %v", st, err)
	}
	if _, err := n.CardEdit(ctx, CardEdit{RemoveIntent: "ping"}); err != nil {
		t.Fatal(err)
	}
	if own, _ = n.Card(ctx); len(own.Intents) != 1 {
		t.Fatalf("after remove: %+v", own.Intents)
	}
	// The signed card verifies with the node's key.
	b, _ := json.Marshal(struct {
		CardInfo
	}{own.CardInfo})
	s, err := card.ParseSigned(b)
	if err != nil || s.Check(n.h.Key.ID()) != nil {
		t.Fatalf("own card does not verify: %v", err)
	}
	// A card.json others may write is refused.
	if err := os.Chmod(n.h.CardPath(), 0o666); err != nil {
		t.Fatal(err)
	}
	if _, err := n.Card(ctx); CodeOf(err) != CodeInternal || !strings.Contains(err.Error(), "chmod") {
		t.Fatalf("group-writable card.json: %v", err)
	}
	if err := CheckHome(n.h.Dir); err == nil {
		t.Fatal("CheckHome accepts a group-writable card.json")
	}
}

func TestCardLimiter(t *testing.T) {
	t0 := time.Unix(1000, 0)
	l := &cardLimiter{tokens: cardBurst, last: t0}
	for i := range cardBurst {
		if !l.allow(t0) {
			t.Fatalf("request %d of the burst refused", i)
		}
	}
	if l.allow(t0) {
		t.Fatal("request past the burst allowed")
	}
	if l.allow(t0.Add(cardRate / 2)) {
		t.Fatal("allowed before a token came back")
	}
	if !l.allow(t0.Add(cardRate + cardRate/2)) {
		t.Fatal("refused after a token came back")
	}
	later := t0.Add(time.Hour)
	allowed := 0
	for range cardBurst + 2 {
		if l.allow(later) {
			allowed++
		}
	}
	if allowed != cardBurst {
		t.Fatalf("after an idle hour %d requests allowed at once, want the burst %d", allowed, cardBurst)
	}
}

// A meerkat.card request is taken before the inbox: admitted (so acked),
// never stored nor recorded as answerable, and answered at most
// cardBurst times in a row per peer.
func TestCardRequestNotStored(t *testing.T) {
	n, bob := mcpTestNode(t)
	ctx := context.Background()
	var ids []identity.UUID
	for range 10 {
		ids = append(ids, arrive(t, n, bob, wire.Request(CardIntent, wire.Null())).ID)
	}
	b, err := n.Receive(ctx, Query{})
	if err != nil || len(b.Messages) != 0 || b.Pending != 0 {
		t.Fatalf("card requests reached the inbox: %+v, %v", b, err)
	}
	if _, err := n.SendResponse(ctx, "bob", ids[0].String(), "completed", nil, SendOptions{}); CodeOf(err) != CodeUnknownRequest {
		t.Fatalf("answering a card request by hand: %v", err)
	}
	n.cards.mu.Lock()
	l := n.cards.limiters[bob.ID()]
	n.cards.mu.Unlock()
	if l == nil || l.tokens >= 1 {
		t.Fatalf("limiter after 10 requests: %+v", l)
	}
	// An ordinary request still goes to the inbox.
	arrive(t, n, bob, wire.Request("meerkatx.card", wire.Null()))
	if b, _ := n.Receive(ctx, Query{}); len(b.Messages) != 1 {
		t.Fatalf("ordinary request: %+v", b.Messages)
	}
}

// cardPeers starts alice (a serving node) and a raw Router "mallory"
// that trust each other; mallory answers meerkat.card with answer's
// status and result.
func cardPeers(t *testing.T, answer func(alice identity.PeerID) (wire.Status, wire.Value)) (*Node, *identity.Keypair) {
	t.Helper()
	mk, _ := identity.GenerateKeypair()
	h, _ := testHome(t, "alice", func(c *config.Config) { c.Store.Mode = config.StoreMemory })
	dir := t.TempDir()
	malAddr := transport.Addr{Scheme: transport.SchemeUDS, Path: filepath.Join(dir, "m.sock")}
	l, err := trust.New(trust.Peer{Name: "mallory", ID: mk.ID(), Addr: malAddr})
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Save(h.TrustPath()); err != nil {
		t.Fatal(err)
	}
	alice := startTest(t, h, ModeServe)
	ml, err := trust.New(trust.Peer{Name: "alice", ID: h.Key.ID(), Addr: alice.Addrs()[0]})
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	ctx, cancel := context.WithCancel(context.Background())
	var r *comms.Router
	admit := admitFunc(func(it comms.Item) error {
		e := it.Envelope
		if e.Kind.Type() == wire.TypeRequest && e.Kind.Intent() == CardIntent {
			st, v := answer(h.Key.ID())
			wg.Add(1)
			go func() {
				defer wg.Done()
				r.SendResponse(ctx, "alice", e.ID, st, v)
			}()
		}
		return nil
	})
	r, err = comms.New(mk, ml, comms.Options{Inbox: admit})
	if err != nil {
		t.Fatal(err)
	}
	ln, err := transport.Listen(ctx, malAddr)
	if err != nil {
		t.Fatal(err)
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		r.Serve(ln)
	}()
	t.Cleanup(func() {
		cancel()
		r.Close()
		wg.Wait()
	})
	return alice, mk
}

type admitFunc func(comms.Item) error

func (f admitFunc) Push(it comms.Item) error { return f(it) }

// signedValue is c signed by kp, changed by tamper, as a wire value.
func signedValue(t *testing.T, kp *identity.Keypair, c card.Card, tamper func(string) string) wire.Value {
	t.Helper()
	s, err := card.Sign(kp, c)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := s.MarshalJSON()
	text := string(b)
	if tamper != nil {
		text = tamper(text)
	}
	v, err := wire.ParseJSON([]byte(text))
	if err != nil {
		t.Fatal(err)
	}
	return v
}

func TestFetchCard(t *testing.T) {
	other, _ := identity.GenerateKeypair()
	good := card.Card{Name: "mallory", Description: "fine", Intents: []card.Intent{{Name: "sum", ParamsSchema: json.RawMessage(`{"type":"array","items":{"type":"number","multipleOf":0.5}}`)}}}
	cases := []struct {
		name   string
		answer func(mk *identity.Keypair) (wire.Status, wire.Value)
		code   string
	}{
		{"good", func(mk *identity.Keypair) (wire.Status, wire.Value) {
			return wire.StatusCompleted, signedValue(t, mk, good, nil)
		}, ""},
		{"tampered name", func(mk *identity.Keypair) (wire.Status, wire.Value) {
			return wire.StatusCompleted, signedValue(t, mk, good, func(s string) string { return strings.Replace(s, `"name":"mallory"`, `"name":"trusted-admin"`, 1) })
		}, CodeBadCard},
		{"tampered intent", func(mk *identity.Keypair) (wire.Status, wire.Value) {
			return wire.StatusCompleted, signedValue(t, mk, good, func(s string) string { return strings.Replace(s, `"sum"`, `"rm"`, 1) })
		}, CodeBadCard},
		{"signed by another key", func(mk *identity.Keypair) (wire.Status, wire.Value) {
			return wire.StatusCompleted, signedValue(t, other, good, nil)
		}, CodeBadCard},
		{"not a card", func(mk *identity.Keypair) (wire.Status, wire.Value) {
			return wire.StatusCompleted, wire.Text("hello")
		}, CodeBadCard},
		{"declined", func(mk *identity.Keypair) (wire.Status, wire.Value) {
			return wire.StatusFailed, wire.Null()
		}, CodeBadCard},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var mk *identity.Keypair
			alice, mk := cardPeers(t, func(identity.PeerID) (wire.Status, wire.Value) { return c.answer(mk) })
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			pc, err := alice.FetchCard(ctx, "mallory")
			if CodeOf(err) != c.code && !(c.code == "" && err == nil) {
				t.Fatalf("FetchCard: %+v, %v; want code %q", pc, err, c.code)
			}
			peers, perr := alice.Peers(ctx)
			if perr != nil || len(peers) != 1 {
				t.Fatal(peers, perr)
			}
			_, statErr := os.Stat(alice.keptCardPath(mk.ID()))
			if c.code != "" {
				if alice.hasVerifiedCard(mk.ID()) || peers[0].Card != nil || !errors.Is(statErr, os.ErrNotExist) {
					t.Fatalf("a refused card was kept: %+v %v", peers[0].Card, statErr)
				}
				return
			}
			if pc.Name != "mallory" || !pc.Untrusted || len(pc.Intents) != 1 || pc.PubKey != mk.ID().String() {
				t.Fatalf("card: %+v", pc)
			}
			if !alice.hasVerifiedCard(mk.ID()) || peers[0].Card == nil || peers[0].Card.Name != "mallory" || peers[0].Card.Intents[0] != "sum" {
				t.Fatalf("summary: %+v", peers[0].Card)
			}
			// The response was consumed, not stored.
			if b, _ := alice.Receive(ctx, Query{}); len(b.Messages) != 0 {
				t.Fatalf("the card response reached the inbox: %+v", b.Messages)
			}
			d, err := alice.DescribePeer(ctx, "mallory", false)
			if err != nil || d.Card.Name != "mallory" || d.Peer.Name != "mallory" || !d.Card.FetchedAt.Equal(pc.FetchedAt) {
				t.Fatalf("describe: %+v, %v", d, err)
			}
			// A kept file tampered with on disk is not believed.
			data, _ := os.ReadFile(alice.keptCardPath(mk.ID()))
			bad := strings.Replace(string(data), `\"fine\"`, `\"evil\"`, 1)
			bad = strings.Replace(bad, `"fine"`, `"evil"`, 1)
			if bad == string(data) {
				t.Fatal("test bug: nothing replaced")
			}
			if err := os.WriteFile(alice.keptCardPath(mk.ID()), []byte(bad+" "), 0o600); err != nil {
				t.Fatal(err)
			}
			if alice.hasVerifiedCard(mk.ID()) {
				t.Fatal("a tampered kept card is believed")
			}
		})
	}
}

func TestFetchCardChecks(t *testing.T) {
	n, _ := mcpTestNode(t)
	ctx := context.Background()
	if _, err := n.FetchCard(ctx, "nobody"); CodeOf(err) != CodeUnknownPeer {
		t.Fatalf("unknown peer: %v", err)
	}
	if _, err := n.FetchCard(ctx, "bob"); CodeOf(err) != CodePeerOffline {
		t.Fatalf("unreachable peer: %v", err)
	}
	if _, err := n.DescribePeer(ctx, "bob", false); CodeOf(err) != CodePeerOffline {
		t.Fatalf("describe unreachable peer: %v", err)
	}
	h, _ := testHome(t, "carol", nil)
	s := startTest(t, h, ModeSend)
	if _, err := s.FetchCard(ctx, "bob"); CodeOf(err) != CodeNoDaemon {
		t.Fatalf("send-only node: %v", err)
	}
}

// Two meerkatd nodes: one fetches the other's card, answered by the node
// itself.
func TestFetchCardBetweenNodes(t *testing.T) {
	alice, bob := fullTestNode(t, "alice"), fullTestNode(t, "bob")
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	o, err := alice.PairOffer(ctx, PairOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := bob.PairAccept(ctx, o.Line, ""); err != nil {
		t.Fatal(err)
	}
	if _, err := alice.CardEdit(ctx, CardEdit{Description: strp("alice's agent"), AddIntent: &CardIntentEdit{Name: "review-pr", ParamsSchema: json.RawMessage(`{"type":"object"}`)}}); err != nil {
		t.Fatal(err)
	}
	pc, err := bob.FetchCard(ctx, "alice")
	if err != nil || pc.Name != "alice" || pc.Description != "alice's agent" || len(pc.Intents) != 1 {
		t.Fatalf("fetch: %+v, %v", pc, err)
	}
	// Only the node's own notices (the pairing) are there.
	if m := fromPeers(t, alice); len(m) != 0 {
		t.Fatalf("the card request reached alice's inbox: %+v", m)
	}
	if m := fromPeers(t, bob); len(m) != 0 {
		t.Fatalf("the card response reached bob's inbox: %+v", m)
	}
	// The SQLite home keeps it across a restart.
	if !bob.hasVerifiedCard(alice.h.Key.ID()) {
		t.Fatal("not kept")
	}
}

// cardAtLimit is a card whose signed form takes exactly card.MaxSize
// bytes: its description filled with desc (repeated up to 4096 bytes),
// then its schema holding schemaText repeated, then padding.
func cardAtLimit(t *testing.T, kp *identity.Keypair, desc, schemaText string) card.Card {
	t.Helper()
	build := func(n, pad int) card.Card {
		s, err := json.Marshal(map[string]string{"s": strings.Repeat(schemaText, n), "z": strings.Repeat("a", pad)})
		if err != nil {
			t.Fatal(err)
		}
		d := strings.Repeat(desc, card.MaxDescriptionLen/max(1, len(desc)))
		return card.Card{Name: "big <card>", Description: d, Intents: []card.Intent{{Name: "x", Description: "<&>", ParamsSchema: s}}}
	}
	size := func(c card.Card) int {
		s, err := card.Sign(kp, c)
		if err != nil {
			t.Fatalf("test bug: %v", err)
		}
		b, _ := s.MarshalJSON()
		return len(b)
	}
	base := size(build(0, 0))
	unit := size(build(1, 0)) - base
	n := (card.MaxSize - base) / unit
	c := build(n, card.MaxSize-base-n*unit)
	if got := size(c); got != card.MaxSize {
		t.Fatalf("test bug: %d bytes", got)
	}
	return c
}

// A card at the size limit, whose text other writers escape with more
// bytes (\b is \u0008 in the wire's JSON, < is \u003c in Go's), is
// fetched, kept and read back from the home, byte for byte as signed.
func TestFetchCardAtTheLimit(t *testing.T) {
	cases := []struct{ name, desc, schema string }{
		{"backspace", "", "\b"},
		{"form feed", "", "\f"},
		{"every control character", "\t\n", "\x00\x01\x02\x03\x04\x05\x06\x07\b\t\n\x0b\f\r\x0e\x0f\x10\x11\x12\x13\x14\x15\x16\x17\x18\x19\x1a\x1b\x1c\x1d\x1e\x1f\x7f"},
		{"html", "<>&", "<>&"},
		{"line separators", "\u2028", "\u2028\u2029"},
		{"non-BMP", "😀", "😀"},
		{"mixed", "<é\u2028", "<\b😀\u2028\f\"\\"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var want []byte
			alice, mk := cardPeers(t, func(identity.PeerID) (wire.Status, wire.Value) {
				v, err := wire.ParseJSON(want)
				if err != nil {
					t.Error(err)
				}
				return wire.StatusCompleted, v
			})
			s, err := card.Sign(mk, cardAtLimit(t, mk, c.desc, c.schema))
			if err != nil {
				t.Fatal(err)
			}
			want, _ = s.MarshalJSON()
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			pc, err := alice.FetchCard(ctx, "mallory")
			if err != nil || pc.Name != "big <card>" {
				t.Fatalf("FetchCard of a card Sign accepted: %+v, %v", pc.CardInfo.Name, err)
			}
			k, ok := alice.keptCard(mk.ID())
			if !ok {
				t.Fatal("the fetched card is not kept: its file does not read back")
			}
			if got, _ := k.s.MarshalJSON(); !bytes.Equal(got, want) {
				t.Fatal("the kept card differs from the signed one")
			}
		})
	}
}

// The same between two meerkatd nodes: a card set at the limit through
// CardEdit (card.json, signed when asked) is fetched by the peer.
func TestFetchCardBetweenNodesAtTheLimit(t *testing.T) {
	cases := []struct{ name, desc, schema string }{
		{"backspace", "", "\b"},
		{"html and line separators", "<\u2028&", "\b<\f"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			alice, bob := fullTestNode(t, "alice"), fullTestNode(t, "bob")
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			o, err := alice.PairOffer(ctx, PairOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if _, err := bob.PairAccept(ctx, o.Line, ""); err != nil {
				t.Fatal(err)
			}
			c := cardAtLimit(t, alice.h.Key, tc.desc, tc.schema)
			in := c.Intents[0]
			if _, err := alice.CardEdit(ctx, CardEdit{Name: &c.Name, Description: &c.Description,
				AddIntent: &CardIntentEdit{Name: in.Name, Description: in.Description, ParamsSchema: in.ParamsSchema}}); err != nil {
				t.Fatalf("CardEdit of a card Sign accepts: %v", err)
			}
			own, err := alice.signedCard()
			if err != nil {
				t.Fatal(err)
			}
			want, _ := own.MarshalJSON()
			if len(want) != card.MaxSize {
				t.Fatalf("test bug: %d bytes", len(want))
			}
			pc, err := bob.FetchCard(ctx, "alice")
			if err != nil || pc.Description != c.Description {
				t.Fatalf("fetch: %v", err)
			}
			k, ok := bob.keptCard(alice.h.Key.ID())
			if !ok {
				t.Fatal("not kept")
			}
			if got, _ := k.s.MarshalJSON(); !bytes.Equal(got, want) {
				t.Fatal("the kept card differs from the signed one")
			}
		})
	}
}

// A node whose own card cannot be given (its card.json does not parse)
// declines a card request at once: the asker gets bad_card, not a wait
// for a card that never comes.
func TestCardDeclinedWhenBroken(t *testing.T) {
	ha, hb := twoHomes(t, func(c *config.Config) { c.Store.Mode = config.StoreMemory })
	if err := os.WriteFile(hb.CardPath(), []byte(`{"name": `), 0o600); err != nil {
		t.Fatal(err)
	}
	startTest(t, hb, ModeServe)
	alice := startTest(t, ha, ModeServe)
	start := time.Now()
	_, err := alice.FetchCard(context.Background(), "bob")
	if CodeOf(err) != CodeBadCard || !strings.Contains(err.Error(), "declined") {
		t.Fatalf("card of a node whose card is broken: %v, want %s, declined", err, CodeBadCard)
	}
	t.Logf("declined after %v", time.Since(start))
}

// A card.json that cannot be used is the file's fault: showing or editing
// the card fails with an internal error (exit 1) that names the file and
// the way out, not bad_argument (exit 2, for a command line at fault).
func TestBrokenCardFileIsNotABadArgument(t *testing.T) {
	ha, _ := twoHomes(t, func(c *config.Config) { c.Store.Mode = config.StoreMemory })
	n := startTest(t, ha, ModeServe)
	ctx := context.Background()
	for _, content := range []string{`{"name": `, `{}`} {
		if err := os.WriteFile(ha.CardPath(), []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		_, showErr := n.Card(ctx)
		desc := "x"
		_, editErr := n.CardEdit(ctx, CardEdit{Description: &desc})
		for what, err := range map[string]error{"Card": showErr, "CardEdit": editErr} {
			if err == nil || CodeOf(err) != CodeInternal || !strings.Contains(err.Error(), ha.CardPath()) || !strings.Contains(err.Error(), "remove it") {
				t.Errorf("%s with card.json %s: %v (code %s), want an internal error naming the file and the way out", what, content, err, CodeOf(err))
			}
		}
	}
}

// Fetches paced by reserve (cardPaceBurst, cardPaceRate) are all taken by
// the peer's limiter (cardBurst, cardRate), which counts from when they
// arrive: the first may take longer on the way (it dials) than the next,
// by up to a second, or less, in either direction.
func TestCardPaceWithinThePeersLimit(t *testing.T) {
	for _, skew := range []time.Duration{0, 50 * time.Millisecond, 300 * time.Millisecond, 900 * time.Millisecond} {
		for _, firstSlow := range []bool{true, false} {
			t0 := time.Unix(1000, 0)
			mine := &cardLimiter{tokens: cardPaceBurst, last: t0}
			var theirs *cardLimiter
			sent := t0
			for i := range 3 * cardBurst {
				// A fetch loop: each asks as soon as the last was answered,
				// after the wait reserve gives.
				sent = sent.Add(mine.reserve(sent, cardPaceBurst, cardPaceRate))
				delay := time.Duration(0)
				if (i == 0) == firstSlow {
					delay = skew
				}
				arrived := sent.Add(delay)
				if theirs == nil {
					theirs = &cardLimiter{tokens: cardBurst, last: arrived}
				}
				if !theirs.allow(arrived) {
					t.Fatalf("skew %v (first slow %v): fetch %d, sent at +%v, refused by the peer", skew, firstSlow, i, sent.Sub(t0))
				}
			}
		}
	}
	// Past the burst, a paced fetch waits about the peer's interval.
	l := &cardLimiter{tokens: cardPaceBurst, last: time.Unix(0, 0)}
	for range cardPaceBurst {
		if w := l.reserve(time.Unix(0, 0), cardPaceBurst, cardPaceRate); w != 0 {
			t.Fatalf("within the burst: wait %v", w)
		}
	}
	if w := l.reserve(time.Unix(0, 0), cardPaceBurst, cardPaceRate); w < cardRate || w > 2*cardRate {
		t.Fatalf("past the burst: wait %v", w)
	}
}

// A node fetching one peer's card more often than the peer answers
// (cardBurst in a row, then one per cardRate) waits its turn: every fetch
// gets the card, none is left unanswered to time out.
func TestFetchCardPacedPastTheBurst(t *testing.T) {
	_, bob := pairedNodes(t, false)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for i := range cardBurst + 2 {
		if pc, err := bob.FetchCard(ctx, "alice"); err != nil || pc.Name != "alice" {
			t.Fatalf("fetch %d: %+v, %v", i, pc, err)
		}
	}
}
