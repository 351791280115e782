package node

import (
	"math"
	"slices"
	"sync"

	"github.com/meerkatd/meerkatd/comms"
	"github.com/meerkatd/meerkatd/comms/wire"
	"github.com/meerkatd/meerkatd/inbox"
)

// Item classes, in priority order (Message.Class). An agent reads its
// inbox by class, then arrival: what the node itself tells it first,
// then what its person adds, then interrupts, broadcasts, and the rest.
const (
	// ClassSystem is a notice the node raised for its agent (a reliable
	// send became a dead letter, a peer's breaker opened, a pairing
	// completed). Only the node makes these.
	ClassSystem = "system"
	// ClassUser is a note the local person added (meerkatd tell). Only
	// the node makes these, on its person's command.
	ClassUser = "user"
	// ClassInterrupt is a message or request a peer marked
	// handling_mode "steer": to be handled at the next boundary of the
	// agent's current work, before queued items.
	ClassInterrupt = "interrupt"
	// ClassBroadcast is an envelope a meerkatd peer sent to many peers
	// at once (it carries meerkat_broadcast).
	ClassBroadcast = "broadcast"
	// ClassNormal is everything else.
	ClassNormal = "normal"
)

// Classes lists the item classes in priority order.
var Classes = []string{ClassSystem, ClassUser, ClassInterrupt, ClassBroadcast, ClassNormal}

// Orders of a Receive (Query.Order).
const (
	// OrderPriority (the default, also "") returns items by class, in
	// the order of Classes, then by arrival.
	OrderPriority = "priority"
	// OrderArrival returns items in arrival order, classes aside.
	OrderArrival = "arrival"
)

// Signed kind fields of the item classes.
const (
	// fieldHandlingMode is the Rust reference's field; "steer" asks the
	// receiver to handle the envelope at its next boundary.
	fieldHandlingMode = "handling_mode"
	steer             = "steer"
	// fieldClass marks a local item's class (system or user); it counts
	// only on an item the node sealed to itself (comms.Item.Local).
	fieldClass = "meerkat_class"
	// fieldNotice holds a system notice's event, peer and envelope id.
	fieldNotice = "meerkat_notice"
	// fieldBroadcast marks a broadcast copy (its broadcast id).
	fieldBroadcast = "meerkat_broadcast"
)

// classOf is an item's class. Only a local item (sealed by this node
// from its own key to its own key, which the Router never produces) can
// be system or user: a peer's envelope claiming meerkat_class is ranked
// by its other fields like any other.
func classOf(it comms.Item) string {
	if it.Type != comms.ItemExternal {
		return ClassNormal
	}
	k := it.Envelope.Kind
	if it.Local && it.Envelope.From == it.Envelope.To {
		if v, ok := k.Field(fieldClass); ok {
			if c, _ := v.Text(); c == ClassSystem || c == ClassUser {
				return c
			}
		}
	}
	switch k.Type() {
	case wire.TypeMessage, wire.TypeRequest, wire.TypeResponse:
		if v, ok := k.Field(fieldHandlingMode); ok {
			if m, _ := v.Text(); m == steer {
				return ClassInterrupt
			}
		}
	}
	if _, ok := k.Field(fieldBroadcast); ok {
		return ClassBroadcast
	}
	return ClassNormal
}

// classRank is the position of class in Classes (unknown: last).
func classRank(class string) int {
	for i, c := range Classes {
		if c == class {
			return i
		}
	}
	return len(Classes)
}

// checkOrder validates a Query.Order.
func checkOrder(order string) error {
	switch order {
	case "", OrderPriority, OrderArrival:
		return nil
	}
	return errorf(CodeBadArgument, "order %q: want %q or %q", order, OrderPriority, OrderArrival)
}

// pendingByClass is counts with every class present.
func pendingByClass(counts map[string]int) map[string]int {
	out := make(map[string]int, len(Classes))
	for _, c := range Classes {
		out[c] = counts[c]
	}
	return out
}

