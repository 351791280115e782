package node

import (
	"context"
	"io"
	"log/slog"
	"strings"
	"testing"

	"github.com/meerkatd/meerkatd/comms"
	"github.com/meerkatd/meerkatd/comms/wire"
	"github.com/meerkatd/meerkatd/config"
	"github.com/meerkatd/meerkatd/identity"
	"github.com/meerkatd/meerkatd/inbox/store"
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
