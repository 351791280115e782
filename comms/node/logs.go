package node

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"os"
	"slices"
	"sync"
	"syscall"
	"time"

	"github.com/meerkatd/meerkatd/comms"
	"github.com/meerkatd/meerkatd/comms/outbox"
	"github.com/meerkatd/meerkatd/config"
	"github.com/meerkatd/meerkatd/identity"
	"github.com/meerkatd/meerkatd/trust"
)

// NewLogger returns a logger writing c's format ("text": key=value lines,
// "json": one JSON object per line) to w at c's level and above. A value
// that [config.Config.Validate] refuses falls back to the default.
func NewLogger(w io.Writer, c config.Log) *slog.Logger {
	var level slog.Level
	if level.UnmarshalText([]byte(c.Level)) != nil {
		level = slog.LevelInfo
	}
	opts := &slog.HandlerOptions{Level: level}
	if c.Format == config.LogJSON {
		return slog.New(slog.NewJSONHandler(w, opts))
	}
	return slog.New(slog.NewTextHandler(w, opts))
}

// Log lines about what peers cause (retries, circuit breakers, dead
// letters, recoveries) are limited to one per (event, peer) and
// logInterval; the lines left out are counted, and the count is logged
// with the next line, within eventFlushInterval of the interval's end, or
// before the next line about the same peer, whichever comes first.
const logInterval = time.Minute

// eventLog writes the node's info lines about peers, at most one per
// (event, peer) and interval. It is safe for concurrent use; its methods
// never block on anything but the logger. Lines are written under mu, so
// that they reach the log in the order they were decided.
type eventLog struct {
	log   *slog.Logger
	every time.Duration
	now   func() time.Time

	mu   sync.Mutex
	last map[eventKey]*eventState
}

type eventKey struct {
	msg  string
	peer identity.PeerID
}

type eventState struct {
	at     time.Time // when the last line was written
	held   int       // lines left out since
	name   string    // the peer's name, for the count line
	attrs  []any     // the last line left out, for the count line
	heldAt time.Time // when that line was left out
}

func newEventLog(log *slog.Logger, every time.Duration) *eventLog {
	return &eventLog{log: log, every: every, now: time.Now, last: map[eventKey]*eventState{}}
}

// info writes msg about peer with args, unless a line with the same msg
// about peer was written less than the interval ago: then it only counts
// it. args must hold no bodies or secrets.
func (l *eventLog) info(msg string, peer identity.PeerID, name string, args ...any) {
	if !l.log.Enabled(context.Background(), slog.LevelInfo) {
		return
	}
	l.mu.Lock()
	k := eventKey{msg, peer}
	st := l.last[k]
	now := l.now()
	if st != nil && now.Sub(st.at) < l.every {
		st.held++
		st.name, st.attrs, st.heldAt = name, args, now
		l.mu.Unlock()
		return
	}
	held := 0
	if st == nil {
		st = &eventState{}
		l.last[k] = st
	} else {
		held = st.held
	}
	st.at, st.held, st.attrs = now, 0, nil
	// The lines about this peer left out of other events come first,
	// each with its count: a breaker's "open" held back must not be
	// read after its "closed".
	defer l.mu.Unlock()
	l.writeLocked(l.heldLocked(now, func(o eventKey, _ *eventState) bool { return o.peer == peer && o.msg != msg }))
	args = append([]any{"peer", name, "key", peer.String()}, args...)
	if held > 0 {
		args = append(args, "not_logged_before", held)
	}
	l.log.Info(msg, args...)
}

// writeLocked writes count lines. l.mu must be held.
func (l *eventLog) writeLocked(lines []heldLine) {
	for _, ln := range lines {
		l.log.Info(ln.msg+" (the last of several)", ln.args...)
	}
}

// heldLine is a count line: an event's last line left out, with how many
// were.
type heldLine struct {
	msg  string
	args []any
	at   time.Time // when its details were true
}

// heldLocked returns the count lines of the (event, peer) pairs that
// which picks and that hold lines left out, and counts those as written
// at now. It forgets the pairs which picks with nothing held whose
// interval is over. l.mu must be held.
func (l *eventLog) heldLocked(now time.Time, which func(eventKey, *eventState) bool) []heldLine {
	var out []heldLine
	for k, st := range l.last {
		if !which(k, st) {
			continue
		}
		if st.held == 0 {
			if now.Sub(st.at) >= l.every {
				delete(l.last, k)
			}
			continue
		}
		// The count line may come up to a minute late: "at" says when
		// its details were true.
		args := append([]any{"peer", st.name, "key", k.peer.String()}, st.attrs...)
		out = append(out, heldLine{k.msg, append(args, "at", st.heldAt.UTC().Format(time.RFC3339), "not_logged", st.held), st.heldAt})
		st.at, st.held, st.attrs = now, 0, nil
	}
	slices.SortFunc(out, func(a, b heldLine) int { return a.at.Compare(b.at) })
	return out
}