// scanPriority fills b with the first limit items matching f after
// b.Cursor by (class rank, seq), within MaxBatchBytes. b.Cursor becomes
// the highest seq below which every matching item is in the batch, so a
// reader that passes it as After skips nothing; b.More tells that a
// matching item was left out.
func scanPriority(mail mailStore, f filter, limit int, b *Batch, decorate func(*Message, comms.Item)) {
	after := b.Cursor
	var (
		excluded uint64 // lowest seq of a matching item left out (when full)
		maxSeen  uint64 // highest seq looked at
		full     bool
		size     int
	)
	// Nothing above last counts: an item arriving during the scan (of a
	// class already scanned) must not fall below the cursor unseen.
	// The counts are taken after last, so every item at or below it
	// that is still unacknowledged is counted.
	last := mail.Last()
	b.PendingByClass = mail.PendingByClass()
	for _, class := range Classes {
		if b.PendingByClass[class] == 0 {
			continue // none: no need to look
		}
		from := after
		pageSize := min(listPage, limit+1)
	scan:
		for {
			page := mail.ListClass(class, from, pageSize)
			for _, en := range page.items {
				if en.Seq > last {
					break scan
				}
				if full && en.Seq >= excluded {
					break scan // nothing of this class can come before it
				}
				maxSeen = max(maxSeen, en.Seq)
				if !f.matches(en.Item) {
					continue
				}
				if full {
					excluded = en.Seq
					break scan
				}
				msg := toMessage(en)
				decorate(&msg, en.Item)
				n := itemSize(msg)
				if len(b.Messages) == limit || len(b.Messages) > 0 && size+n > MaxBatchBytes {
					full, excluded = true, en.Seq
					break scan
				}
				size += n
				b.Messages = append(b.Messages, msg)
			}
			from = page.next
			maxSeen = max(maxSeen, min(from, last)) // past rows skipped as undecodable too
			if !page.more || from > last {
				break
			}
			pageSize = min(2*pageSize, listPage)
		}
	}
	b.More = full
	if full {
		b.Cursor = max(after, excluded-1)
	} else {
		b.Cursor = max(after, maxSeen)
	}
}

// ListClass lists up to limit unacknowledged items of class after seq
// after, oldest first. The memory inbox indexes the items of every class
// but normal by seq: those are found directly, and a read of normal
// items skips them.
func (m memMail) ListClass(class string, after uint64, limit int) mailPage {
	if class != ClassNormal {
		seqs := m.cls.seqsAfter(class, after, limit)
		var out []inbox.Entry[comms.Item]
		for _, seq := range seqs {
			if en := m.Mailbox.List(seq-1, 1); len(en) == 1 && en[0].Seq == seq {
				out = append(out, en[0])
			}
		}
		p := mailPage{items: out, next: after, more: limit > 0 && len(seqs) == limit}
		if len(seqs) > 0 {
			p.next = seqs[len(seqs)-1]
		}
		return p
	}
	size := listPage // pages as long as needed, growing while other classes are skipped
	if limit > 0 {
		size = min(limit, listPage)
	}
	var out []inbox.Entry[comms.Item]
	for {
		page := m.Mailbox.List(after, size)
		m.cls.mu.Lock()
		for _, en := range page {
			after = en.Seq
			if _, other := m.cls.class[en.Seq]; !other {
				out = append(out, en)
				if limit > 0 && len(out) == limit {
					m.cls.mu.Unlock()
					return mailPage{items: out, next: after, more: true}
				}
			}
		}
		m.cls.mu.Unlock()
		if len(page) < size {
			return mailPage{items: out, next: after}
		}
		size = min(2*size, listPage)
	}
}

