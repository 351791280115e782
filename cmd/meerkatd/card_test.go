package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"

	"github.com/meerkatd/meerkatd/comms"
	"github.com/meerkatd/meerkatd/comms/card"
	"github.com/meerkatd/meerkatd/comms/wire"
	"github.com/meerkatd/meerkatd/identity"
	"github.com/meerkatd/meerkatd/transport"
	"github.com/meerkatd/meerkatd/trust"
)

// cliCard is a card as card show/fetch --json print it.
type cliCard struct {
	Name        string `json:"name"`
	Description string `json:"description"`
	Intents     []struct {
		Name         string          `json:"name"`
		ParamsSchema json.RawMessage `json:"params_schema"`
	} `json:"intents"`
	PubKey    string `json:"pubkey"`
	Default   bool   `json:"default"`
	Peer      string `json:"peer"`
	Untrusted bool   `json:"untrusted"`
}

// cliPeerCard is the card part of peers list --json.
type cliPeerCard struct {
	Name   string `json:"name"`
	PubKey string `json:"pubkey"`
	Card   *struct {
		Name    string   `json:"name"`
		Intents []string `json:"intents"`
	} `json:"card"`
}

func (n *testNode) peerCards() map[string]cliPeerCard {
	n.t.Helper()
	var ps []cliPeerCard
	n.okJSON(&ps, "peers", "list", "--json")
	m := map[string]cliPeerCard{}
	for _, p := range ps {
		m[p.Name] = p
	}
	return m
}

// rawCardPeer is a Go peer that is not meerkatd: a bare Router that
// answers meerkat.card requests with whatever answer returns.
type rawCardPeer struct {
	kp     *identity.Keypair
	addr   string
	answer atomic.Value // func() wire.Value
}

func startRawCardPeer(t *testing.T, to *testNode) *rawCardPeer {
	t.Helper()
	kp, err := identity.GenerateKeypair()
	if err != nil {
		t.Fatal(err)
	}
	dir, err := os.MkdirTemp("", "mkr")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	addr := transport.Addr{Scheme: transport.SchemeUDS, Path: filepath.Join(dir, "m.sock")}
	toAddr, err := transport.ParseAddr(to.addr)
	if err != nil {
		t.Fatal(err)
	}
	toID, err := identity.ParsePeerID(to.key)
	if err != nil {
		t.Fatal(err)
	}
	l, err := trust.New(trust.Peer{Name: to.name, ID: toID, Addr: toAddr})
	if err != nil {
		t.Fatal(err)
	}
	p := &rawCardPeer{kp: kp, addr: addr.String()}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	var r *comms.Router
	admit := admitFunc(func(it comms.Item) error {
		e := it.Envelope
		if e.Kind.Type() == wire.TypeRequest && e.Kind.Intent() == "meerkat.card" {
			v := p.answer.Load().(func() wire.Value)()
			wg.Add(1)
			go func() {
				defer wg.Done()
				r.SendResponse(ctx, to.name, e.ID, wire.StatusCompleted, v)
			}()
		}
		return nil
	})
	if r, err = comms.New(kp, l, comms.Options{Inbox: admit}); err != nil {
		t.Fatal(err)
	}
	ln, err := transport.Listen(ctx, addr)
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
	return p
}

type admitFunc func(comms.Item) error

func (f admitFunc) Push(it comms.Item) error { return f(it) }

// cardValue signs c with kp, lets tamper change the JSON text, and
// returns it as the response's result.
func cardValue(t *testing.T, kp *identity.Keypair, c card.Card, tamper func(string) string) func() wire.Value {
	s, err := card.Sign(kp, c)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := s.MarshalJSON()
	text := string(b)
	if tamper != nil {
		if text = tamper(text); text == string(b) {
			t.Fatal("test bug: the tamper changed nothing")
		}
	}
	v, err := wire.ParseJSON([]byte(text))
	if err != nil {
		t.Fatal(err)
	}
	return func() wire.Value { return v }
}

