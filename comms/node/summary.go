package node

import (
	"context"
	"errors"
	"log/slog"
	"slices"
	"sync"
	"time"

	"github.com/meerkatd/meerkatd/comms"
	"github.com/meerkatd/meerkatd/comms/audit"
	"github.com/meerkatd/meerkatd/identity"
	"github.com/meerkatd/meerkatd/trust/pair"
)

// Summaries: what strangers can cause as often as they like is summed and
// written once per interval, so a flood costs a bounded number of audit
// rows and log lines.
const (
	// summaryInterval is how often the sums are written (and emptied).
	summaryInterval = time.Minute
	// maxSummaryRows bounds the (source, reason) pairs summed per interval;
	// past it, the rest are summed under Claimed "*".
	maxSummaryRows = 64
	// maxExcerpt bounds peer-chosen text (a kind) in a summary row.
	maxExcerpt = 64
	// maxPairSources bounds the sources a pairing summary tells apart.
	maxPairSources = 1024
)

// eventFlushInterval is how often the count lines of the peer events
// left out are looked for: each is written within this of the end of its
// minute.
const eventFlushInterval = 5 * time.Second

// summaryLoop writes the node's summaries every summaryInterval until ctx
// ends, and the peer events' count lines as their minutes end; Close
// writes the last ones.
func (n *Node) summaryLoop(ctx context.Context) {
	t := time.NewTicker(summaryInterval)
	defer t.Stop()
	ev := time.NewTicker(eventFlushInterval)
	defer ev.Stop()
	logged := map[string]bool{} // problems logged: each once
	for {
		select {
		case <-ev.C:
			n.events.flush()
		case <-t.C:
			n.flushSummaries()
			for _, p := range n.problems() {
				if !logged[p] {
					logged[p] = true
					n.log.Error(p)
				}
			}
		case <-ctx.Done():
			return
		}
	}
}

// flushSummaries writes what the summaries hold now.
func (n *Node) flushSummaries() {
	n.auditSum.flush()
	n.events.flush()
	if n.pairing != nil {
		n.pairing.fails.flush()
	}
}

// auditSummary sums the inbound events a stranger can cause at will into
// one audit row per (event, source, reason) and interval: refusals before
// the signature was checked (their sender is only claimed) and acks from
// trusted peers (not stored, so they have no row of their own). It is
// safe for concurrent use; a nil *auditSummary sums nothing.
type auditSummary struct {
	rec func(audit.Record) // where rows go
	now func() time.Time

	mu   sync.Mutex
	rows map[summaryKey]*summaryRow
	keys []summaryKey // rows in the order they began
	// ownRows counts, per key, the events that had a row of their own
	// in this interval (ownRow).
	ownRows map[summaryKey]int
}

// maxOwnRows is how many duplicates of one sender an interval writes a
// row each; the rest are summed. A duplicate is verified, but anyone who
// saw an envelope on its way can send it again as often as they like.
const maxOwnRows = 8

// summaryKey identifies a summary row.
type summaryKey struct {
	event  string          // audit.EventRefused or audit.EventAcks
	reason string          // the Router's Reject… constant
	key    identity.PeerID // claimed sender (refusals), verified sender (acks); zero: none
	others bool            // the table was full: any sender
}

type summaryRow struct {
	count, size int
	peer        string // acks: the verified sender's name
	kind        string // refusals: an excerpt of the first envelope's kind
}

func newAuditSummary(rec func(audit.Record)) *auditSummary {
	return &auditSummary{rec: rec, now: time.Now, rows: map[summaryKey]*summaryRow{}}
}

