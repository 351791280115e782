package main

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/meerkatd/meerkatd/comms/audit"
	"github.com/meerkatd/meerkatd/comms/outbox"
	"github.com/meerkatd/meerkatd/identity"
)

// outboxInfo is what `meerkatd outbox` shows.
type outboxInfo struct {
	Entries []outboxItem    `json:"entries"`
	Peers   []peerSendState `json:"peers"`
}

// outboxItem is one queued reliable send.
type outboxItem struct {
	Seq         uint64    `json:"seq"`
	ID          string    `json:"id"`
	Peer        string    `json:"peer"`
	Key         string    `json:"key"`
	Kind        string    `json:"kind"`
	Size        int       `json:"size,omitempty"`
	Created     time.Time `json:"created"`
	Expires     time.Time `json:"expires,omitzero"`
	Attempts    int       `json:"attempts"`
	NextAttempt time.Time `json:"next_attempt,omitzero"`
	LastError   string    `json:"last_error,omitempty"`
	InFlight    bool      `json:"in_flight,omitempty"`
}

// peerSendState is a peer's reliable-send state: queue and circuit breaker.
type peerSendState struct {
	Peer        string    `json:"peer"`
	Key         string    `json:"key"`
	Queued      int       `json:"queued"`
	Breaker     string    `json:"breaker"` // closed, open, half_open
	Failures    int       `json:"failures"`
	OpenUntil   time.Time `json:"open_until,omitzero"`
	NextAttempt time.Time `json:"next_attempt,omitzero"`
	LastError   string    `json:"last_error,omitempty"`
}

// deadLetterInfo is one dead letter.
type deadLetterInfo struct {
	outboxItem
	Reason string    `json:"reason"`
	DiedAt time.Time `json:"died_at"`
}

func toOutboxItem(e outbox.Entry, inFlight bool) outboxItem {
	return outboxItem{Seq: e.Seq, ID: e.ID.String(), Peer: e.Peer, Key: e.To.String(), Kind: e.Kind, Size: len(e.Payload),
		Created: e.Created.UTC(), Expires: utcOrZero(e.Expires), Attempts: e.Attempts, NextAttempt: utcOrZero(e.NextAttempt),
		LastError: e.LastError, InFlight: inFlight}
}

func utcOrZero(t time.Time) time.Time {
	if t.IsZero() {
		return t
	}
	return t.UTC()
}

