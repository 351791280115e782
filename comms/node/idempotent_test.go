package node

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/json"
	"io"
	"net"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/meerkatd/meerkatd/comms/wire"
	"github.com/meerkatd/meerkatd/config"
	"github.com/meerkatd/meerkatd/inbox/store"
	"github.com/meerkatd/meerkatd/transport"
	"github.com/meerkatd/meerkatd/trust"
)

// ackDropper stands between a node and its peer on a Unix socket: it
// passes every frame on, and drops the peer's frames (its acks) while
// drop is set, as a connection that fails after the envelope arrived.
type ackDropper struct {
	addr    transport.Addr
	ln      net.Listener
	drop    atomic.Bool
	dropped atomic.Int64
	wg      sync.WaitGroup
	mu      sync.Mutex
	closed  bool
	conns   []net.Conn
}

// newAckDropper listens for connections to pass on to the node at to,
// until the test ends.
func newAckDropper(t *testing.T, to transport.Addr) *ackDropper {
	t.Helper()
	dir, err := os.MkdirTemp("", "mkp") // short: socket paths have a length limit
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	d := &ackDropper{addr: transport.Addr{Scheme: transport.SchemeUDS, Path: filepath.Join(dir, "p.sock")}}
	if d.ln, err = transport.Listen(context.Background(), d.addr); err != nil {
		t.Fatal(err)
	}
	d.wg.Add(1)
	go d.acceptLoop(to)
	t.Cleanup(func() {
		d.ln.Close()
		d.mu.Lock()
		d.closed = true
		for _, c := range d.conns {
			c.Close()
		}
		d.mu.Unlock()
		d.wg.Wait()
	})
	return d
}

func (d *ackDropper) acceptLoop(to transport.Addr) {
	defer d.wg.Done()
	for {
		c, err := d.ln.Accept()
		if err != nil {
			return
		}
		s, err := transport.Dial(context.Background(), to)
		if err != nil {
			c.Close()
			continue
		}
		d.mu.Lock()
		if d.closed {
			d.mu.Unlock()
			c.Close()
			s.Close()
			return
		}
		d.conns = append(d.conns, c, s)
		d.mu.Unlock()
		d.wg.Add(2)
		go func() {
			defer d.wg.Done()
			io.Copy(s, c)
			s.Close()
			c.Close()
		}()
		go func() {
			defer d.wg.Done()
			defer c.Close()
			defer s.Close()
			for {
				f, err := transport.ReadFrame(s, 0)
				if err != nil {
					return
				}
				if d.drop.Load() {
					d.dropped.Add(1)
					continue
				}
				if transport.WriteFrame(c, f) != nil {
					return
				}
			}
		}()
	}
}

// A send under an idempotency key whose first attempt reached the peer
// but whose ack was lost fails and releases its key; the caller's retry
// with the key sends again under the same envelope id, so the peer drops
// the repeat and acks it: the retry succeeds and the peer has the
// envelope once. A direct broadcast whose copies all failed likewise.
func TestIdempotentRetryAfterLostAck(t *testing.T) {
	ha, hb := twoHomes(t, func(c *config.Config) { c.Store.Mode = config.StoreMemory })
	ls, err := hb.Config.Resolve(hb.Dir)
	if err != nil {
		t.Fatal(err)
	}
	proxy := newAckDropper(t, ls.UDS)
	l, err := trust.New(trust.Peer{Name: "bob", ID: hb.Key.ID(), Addr: proxy.addr})
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Save(ha.TrustPath()); err != nil {
		t.Fatal(err)
	}
	bob := startTest(t, hb, ModeServe)
	alice := startTest(t, ha, ModeServe)

	for _, c := range []struct {
		kind string
		send func(ctx context.Context) (id string, delivery string, replayed bool, err error)
	}{
		{"message", func(ctx context.Context) (string, string, bool, error) {
			s, err := alice.SendMessage(ctx, "bob", "exactly once", SendOptions{IdempotencyKey: "note-1"})
			return s.ID, s.Delivery, s.Replayed, err
		}},
		{"request", func(ctx context.Context) (string, string, bool, error) {
			s, err := alice.SendRequest(ctx, "bob", "review", json.RawMessage(`{"pr":7}`), SendOptions{IdempotencyKey: "review-1"})
			return s.ID, s.Delivery, s.Replayed, err
		}},
		{"broadcast", func(ctx context.Context) (string, string, bool, error) {
			b, err := alice.Broadcast(ctx, BroadcastArgs{Body: "to all, once", Direct: true, SendOptions: SendOptions{IdempotencyKey: "all-1"}})
			if len(b.Copies) != 1 {
				return "", "", b.Replayed, err
			}
			return b.Copies[0].ID, b.Copies[0].Delivery, b.Replayed, err
		}},
	} {
		t.Run(c.kind, func(t *testing.T) {
			kind := c.kind
			if kind == "broadcast" {
				kind = "message"
			}
			had := countItems(t, bob, kind)
			proxy.drop.Store(true)
			lost := proxy.dropped.Load()
			ctx, cancel := context.WithTimeout(context.Background(), time.Second)
			firstID, delivery, _, err := c.send(ctx)
			cancel()
			if delivery == DeliveryAcked {
				t.Fatalf("first attempt: acked although its ack was dropped (%v)", err)
			}
			waitFor(t, 5*time.Second, "the first attempt to arrive", func() bool { return countItems(t, bob, kind) == had+1 })
			if proxy.dropped.Load() == lost {
				t.Fatal("no ack was dropped")
			}

			proxy.drop.Store(false)
			ctx, cancel = context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			id, delivery, replayed, err := c.send(ctx)
			if err != nil || delivery != DeliveryAcked || replayed {
				t.Fatalf("retry with the key: id %s, delivery %q, replayed %v, %v; want sent again and acked", id, delivery, replayed, err)
			}
			if firstID != "" && id != firstID {
				t.Errorf("retry sealed as %s, the first attempt as %s: want one envelope id", id, firstID)
			}
			if n := countItems(t, bob, kind); n != had+1 {
				t.Fatalf("bob has %d new %ss, want exactly 1", n-had, kind)
			}
			// Now kept: another retry replays.
			if _, _, replayed, err := c.send(ctx); err != nil || !replayed {
				t.Fatalf("retry after the success: replayed %v, %v", replayed, err)
			}
		})
	}
}