// ListClass lists up to limit unacknowledged items of class after seq
// after, oldest first, through the store's index by class.
func (d *durableMail) ListClass(class string, after uint64, limit int) mailPage {
	recs, cut, err := d.st.ListClassBytes(class, after, limit, pageBytes)
	if err != nil {
		d.log.Error("inbox store: list failed", "err", err)
		return mailPage{next: after}
	}
	return d.page(recs, after, limit, cut)
}

// PendingByClass counts the unacknowledged items of each class.
func (d *durableMail) PendingByClass() map[string]int {
	counts, err := d.st.CountClasses()
	if err != nil {
		d.log.Error("inbox store: count failed", "err", err)
	}
	return pendingByClass(counts)
}

// withInterrupt marks a message or request kind handling_mode "steer"
// when interrupt is set (SendOptions.Interrupt).
func withInterrupt(k wire.Kind, interrupt bool) (wire.Kind, error) {
	if !interrupt {
		return k, nil
	}
	if t := k.Type(); t != wire.TypeMessage && t != wire.TypeRequest {
		return k, errorf(CodeBadArgument, "interrupt applies to messages and requests only")
	}
	return k.With(fieldHandlingMode, wire.Text(steer))
}

// memClasses counts a memory inbox's unacknowledged items by class, so
// that its class counts cost nothing, and indexes those of every class
// but normal (few, as a rule) by seq. mu serialises pushes and acks with
// their counting; it is taken before the Mailbox's own lock.
type memClasses struct {
	mu     sync.Mutex
	counts map[string]int
	seqs   map[string][]uint64 // by class (not normal): the seqs, ascending
	class  map[uint64]string   // the class of each seq in seqs
}

func newMemClasses() *memClasses {
	return &memClasses{counts: map[string]int{}, seqs: map[string][]uint64{}, class: map[uint64]string{}}
}

// seqsAfter returns up to limit seqs of class above after (limit <= 0:
// all).
func (c *memClasses) seqsAfter(class string, after uint64, limit int) []uint64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	s := c.seqs[class]
	i, _ := slices.BinarySearch(s, after+1)
	s = s[i:]
	if limit > 0 && len(s) > limit {
		s = s[:limit]
	}
	return slices.Clone(s)
}

// Push stores it and counts its class.
func (m memMail) Push(it comms.Item) error {
	m.cls.mu.Lock()
	defer m.cls.mu.Unlock()
	if err := m.Mailbox.Push(it); err != nil {
		return err
	}
	c := classOf(it)
	m.cls.counts[c]++
	if c != ClassNormal {
		seq := m.Mailbox.Last() // this push's: pushes are serialised by mu
		m.cls.seqs[c] = append(m.cls.seqs[c], seq)
		m.cls.class[seq] = c
	}
	return nil
}

// Ack removes the items with these seqs and uncounts their classes.
func (m memMail) Ack(seqs ...uint64) int {
	m.cls.mu.Lock()
	defer m.cls.mu.Unlock()
	n := 0
	for _, s := range seqs {
		if m.Mailbox.Ack(s) == 0 {
			continue
		}
		n++
		c, other := m.cls.class[s]
		if !other {
			m.cls.counts[ClassNormal]--
			continue
		}
		m.cls.counts[c]--
		delete(m.cls.class, s)
		if i, ok := slices.BinarySearch(m.cls.seqs[c], s); ok {
			m.cls.seqs[c] = slices.Delete(m.cls.seqs[c], i, i+1)
		}
	}
	return n
}

// PendingByClass counts the unacknowledged items of each class.
func (m memMail) PendingByClass() map[string]int {
	m.cls.mu.Lock()
	defer m.cls.mu.Unlock()
	return pendingByClass(m.cls.counts)
}

// Last is the highest seq the inbox handed out.
func (d *durableMail) Last() uint64 {
	seq, err := d.st.LastSeq()
	if err != nil {
		d.log.Error("inbox store: last seq failed", "err", err)
		return math.MaxUint64 // no bound rather than skipping items
	}
	return seq
}