func toPeerSendState(s outbox.PeerState) peerSendState {
	return peerSendState{Peer: s.Name, Key: s.Peer.String(), Queued: s.Queued, Breaker: s.Breaker, Failures: s.Failures,
		OpenUntil: utcOrZero(s.OpenUntil), NextAttempt: utcOrZero(s.NextAttempt), LastError: s.LastError}
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

func (b *localBackend) outbox(ctx context.Context) (outboxInfo, error) {
	info := outboxInfo{Entries: []outboxItem{}, Peers: []peerSendState{}}
	if ob := b.n.ob; ob != nil {
		for _, q := range ob.List() {
			info.Entries = append(info.Entries, toOutboxItem(q.Entry, q.InFlight))
		}
		for _, s := range ob.Peers() {
			info.Peers = append(info.Peers, toPeerSendState(s))
		}
		return info, nil
	}
	st, err := b.n.outboxStore()
	if err != nil {
		return info, err
	}
	es, err := st.Entries()
	if err != nil {
		return info, err
	}
	byPeer := map[identity.PeerID]*peerSendState{}
	for _, e := range es {
		info.Entries = append(info.Entries, toOutboxItem(e, false))
		ps := byPeer[e.To]
		if ps == nil {
			ps = &peerSendState{Peer: e.Peer, Key: e.To.String(), Breaker: outbox.BreakerClosed}
			byPeer[e.To] = ps
		}
		ps.Queued++
		if ps.Queued == 1 {
			ps.NextAttempt, ps.LastError = utcOrZero(e.NextAttempt), e.LastError
		}
	}
	bs, err := st.Breakers()
	if err != nil {
		return info, err
	}
	now := time.Now()
	for _, br := range bs {
		ps := byPeer[br.Peer]
		if ps == nil {
			ps = &peerSendState{Key: br.Peer.String()}
			if p, ok := b.n.r.Trust().Lookup(br.Peer); ok {
				ps.Peer = p.Name
			}
			byPeer[br.Peer] = ps
		}
		ps.Breaker, ps.Failures, ps.OpenUntil = breakerOf(br, now), br.Failures, utcOrZero(br.OpenUntil)
	}
	for _, ps := range byPeer {
		info.Peers = append(info.Peers, *ps)
	}
	slices.SortFunc(info.Peers, func(a, b peerSendState) int { return strings.Compare(a.Peer+a.Key, b.Peer+b.Key) })
	return info, nil
}

func (b *localBackend) deadLetters(ctx context.Context) ([]deadLetterInfo, error) {
	var dl []outbox.DeadLetter
	var err error
	if b.n.ob != nil {
		dl, err = b.n.ob.DeadLetters()
	} else {
		var st outbox.Store
		if st, err = b.n.outboxStore(); err == nil {
			dl, err = st.DeadLetters()
		}
	}
	out := make([]deadLetterInfo, 0, len(dl))
	for _, d := range dl {
		out = append(out, deadLetterInfo{outboxItem: toOutboxItem(d.Entry, false), Reason: d.Reason, DiedAt: d.DiedAt.UTC()})
	}
	return out, err
}

// deadIDs parses the ids of a deadletters retry/drop; all means every dead
// letter (nil ids for revive).
func (b *localBackend) deadIDs(ids []string, all bool) ([]identity.UUID, error) {
	if all == (len(ids) > 0) {
		return nil, &codedError{codeBadArgs, "give dead-letter ids or --all (not both)"}
	}
	out := make([]identity.UUID, 0, len(ids))
	for _, s := range ids {
		u, err := identity.ParseUUID(s)
		if err != nil {
			return nil, &codedError{codeBadArgs, fmt.Sprintf("%q is not an envelope id", s)}
		}
		out = append(out, u)
	}
	return out, nil
}

func (b *localBackend) reviveDead(ctx context.Context, ids []string, all bool) (int, error) {
	us, err := b.deadIDs(ids, all)
	if err != nil {
		return 0, err
	}
	if b.n.ob != nil {
		return b.n.ob.Revive(us...)
	}
	st, err := b.n.outboxStore()
	if err != nil {
		return 0, err
	}
	es, err := st.Revive(us...)
	return len(es), err
}

func (b *localBackend) dropDead(ctx context.Context, ids []string, all bool) (int, error) {
	us, err := b.deadIDs(ids, all)
	if err != nil {
		return 0, err
	}
	var st outbox.Store
	if b.n.ob != nil {
		st = b.n.obStore
	} else if st, err = b.n.outboxStore(); err != nil {
		return 0, err
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
	return st.Drop(us...)
}

func runOutbox(e *env, args []string) error {
	flags := e.newFlags("outbox")
	homeFlag := flags.String("home", "", "node home `directory`")
	asJSON := flags.Bool("json", false, "print JSON")
	h, err := e.openNoArgs(flags, homeFlag, args)
	if err != nil {
		return err
	}
	var info outboxInfo
	if err := e.withBackend(h, func(ctx context.Context, b backend) (err error) { info, err = b.outbox(ctx); return err }); err != nil {
		return err
	}
	if *asJSON {
		return printJSON(e.stdout, info)
	}
	if len(info.Peers) > 0 {
		tw := tabwriter.NewWriter(e.stdout, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "PEER\tQUEUED\tBREAKER\tFAILURES\tNEXT ATTEMPT\tLAST ERROR")
		for _, p := range info.Peers {
			fmt.Fprintf(tw, "%s\t%d\t%s\t%d\t%s\t%s\n", orKey(p.Peer, p.Key), p.Queued, breakerText(p), p.Failures, timeText(p.NextAttempt), p.LastError)
		}
		tw.Flush()
	}
	if len(info.Entries) == 0 {
		fmt.Fprintln(e.stderr, "outbox empty")
		return nil
	}
	fmt.Fprintln(e.stdout)
	tw := tabwriter.NewWriter(e.stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "SEQ\tID\tPEER\tKIND\tATTEMPTS\tNEXT ATTEMPT\tEXPIRES\tLAST ERROR")
	for _, it := range info.Entries {
		fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%d\t%s\t%s\t%s\n", it.Seq, it.ID, orKey(it.Peer, it.Key), it.Kind, it.Attempts, timeText(it.NextAttempt), timeText(it.Expires), it.LastError)
	}
	return tw.Flush()
}

func orKey(name, key string) string {
	if name != "" {
		return name
	}
	return key
}

func timeText(t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	return t.Local().Format(time.RFC3339)
}

func breakerText(p peerSendState) string {
	if p.Breaker == outbox.BreakerOpen {
		return "open until " + p.OpenUntil.Local().Format(time.TimeOnly)
	}
	return p.Breaker
}

func runDeadLetters(e *env, args []string) error {
	sub := "list"
	if len(args) > 0 && !strings.HasPrefix(args[0], "-") {
		sub, args = args[0], args[1:]
	}
	flags := e.newFlags("deadletters")
	homeFlag := flags.String("home", "", "node home `directory`")
	asJSON := flags.Bool("json", false, "print JSON")
	all := flags.Bool("all", false, "with retry or drop: every dead letter")
	pos, err := parseArgs(flags, args)
	if err != nil {
		return err
	}
	switch sub {
	case "list":
		if len(pos) > 0 || *all {
			return fmt.Errorf("%w: deadletters list takes no ids or --all", errUsage)
		}
	case "retry", "drop":
		if *all == (len(pos) > 0) {
			return fmt.Errorf("%w: deadletters %s wants ID... or --all", errUsage, sub)
		}
	default:
		return fmt.Errorf("%w: unknown deadletters subcommand %q (want list, retry or drop)", errUsage, sub)
	}
	h, err := e.openHome(*homeFlag, nil)
	if err != nil {
		return err
	}
	var n int
	var dl []deadLetterInfo
	err = e.withBackend(h, func(ctx context.Context, b backend) (err error) {
		switch sub {
		case "retry":
			n, err = b.reviveDead(ctx, pos, *all)
		case "drop":
			n, err = b.dropDead(ctx, pos, *all)
		default:
			dl, err = b.deadLetters(ctx)
		}
		return err
	})
	if err != nil {
		return err
	}
	switch sub {
	case "retry", "drop":
		if *asJSON {
			return printJSON(e.stdout, map[string]int{map[string]string{"retry": "requeued", "drop": "dropped"}[sub]: n})
		}
		verb := map[string]string{"retry": "requeued", "drop": "dropped"}[sub]
		fmt.Fprintf(e.stdout, "%s %d dead letter(s)\n", verb, n)
		if n < len(pos) {
			return &codedError{codeBadArgs, fmt.Sprintf("%d of the given ids are not dead letters", len(pos)-n)}
		}
		return nil
	}
	if *asJSON {
		return printJSON(e.stdout, dl)
	}
	if len(dl) == 0 {
		fmt.Fprintln(e.stderr, "no dead letters")
		return nil
	}
	tw := tabwriter.NewWriter(e.stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "DIED\tID\tPEER\tKIND\tATTEMPTS\tREASON")
	for _, d := range dl {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%d\t%s\n", timeText(d.DiedAt), d.ID, orKey(d.Peer, d.Key), d.Kind, d.Attempts, d.Reason)
	}
	return tw.Flush()
}

func runAudit(e *env, args []string) error {
	flags := e.newFlags("audit")
	homeFlag := flags.String("home", "", "node home `directory`")
	asJSON := flags.Bool("json", false, "print JSON lines")
	since := flags.String("since", "", "only rows from `WHEN` on: a duration back from now (1h, 30m) or an RFC 3339 time")
	peer := flags.String("peer", "", "only rows about this peer (`name` or key)")
	event := flags.String("event", "", "only rows of this `event` (sent, received, acked, refused, retry, expired, dead_letter, …)")
	id := flags.String("id", "", "only rows about this envelope `id` (its acks and responses too)")
	limit := flags.Int("limit", 1000, "show the newest `N` matching rows (0: all)")
	h, err := e.openNoArgs(flags, homeFlag, args)
	if err != nil {
		return err
	}
	f := audit.Filter{Peer: *peer, Event: *event, ID: *id}
	if *since != "" {
		if f.Since, err = parseSince(*since, time.Now()); err != nil {
			return fmt.Errorf("%w: --since: %v", errUsage, err)
		}
	}
	if *limit < 0 {
		return fmt.Errorf("%w: --limit must not be negative", errUsage)
	}
	recs, st, err := audit.Read(filepath.Join(h.dir, audit.FileName), f, *limit)
	if errors.Is(err, fs.ErrNotExist) {
		if !h.cfg.Audit.Enabled {
			return &codedError{codeBadArgs, "no audit log: [audit] enabled is false for this home"}
		}
		fmt.Fprintln(e.stderr, "no audit log yet (the daemon writes audit.log in the home)")
		return nil
	}
	if err != nil {
		return err
	}
	if n := st.Skipped(); n > 0 {
		fmt.Fprintf(e.stderr, "skipped %d unreadable line(s)\n", n)
	}
	if *asJSON {
		return audit.FormatJSON(e.stdout, recs)
	}
	if len(recs) == 0 {
		fmt.Fprintln(e.stderr, "no matching rows")
		return nil
	}
	return audit.Format(e.stdout, recs)
}

// parseSince reads --since: a duration back from now or an RFC 3339 time.
func parseSince(s string, now time.Time) (time.Time, error) {
	if d, err := time.ParseDuration(s); err == nil {
		if d < 0 {
			return time.Time{}, fmt.Errorf("duration %s is negative", s)
		}
		return now.Add(-d), nil
	}
	if t, err := time.Parse(time.RFC3339, s); err == nil {
		return t, nil
	}
	return time.Time{}, fmt.Errorf("%q is neither a duration (1h, 30m) nor an RFC 3339 time", s)
}
