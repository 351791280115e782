package node

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"log/slog"
	"time"

	"github.com/meerkatd/meerkatd/comms"
	"github.com/meerkatd/meerkatd/comms/wire"
	"github.com/meerkatd/meerkatd/identity"
	"github.com/meerkatd/meerkatd/inbox"
	"github.com/meerkatd/meerkatd/inbox/store"
)

// mailStore is where a node keeps what it received: the memory Mailbox or
// the durable SQLite store ([store] mode).
type mailStore interface {
	Push(comms.Item) error
	// Pending counts what an agent must look at: every unacknowledged
	// item (messages, requests, responses, MEUP items, kinds this node
	// does not model, subagent results; acks are never stored), so an
	// agent that reads until pending is zero drains the inbox.
	Pending() int
	// List reads up to limit unacknowledged items after seq after,
	// oldest first (limit 0: no count limit). A durable inbox may cut a
	// page short at pageBytes: a reader follows more and next.
	List(after uint64, limit int) mailPage
	Ack(seqs ...uint64) int
	Len() int
	Changed() <-chan struct{}
	// Epoch names the sequence of seqs this inbox hands out (Batch.Epoch):
	// the same as long as seqs continue, another once they start over.
	Epoch() string
	Close()

	// ListClass is List for the items of one class (classes.go).
	ListClass(class string, after uint64, limit int) mailPage
	// PendingByClass counts the unacknowledged items of each class,
	// every class present.
	PendingByClass() map[string]int
	// Last is the highest seq the inbox has handed out (0: none): a
	// priority read looks at nothing above it, and a cursor above it
	// came from elsewhere.
	Last() uint64
}

var (
	_ mailStore = memMail{}
	_ mailStore = (*durableMail)(nil)
)

// mailPage is one page of an inbox read.
type mailPage struct {
	items []inbox.Entry[comms.Item]
	// next is where the next page starts (after it): the last item the
	// read passed, one skipped as undecodable included, or the read's
	// own start when it passed none.
	next uint64
	// more reports that items may follow next: the page reached its
	// limit, or a durable inbox cut it short at pageBytes.
	more bool
}

// pageBytes bounds the stored bytes one page of a durable inbox reads
// (and decodes) at once, besides the page's limit: items are up to a
// frame each, and some decode to many times their size.
const pageBytes = 1 << 20

// memMail is the memory inbox.
type memMail struct {
	*inbox.Mailbox[comms.Item]
	epoch string // random: seqs start over with every memory inbox
	cls   *memClasses
}

// newMemMail returns an empty memory inbox with a fresh epoch.
func newMemMail(mb *inbox.Mailbox[comms.Item]) memMail {
	var b [16]byte
	rand.Read(b[:]) // never fails (Go 1.24+)
	return memMail{Mailbox: mb, epoch: hex.EncodeToString(b[:]), cls: newMemClasses()}
}

func (m memMail) Epoch() string { return m.epoch }

func (m memMail) List(after uint64, limit int) mailPage {
	items := m.Mailbox.List(after, limit)
	p := mailPage{items: items, next: after, more: limit > 0 && len(items) == limit}
	if len(items) > 0 {
		p.next = items[len(items)-1].Seq
	}
	return p
}

func (m memMail) Pending() int { return m.Len() }

// kindSubagent marks stored subagent results, which are not envelopes.
const kindSubagent = "subagent_result"

// admitTimeout bounds one durable admission (a group commit is a few
// milliseconds; a stuck disk must not hold a connection forever).
const admitTimeout = 10 * time.Second

// durableMail keeps items in the SQLite store: envelopes as their wire
// bytes, subagent results as JSON.
type durableMail struct {
	st  *store.Store
	log *slog.Logger
}

type storedSubagent struct {
	ID      identity.UUID `json:"id"`
	Result  wire.Value    `json:"result"`
	Summary string        `json:"summary"`
}

// Push stores it durably and returns once it is committed. A duplicate
// (same sender and id, within the dedup window, also across restarts)
// returns comms.ErrDuplicate: it was stored before, so the sender may be
// acked again.
func (d *durableMail) Push(it comms.Item) error {
	rec, err := d.record(it)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), admitTimeout)
	defer cancel()
	return dupErr(d.st.Admit(ctx, rec))
}

// dupErr turns the store's duplicate flag into comms.ErrDuplicate.
func dupErr(dup bool, err error) error {
	if err == nil && dup {
		return comms.ErrDuplicate
	}
	return err
}

