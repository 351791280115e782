package node

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/meerkatd/meerkatd/comms/wire"
	"github.com/meerkatd/meerkatd/config"
	"github.com/meerkatd/meerkatd/identity"
)

// guardClock is a clock tests move by hand.
type guardClock struct {
	mu sync.Mutex
	t  time.Time
}

func newGuardClock() *guardClock {
	return &guardClock{t: time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)}
}

func (c *guardClock) now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *guardClock) advance(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

// guardStep is one step of a loop guard scenario.
type guardStep struct {
	op   string        // recv, send, user, wait, release
	d    time.Duration // wait: how long
	held bool          // send: want it refused with CodeLoopGuard
	trip bool          // send: want it to make the guard hold the peer
	n    int           // the count after the step
}

// fast replies: a receipt, then a send 100 ms later.
func guardFastRounds(from, to int) []guardStep {
	var s []guardStep
	for i := from; i <= to; i++ {
		s = append(s, guardStep{op: "recv", n: i - 1}, guardStep{op: "wait", d: 100 * time.Millisecond, n: i - 1}, guardStep{op: "send", n: i})
	}
	return s
}

func guardSteps(parts ...[]guardStep) []guardStep {
	var out []guardStep
	for _, p := range parts {
		out = append(out, p...)
	}
	return out
}

func TestLoopGuardScenarios(t *testing.T) {
	const max, fast, hold = 4, time.Second, time.Minute
	trip := func(n int) []guardStep {
		return []guardStep{{op: "recv", n: n - 1}, {op: "wait", d: 100 * time.Millisecond, n: n - 1}, {op: "send", trip: true, n: n}}
	}
	cases := []struct {
		name  string
		steps []guardStep
	}{
		{"fast replies trip at max", guardSteps(guardFastRounds(1, 3), trip(4),
			[]guardStep{{op: "send", held: true, n: 4}, {op: "recv", n: 4}, {op: "send", held: true, n: 4}})},
		{"a slow reply starts the count again", guardSteps(guardFastRounds(1, 3),
			[]guardStep{{op: "recv", n: 3}, {op: "wait", d: fast, n: 3}, {op: "send", n: 0}},
			guardFastRounds(1, 3))},
		{"just under fast counts", guardSteps(guardFastRounds(1, 2),
			[]guardStep{{op: "recv", n: 2}, {op: "wait", d: fast - time.Millisecond, n: 2}, {op: "send", n: 3}})},
		{"sends with nothing to answer change nothing", guardSteps(guardFastRounds(1, 2),
			[]guardStep{{op: "send", n: 2}, {op: "send", n: 2}, {op: "wait", d: hold / 2, n: 2}, {op: "send", n: 2}})},
		{"several receipts, one reply: one exchange", guardSteps(
			[]guardStep{{op: "recv"}, {op: "recv"}, {op: "recv"}, {op: "send", n: 1}, {op: "send", n: 1}})},
		{"a user item starts every count again and voids the receipt", guardSteps(guardFastRounds(1, 3),
			[]guardStep{{op: "recv", n: 3}, {op: "user", n: 0}, {op: "send", n: 0}},
			guardFastRounds(1, 3))},
		{"the hold ends after hold, counting from zero", guardSteps(guardFastRounds(1, 3), trip(4),
			[]guardStep{{op: "wait", d: hold - time.Millisecond, n: 4}, {op: "send", held: true, n: 4}, {op: "wait", d: time.Millisecond, n: 0}, {op: "send", n: 0}},
			guardFastRounds(1, 3), trip(4))},
		{"a person's release lifts the hold", guardSteps(guardFastRounds(1, 3), trip(4),
			[]guardStep{{op: "release", n: 0}, {op: "send", n: 0}}, guardFastRounds(1, 3))},
		{"a user item does not lift a hold", guardSteps(guardFastRounds(1, 3), trip(4),
			[]guardStep{{op: "user", n: 0}, {op: "send", held: true, n: 0}})},
		{"a receipt within hold of the last exchange continues the chain", guardSteps(guardFastRounds(1, 2),
			[]guardStep{{op: "wait", d: hold - 500*time.Millisecond, n: 2}, {op: "recv", n: 2}, {op: "wait", d: 600 * time.Millisecond, n: 2}, {op: "send", n: 3}})},
		{"a chain quiet for longer than hold starts over", guardSteps(guardFastRounds(1, 3),
			[]guardStep{{op: "wait", d: hold + time.Second, n: 0}}, guardFastRounds(1, 3), trip(4))},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			clock := newGuardClock()
			g := newLoopGuard(max, fast, hold, clock.now)
			kp, _ := identity.GenerateKeypair()
			peer := kp.ID()
			for i, s := range c.steps {
				switch s.op {
				case "recv":
					g.received(peer, "bob")
				case "wait":
					clock.advance(s.d)
				case "user":
					g.userActivity()
				case "release":
					g.release(peer)
				case "send":
					tr, err := g.send(peer, "bob")
					if got := err != nil; got != s.held {
						t.Fatalf("step %d (send): err %v, want held %v", i, err, s.held)
					}
					if err != nil && CodeOf(err) != CodeLoopGuard {
						t.Fatalf("step %d: code %s, want %s", i, CodeOf(err), CodeLoopGuard)
					}
					if got := tr != nil; got != s.trip {
						t.Fatalf("step %d (send): tripped %v, want %v", i, got, s.trip)
					}
				default:
					t.Fatalf("bad step %q", s.op)
				}
				if got := guardCount(g, peer); got != s.n {
					t.Fatalf("step %d (%s): count %d, want %d", i, s.op, got, s.n)
				}
			}
		})
	}
}