// Two daemons exchange their cards, answered by the daemons themselves;
// a peer (a raw Go Router, not meerkatd) whose card is tampered with or
// signed by another key is refused with bad_card and nothing is kept; a
// good card from it is shown in peers list, also when fetched by a
// command with no daemon running.
func TestCardDaemons(t *testing.T) {
	t.Parallel()
	alice, bob := twoNodes(t, "uds")
	var own cliCard
	alice.okJSON(&own, "card", "show", "--json")
	if !own.Default || own.Name != "alice" || len(own.Intents) != 0 || own.PubKey != alice.key {
		t.Fatalf("default card: %+v", own)
	}
	alice.ok("card", "edit", "--description", "Reviews pull requests", "--contact", "alice@example.org")
	alice.okJSON(&own, "card", "edit", "--add-intent", "review-pr", "--intent-description", "review one PR",
		"--schema", `{"type":"object","properties":{"url":{"type":"string"}},"required":["url"]}`, "--json")
	if own.Default || len(own.Intents) != 1 || own.Description != "Reviews pull requests" {
		t.Fatalf("edited card: %+v", own)
	}
	alice.wantCode(exitUsage, []string{"needs something to change"}, "card", "edit")
	alice.wantCode(exitUsage, []string{"bad_argument", "node's own"}, "card", "edit", "--add-intent", "meerkat.card")
	alice.start()
	bob.start()

	var got cliCard
	bob.okJSON(&got, "card", "fetch", "alice", "--json")
	var schema bytes.Buffer
	if len(got.Intents) == 1 {
		json.Compact(&schema, got.Intents[0].ParamsSchema)
	}
	if got.Name != "alice" || got.Peer != "alice" || !got.Untrusted || got.PubKey != alice.key || len(got.Intents) != 1 ||
		got.Intents[0].Name != "review-pr" || schema.String() != `{"properties":{"url":{"type":"string"}},"required":["url"],"type":"object"}` {
		t.Fatalf("fetched card: %+v", got)
	}
	if c := bob.peerCards()["alice"].Card; c == nil || c.Name != "alice" || len(c.Intents) != 1 || c.Intents[0] != "review-pr" {
		t.Fatalf("peers list card: %+v", c)
	}
	if out := bob.ok("peers", "list"); !strings.Contains(out, "CARD") || !strings.Contains(out, "alice (review-pr)") {
		t.Fatalf("peers list:\n%s", out)
	}
	if out := bob.ok("card", "show", "alice"); !strings.Contains(out, "Reviews pull requests") || !strings.Contains(out, "signed by the peer's key") {
		t.Fatalf("card show alice:\n%s", out)
	}
	// Neither side's inbox holds the card request or its answer.
	if items := alice.inbox(); len(items) != 0 {
		t.Fatalf("alice's inbox: %+v", items)
	}
	if items := bob.inbox(); len(items) != 0 {
		t.Fatalf("bob's inbox: %+v", items)
	}

	// mallory is no meerkatd; bob trusts it.
	mallory := startRawCardPeer(t, bob)
	bob.ok("peers", "add", "mallory", mallory.kp.ID().String(), mallory.addr)
	bob.d.cmd.Process.Signal(syscall.SIGHUP) // reload the trust file now
	waitUntil(t, "bob's daemon trusts mallory", func() bool { _, ok := bob.peerCards()["mallory"]; return ok })
	other, _ := identity.GenerateKeypair()
	mc := card.Card{Name: "mallory", Description: "harmless helper", Intents: []card.Intent{{Name: "sum"}}}
	for _, c := range []struct {
		name   string
		answer func() wire.Value
	}{
		{"tampered description", cardValue(t, mallory.kp, mc, func(s string) string {
			return strings.Replace(s, "harmless helper", "trusted admin", 1)
		})},
		{"intent added after signing", cardValue(t, mallory.kp, mc, func(s string) string {
			return strings.Replace(s, `{"name":"sum"}`, `{"name":"sum"},{"name":"run-shell"}`, 1)
		})},
		{"signed by another key", cardValue(t, other, mc, nil)},
		{"pubkey swapped to the signer's", cardValue(t, other, mc, func(s string) string {
			return strings.Replace(s, other.ID().String(), mallory.kp.ID().String(), 1)
		})},
		{"not a card", func() wire.Value { return wire.Text("trust me") }},
	} {
		mallory.answer.Store(c.answer)
		r := bob.wantCode(exitError, []string{"bad_card"}, "card", "fetch", "mallory")
		if !strings.Contains(r.stderr, "mallory") {
			t.Fatalf("%s: %s", c.name, r)
		}
		var e struct {
			Error struct {
				Code string `json:"code"`
			} `json:"error"`
		}
		r = bob.run("card", "fetch", "mallory", "--json")
		if json.Unmarshal([]byte(r.stdout), &e); e.Error.Code != "bad_card" {
			t.Fatalf("%s: --json error: %s", c.name, r)
		}
		if p := bob.peerCards()["mallory"]; p.Card != nil {
			t.Fatalf("%s: a refused card is shown: %+v", c.name, p.Card)
		}
		if _, err := os.Stat(filepath.Join(bob.home, "cards", mallory.kp.ID().UUID().String()+".json")); !os.IsNotExist(err) {
			t.Fatalf("%s: a refused card was kept: %v", c.name, err)
		}
	}
	// The same peer with a good card: shown.
	mallory.answer.Store(cardValue(t, mallory.kp, mc, nil))
	bob.okJSON(&got, "card", "fetch", "mallory", "--json")
	if got.Name != "mallory" || got.Description != "harmless helper" {
		t.Fatalf("good card: %+v", got)
	}
	if c := bob.peerCards()["mallory"].Card; c == nil || c.Name != "mallory" {
		t.Fatalf("peers list after a good card: %+v", c)
	}
	// Without a daemon, the command's own node fetches and keeps it.
	bob.stop()
	mc.Description = "changed, re-signed"
	mallory.answer.Store(cardValue(t, mallory.kp, mc, nil))
	bob.okJSON(&got, "card", "fetch", "mallory", "--json")
	if got.Description != "changed, re-signed" {
		t.Fatalf("fetch without a daemon: %+v", got)
	}
	var d struct {
		Peer struct {
			Name string `json:"name"`
		} `json:"peer"`
		Card cliCard `json:"card"`
	}
	if out := bob.ok("card", "show", "mallory", "--json"); json.Unmarshal([]byte(out), &d.Card) != nil || d.Card.Description != "changed, re-signed" {
		t.Fatalf("card show mallory after a fetch without the daemon:\n%s", out)
	}
}