// flush logs, for every (event, peer) whose lines were left out and whose
// interval is over, how many, with the last one's details; it forgets
// the pairs with nothing held.
//
// With it come the lines held for the other events of the same peer,
// whatever their intervals: the log then reads in the order things
// happened to that peer (its "open" held back is not left to come after
// a "closed" held later).
func (l *eventLog) flush() {
	l.mu.Lock()
	defer l.mu.Unlock()
	now := l.now()
	due := map[identity.PeerID]bool{}
	for k, st := range l.last {
		if st.held > 0 && now.Sub(st.at) >= l.every {
			due[k.peer] = true
		}
	}
	l.writeLocked(l.heldLocked(now, func(k eventKey, st *eventState) bool { return due[k.peer] || now.Sub(st.at) >= l.every }))
}

// Messages of the lines about peers.
const (
	msgRetry      = "outbox: send failed; will retry"
	msgDeadLetter = "outbox: dead letter"
	msgOpen       = "outbox: circuit breaker open; queueing without dialling"
	msgProbe      = "outbox: circuit breaker half-open; probing"
	msgClosed     = "outbox: circuit breaker closed"
	msgRecovered  = "outbox: peer acknowledging again"
)

// logOutbox logs an outbox event: retries and dead letters (expired or
// not). Only ids, names, attempts, times and error texts: never payloads.
func (l *eventLog) logOutbox(ev outbox.Event) {
	e := ev.Entry
	switch ev.Type {
	case outbox.EventRetry:
		l.info(msgRetry, e.To, e.Peer, "id", e.ID.String(), "attempt", ev.Attempt,
			"next_attempt", e.NextAttempt.UTC().Format(time.RFC3339), "error_kind", errorKind(ev.Err), "err", ev.Reason)
	case outbox.EventExpired, outbox.EventDeadLetter:
		l.info(msgDeadLetter, e.To, e.Peer, "id", e.ID.String(), "attempts", ev.Attempt, "reason", ev.Reason)
	}
}

// logBreaker logs a change of a peer's circuit breaker.
func (l *eventLog) logBreaker(ev outbox.BreakerEvent) {
	switch ev.State {
	case outbox.BreakerOpen:
		l.info(msgOpen, ev.Peer, ev.Name, "failures", ev.Failures, "until", ev.Until.UTC().Format(time.RFC3339), "waiting", ev.Waiting)
	case outbox.BreakerHalfOpen:
		l.info(msgProbe, ev.Peer, ev.Name, "failures", ev.Failures, "waiting", ev.Waiting)
	case outbox.BreakerClosed:
		if ev.WasOpen {
			l.info(msgClosed, ev.Peer, ev.Name, "failures", ev.Failures)
		}
		l.info(msgRecovered, ev.Peer, ev.Name, "failures", ev.Failures, "waiting", ev.Waiting)
	}
}

// errorKind names the class of a failed attempt's error for logs.
func errorKind(err error) string {
	var dnsErr *net.DNSError
	switch {
	case err == nil:
		return "unknown"
	case errors.As(err, &dnsErr) && !dnsErr.IsTimeout:
		return "name_resolution"
	case errors.Is(err, syscall.ECONNREFUSED), errors.Is(err, syscall.ENOENT), errors.Is(err, syscall.EHOSTUNREACH),
		errors.Is(err, syscall.ENETUNREACH):
		return "unreachable"
	case errors.Is(err, context.DeadlineExceeded), errors.Is(err, os.ErrDeadlineExceeded):
		return "timeout"
	case errors.Is(err, comms.ErrPlaintextRefused):
		return "plaintext_refused"
	case errors.Is(err, comms.ErrUnknownPeer):
		return "unknown_peer"
	case errors.Is(err, comms.ErrPeerOffline):
		return "offline"
	case errors.Is(err, syscall.ECONNRESET), errors.Is(err, syscall.EPIPE), errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF):
		return "connection_lost"
	}
	return "other"
}

// maxLoggedNames bounds the names a trust-reload line lists.
const maxLoggedNames = 32

// logTrustReload logs a reload of the trusted peers: how many, and the
// names added and removed (a peer whose key or address changed is both).
func logTrustReload(log *slog.Logger, before, after *trust.List) {
	old := map[string]trust.Peer{}
	for _, p := range before.Peers() {
		old[p.Name] = p
	}
	var added, removed, moved []string
	for _, p := range after.Peers() {
		q, ok := old[p.Name]
		switch {
		case !ok || q.ID != p.ID: // a new name, or another key under it
			added = append(added, p.Name)
			if ok {
				removed = append(removed, p.Name)
			}
		case q.Addr != p.Addr || q.NATS != p.NATS:
			moved = append(moved, p.Name)
		}
		delete(old, p.Name)
	}
	for name := range old {
		removed = append(removed, name)
	}
	slices.Sort(removed)
	args := []any{"peers", after.Len(), "added", capNames(added), "removed", capNames(removed)}
	if len(moved) > 0 {
		args = append(args, "readdressed", capNames(moved))
	}
	log.Info("trusted peers reloaded", args...)
}

func capNames(names []string) []string {
	if names == nil {
		return []string{}
	}
	if len(names) > maxLoggedNames {
		return append(names[:maxLoggedNames:maxLoggedNames], "…")
	}
	return names
}
