package node

import (
	"context"
	"slices"
	"strings"
	"time"

	"github.com/meerkatd/meerkatd/comms/outbox"
	"github.com/meerkatd/meerkatd/identity"
)

// timeOrNil is t in UTC, or nil for the zero time (JSON null).
func timeOrNil(t time.Time) *time.Time {
	if t.IsZero() {
		return nil
	}
	t = t.UTC()
	return &t
}

// due reports whether a next attempt at t (zero: none set) has come.
func due(t, now time.Time) bool { return !t.After(now) }

func toQueuedSend(e outbox.Entry, inFlight bool, now time.Time) QueuedSend {
	expired := !e.Expires.IsZero() && !now.Before(e.Expires)
	return QueuedSend{Seq: e.Seq, ID: e.ID.String(), Peer: e.Peer, PubKey: e.To.String(), Kind: e.Kind, Size: len(e.Payload),
		Created: e.Created.UTC(), Attempts: e.Attempts, NextAttempt: timeOrNil(e.NextAttempt), Due: !inFlight && !expired && due(e.NextAttempt, now),
		Expires: timeOrNil(e.Expires), Expired: expired, LastError: userText(e.LastError), InFlight: inFlight}
}

// toPeerSendState is s as the API shows it; Outbox then applies what an
// open breaker holds back (holdForBreakers).
func toPeerSendState(s outbox.PeerState, now time.Time) PeerSendState {
	return PeerSendState{Peer: s.Name, PubKey: s.Peer.String(), Queued: s.Queued, Breaker: s.Breaker, Failures: s.Failures,
		OpenUntil: timeOrNil(s.OpenUntil), NextAttempt: timeOrNil(s.NextAttempt),
		Due: s.Queued > 0 && due(s.NextAttempt, now), LastError: userText(s.LastError)}
}

// breakerOf is the state shown for a stored breaker without a running
// outbox.
func breakerOf(b outbox.Breaker, now time.Time) string {
	switch {
	case b.OpenUntil.IsZero():
		return outbox.BreakerClosed
	case now.Before(b.OpenUntil):
		return outbox.BreakerOpen
	}
	return outbox.BreakerHalfOpen
}

// outboxBounds are the bounds the daemon's outbox puts on stored times
// (outbox.Bounds, from the schedule newOutbox gives it), for the view of
// the stored outbox without a daemon: a next attempt or an open breaker
// stored while the clock was wrong shows as the daemon will treat it, not
// years ahead.
func (n *Node) outboxBounds() outbox.Bounds {
	backoff, _ := n.h.Config.Outbox.BackoffDurations() // invalid: the daemon would not start; shown with the defaults
	return outbox.Options{Backoff: backoff, BreakerOpen: n.h.Config.Outbox.BreakerOpen()}.Bounds()
}

