package node

import (
	"context"
	"errors"
	"io/fs"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/meerkatd/meerkatd/comms"
	"github.com/meerkatd/meerkatd/comms/wire"
	"github.com/meerkatd/meerkatd/identity"
	"github.com/meerkatd/meerkatd/inbox"
	"github.com/meerkatd/meerkatd/inbox/store"
)

// SearchAPI is the part of [API] that searches what the node received
// (slice C: search).
type SearchAPI interface {
	// Search finds received items whose text matches q.Query: the
	// unacknowledged ones and, with the SQLite inbox, the acknowledged
	// history too; newest first, a page at a time.
	Search(ctx context.Context, q SearchQuery) (SearchResult, error)
}

// Limits of Search.
const (
	// DefaultSearchLimit is the page size of a Search without a limit.
	DefaultSearchLimit = 20
	// MaxSearchLimit is the largest page a Search may ask for.
	MaxSearchLimit = 100
)

// SearchQuery selects items for Search.
//
// Query is words, all of which must occur (case-insensitively),
// "quoted phrases" whose words must come in a row, and prefix* words
// matching every word they start. Words are runs of letters and digits:
// punctuation only separates them, and nothing else in a query has a
// meaning of its own.
type SearchQuery struct {
	Query string   `json:"query"`
	Peer  string   `json:"peer,omitempty"`  // only from this peer: name, key or peer UUID (a key also finds a peer no longer trusted)
	Kinds []string `json:"kinds,omitempty"` // only these kinds: message, request, response, meup (empty: all)
	// Since and Until bound the time items were received (inclusive;
	// zero: no bound).
	Since time.Time `json:"since,omitzero"`
	Until time.Time `json:"until,omitzero"`
	Limit int       `json:"limit,omitempty"` // hits per page, 1 to MaxSearchLimit (0: DefaultSearchLimit)
	// Cursor is SearchResult.Cursor of the previous page ("": the
	// first page). It is opaque.
	Cursor string `json:"cursor,omitempty"`
}

// SearchResult is a page of Search hits.
type SearchResult struct {
	Hits []SearchHit `json:"hits"`
	// More is true when more hits follow: pass Cursor in the next query
	// (with the same query and filters) for them.
	More   bool   `json:"more"`
	Cursor string `json:"cursor,omitempty"`
	// History is true when acknowledged items were searched too (the
	// SQLite inbox); false in memory mode, which keeps only the
	// unacknowledged items.
	History bool `json:"history"`
}

// SearchHit is one item Search found.
type SearchHit struct {
	Message Message `json:"message"`
	// Acked is true for an item acknowledged already (history).
	Acked bool `json:"acked"`
	// Snippet is a short part of the item's text around the match, the
	// matched words between « and », … where text was left out. It is
	// the peer's text, like the message.
	Snippet string `json:"snippet"`
}

// Search implements [API]. A node that does not serve its home (a
// command run without a daemon) searches the home's database read only.
func (n *Node) Search(ctx context.Context, q SearchQuery) (SearchResult, error) {
	if n.closing() {
		return SearchResult{}, Coded(ErrClosed)
	}
	terms, err := store.ParseSearch(q.Query)
	if err != nil {
		return SearchResult{}, errorf(CodeBadArgument, "%s", UserText(err))
	}
	sq, err := n.searchFilters(q)
	if err != nil {
		return SearchResult{}, err
	}
	sq.Terms = terms
	limit := sq.Limit
	var db *store.Store
	var mem mailStore
	switch {
	case n.mode == ModeServe:
		if d, ok := n.mail.(*durableMail); ok {
			db = d.st
		} else {
			mem = n.mail
		}
	default:
		db, err = n.readDB()
		switch {
		case errors.Is(err, fs.ErrNotExist):
			return SearchResult{Hits: []SearchHit{}, History: true}, nil // nothing stored yet
		case errors.Is(err, errMemoryHome):
			return SearchResult{}, errorf(CodeNoDaemon, "no daemon is running for %s, and its inbox lives in the daemon's memory ([store] mode = \"memory\"): start it with meerkatd run --home %s", n.h.Dir, n.h.Dir)
		case err != nil:
			return SearchResult{}, Coded(err)
		}
	}
	var found []found
	if db != nil {
		sq.Limit = limit + 1
		hits, err := db.Search(ctx, sq)
		if err != nil {
			return SearchResult{}, Coded(err)
		}
		d := &durableMail{st: db, log: n.log}
		for _, h := range hits {
			it, err := d.item(h.Record)
			if err != nil {
				n.log.Error("inbox store: undecodable item skipped", "seq", h.Seq, "err", err)
				continue
			}
			found = append(found, hitFound(h, it))
		}
	} else {
		found = searchMemory(mem, sq, limit+1)
	}
	res := SearchResult{Hits: []SearchHit{}, History: db != nil}
	size := 0
	for _, f := range found {
		if len(res.Hits) == limit {
			res.More = true
			break
		}
		h := SearchHit{Message: toMessage(f.entry), Acked: f.acked, Snippet: f.snippet}
		sz := itemSize(h.Message) + jsonStringLen(h.Snippet)
		if len(res.Hits) > 0 && size+sz > MaxBatchBytes {
			res.More = true
			break
		}
		size += sz
		res.Hits = append(res.Hits, h)
	}
	if res.More {
		res.Cursor = strconv.FormatUint(res.Hits[len(res.Hits)-1].Message.Seq, 10)
	}
	return res, nil
}

