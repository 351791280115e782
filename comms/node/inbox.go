package node

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/meerkatd/meerkatd/comms"
	"github.com/meerkatd/meerkatd/comms/wire"
	"github.com/meerkatd/meerkatd/identity"
	"github.com/meerkatd/meerkatd/inbox"
)

// toMessage is an inbox entry as the API shows it.
func toMessage(en inbox.Entry[comms.Item]) Message {
	e := en.Item.Envelope
	m := Message{
		Seq:       en.Seq,
		ID:        e.ID.String(),
		Kind:      e.Kind.Type(),
		From:      e.From.String(),
		Peer:      en.Item.PeerName,
		Received:  en.Item.Received.UTC(),
		Untrusted: en.Item.Type == comms.ItemExternal,
		Body:      e.Kind.Body(),
		Intent:    e.Kind.Intent(),
		Status:    string(e.Kind.Status()),
		Class:     classOf(en.Item),
	}
	if m.Class == ClassSystem || m.Class == ClassUser {
		m.Untrusted = false // the node's own, or its person's
		if m.Class == ClassSystem {
			m.Notice = localNotice(e.Kind)
		}
	}
	if v, ok := e.Kind.Field("params"); ok {
		if b, err := v.MarshalJSON(); err == nil {
			m.Params = json.RawMessage(b)
		}
	}
	if v, ok := e.Kind.Field("result"); ok {
		if b, err := v.MarshalJSON(); err == nil {
			m.Result = json.RawMessage(b)
		}
	}
	if u, ok := e.Kind.InReplyTo(); ok {
		m.RequestID = u.String()
	}
	m.TaskID, m.BroadcastID = kindText(e.Kind, FieldObjectiveID), kindText(e.Kind, FieldBroadcast) // broadcast and tasks slice
	switch m.Kind {
	case wire.TypeMessage, wire.TypeRequest, wire.TypeResponse:
	case wire.TypeMEUP:
		m.MEUP = meupItem(e.Kind)
	default:
		if b, err := e.Kind.Value().MarshalJSON(); err == nil {
			m.Fields = json.RawMessage(b)
		}
	}
	return m
}

// itemOverheadJSON is what a Message's JSON costs beyond the text of its
// values: the field names, punctuation, seq, the timestamp, booleans.
const itemOverheadJSON = 256

// itemSize is a message's share of a batch: an upper bound of the size of
// its JSON. Every string and JSON value counts as encoding/json writes it
// (escapes included), so a peer cannot grow a batch past MaxBatchBytes
// with text that escapes long or with fields the budget forgets (a long
// kind, a status, a peer-written MEUP id or participant).
func itemSize(m Message) int {
	n := itemOverheadJSON
	for _, s := range []string{m.ID, m.Kind, m.From, m.Peer, m.Body, m.Intent, m.RequestID, m.Status, m.TaskID, m.BroadcastID} {
		n += jsonStringLen(s)
	}
	for _, v := range []any{m.Params, m.Result, m.Fields} {
		n += rawJSONLen(v)
	}
	if m.Deadline != nil {
		n += 48
	}
	if c := m.Cancelled; c != nil {
		n += 96 + jsonStringLen(c.Reason) + jsonStringLen(c.Note)
	}
	if mi := m.MEUP; mi != nil {
		n += itemOverheadJSON / 2
		for _, s := range []string{mi.Space, mi.ID, mi.Kind, mi.Participant, mi.Context} {
			n += jsonStringLen(s)
		}
		for _, s := range mi.To {
			n += jsonStringLen(s) + 1
		}
		n += rawJSONLen(mi.Envelope)
	}
	return n
}

// jsonStringLen is at least the length of s as a JSON string written by
// encoding/json: quotes, escaped control characters, HTML-escaped <, >
// and &, invalid UTF-8 written as \ufffd, U+2028 and U+2029 escaped.
func jsonStringLen(s string) int {
	n := 2
	for i := 0; i < len(s); {
		b := s[i]
		if b < utf8.RuneSelf {
			switch {
			case b == '"' || b == '\\':
				n += 2
			case b < 0x20 || b == '<' || b == '>' || b == '&':
				n += 6
			default:
				n++
			}
			i++
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && size == 1, r == '\u2028', r == '\u2029':
			n += 6
		default:
			n += size
		}
		i += size
	}
	return n
}