// The name of a call under a key is the key, a zero byte and the hash of
// the op and arguments: another key, op or arguments give another one.
func TestCallOf(t *testing.T) {
	hash := func(op string, args any) []byte {
		h, err := argsHash(op, args)
		if err != nil {
			t.Fatal(err)
		}
		return h
	}
	msg := sendArgs{Peer: "ed25519:bob", Body: "hi"}
	at := time.Unix(1_800_000_000, 123)
	first := callOf("k1", hash("send_message", msg), at)
	if want := sha256.Size + len("k1") + 1 + 8; len(first) != want || !bytes.HasPrefix(first, []byte("k1\x00")) {
		t.Fatalf("callOf = %q: want the key, a zero byte, the %d-byte hash and the time", first, sha256.Size)
	}
	other := msg
	other.Body = "hello"
	for _, c := range []struct {
		name string
		call []byte
		same bool
	}{
		{"the same call", callOf("k1", hash("send_message", msg), at), true},
		{"another key", callOf("k2", hash("send_message", msg), at), false},
		{"a key that extends it", callOf("k1\x01", hash("send_message", msg), at), false},
		{"another op", callOf("k1", hash("send_request", msg), at), false},
		{"other arguments", callOf("k1", hash("send_message", other), at), false},
		{"another first claim", callOf("k1", hash("send_message", msg), at.Add(time.Nanosecond)), false},
	} {
		if bytes.Equal(c.call, first) != c.same {
			t.Errorf("%s: %q, first %q: want the same %v", c.name, c.call, first, c.same)
		}
	}
}

// A key used again with the same arguments after its window is a new
// send: it goes out under a new envelope id and the peer delivers it,
// although its node still remembers the first id (for a week). Within
// the window the same call is replayed and nothing is sent.
func TestIdempotencyKeyAfterItsWindow(t *testing.T) {
	for _, mode := range []string{config.StoreMemory, config.StoreSQLite} {
		t.Run(mode, func(t *testing.T) {
			ha, hb := twoHomes(t, func(c *config.Config) { c.Store.Mode = mode })
			bob := startTest(t, hb, ModeServe)
			alice := startTest(t, ha, ModeServe)
			ctx := context.Background()
			send := func() Sent {
				t.Helper()
				s, err := alice.SendMessage(ctx, "bob", "stand-up at nine", SendOptions{IdempotencyKey: "standup"})
				if err != nil || s.Delivery != DeliveryAcked {
					t.Fatalf("send: %+v %v", s, err)
				}
				return s
			}
			first := send()
			if again := send(); !again.Replayed || again.ID != first.ID {
				t.Fatalf("within the window: %+v, want the first send %s replayed", again, first.ID)
			}
			waitFor(t, 5*time.Second, "the first send to arrive", func() bool { return countItems(t, bob, "message") == 1 })

			// The window passes: the node forgets the key, as its pruning does.
			st, err := alice.sentStore()
			if err != nil {
				t.Fatal(err)
			}
			if _, k, err := st.Prune(time.Time{}, time.Now().Add(time.Second)); err != nil || k != 1 {
				t.Fatalf("Prune: %d keys, %v", k, err)
			}
			second := send()
			if second.Replayed || second.ID == first.ID {
				t.Fatalf("after the window: %+v, want a new send (the first was %s)", second, first.ID)
			}
			waitFor(t, 5*time.Second, "the second send to arrive", func() bool { return countItems(t, bob, "message") == 2 })
		})
	}
}

