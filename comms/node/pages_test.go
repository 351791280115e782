package node

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"strings"
	"testing"

	"github.com/meerkatd/meerkatd/comms"
	"github.com/meerkatd/meerkatd/comms/outbox"
	"github.com/meerkatd/meerkatd/comms/wire"
	"github.com/meerkatd/meerkatd/config"
	"github.com/meerkatd/meerkatd/identity"
	"github.com/meerkatd/meerkatd/inbox"
	"github.com/meerkatd/meerkatd/inbox/store"
	"github.com/meerkatd/meerkatd/transport"
	"github.com/meerkatd/meerkatd/trust"
)

// pageBytesCounter records the most stored bytes one page of reads held.
type pageBytesCounter struct {
	mailStore
	most int
}

func (p *pageBytesCounter) note(page mailPage) mailPage {
	n := 0
	for _, en := range page.items {
		n += en.Item.Size
	}
	p.most = max(p.most, n)
	return page
}

func (p *pageBytesCounter) List(after uint64, limit int) mailPage {
	return p.note(p.mailStore.List(after, limit))
}

func (p *pageBytesCounter) ListClass(class string, after uint64, limit int) mailPage {
	return p.note(p.mailStore.ListClass(class, after, limit))
}

// A durable inbox holding large items reads them about pageBytes at a
// time, not a page of listPage items at once, and a page cut short by
// its bytes is not taken for the end: reads in either order, an ack by
// id and one by cursor still reach every item.
func TestDurableReadsPageByBytes(t *testing.T) {
	h, bob := testHome(t, "alice", func(c *config.Config) { c.Store.Mode = config.StoreSQLite })
	n := startTest(t, h, ModeServe)
	const items, size = 12, 300 << 10
	var last wire.Envelope
	for i := range items {
		last = arrive(t, n, bob, wire.Message(strings.Repeat(string(rune('a'+i)), size)))
	}
	pc := &pageBytesCounter{mailStore: n.mail}
	n.mail = pc
	ctx := context.Background()
	for _, order := range []string{OrderPriority, OrderArrival} {
		pc.most = 0
		b, err := n.Receive(ctx, Query{Limit: 100, Order: order})
		if err != nil || len(b.Messages) != items || b.More {
			t.Fatalf("order %q: %d items, more %v, %v; want all %d", order, len(b.Messages), b.More, err, items)
		}
		if pc.most > pageBytes+2*size {
			t.Errorf("order %q: a page held %d stored bytes (pages of about %d)", order, pc.most, pageBytes)
		}
	}
	a, err := n.Ack(ctx, AckRequest{IDs: []string{last.ID.String()}})
	if err != nil || a.Acked != 1 || len(a.NotFound) != 0 {
		t.Fatalf("ack of the last item by id: %+v, %v", a, err)
	}
	a, err = n.Ack(ctx, AckRequest{UpTo: uint64(items)})
	if err != nil || a.Acked != items-1 || a.Pending != 0 {
		t.Fatalf("ack of the rest by cursor: %+v, %v", a, err)
	}
}

// A durable page passes records that do not decode: its next is the last
// record read, decodable or not, and it says more when the read found
// its limit of records, whatever was skipped.
func TestDurablePageSkipsUndecodable(t *testing.T) {
	a, _ := identity.GenerateKeypair()
	good := func(seq uint64) store.Record {
		e, err := wire.Seal(a, identity.NewUUID(), a.ID(), wire.Message("m"))
		if err != nil {
			t.Fatal(err)
		}
		p, _ := e.MarshalBinary()
		return store.Record{Seq: seq, Kind: wire.TypeMessage, Payload: p}
	}
	bad := func(seq uint64) store.Record {
		return store.Record{Seq: seq, Kind: wire.TypeMessage, Payload: []byte{0xff, 0x00}}
	}
	d := &durableMail{log: slog.New(slog.NewTextHandler(io.Discard, nil))}
	tests := []struct {
		name      string
		recs      []store.Record
		limit     int
		cut       bool
		wantItems []uint64
		wantNext  uint64
		wantMore  bool
	}{
		{"none", nil, 4, false, nil, 7, false},
		{"all good, short", []store.Record{good(8), good(9)}, 4, false, []uint64{8, 9}, 9, false},
		{"bad last, full", []store.Record{good(8), good(9), bad(10)}, 3, false, []uint64{8, 9}, 10, true},
		{"all bad, full", []store.Record{bad(8), bad(9)}, 2, false, nil, 9, true},
		{"bad middle, short", []store.Record{good(8), bad(9), good(11)}, 4, false, []uint64{8, 11}, 11, false},
		{"cut", []store.Record{good(8)}, 4, true, []uint64{8}, 8, true},
		{"no limit", []store.Record{good(8), bad(9)}, 0, false, []uint64{8}, 9, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := d.page(tt.recs, 7, tt.limit, tt.cut)
			var seqs []uint64
			for _, en := range p.items {
				if en.Item.Type != comms.ItemExternal {
					t.Errorf("item %d: type %v", en.Seq, en.Item.Type)
				}
				seqs = append(seqs, en.Seq)
			}
			if len(seqs) != len(tt.wantItems) || p.next != tt.wantNext || p.more != tt.wantMore {
				t.Fatalf("items %v next %d more %v; want %v, %d, %v", seqs, p.next, p.more, tt.wantItems, tt.wantNext, tt.wantMore)
			}
			for i := range seqs {
				if seqs[i] != tt.wantItems[i] {
					t.Fatalf("items %v, want %v", seqs, tt.wantItems)
				}
			}
		})
	}
}