// rawJSONLen is at least the length of v (a json.RawMessage, or nil) as
// encoding/json writes it: the raw text with <, >, &, U+2028 and U+2029
// escaped.
func rawJSONLen(v any) int {
	raw, ok := v.(json.RawMessage)
	if !ok {
		return 0
	}
	n := len(raw)
	for _, b := range raw {
		switch b {
		case '<', '>', '&':
			n += 5
		case 0xe2: // the first byte of U+2028 and U+2029 (3 bytes, written as 6)
			n += 3
		}
	}
	return n
}

// filter is a Query's filters, resolved.
type filter struct {
	kinds     []string
	from      *identity.PeerID
	requestID string
	meup      MEUPFilter
	// noSpace is unknown_space when meup.Space names no space of this
	// node's: a read or ack that matches no item fails with it.
	noSpace error
}

// newFilter resolves the filters: the peer by name, key or UUID.
func (n *Node) newFilter(kinds []string, from, requestID string, mf MEUPFilter) (filter, error) {
	f := filter{kinds: kinds, requestID: strings.ToLower(requestID), meup: mf}
	if requestID != "" {
		// A request id is a UUID: anything else would match nothing, and
		// a wait for it would only time out.
		if _, err := identity.ParseUUID(requestID); err != nil {
			return f, errorf(CodeBadArgument, "request_id %q is not a request id (a UUID)", requestID)
		}
	}
	for _, k := range kinds {
		switch k {
		case wire.TypeMessage, wire.TypeRequest, wire.TypeResponse, wire.TypeMEUP:
		default:
			return f, errorf(CodeBadArgument, "kinds: %q is not message, request, response or meup", k)
		}
	}
	if from != "" {
		p, err := n.r.ResolvePeer(from)
		if err != nil {
			return f, Coded(err)
		}
		f.from = &p.ID
	}
	if mf.Space != "" {
		f.noSpace = n.knownSpace(mf.Space)
		if f.noSpace != nil && CodeOf(f.noSpace) != CodeUnknownSpace {
			return f, f.noSpace
		}
	}
	return f, nil
}

// knownSpace checks a space filter as a peer filter is checked: spaces
// are this node's own (its rosters), so a name none has is refused with
// unknown_space, listing the spaces there are, rather than matching
// nothing. Items of a space left or deleted here stay in the inbox, so a
// filter by its name that matches some is no error (filter.noSpace).
func (n *Node) knownSpace(name string) error {
	infos, err := n.Spaces(context.Background())
	if err != nil {
		return err
	}
	names := make([]string, 0, len(infos))
	for _, s := range infos {
		if s.Name == name {
			return nil
		}
		names = append(names, s.Name)
	}
	if len(names) == 0 {
		return errorf(CodeUnknownSpace, "no space %q here: this node is in no space", name)
	}
	slices.Sort(names)
	return errorf(CodeUnknownSpace, "no space %q here: the spaces are %s", name, strings.Join(names, ", "))
}

func (f filter) matches(it comms.Item) bool {
	e := it.Envelope
	if len(f.kinds) > 0 && !slices.Contains(f.kinds, e.Kind.Type()) {
		return false
	}
	if f.from != nil && e.From != *f.from {
		return false
	}
	if f.requestID != "" {
		u, ok := e.Kind.InReplyTo()
		if !ok || e.Kind.Type() != wire.TypeResponse || u.String() != f.requestID {
			return false
		}
	}
	if f.meup.Space != "" || len(f.meup.MEUPKinds) > 0 || f.meup.Context != "" {
		return f.meup.matches(e.Kind)
	}
	return true
}

// matches reports whether kind is a meup kind passing the filter.
func (mf MEUPFilter) matches(k wire.Kind) bool {
	name, env, _, ok := parseMEUP(k)
	switch {
	case !ok:
		return false
	case mf.Space != "" && name != mf.Space:
		return false
	case len(mf.MEUPKinds) > 0 && !slices.Contains(mf.MEUPKinds, env.Kind):
		return false
	}
	return mf.Context == "" || env.Context == mf.Context
}