// searchFilters checks q's filters and limit and turns them into a
// store search (without terms).
func (n *Node) searchFilters(q SearchQuery) (store.Search, error) {
	var sq store.Search
	switch {
	case q.Limit < 0 || q.Limit > MaxSearchLimit:
		return sq, errorf(CodeBadArgument, "limit: %d is not from 1 to %d", q.Limit, MaxSearchLimit)
	case q.Limit == 0:
		sq.Limit = DefaultSearchLimit
	default:
		sq.Limit = q.Limit
	}
	for _, k := range q.Kinds {
		switch k {
		case wire.TypeMessage, wire.TypeRequest, wire.TypeResponse, wire.TypeMEUP:
		default:
			return sq, errorf(CodeBadArgument, "kinds: %q is not message, request, response or meup", k)
		}
	}
	sq.Kinds = slices.Compact(slices.Sorted(slices.Values(q.Kinds))) // at most the four kinds
	if q.Peer != "" {
		if p, err := n.r.ResolvePeer(q.Peer); err == nil {
			sq.Sender = (*[32]byte)(&p.ID)
		} else if id, kerr := identity.ParsePeerID(q.Peer); kerr == nil {
			sq.Sender = (*[32]byte)(&id) // a peer no longer trusted: its items stay in history
		} else {
			return sq, Coded(err)
		}
	}
	if !q.Since.IsZero() && !q.Until.IsZero() && q.Until.Before(q.Since) {
		return sq, errorf(CodeBadArgument, "until (%s) is before since (%s)", q.Until.Format(time.RFC3339), q.Since.Format(time.RFC3339))
	}
	sq.Since, sq.Until = q.Since, q.Until
	if q.Cursor != "" {
		c, err := strconv.ParseUint(q.Cursor, 10, 63)
		if err != nil || c == 0 {
			return sq, errorf(CodeBadArgument, "cursor: %q is not a cursor a search returned", q.Cursor)
		}
		sq.Before = c
	}
	return sq, nil
}

// found is one item a search found, before it becomes a SearchHit.
type found struct {
	entry   inbox.Entry[comms.Item]
	acked   bool
	snippet string
}

func hitFound(h store.Hit, it comms.Item) found {
	return found{entry: inbox.Entry[comms.Item]{Seq: h.Seq, Item: it}, acked: !h.AckedAt.IsZero(), snippet: h.Snippet}
}

// searchMemory searches the unacknowledged items of a memory inbox: the
// newest limit items passing sq (its terms matched case-insensitively
// against searchText, accents not folded).
func searchMemory(mail mailStore, sq store.Search, limit int) []found {
	var out []found
	for after := uint64(0); ; {
		page := mail.List(after, listPage)
		for _, en := range page.items {
			it := en.Item
			e := it.Envelope
			switch {
			case it.Type != comms.ItemExternal,
				sq.Before > 0 && en.Seq >= sq.Before,
				len(sq.Kinds) > 0 && !slices.Contains(sq.Kinds, e.Kind.Type()),
				sq.Sender != nil && e.From != identity.PeerID(*sq.Sender),
				!sq.Since.IsZero() && it.Received.Before(sq.Since),
				!sq.Until.IsZero() && it.Received.After(sq.Until):
				continue
			}
			text := searchText(e, it.PeerName)
			if !sq.Terms.Matches(text) {
				continue
			}
			out = append(out, found{entry: en, snippet: sq.Terms.Snippet(text)})
			if len(out) > 2*limit { // keep the newest only
				out = slices.Delete(out, 0, len(out)-limit)
			}
		}
		if after = page.next; !page.more {
			break
		}
	}
	if len(out) > limit {
		out = out[len(out)-limit:]
	}
	slices.Reverse(out)
	return out
}

// searchText is the text an envelope is found by: the sender's name, then
// every text and number in its kind (body, intent, status, params and
// result, a MEUP envelope's fields and payload; the keys of maps below
// the kind's own fields), up to about store.MaxSearchText bytes. The
// kind's type and in_reply_to are left out: every item has them.
func searchText(e wire.Envelope, peer string) string {
	var b strings.Builder
	b.WriteString(peer)
	k := e.Kind.Value()
	for i := range k.Len() {
		m := k.Member(i)
		if m.Key == "type" || m.Key == "in_reply_to" {
			continue
		}
		appendText(&b, m.Value)
	}
	return store.ClipText(b.String()) // a last text may run past the bound
}

// appendText writes the texts and numbers in v to b, separated by
// spaces, until b holds store.MaxSearchText bytes.
func appendText(b *strings.Builder, v wire.Value) {
	if b.Len() >= store.MaxSearchText {
		return
	}
	switch v.Type() {
	case wire.TypeText:
		s, _ := v.Text()
		b.WriteByte(' ')
		b.WriteString(s)
	case wire.TypeInt:
		b.WriteByte(' ')
		if i, ok := v.Int(); ok {
			b.WriteString(strconv.FormatInt(i, 10))
		} else if u, ok := v.Uint(); ok {
			b.WriteString(strconv.FormatUint(u, 10))
		}
	case wire.TypeFloat:
		f, _ := v.Float()
		b.WriteByte(' ')
		b.WriteString(strconv.FormatFloat(f, 'g', -1, 64))
	case wire.TypeArray:
		for i := range v.Len() {
			appendText(b, v.Index(i))
		}
	case wire.TypeMap:
		for i := range v.Len() {
			m := v.Member(i)
			b.WriteByte(' ')
			b.WriteString(m.Key)
			appendText(b, m.Value)
		}
	}
}

// recordText is store.Options.SearchText: the text of a stored item,
// decoded from its payload (by the admitting goroutine, or when the store
// reads an item back to index it) — the same as searchText of the
// envelope.
func recordText(r store.Record) string {
	if r.Kind == kindSubagent {
		return ""
	}
	e, err := wire.Decode(r.Payload)
	if err != nil {
		return ""
	}
	return searchText(e, r.Peer)
}