// record turns an inbox item into a store record.
func (d *durableMail) record(it comms.Item) (store.Record, error) {
	rec := store.Record{Received: it.Received}
	switch it.Type {
	case comms.ItemExternal:
		payload, err := it.Envelope.MarshalBinary()
		if err != nil {
			return rec, err
		}
		rec.Sender, rec.ID, rec.Kind, rec.Peer, rec.Payload = it.Envelope.From, it.Envelope.ID, it.Envelope.Kind.Type(), it.PeerName, payload
		rec.Class = classOf(it)
		if rec.Kind != kindSubagent {
			rec.Text = searchText(it.Envelope, it.PeerName) // what recordText finds, without decoding again
		}
	case comms.ItemSubagentResult:
		payload, err := json.Marshal(storedSubagent{ID: it.SubagentID, Result: it.Result, Summary: it.Summary})
		if err != nil {
			return rec, err
		}
		rec.ID, rec.Kind, rec.Payload = it.SubagentID, kindSubagent, payload
	default:
		return rec, errors.New("unknown inbox item type")
	}
	return rec, nil
}

// PushAsync queues it for the next group commit; the admission's Wait
// waits for the commit. Duplicates report comms.ErrDuplicate.
func (d *durableMail) PushAsync(it comms.Item) comms.Admission {
	rec, err := d.record(it)
	if err != nil {
		return doneAdmission{err}
	}
	return storeAdmission{d.st.AdmitAsync(rec, admitTimeout)} // bounds only the wait for queue room
}

// storeAdmission is a store admission as a comms.Admission.
type storeAdmission struct{ p *store.Pending }

func (s storeAdmission) Ready() bool { return s.p.Ready() }

func (s storeAdmission) Wait() error { return dupErr(s.p.Wait()) }

// item decodes a stored record. Envelopes were verified when they arrived;
// here they are only decoded.
func (d *durableMail) item(r store.Record) (comms.Item, error) {
	if r.Kind == kindSubagent {
		var s storedSubagent
		if err := json.Unmarshal(r.Payload, &s); err != nil {
			return comms.Item{}, err
		}
		return comms.Item{Type: comms.ItemSubagentResult, Received: r.Received, SubagentID: s.ID, Result: s.Result, Summary: s.Summary}, nil
	}
	e, err := wire.Decode(r.Payload)
	if err != nil {
		return comms.Item{}, err
	}
	// Only the node stores a local item's class (system, user): the
	// column, not the envelope, says the item is local.
	local := r.Class == ClassSystem || r.Class == ClassUser
	return comms.Item{Type: comms.ItemExternal, Received: r.Received, Envelope: e, PeerName: r.Peer, Size: len(r.Payload), Local: local}, nil
}

func (d *durableMail) List(after uint64, limit int) mailPage {
	recs, cut, err := d.st.ListBytes(after, limit, pageBytes)
	if err != nil {
		d.log.Error("inbox store: list failed", "err", err)
		return mailPage{next: after}
	}
	return d.page(recs, after, limit, cut)
}

// page decodes the stored records of a read after seq after with limit,
// skipping (and logging) any that do not decode: the page passes them,
// and says more when the read found limit records, decodable or not.
func (d *durableMail) page(recs []store.Record, after uint64, limit int, cut bool) mailPage {
	p := mailPage{next: after, more: cut || limit > 0 && len(recs) == limit}
	p.items = make([]inbox.Entry[comms.Item], 0, len(recs))
	for _, r := range recs {
		p.next = r.Seq
		it, err := d.item(r)
		if err != nil {
			d.log.Error("inbox store: undecodable item skipped", "seq", r.Seq, "err", err)
			continue
		}
		p.items = append(p.items, inbox.Entry[comms.Item]{Seq: r.Seq, Item: it})
	}
	return p
}

func (d *durableMail) Ack(seqs ...uint64) int {
	n, err := d.st.Ack(seqs...)
	if err != nil {
		d.log.Error("inbox store: ack failed", "err", err)
	}
	return n
}

func (d *durableMail) Len() int {
	n, err := d.st.Len()
	if err != nil {
		d.log.Error("inbox store: count failed", "err", err)
	}
	return n
}

func (d *durableMail) Changed() <-chan struct{} { return d.st.Changed() }

// Epoch is the database's id: seqs continue for as long as the file
// lives, across restarts.
func (d *durableMail) Epoch() string { return d.st.ID() }

func (d *durableMail) Pending() int { return d.Len() }

func (d *durableMail) Close() {
	if err := d.st.Close(); err != nil {
		d.log.Error("inbox store: close failed", "err", err)
	}
}