// Outbox implements [API]: the running outbox's view, or without one the
// home's stored outbox, its times bounded as the daemon bounds them.
func (n *Node) Outbox(ctx context.Context) (Outbox, error) {
	info := Outbox{Entries: []QueuedSend{}, Peers: []PeerSendState{}}
	if n.closing() {
		return info, Coded(ErrClosed)
	}
	now := time.Now()
	if ob := n.ob; ob != nil {
		for _, q := range ob.List() {
			qs := toQueuedSend(q.Entry, q.InFlight, now)
			qs.Size, qs.StoredInBroker = q.Size, q.Stored
			info.Entries = append(info.Entries, qs)
		}
		list := n.r.Trust()
		for _, s := range ob.Peers() {
			if p, ok := list.Lookup(s.Peer); ok && s.Name == "" {
				s.Name = p.Name // a breaker loaded at start, with nothing queued since
			}
			info.Peers = append(info.Peers, toPeerSendState(s, now))
		}
		holdQueues(&info)
		return info, nil
	}
	st, err := n.outboxView()
	if err != nil || st == nil {
		return info, Coded(err)
	}
	es, err := st.Entries()
	if err != nil {
		return info, err
	}
	bounds := n.outboxBounds()
	byPeer := map[identity.PeerID]*PeerSendState{}
	timed := map[identity.PeerID]bool{} // its next attempt is known: from its first entry still alive
	for _, e := range es {
		e = bounds.Entry(e, now)
		qs := toQueuedSend(e, false, now)
		info.Entries = append(info.Entries, qs)
		ps := byPeer[e.To]
		if ps == nil {
			ps = &PeerSendState{Peer: e.Peer, PubKey: e.To.String(), Breaker: outbox.BreakerClosed}
			byPeer[e.To] = ps
		}
		ps.Queued++
		if !timed[e.To] && !qs.Expired { // an expired entry is not attempted: the next one is
			timed[e.To] = true
			ps.NextAttempt, ps.Due, ps.LastError = timeOrNil(e.NextAttempt), due(e.NextAttempt, now), userText(e.LastError)
		}
	}
	bs, err := st.Breakers()
	if err != nil {
		return info, err
	}
	for _, br := range bs {
		br = bounds.Breaker(br, now)
		ps := byPeer[br.Peer]
		if ps == nil && br.OpenUntil.IsZero() {
			continue // nothing queued, breaker closed: as the daemon lists it
		}
		if ps == nil {
			ps = &PeerSendState{PubKey: br.Peer.String()}
			if p, ok := n.r.Trust().Lookup(br.Peer); ok {
				ps.Peer = p.Name
			}
			byPeer[br.Peer] = ps
		}
		ps.Breaker, ps.Failures, ps.OpenUntil = breakerOf(br, now), br.Failures, timeOrNil(br.OpenUntil)
	}
	for _, ps := range byPeer {
		info.Peers = append(info.Peers, *ps)
	}
	slices.SortFunc(info.Peers, func(a, b PeerSendState) int { return strings.Compare(a.Peer+a.PubKey, b.Peer+b.PubKey) })
	holdQueues(&info)
	return info, nil
}

// queueHeads returns each peer's first entry that will be attempted (not
// expired, not held by a broker): the one the rest of its queue waits
// behind. info.Entries are in seq order.
func queueHeads(info *Outbox) map[string]*QueuedSend {
	heads := map[string]*QueuedSend{}
	for i := range info.Entries {
		e := &info.Entries[i]
		if _, ok := heads[e.PubKey]; !ok && !e.Expired && !e.StoredInBroker {
			heads[e.PubKey] = e
		}
	}
	return heads
}

// holdForBreakers shows what an open circuit breaker holds back: nothing
// queued for its peer is due, and no attempt comes before its probe, at
// the end of its open time. The probe is the head of the peer's queue,
// whatever that envelope's own backoff (it does not delay the probe);
// the others follow it.
func holdForBreakers(info *Outbox, heads map[string]*QueuedSend) {
	open := map[string]*time.Time{}
	for i := range info.Peers {
		p := &info.Peers[i]
		if p.Breaker != outbox.BreakerOpen {
			continue
		}
		open[p.PubKey] = p.OpenUntil
		p.Due, p.NextAttempt = false, p.OpenUntil
	}
	for i := range info.Entries {
		e := &info.Entries[i]
		until, ok := open[e.PubKey]
		if !ok {
			continue
		}
		e.Due, e.NextAttempt = false, later(e.NextAttempt, until)
		if heads[e.PubKey] == e && !e.InFlight {
			e.NextAttempt = until // the probe
		}
	}
}

// holdBehind shows what waits in a peer's queue: its sends go in order,
// so an entry behind one waiting for its next attempt (a backoff after a
// failure) is not due before it, nor one behind an attempt under way
// (it goes once that attempt ends); nor is the peer.
func holdBehind(info *Outbox, heads map[string]*QueuedSend) {
	for i := range info.Entries {
		e := &info.Entries[i]
		h := heads[e.PubKey]
		switch {
		case h == nil || h == e || e.Expired || e.StoredInBroker:
			// the head, or never attempted again, or held by the broker
		case h.InFlight:
			e.Due = false
		case !h.Due:
			e.Due, e.NextAttempt = false, later(e.NextAttempt, h.NextAttempt)
		}
	}
	for i := range info.Peers {
		if h := heads[info.Peers[i].PubKey]; h != nil && h.InFlight {
			info.Peers[i].Due = false
		}
	}
}