// Receive implements [API].
func (n *Node) Receive(ctx context.Context, q Query) (Batch, error) {
	if n.closing() {
		return Batch{}, Coded(ErrClosed)
	}
	f, err := n.newFilter(q.Kinds, q.From, q.RequestID, q.MEUPFilter)
	if err != nil {
		return Batch{}, err
	}
	if err := checkOrder(q.Order); err != nil {
		return Batch{}, err
	}
	mail, err := n.readMail()
	if err != nil {
		return Batch{}, err
	}
	if n.mode != ModeServe {
		q.Wait = 0 // nothing arrives in a home no node serves
	}
	epoch := mail.Epoch()
	if q.Epoch != "" && q.Epoch != epoch {
		q.After = 0 // the cursor counts in another inbox: read this one from its start
	}
	limit := q.Limit
	if limit <= 0 || limit > MaxBatchItems {
		limit = MaxBatchItems
	}
	var deadline <-chan time.Time
	if q.Wait > 0 {
		t := time.NewTimer(min(q.Wait, MaxWait))
		defer t.Stop()
		deadline = t.C
		if !q.Peek { // a peek (an MCP server's watch for arrivals) reads for nobody
			n.waits.Add(1)
			defer n.waits.Add(-1)
		}
	}
	for {
		changed := mail.Changed()
		b := Batch{Cursor: q.After, Pending: mail.Pending(), Messages: []Message{}, Epoch: epoch}
		if q.Order != OrderArrival {
			scanPriority(mail, f, limit, &b, n.lc.decorate)
		} else {
			b.PendingByClass = mail.PendingByClass()
			scanArrival(mail, f, limit, &b, n.lc.decorate)
		}
		if len(b.Messages) == 0 && f.noSpace != nil {
			return Batch{}, f.noSpace // a mistyped name, not "no items": nothing to wait for
		}
		if len(b.Messages) == 0 && q.After > 0 {
			if last := mail.Last(); q.After > last {
				// Not a cursor this inbox gave: waiting would wait for
				// items that are already there, below it.
				return Batch{}, beyondCursor("after", q.After, last)
			}
		}
		if len(b.Messages) > 0 || q.Wait <= 0 {
			if !q.Peek && n.mode == ModeServe {
				n.shown.mark(b.Messages, n.oldestPending)
			}
			return b, nil
		}
		select {
		case <-changed:
			if n.closing() { // the node stops: the wait did not run out
				return Batch{}, Coded(ErrClosed)
			}
		case <-deadline:
			b.TimedOut = true
			return b, nil
		case <-ctx.Done():
			return Batch{}, ctx.Err()
		case <-n.stopped:
			return Batch{}, Coded(ErrClosed)
		}
	}
}

// beyondCursor is the error of a cursor (arg) above every seq the inbox
// handed out (last).
func beyondCursor(arg string, cursor, last uint64) error {
	handed := "no sequence numbers yet"
	if last > 0 {
		handed = fmt.Sprintf("sequence numbers up to %d only", last)
	}
	return errorf(CodeBadArgument, "%s %d: this inbox has handed out %s: the cursor comes from another inbox, from before the memory inbox started over, or from before the database was restored from a backup; read again from 0", arg, cursor, handed)
}

// scanArrival fills b with the first limit items matching f after
// b.Cursor in arrival order, within MaxBatchBytes.
func scanArrival(mail mailStore, f filter, limit int, b *Batch, decorate func(*Message, comms.Item)) {
	size := 0
	// Read the inbox a page at a time after the cursor: a durable
	// inbox is not loaded whole for one call. The first page is only
	// as long as the call needs (one more item tells More), so a
	// read of one item (MCP's pending count, after every tool) does
	// not load listPage stored items; pages grow while filters skip.
	pageSize := min(listPage, limit+1)
scan:
	for {
		page := mail.List(b.Cursor, pageSize)
		for _, en := range page.items {
			if !f.matches(en.Item) {
				b.Cursor = en.Seq // the cursor passes items the filters skip too
				continue
			}
			if len(b.Messages) == limit {
				b.More = true
				break scan // the cursor stays at the last item returned
			}
			// The budget counts every byte a peer chose (itemSize):
			// a batch stays within MaxBatchBytes, except a lone item
			// larger than that, which comes alone.
			msg := toMessage(en)
			decorate(&msg, en.Item)
			n := itemSize(msg)
			if len(b.Messages) > 0 && size+n > MaxBatchBytes {
				b.More = true
				break scan
			}
			size += n
			b.Messages = append(b.Messages, msg)
			b.Cursor = en.Seq
		}
		b.Cursor = page.next // past items skipped as undecodable too
		if !page.more {
			break
		}
		pageSize = min(2*pageSize, listPage)
	}
}