// ownRow reports whether an event under k gets a row of its own: the
// first maxOwnRows of each key in an interval do, while the interval has
// seen fewer than maxSummaryRows keys; the caller sums the others (add).
func (s *auditSummary) ownRow(k summaryKey) bool {
	if s == nil {
		return true
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	n, ok := s.ownRows[k]
	if (!ok && len(s.ownRows) >= maxSummaryRows) || n >= maxOwnRows {
		return false
	}
	if s.ownRows == nil {
		s.ownRows = map[summaryKey]int{}
	}
	s.ownRows[k] = n + 1
	return true
}

// add sums one event.
func (s *auditSummary) add(k summaryKey, ev comms.Event) {
	if s == nil {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	r := s.rows[k]
	if r == nil && len(s.rows) >= maxSummaryRows {
		// Full: sum under "any sender". The reasons and events are the
		// Router's few constants, so these rows are few too.
		k = summaryKey{event: k.event, reason: k.reason, others: true}
		r = s.rows[k]
	}
	if r == nil {
		r = &summaryRow{}
		if verifiedSum(k.event) && !k.others {
			r.peer = ev.Peer
		}
		if k.event != audit.EventAcks && !k.others {
			r.kind = audit.Excerpt(ev.Kind, maxExcerpt)
		}
		s.rows[k] = r
		s.keys = append(s.keys, k)
	}
	r.count++
	r.size += ev.Size
}

// flush writes one row per sum and starts over.
func (s *auditSummary) flush() {
	if s == nil {
		return
	}
	s.mu.Lock()
	rows, keys := s.rows, s.keys
	if len(keys) > 0 {
		s.rows, s.keys = map[summaryKey]*summaryRow{}, nil
	}
	s.ownRows = nil
	s.mu.Unlock()
	now := s.now()
	for _, k := range keys {
		r := rows[k]
		rec := audit.Record{Time: now, Dir: audit.DirIn, Event: k.event, Reason: k.reason, Kind: r.kind, Size: r.size, Count: r.count}
		switch {
		case k.event == audit.EventAcks:
			rec.Peer, rec.Key, rec.Kind = r.peer, k.key.String(), "ack"
		case verifiedSum(k.event) && !k.others:
			rec.Peer, rec.Key = r.peer, k.key.String()
		case k.others:
			rec.Claimed = "*"
		case !k.key.IsZero():
			rec.Claimed = k.key.String()
		}
		s.rec(rec)
	}
}

// verifiedSum reports whether the sender of the events summed under
// event was verified, so that their row may name the peer.
func verifiedSum(event string) bool {
	return event == audit.EventAcks || event == audit.EventDuplicate
}

// verifiedRefusal reports whether a refusal with reason happens only
// after the sender's signature was checked: its row may name the peer.
func verifiedRefusal(reason string) bool {
	switch reason {
	case comms.RejectInboxFull, comms.RejectStore, comms.RejectInFlight, comms.RejectPeerShare, comms.RejectPeerConns, comms.RejectNotServing:
		return true
	}
	return false
}

// pairFailures sums failed pairing attempts into one log line per
// interval. It is safe for concurrent use.
type pairFailures struct {
	log *slog.Logger
	now func() time.Time

	mu       sync.Mutex
	since    time.Time      // first failure summed
	count    int            // failures summed
	reasons  map[string]int // by pairFailureReason
	sources  map[string]int // by pair.SourceKey, at most maxPairSources
	overflow bool           // more sources than that
}

func newPairFailures(log *slog.Logger) *pairFailures {
	return &pairFailures{log: log, now: time.Now, reasons: map[string]int{}, sources: map[string]int{}}
}

// pairFailureReason names err for the summary.
func pairFailureReason(err error) string {
	for _, e := range []struct {
		err  error
		name string
	}{
		{pair.ErrRateLimited, "rate_limited"}, {pair.ErrNoOffer, "no_offer"}, {pair.ErrExpired, "expired"},
		{pair.ErrBadProof, "bad_proof"}, {pair.ErrRefused, "refused"}, {pair.ErrProtocol, "protocol"},
	} {
		if errors.Is(err, e.err) {
			return e.name
		}
	}
	return "other"
}

// note sums a failed attempt from source.
func (p *pairFailures) note(source string, err error) {
	key := pair.SourceKey(source)
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.count == 0 {
		p.since = p.now()
	}
	p.count++
	p.reasons[pairFailureReason(err)]++
	if _, ok := p.sources[key]; ok || len(p.sources) < maxPairSources {
		p.sources[key]++
	} else {
		p.overflow = true
	}
}

// flush logs the failures summed since the last flush, if any, as one
// line, and starts over.
func (p *pairFailures) flush() {
	p.mu.Lock()
	if p.count == 0 {
		p.mu.Unlock()
		return
	}
	attrs := []any{"failed", p.count, "since", p.since.UTC().Format(time.RFC3339), "sources", len(p.sources)}
	if p.overflow {
		attrs = append(attrs, "more_sources", true)
	}
	top, topN := "", 0
	for k, c := range p.sources {
		if c > topN || (c == topN && k < top) {
			top, topN = k, c
		}
	}
	attrs = append(attrs, "top_source", top, "top_source_failed", topN)
	names := make([]string, 0, len(p.reasons))
	for k := range p.reasons {
		names = append(names, k)
	}
	slices.Sort(names)
	for _, k := range names {
		attrs = append(attrs, k, p.reasons[k])
	}
	p.count, p.overflow = 0, false
	clear(p.reasons)
	clear(p.sources)
	p.mu.Unlock()
	p.log.Info("pairing attempts failed", attrs...)
}