// holdQueues applies holdForBreakers, then holdBehind.
func holdQueues(info *Outbox) {
	heads := queueHeads(info)
	holdForBreakers(info, heads)
	holdBehind(info, heads)
}

// later returns the later of a and b (nil: none).
func later(a, b *time.Time) *time.Time {
	if a == nil || b != nil && b.After(*a) {
		return b
	}
	return a
}

// RetryOutbox implements [API].
func (n *Node) RetryOutbox(ctx context.Context, peer string) (int, error) {
	if n.closing() {
		return 0, Coded(ErrClosed)
	}
	if n.ob == nil {
		return 0, errorf(CodeNoDaemon, "retrying the outbox needs the running daemon (it tries what is queued when it starts)")
	}
	if peer == "" {
		k := n.ob.Retry()
		n.log.Info("outbox: retry now", "entries", k)
		return k, nil
	}
	p, err := n.r.ResolvePeer(peer)
	if err != nil {
		return 0, Coded(err)
	}
	k := n.ob.Retry(p.ID)
	n.log.Info("outbox: retry now", "peer", p.Name, "entries", k)
	return k, nil
}

// DropQueued implements [API].
func (n *Node) DropQueued(ctx context.Context, ids []string) (Dropped, error) {
	out := Dropped{Dropped: []string{}, NotQueued: []string{}, InFlight: []string{}, Stored: []string{}}
	if n.closing() {
		return out, Coded(ErrClosed)
	}
	if len(ids) == 0 || len(ids) > MaxStatusIDs {
		return out, errorf(CodeBadArgument, "give 1 to %d ids of queued sends to drop (meerkatd outbox lists them), got %d", MaxStatusIDs, len(ids))
	}
	us, err := deadIDs(ids, false)
	if err != nil {
		return out, err
	}
	if n.ob == nil {
		return out, errorf(CodeNoDaemon, "dropping queued sends needs the running daemon")
	}
	did := n.ob.DropQueued(us...)
	failed := 0
	for _, u := range us {
		switch did[u] {
		case outbox.Dropped:
			out.Dropped = append(out.Dropped, u.String())
		case outbox.DropInFlight:
			out.InFlight = append(out.InFlight, u.String())
		case outbox.DropStored:
			out.Stored = append(out.Stored, u.String())
		case outbox.DropFailed:
			failed++
		default:
			out.NotQueued = append(out.NotQueued, u.String())
		}
	}
	if len(out.Dropped) > 0 {
		n.log.Info("outbox: queued sends dropped", "count", len(out.Dropped))
	}
	if failed > 0 {
		return out, errorf(CodeInternal, "%d of the sends given could not be moved to the dead letters (the database refused the write; see the log): they stay queued", failed)
	}
	return out, nil
}

// DeadLetters implements [API].
func (n *Node) DeadLetters(ctx context.Context) ([]DeadLetter, error) {
	if n.closing() {
		return nil, Coded(ErrClosed)
	}
	var dl []outbox.DeadLetter
	var err error
	if n.ob != nil {
		dl, err = n.ob.DeadLetters()
	} else {
		var st outbox.Store
		if st, err = n.outboxView(); err == nil && st != nil {
			dl, err = st.DeadLetters()
		}
	}
	out := make([]DeadLetter, 0, len(dl))
	for _, d := range dl {
		e := d.Entry
		out = append(out, DeadLetter{Seq: e.Seq, ID: e.ID.String(), Peer: e.Peer, PubKey: e.To.String(), Kind: e.Kind, Size: len(e.Payload),
			Created: e.Created.UTC(), Attempts: e.Attempts, Reason: userText(d.Reason), DiedAt: d.DiedAt.UTC()})
	}
	return out, Coded(err)
}

// deadIDs parses the ids of a retry or drop; all means every dead letter
// (nil ids).
func deadIDs(ids []string, all bool) ([]identity.UUID, error) {
	if all == (len(ids) > 0) {
		return nil, errorf(CodeBadArgument, "give dead-letter ids or all (not both)")
	}
	out := make([]identity.UUID, 0, len(ids))
	for _, s := range ids {
		u, err := identity.ParseUUID(s)
		if err != nil {
			return nil, errorf(CodeBadArgument, "%q is not an envelope id", s)
		}
		if !slices.Contains(out, u) { // an id given twice counts once
			out = append(out, u)
		}
	}
	return out, nil
}