// guardCount is the guard's count for peer (0 if it keeps nothing for it).
func guardCount(g *loopGuard, peer identity.PeerID) int {
	g.mu.Lock()
	defer g.mu.Unlock()
	if p, ok := g.peers[peer]; ok {
		g.liftExpiredLocked(p, g.now())
		return p.count
	}
	return 0
}

// Peers are counted apart: fast replies to one do not count for another.
func TestLoopGuardPerPeer(t *testing.T) {
	clock := newGuardClock()
	g := newLoopGuard(2, time.Second, time.Minute, clock.now)
	a, _ := identity.GenerateKeypair()
	b, _ := identity.GenerateKeypair()
	for range 2 {
		g.received(a.ID(), "a")
		g.received(b.ID(), "b")
		if _, err := g.send(a.ID(), "a"); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := g.send(a.ID(), "a"); CodeOf(err) != CodeLoopGuard {
		t.Fatalf("a after 2 fast replies: %v, want %s", err, CodeLoopGuard)
	}
	if _, err := g.send(b.ID(), "b"); err != nil {
		t.Fatalf("b, never answered fast before: %v", err)
	}
	st := g.states()
	if len(st) != 2 || st[0].Peer != "a" || !st[0].Held || st[0].Exchanges != 2 || st[0].HeldUntil == nil ||
		!st[0].HeldUntil.Equal(clock.now().Add(time.Minute)) || st[0].Since == nil || st[1].Peer != "b" || st[1].Held || st[1].Exchanges != 1 {
		t.Fatalf("states %+v", st)
	}
}

// The refusal says what was seen and how a person releases it.
func TestLoopGuardMessage(t *testing.T) {
	clock := newGuardClock()
	g := newLoopGuard(3, 3*time.Second, 10*time.Minute, clock.now)
	kp, _ := identity.GenerateKeypair()
	start := clock.now()
	for range 3 {
		g.received(kp.ID(), "bob smith")
		clock.advance(time.Second)
		if _, err := g.send(kp.ID(), "bob smith"); err != nil {
			t.Fatal(err)
		}
	}
	_, err := g.send(kp.ID(), "bob smith")
	want := []string{"3 replies in a row to bob smith", "within 3s", "no person in between since " + start.Format(time.RFC3339),
		"held until " + start.Add(3*time.Second+10*time.Minute).Format(time.RFC3339), "meerkatd release 'bob smith'"}
	for _, w := range want {
		if err == nil || !strings.Contains(err.Error(), w) {
			t.Fatalf("error %q: want it to say %q", err, w)
		}
	}
}

// A nil guard (agent.loop_max_exchanges = 0) guards nothing.
func TestLoopGuardOff(t *testing.T) {
	g := newLoopGuard(0, time.Second, time.Minute, nil)
	if g != nil {
		t.Fatal("max 0 made a guard")
	}
	kp, _ := identity.GenerateKeypair()
	for range 100 {
		g.received(kp.ID(), "bob")
		if _, err := g.send(kp.ID(), "bob"); err != nil {
			t.Fatal(err)
		}
	}
	g.userActivity()
	if g.release(kp.ID()) || len(g.states()) != 0 {
		t.Fatal("a nil guard reports state")
	}
}

// The guard remembers at most maxGuardPeers peers, and never forgets a
// held one to make room.
func TestLoopGuardBounded(t *testing.T) {
	clock := newGuardClock()
	g := newLoopGuard(1, time.Second, time.Hour, clock.now)
	held, _ := identity.GenerateKeypair()
	g.received(held.ID(), "held")
	if tr, _ := g.send(held.ID(), "held"); tr == nil {
		t.Fatal("one fast reply did not trip a guard of max 1")
	}
	for i := range maxGuardPeers + 10 {
		var id identity.PeerID
		id[0], id[1], id[2] = byte(i), byte(i>>8), 0xff
		clock.advance(time.Millisecond)
		g.received(id, "")
	}
	if len(g.peers) > maxGuardPeers {
		t.Fatalf("%d peers kept, bound %d", len(g.peers), maxGuardPeers)
	}
	if _, err := g.send(held.ID(), "held"); CodeOf(err) != CodeLoopGuard {
		t.Fatalf("held peer forgotten: %v", err)
	}
}

// guardedNode is a serving node whose loop guard runs on a fake clock:
// max 3 fast (1 s) replies, held 10 minutes. Its peer bob is unreachable,
// so reliable sends stay queued in its outbox.
func guardedNode(t *testing.T) (*Node, *identity.Keypair, *guardClock) {
	t.Helper()
	h, bob := testHome(t, "alice", func(c *config.Config) { c.Store.Mode = config.StoreMemory })
	n := startTest(t, h, ModeServe)
	clock := newGuardClock()
	n.loop = newLoopGuard(3, time.Second, 10*time.Minute, clock.now)
	return n, bob, clock
}

// Through the node: receipts seen on admission, replies counted on every
// send kind, the hold refuses sends before they are queued, status and
// peers show it, and a release lifts it.
func TestNodeLoopGuard(t *testing.T) {
	n, bob, clock := guardedNode(t)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	queued := SendOptions{Reliable: true, NoWait: true}
	arrive(t, n, bob, wire.Message("hi"))
	if _, err := n.SendMessage(ctx, "bob", "hello", queued); err != nil {
		t.Fatal(err)
	}
	req := arrive(t, n, bob, wire.Request("ask", wire.Null()))
	if _, err := n.SendResponse(ctx, "bob", req.ID.String(), "completed", nil, queued); err != nil {
		t.Fatal(err)
	}
	// A reserved intent is the node's to answer: no receipt.
	arrive(t, n, bob, wire.Request("meerkat.card", wire.Null()))
	if _, err := n.SendMessage(ctx, "bob", "not a reply", queued); err != nil {
		t.Fatal(err)
	}
	if g := n.guardState(bob.ID()); g == nil || g.Exchanges != 2 || g.Held {
		t.Fatalf("after two fast replies and a send that answers nothing: %+v", g)
	}
	arrive(t, n, bob, wire.Response(req.ID, wire.StatusCompleted, wire.Null()))
	if _, err := n.SendRequest(ctx, "bob", "more", nil, queued); err != nil {
		t.Fatalf("third fast reply (it trips the guard, but goes): %v", err)
	}
	ob, err := n.Outbox(ctx)
	if err != nil {
		t.Fatal(err)
	}
	before := len(ob.Entries)
	arrive(t, n, bob, wire.Message("again"))
	_, err = n.SendMessage(ctx, "bob", "held", queued)
	if CodeOf(err) != CodeLoopGuard || !strings.Contains(err.Error(), "meerkatd release bob") {
		t.Fatalf("send to a held peer: %v, want %s", err, CodeLoopGuard)
	}
	req2 := arrive(t, n, bob, wire.Request("ask", wire.Null()))
	if _, err := n.SendResponse(ctx, "bob", req2.ID.String(), "completed", nil, queued); CodeOf(err) != CodeLoopGuard {
		t.Fatalf("response to a held peer: %v", err)
	}
	if _, err := n.SendRequest(ctx, "bob", "x", nil, SendOptions{}); CodeOf(err) != CodeLoopGuard {
		t.Fatalf("direct request to a held peer: %v", err)
	}
	if ob, err = n.Outbox(ctx); err != nil || len(ob.Entries) != before {
		t.Fatalf("outbox %d entries (err %v), want %d: a held send was queued", len(ob.Entries), err, before)
	}
	st, err := n.Status(ctx)
	if err != nil || len(st.LoopGuards) != 1 || st.LoopGuards[0].Peer != "bob" || !st.LoopGuards[0].Held || st.LoopGuards[0].Exchanges != 3 {
		t.Fatalf("status loop_guards %+v (err %v)", st.LoopGuards, err)
	}
	ps, err := n.Peers(ctx)
	if err != nil || len(ps) != 1 || ps[0].LoopGuard == nil || !ps[0].LoopGuard.Held {
		t.Fatalf("peers %+v (err %v)", ps, err)
	}
	// The answer to req2 was refused: it can still be given after release.
	if err := n.ReleaseLoopGuard(ctx, "bob"); err != nil {
		t.Fatal(err)
	}
	if _, err := n.SendResponse(ctx, "bob", req2.ID.String(), "completed", nil, queued); err != nil {
		t.Fatalf("after release: %v", err)
	}
	if gs, _ := n.LoopGuards(ctx); len(gs) != 0 {
		t.Fatalf("after release the guard counts %+v", gs)
	}
	if err := n.ReleaseLoopGuard(ctx, "carol"); CodeOf(err) != CodeUnknownPeer {
		t.Fatalf("release of an unknown peer: %v", err)
	}
	// The hold ends by itself too.
	for range 3 {
		arrive(t, n, bob, wire.Message("m"))
		if _, err := n.SendMessage(ctx, "bob", "r", queued); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := n.SendMessage(ctx, "bob", "r", queued); CodeOf(err) != CodeLoopGuard {
		t.Fatalf("tripped again: %v", err)
	}
	clock.advance(10 * time.Minute)
	if _, err := n.SendMessage(ctx, "bob", "r", queued); err != nil {
		t.Fatalf("after the hold: %v", err)
	}
}

// A person's user item starts the count again: fast replies around it
// never reach the limit.
func TestNodeLoopGuardUserItem(t *testing.T) {
	n, bob, _ := guardedNode(t)
	ctx := context.Background()
	queued := SendOptions{Reliable: true, NoWait: true}
	for i := range 10 {
		arrive(t, n, bob, wire.Message("m"))
		if _, err := n.SendMessage(ctx, "bob", "r", queued); err != nil {
			t.Fatalf("reply %d: %v", i, err)
		}
		if i%2 == 1 {
			if _, err := n.Tell(ctx, "carry on"); err != nil { // a person's note
				t.Fatalf("tell: %v", err)
			}
		}
	}
}

// A node that does not serve its home keeps no guard and cannot release.
func TestLoopGuardNeedsDaemon(t *testing.T) {
	h, _ := testHome(t, "alice", nil)
	n := startTest(t, h, ModeSend)
	if err := n.ReleaseLoopGuard(context.Background(), "bob"); CodeOf(err) != CodeNoDaemon {
		t.Fatalf("release without a daemon: %v", err)
	}
	if gs, err := n.LoopGuards(context.Background()); err != nil || gs == nil || len(gs) != 0 {
		t.Fatalf("guards without a daemon: %v %v", gs, err)
	}
}

func TestGuardQuote(t *testing.T) {
	for _, c := range []struct{ in, want string }{
		{"bob", "bob"},
		{"build-bot_2.local", "build-bot_2.local"},
		{"ed25519:AQEB+/=", "ed25519:AQEB+/="},
		{"bob smith", "'bob smith'"},
		{"o'brien", `'o'\''brien'`},
		{"$(rm)", "'$(rm)'"},
		{"", "''"},
	} {
		if got := guardQuote(c.in); got != c.want {
			t.Errorf("guardQuote(%q) = %q, want %q", c.in, got, c.want)
		}
	}
}

// FuzzLoopGuard runs the guard through any sequence of receipts, sends,
// user items, releases and clock moves over a few peers, and checks its
// invariants: a count never passes max, a send is refused exactly while
// its peer is held, a send with no receipt to answer never adds to a
// count, and the states agree with the refusals.
func FuzzLoopGuard(f *testing.F) {
	f.Add([]byte{0, 1, 0, 1, 0, 1, 0, 1, 1})
	f.Add([]byte{0, 2, 1, 3, 0, 1, 4, 1, 0x85, 1})
	f.Fuzz(func(t *testing.T, ops []byte) {
		const max, fast, hold = 3, time.Second, time.Minute
		clock := newGuardClock()
		g := newLoopGuard(max, fast, hold, clock.now)
		var peers [3]identity.PeerID
		for i := range peers {
			peers[i][0] = byte(i + 1)
		}
		heldUntil := map[identity.PeerID]time.Time{}
		for _, op := range ops {
			p := peers[int(op>>4)%len(peers)]
			switch op & 0x0f {
			case 0:
				g.received(p, "p")
			case 1:
				before := guardCount(g, p)
				g.mu.Lock()
				pending := g.peers[p] != nil && !g.peers[p].received.IsZero()
				g.mu.Unlock()
				tr, err := g.send(p, "p")
				held := clock.now().Before(heldUntil[p])
				if (err != nil) != held {
					t.Fatalf("send: err %v, but held %v (until %v, now %v)", err, held, heldUntil[p], clock.now())
				}
				if tr != nil {
					heldUntil[p] = tr.until
				}
				if err == nil && !pending && guardCount(g, p) > before {
					t.Fatalf("a send with nothing to answer counted: %d -> %d", before, guardCount(g, p))
				}
			case 2:
				g.userActivity()
			case 3:
				g.release(p)
				delete(heldUntil, p)
			default:
				d := time.Duration(op&0x0f) * 150 * time.Millisecond // up to 2.25 s: either side of fast
				if op&0x80 != 0 {
					d *= 40 // up to 90 s: either side of hold
				}
				clock.advance(d)
			}
			for _, q := range peers {
				if c := guardCount(g, q); c > max {
					t.Fatalf("count %d above max %d", c, max)
				}
			}
			for _, s := range g.states() {
				if s.Held != (s.HeldUntil != nil) {
					t.Fatalf("state %+v: held and held_until disagree", s)
				}
			}
		}
	})
}

// At the default settings, a person's pace is never held: a long
// conversation whose replies come a few seconds after each message
// (people read, then type), with quick answers now and then. Agents that
// answer at once are held after the default number of fast replies.
func TestLoopGuardDefaults(t *testing.T) {
	c := config.Default()
	max, fast, hold := c.Agent.LoopMaxExchanges, c.Agent.LoopFast(), c.Agent.LoopHold()
	if max != config.DefaultLoopMaxExchanges || fast != config.DefaultLoopFastMS*time.Millisecond {
		t.Fatalf("defaults: max %d, fast %v", max, fast)
	}
	kp, _ := identity.GenerateKeypair()
	peer := kp.ID()

	clock := newGuardClock()
	g := newLoopGuard(max, fast, hold, clock.now)
	// 1,000 replies; every fifth answers within a second ("ok", "thanks"),
	// the others take 4 to 30 seconds.
	for i := range 1000 {
		g.received(peer, "bob")
		d := fast + time.Duration(1+i%27)*time.Second
		if i%5 == 0 {
			d = 800 * time.Millisecond
		}
		clock.advance(d)
		if _, err := g.send(peer, "bob"); err != nil {
			t.Fatalf("reply %d, %v after the message: held: %v", i+1, d, err)
		}
		clock.advance(2 * time.Second) // the other side reads and answers
	}

	clock = newGuardClock()
	g = newLoopGuard(max, fast, hold, clock.now)
	for i := 1; ; i++ {
		g.received(peer, "bob")
		clock.advance(50 * time.Millisecond)
		tripped, err := g.send(peer, "bob")
		if err != nil {
			if i != max+1 {
				t.Fatalf("instant replies held at reply %d, want %d", i, max+1)
			}
			break
		}
		if (tripped != nil) != (i == max) {
			t.Fatalf("reply %d: tripped %v", i, tripped != nil)
		}
	}
}
