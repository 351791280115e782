package node

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/meerkatd/meerkatd/identity"
	"github.com/meerkatd/meerkatd/transport"
	"github.com/meerkatd/meerkatd/trust"
)

// A broadcast reaches every trusted peer once; only a peer known to run
// meerkatd gets the broadcast mark, the others a plain message with no
// field the Rust reference does not know.
func TestBroadcastMarksOnlyMeerkatdPeers(t *testing.T) {
	hs := meshHomes(t, memoryStore, []string{"alice", "bob", "carol"}, map[string]string{
		"bob":   `{"software":"meerkatd","groups":["builders","ops"]}`,
		"carol": `{"groups":["ops"]}`,
	})
	alice, bob, carol := startTest(t, hs["alice"], ModeServe), startTest(t, hs["bob"], ModeServe), startTest(t, hs["carol"], ModeServe)
	ctx := context.Background()

	res, err := alice.Broadcast(ctx, BroadcastArgs{Body: "deploy at noon", SendOptions: SendOptions{TaskID: "deploy"}})
	if err != nil {
		t.Fatal(err)
	}
	if res.ID == "" || res.TaskID != "deploy" || len(res.Copies) != 2 {
		t.Fatalf("broadcast: %+v", res)
	}
	byPeer := map[string]BroadcastCopy{}
	for _, c := range res.Copies {
		byPeer[c.Peer] = c
		if c.Delivery != DeliveryAcked || c.ID == "" {
			t.Errorf("copy to %s: %+v, want acked", c.Peer, c)
		}
	}
	if !byPeer["bob"].Marked || byPeer["carol"].Marked {
		t.Fatalf("marks: %+v: want bob marked, carol not", byPeer)
	}
	got := func(n *Node) Message {
		t.Helper()
		b := Batch{Messages: waitPeerItems(t, n, 1)}
		if len(b.Messages) != 1 {
			t.Fatalf("%s's inbox: %+v: want one copy", n.h.Config.Name, b.Messages)
		}
		return b.Messages[0]
	}
	bm, cm := got(bob), got(carol)
	if bm.BroadcastID != res.ID || bm.TaskID != "deploy" || bm.Body != "deploy at noon" {
		t.Fatalf("bob's copy: %+v", bm)
	}
	if cm.BroadcastID != "" || cm.TaskID != "deploy" || cm.Body != "deploy at noon" {
		t.Fatalf("carol's copy: %+v: want a plain message", cm)
	}
	// What carol's node received carries only the reference's fields.
	for _, en := range carol.mail.List(0, 10).items {
		if _, ok := en.Item.Envelope.Kind.Field(FieldBroadcast); ok {
			t.Fatal("carol's envelope carries meerkat_broadcast")
		}
	}
	tl, err := alice.Tasks(ctx, TaskQuery{})
	if ts := tl.Tasks; err != nil || len(ts) != 1 || len(ts[0].Participants) != 2 || tl.More {
		t.Fatalf("the broadcast's task: %+v, %v: want bob and carol as participants", tl, err)
	}

	// Listed twice (by name and by key): one copy.
	res, err = alice.Broadcast(ctx, BroadcastArgs{Body: "again", Peers: []string{"bob", hs["bob"].Key.ID().String()}})
	if err != nil || len(res.Copies) != 1 {
		t.Fatalf("peer listed twice: %+v, %v", res, err)
	}
	// A group.
	res, err = alice.Broadcast(ctx, BroadcastArgs{Body: "ops only", Group: "builders"})
	if err != nil || len(res.Copies) != 1 || res.Copies[0].Peer != "bob" {
		t.Fatalf("group builders: %+v, %v", res, err)
	}
	res, err = alice.Broadcast(ctx, BroadcastArgs{Body: "ops", Group: "ops", Direct: true})
	if err != nil || len(res.Copies) != 2 {
		t.Fatalf("group ops: %+v, %v", res, err)
	}
	_, err = alice.Broadcast(ctx, BroadcastArgs{Body: "x", Group: "qa"})
	if CodeOf(err) != CodeBadArgument || !strings.Contains(err.Error(), "builders, ops") {
		t.Fatalf("unknown group: %v: want the known groups listed", err)
	}
	for name, a := range map[string]BroadcastArgs{
		"no body":          {},
		"group and peers":  {Body: "x", Group: "ops", Peers: []string{"bob"}},
		"direct with ttl":  {Body: "x", Direct: true, SendOptions: SendOptions{TTL: time.Minute}},
		"wait":             {Body: "x", SendOptions: SendOptions{Wait: time.Second}},
		"bad task id":      {Body: "x", SendOptions: SendOptions{TaskID: "a\x00"}},
		"unknown peer":     {Body: "x", Peers: []string{"dave"}},
		"ttl beyond limit": {Body: "x", SendOptions: SendOptions{TTL: MaxTTL + 1}},
	} {
		if _, err := alice.Broadcast(ctx, a); err == nil {
			t.Errorf("%s: no error", name)
		}
	}
	// Each of bob's copies arrived once.
	if got := fromPeers(t, bob); len(got) != 4 {
		t.Fatalf("bob holds %d items from peers, want 4 (one per broadcast)", len(got))
	}
}