// undecodableMail is an inbox some of whose stored items do not decode:
// its pages leave them out as a durable inbox's do (durableMail.page),
// passing them (next) and counting them toward the limit (more).
type undecodableMail struct {
	mailStore
	bad map[uint64]bool
}

func (u undecodableMail) drop(p mailPage) mailPage {
	var kept []inbox.Entry[comms.Item]
	for _, en := range p.items {
		if !u.bad[en.Seq] {
			kept = append(kept, en)
		}
	}
	p.items = kept
	return p
}

func (u undecodableMail) List(after uint64, limit int) mailPage {
	return u.drop(u.mailStore.List(after, limit))
}

func (u undecodableMail) ListClass(class string, after uint64, limit int) mailPage {
	return u.drop(u.mailStore.ListClass(class, after, limit))
}

// Reads one item at a time pass runs of items that do not decode, longer
// than the longest page included, in either order, and come to the end,
// their cursor past the last of them; an ack by cursor or by id goes
// past them too.
func TestReadsPassUndecodableItems(t *testing.T) {
	for _, order := range []string{OrderPriority, OrderArrival} {
		t.Run(order, func(t *testing.T) {
			m, bob := mcpTestNode(t)
			ctx := context.Background()
			var ids []string
			const n = listPage + 50
			for i := range n {
				ids = append(ids, arrive(t, m, bob, wire.Message(fmt.Sprint("m", i))).ID.String())
			}
			// Seqs 1 and n-4 to n-2 decode: the others, a run longer than
			// a page, and the last two, do not.
			bad := map[uint64]bool{n - 1: true, n: true}
			for seq := uint64(2); seq < n-4; seq++ {
				bad[seq] = true
			}
			m.mail = undecodableMail{mailStore: m.mail, bad: bad}
			var got []string
			var cursor uint64
			for range 10 {
				b, err := m.Receive(ctx, Query{After: cursor, Limit: 1, Order: order})
				if err != nil {
					t.Fatal(err)
				}
				for _, msg := range b.Messages {
					got = append(got, msg.Body)
				}
				cursor = b.Cursor
				if !b.More {
					break
				}
			}
			if want := []string{"m0", fmt.Sprint("m", n-5), fmt.Sprint("m", n-4), fmt.Sprint("m", n-3)}; !slices.Equal(got, want) {
				t.Fatalf("read %q, want %q", got, want)
			}
			if cursor != n {
				t.Errorf("cursor %d at the end, want %d", cursor, n)
			}
			a, err := m.Ack(ctx, AckRequest{IDs: []string{ids[n-3]}})
			if err != nil || a.Acked != 1 || len(a.NotFound) != 0 {
				t.Fatalf("ack of the last by id: %+v, %v", a, err)
			}
			if a, err = m.Ack(ctx, AckRequest{UpTo: n}); err != nil || a.Acked != 3 {
				t.Fatalf("ack up to %d: %+v, %v", n, a, err)
			}
		})
	}
}

// A reliable send to a nats: peer while this node's NATS connection is
// not up is this node's failure, not the peer's (outbox.ErrLocal).
func TestDelivererNATSDownIsLocal(t *testing.T) {
	self, _ := identity.GenerateKeypair()
	peer, _ := identity.GenerateKeypair()
	natsAddr, err := transport.ParseAddr("nats:")
	if err != nil {
		t.Fatal(err)
	}
	list, err := trust.New(trust.Peer{Name: "far", ID: peer.ID(), Addr: natsAddr})
	if err != nil {
		t.Fatal(err)
	}
	r, err := comms.New(self, list, comms.Options{RelayExpected: true})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	sd, err := r.Seal("far", wire.Message("hi"))
	if err != nil {
		t.Fatal(err)
	}
	err = routerDeliverer{r: r}.Deliver(context.Background(), outbox.Attempt{To: peer.ID(), ID: sd.ID, Payload: sd.Payload, WantAck: true, Kind: wire.TypeMessage, Queued: func() {}})
	if !errors.Is(err, outbox.ErrLocal) || !strings.Contains(err.Error(), "not connected to NATS now") {
		t.Fatalf("a send with NATS down: %v", err)
	}
}