// DistinctIDs is how many different envelope ids ids holds (an id may be
// written in either letter case); -1 if one is not an envelope id.
func DistinctIDs(ids []string) int {
	us, err := deadIDs(ids, false)
	if err != nil {
		return -1
	}
	return len(us)
}

// RetryDeadLetters implements [API].
func (n *Node) RetryDeadLetters(ctx context.Context, ids []string, all bool) (int, error) {
	if n.closing() {
		return 0, Coded(ErrClosed)
	}
	us, err := deadIDs(ids, all)
	if err != nil {
		return 0, err
	}
	var st outbox.Store
	if n.ob != nil {
		st = n.obStore
	} else if st, err = n.outboxStore(); err != nil {
		return 0, Coded(err)
	}
	us, over, err := revivable(st, us, all, n.requestOver)
	if err != nil {
		return 0, Coded(err)
	}
	k := 0
	if len(us) > 0 && n.ob != nil {
		k, err = n.ob.Revive(us...)
	} else if len(us) > 0 {
		var es []outbox.Entry
		es, err = st.Revive(us...)
		k = len(es)
	}
	if err != nil || len(over) == 0 {
		return k, Coded(err)
	}
	return k, errorf(CodeBadArgument, "%d requeued; %d left as they are: requests withdrawn at their deadline or by a cancel (%s), which nobody waits for any more: send a new request instead",
		k, len(over), strings.Join(over, ", "))
}

// requestOver reports whether id is a request this node sent that is no
// longer open: cancelled, timed out or answered.
func (n *Node) requestOver(id identity.UUID) bool {
	if n.lc == nil {
		return false
	}
	r, ok, err := n.lc.st.SentRequest(id.String())
	return err == nil && ok && r.State != RequestOpen
}

// withdrawnReason reports whether a dead letter's reason is that of a
// request withdrawn at its deadline or by a cancel, before delivery.
func withdrawnReason(reason string) bool {
	why, _, _ := strings.Cut(reason, ":")
	return why == outbox.ReasonDeadline || why == outbox.ReasonCancelled
}

// revivable returns the dead letters of ids (all: every one) that may be
// sent again, leaving out the requests withdrawn at their deadline or by
// a cancel, and those (dead letters before that) whose request is over
// (requestOver: cancelled, timed out): sent now they would reach the
// peer as requests nobody waits for. over names those of ids left out
// (with all, they are left out silently).
func revivable(st outbox.Store, ids []identity.UUID, all bool, requestOver func(identity.UUID) bool) (out []identity.UUID, over []string, err error) {
	dead, err := st.DeadLetters()
	if err != nil {
		return nil, nil, err
	}
	done := func(d outbox.DeadLetter) bool { return withdrawnReason(d.Reason) || requestOver(d.ID) }
	if all {
		for _, d := range dead {
			if !done(d) {
				out = append(out, d.ID)
			}
		}
		return out, nil, nil
	}
	for _, u := range ids {
		if slices.ContainsFunc(dead, func(d outbox.DeadLetter) bool { return d.ID == u && done(d) }) {
			over = append(over, u.String())
		} else {
			out = append(out, u)
		}
	}
	return out, over, nil
}

// DropDeadLetters implements [API].
func (n *Node) DropDeadLetters(ctx context.Context, ids []string, all bool) (int, error) {
	if n.closing() {
		return 0, Coded(ErrClosed)
	}
	us, err := deadIDs(ids, all)
	if err != nil {
		return 0, err
	}
	var st outbox.Store
	if n.ob != nil {
		st = n.obStore
	} else if st, err = n.outboxStore(); err != nil {
		return 0, Coded(err)
	}
	if all {
		dl, err := st.DeadLetters()
		if err != nil {
			return 0, err
		}
		for _, d := range dl {
			us = append(us, d.ID)
		}
		if len(us) == 0 {
			return 0, nil
		}
	}
	k, err := st.Drop(us...)
	return k, Coded(err)
}