// readMail is the inbox Receive reads: the serving node's, or the home's
// stored inbox read by a command run without a daemon.
func (n *Node) readMail() (mailStore, error) {
	if n.mode == ModeServe {
		return n.mail, nil
	}
	d, err := n.diskMail()
	if errors.Is(err, errMemoryHome) {
		return nil, errorf(CodeNoDaemon, "no daemon is running for %s, and its inbox lives in the daemon's memory ([store] mode = \"memory\"): start it with meerkatd run --home %s", n.h.Dir, n.h.Dir)
	}
	return d, Coded(err)
}

// Ack implements [API]. It reads the inbox a page at a time, so acking
// by id or cursor in a large durable inbox does not load it whole.
func (n *Node) Ack(_ context.Context, a AckRequest) (Acked, error) {
	if n.closing() {
		return Acked{}, Coded(ErrClosed)
	}
	if n.mode != ModeServe {
		return Acked{}, errorf(CodeNoDaemon, "no daemon is running for %s: acknowledging needs it (start it with meerkatd run --home %s)", n.h.Dir, n.h.Dir)
	}
	if epoch := n.mail.Epoch(); a.Epoch != "" && a.Epoch != epoch && (a.UpTo > 0 || len(a.Seqs) > 0) {
		return Acked{}, errorf(CodeBadArgument, "epoch %q is not the inbox's (%s): the inbox started over (a node keeping it in memory restarted), so up_to and seqs count in an inbox that is gone; nothing was acknowledged: read again from after 0 and acknowledge what that read returns", a.Epoch, epoch)
	}
	f, err := n.newFilter(a.Kinds, a.From, a.RequestID, a.MEUPFilter)
	if err != nil {
		return Acked{}, err
	}
	if last := n.mail.Last(); a.UpTo > last && f.noSpace == nil {
		return Acked{}, beyondCursor("up_to", a.UpTo, last) // nothing acknowledged: the caller's cursor is not this inbox's
	}
	unread, matched := 0, 0
	want, found := map[string]bool{}, map[string]bool{}
	var ids []string // the ids given, canonical, once each, in order
	for _, id := range a.IDs {
		u, err := identity.ParseUUID(id)
		if err != nil {
			return Acked{}, errorf(CodeBadArgument, "%q is not an item id (receive_messages and meerkatd inbox show them): nothing was acknowledged", id)
		}
		if k := u.String(); !want[k] {
			want[k] = true
			ids = append(ids, k)
		}
	}
	seqs := slices.Clone(a.Seqs)
	if len(want) > 0 || a.UpTo > 0 {
		for after := uint64(0); ; {
			page := n.mail.List(after, listPage)
			for _, en := range page.items {
				id := en.Item.Envelope.ID.String()
				byID := want[id]
				if byID {
					found[id] = true
				}
				// up_to acknowledges only what a read with the same
				// filters could have shown and a read did show, never
				// items a filtered read skipped (its cursor passed them).
				byCursor := en.Seq <= a.UpTo && f.matches(en.Item)
				if byCursor {
					matched++
				}
				if byCursor && !n.shown.has(en.Seq) {
					byCursor = false
					if !byID {
						unread++
					}
				}
				if byID || byCursor {
					seqs = append(seqs, en.Seq)
				}
			}
			after = page.next
			if !page.more || len(want) == 0 && after >= a.UpTo {
				break
			}
		}
	}
	if f.noSpace != nil && matched == 0 && len(want) == 0 {
		return Acked{}, f.noSpace // ids are acknowledged whatever the filters
	}
	acked := n.mail.Ack(seqs...)
	n.shown.forget(seqs)
	r := Acked{Acked: acked, Pending: n.mail.Pending(), Unread: unread}
	for _, id := range ids {
		if !found[id] {
			r.NotFound = append(r.NotFound, id)
		}
	}
	if acked == 0 && a.UpTo > 0 {
		r.Above = n.shown.above(a.UpTo)
	}
	return r, nil
}

// oldestPending is the seq of the oldest unacknowledged item (0: none).
func (n *Node) oldestPending() uint64 {
	if page := n.mail.List(0, 1); len(page.items) > 0 {
		return page.items[0].Seq
	}
	return 0
}