// The memory store keeps keys as the durable one does: a released key's
// retry keeps the time that names the call and starts the window again;
// a finished one is replayed a window after its latest claim.
func TestMemSentKeys(t *testing.T) {
	m := newMemSent()
	t0 := time.Unix(5000, 0)
	const window = time.Hour
	k := store.Idem{Key: "k", Op: "send_message", ArgsHash: []byte{1}, Owner: "a", Created: t0}
	if got, ok, err := m.ClaimKey(k, t0.Add(-window)); err != nil || !ok || !got.CallAt.Equal(t0) {
		t.Fatalf("first claim: %+v %v %v", got, ok, err)
	}
	if got, ok, _ := m.ClaimKey(store.Idem{Key: "k", Op: "send_message", ArgsHash: []byte{1}, Owner: "x", Created: t0}, t0.Add(-window)); ok || got.Owner != "a" {
		t.Fatalf("claim while it runs: %+v %v", got, ok)
	}
	if err := m.ReleaseKey(k); err != nil {
		t.Fatal(err)
	}
	retry := k
	retry.Owner, retry.Created = "b", t0.Add(50*time.Minute)
	got, ok, err := m.ClaimKey(retry, retry.Created.Add(-window))
	if err != nil || !ok || !got.CallAt.Equal(t0) || !got.Created.Equal(retry.Created) || got.Owner != "b" {
		t.Fatalf("retry: %+v %v %v", got, ok, err)
	}
	got.Result = []byte(`"sent"`)
	if err := m.FinishKey(got); err != nil {
		t.Fatal(err)
	}
	at := t0.Add(61 * time.Minute)
	if again, ok, err := m.ClaimKey(store.Idem{Key: "k", Op: "send_message", ArgsHash: []byte{1}, Owner: "c", Created: at}, at.Add(-window)); err != nil || ok || string(again.Result) != `"sent"` {
		t.Fatalf("a repeat after the successful retry: %+v %v %v; want it replayed", again, ok, err)
	}
	// Used again after its window: a new call, named by its own time.
	late := t0.Add(3 * time.Hour)
	if got, ok, err := m.ClaimKey(store.Idem{Key: "k", Op: "send_message", ArgsHash: []byte{1}, Owner: "d", Created: late}, late.Add(-window)); err != nil || !ok || !got.CallAt.Equal(late) {
		t.Fatalf("after the window: %+v %v %v", got, ok, err)
	}
}

// A daemon that starts releases the idempotency keys whose calls were
// cut short when the last one stopped (a crash): a retry with such a key
// is made again, not refused as running until the key's window ends.
func TestStartReleasesKeysOfCallsCutShort(t *testing.T) {
	h, _ := testHome(t, "alice", nil) // SQLite: the keys outlive the process
	n, err := Start(h, Options{Mode: ModeServe})
	if err != nil {
		t.Fatal(err)
	}
	st, err := n.sentStore()
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	k := store.Idem{Key: "k1", Op: "send_message", ArgsHash: []byte{1}, Owner: "a process that crashed", Created: now}
	if _, ok, err := st.ClaimKey(k, now.Add(-time.Hour)); err != nil || !ok {
		t.Fatalf("claim: %v %v", ok, err)
	}
	n.Close()
	n = startTest(t, h, ModeServe)
	if st, err = n.sentStore(); err != nil {
		t.Fatal(err)
	}
	retry := k
	retry.Owner, retry.Created = "the restarted daemon", now.Add(time.Second)
	if got, ok, err := st.ClaimKey(retry, now.Add(-time.Hour)); err != nil || !ok || !got.CallAt.Equal(k.Created) {
		t.Fatalf("the key of the call cut short, after a restart: %+v %v %v; want it claimed again as the same call", got, ok, err)
	}
}

// The same call sent reliably again (its key retried after a crash cut
// the first short) finds its envelope queued from the first time: queued,
// under the same id, not an error.
func TestSameCallAgainIsQueued(t *testing.T) {
	alice, bob := pairedNodes(t, false)
	bob.Close()
	ctx := context.Background()
	call := callOf("k1", []byte{1, 2, 3}, time.Now())
	var ids []string
	for i := range 2 {
		s, _, err := alice.sendKind(ctx, "bob", wire.Message("once"), SendOptions{Reliable: true, NoWait: true}, call)
		if err != nil || s.Delivery != DeliveryQueued {
			t.Fatalf("send %d of one call: %+v, %v; want queued", i+1, s, err)
		}
		ids = append(ids, s.ID)
	}
	if ids[0] != ids[1] {
		t.Fatalf("one call, two envelope ids: %v", ids)
	}
	if ob, err := alice.Outbox(ctx); err != nil || len(ob.Entries) != 1 {
		t.Fatalf("outbox: %+v, %v; want the one envelope", ob.Entries, err)
	}
}