// An unreachable peer's copy is queued for retry; the others still go.
func TestBroadcastQueuesForOfflinePeer(t *testing.T) {
	hs := meshHomes(t, nil, []string{"alice", "bob"}, nil)
	alice := startTest(t, hs["alice"], ModeServe)
	startTest(t, hs["bob"], ModeServe)
	l, err := trust.LoadOrEmpty(hs["alice"].TrustPath())
	if err != nil {
		t.Fatal(err)
	}
	dave, _ := identity.GenerateKeypair()
	p, _ := trust.New(append(l.Peers(), trust.Peer{Name: "dave", ID: dave.ID(), Addr: transport.Addr{Scheme: transport.SchemeUDS, Path: "/nonexistent/dave.sock"}})...)
	if err := p.Save(hs["alice"].TrustPath()); err != nil {
		t.Fatal(err)
	}
	alice.ReloadTrust()
	waitFor(t, 5*time.Second, "dave trusted", func() bool { _, ok := alice.r.Trust().ByName("dave"); return ok })
	res, err := alice.Broadcast(context.Background(), BroadcastArgs{Body: "hello all"})
	if err != nil || len(res.Copies) != 2 {
		t.Fatalf("%+v, %v", res, err)
	}
	for _, c := range res.Copies {
		want := DeliveryAcked
		if c.Peer == "dave" {
			want = DeliveryQueued
		}
		if c.Delivery != want {
			t.Errorf("copy to %s: %+v, want %s", c.Peer, c, want)
		}
		// Why it is queued, as send and sent say it: no package prefixes.
		if c.Peer == "dave" && (c.LastError == "" || c.LastError != userText(c.LastError) || strings.Contains(c.LastError, "comms:")) {
			t.Errorf("copy to dave: last error %q", c.LastError)
		}
	}
}

// Pairing marks the paired peer as running meerkatd, keeping its meta.
func TestPlanTrustMarksMeerkatd(t *testing.T) {
	l, _ := trust.New()
	p := trust.Peer{Name: "bob", ID: peerN(3), Meta: json.RawMessage(`{"groups":["ops"]}`)}
	p.Addr = transport.Addr{Scheme: transport.SchemeUDS, Path: "/tmp/b.sock"}
	got, next, err := planTrust(l, p)
	if err != nil {
		t.Fatal(err)
	}
	if m := metaOf(got); m.Software != SoftwareMeerkatd || len(m.Groups) != 1 {
		t.Fatalf("planned meta %s", got.Meta)
	}
	// An entry trusted before pairing gets the mark too.
	old := trust.Peer{Name: "bob", ID: peerN(3), Addr: p.Addr}
	l2, _ := trust.New(old)
	got, _, err = planTrust(l2, p)
	if err != nil || metaOf(got).Software != SoftwareMeerkatd {
		t.Fatalf("re-pair: %+v, %v", got, err)
	}
	if q, ok := next.Lookup(peerN(3)); !ok || metaOf(q).Software != SoftwareMeerkatd {
		t.Fatalf("list entry %+v", q)
	}
	for meta, want := range map[string]string{
		``:                            `{"software":"meerkatd"}`,
		`{"a":1}`:                     `{"a":1,"software":"meerkatd"}`,
		`{"software":"rust-meerkat"}`: `{"software":"meerkatd"}`,
		`[1]`:                         `{"software":"meerkatd"}`,
	} {
		if got := string(markMeerkatd(json.RawMessage(meta))); got != want {
			t.Errorf("markMeerkatd(%s) = %s, want %s", meta, got, want)
		}
	}
}

// Reading a trust entry's meta never fails on hostile input, and marking
// it always gives an object that says meerkatd and keeps the rest.
func FuzzPeerMeta(f *testing.F) {
	for _, s := range []string{``, `{}`, `{"software":"meerkatd","groups":["a","b"]}`, `{"groups":"ops"}`, `{"software":1}`, `[1,2]`, `null`, `{"groups":[1,null]}`} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, meta string) {
		metaOf(trust.Peer{Meta: json.RawMessage(meta)}) // must not panic
		marked := markMeerkatd(json.RawMessage(meta))
		var obj map[string]json.RawMessage
		if err := json.Unmarshal(marked, &obj); err != nil {
			t.Fatalf("markMeerkatd(%q) = %s: %v", meta, marked, err)
		}
		if got := metaOf(trust.Peer{Meta: marked}); got.Software != SoftwareMeerkatd {
			t.Fatalf("marked meta %s reads as %+v", marked, got)
		}
		var before map[string]json.RawMessage
		if json.Unmarshal([]byte(meta), &before) == nil && before != nil {
			for k := range before {
				if _, ok := obj[k]; !ok {
					t.Fatalf("markMeerkatd dropped %q from %s", k, meta)
				}
			}
		}
	})
}

// A body that fits no envelope fails the broadcast as it fails a send
// (body_too_large), not as copies that failed.
func TestBroadcastBodyTooLarge(t *testing.T) {
	hs := meshHomes(t, nil, []string{"alice", "bob"}, nil)
	alice := startTest(t, hs["alice"], ModeServe)
	startTest(t, hs["bob"], ModeServe)
	for _, direct := range []bool{false, true} {
		res, err := alice.Broadcast(context.Background(), BroadcastArgs{Body: strings.Repeat("x", 1<<20), Direct: direct})
		if CodeOf(err) != CodeBodyTooLarge || len(res.Copies) != 0 {
			t.Fatalf("broadcast (direct %v) of a body too large: %+v, %v; want %s", direct, res, err, CodeBodyTooLarge)
		}
	}
}
