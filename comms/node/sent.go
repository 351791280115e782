package node

import (
	"bytes"
	"context"
	"errors"
	"io/fs"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/meerkatd/meerkatd/comms"
	"github.com/meerkatd/meerkatd/comms/outbox"
	"github.com/meerkatd/meerkatd/comms/wire"
	"github.com/meerkatd/meerkatd/identity"
	"github.com/meerkatd/meerkatd/inbox/store"
)

// SentAPI is the part of [API] that reports what became of the envelopes
// this node sent (docs/agents.md, "Delivery status").
type SentAPI interface {
	// MessageStatus reports the state of each envelope id given (at
	// most MaxStatusIDs), in the order given; an id this node has no
	// record of has state "unknown".
	MessageStatus(ctx context.Context, ids []string) ([]SendStatus, error)
	// SentList lists the newest send records, newest first.
	SentList(ctx context.Context, q SentQuery) ([]SendStatus, error)
}

// Limits of the send record.
const (
	// MaxStatusIDs bounds the ids of one MessageStatus call.
	MaxStatusIDs = 100
	// MaxSentList bounds the records of one SentList call; DefaultSentList
	// is what a zero Limit gives.
	MaxSentList     = 1000
	DefaultSentList = 50
	// maxMemSent bounds the records a memory-mode node keeps; the oldest
	// go first.
	maxMemSent = 1 << 16
	// maxSentIntent bounds the intent text a record keeps.
	maxSentIntent = 256
)

// Send states in [SendStatus].
const (
	StateQueued   = store.SentQueued   // reliable, in the outbox, waiting for its next attempt
	StateInFlight = store.SentInFlight // an attempt is on its way
	StateAcked    = store.SentAcked    // the peer acknowledged it
	StateWritten  = store.SentWritten  // a response written to the peer (responses are not acknowledged)
	StateDead     = store.SentDead     // a reliable send given up on: a dead letter (see Reason)
	StateFailed   = store.SentFailed   // a direct send whose one attempt failed: nothing was delivered
	StateAnswered = store.SentAnswered // a request with a final response (see Answer)
	StateStored   = store.SentStored   // the NATS JetStream stream stored it; the peer has not acknowledged it yet
	StateUnknown  = "unknown"          // no record: not sent by this node, or older than agent.sent_history_hours
)

// SentQuery selects send records for SentList.
type SentQuery struct {
	Peer  string `json:"peer,omitempty"`  // only those to this peer (name, key or UUID; "": all)
	Limit int    `json:"limit,omitempty"` // at most this many (0: DefaultSentList; at most MaxSentList)
}

// SendStatus is what this node knows of one envelope it sent (never its
// body).
type SendStatus struct {
	ID        string     `json:"id"`
	State     string     `json:"state"` // a State… value
	Peer      string     `json:"peer,omitempty"`
	PubKey    string     `json:"pubkey,omitempty"`
	Kind      string     `json:"kind,omitempty"`
	Intent    string     `json:"intent,omitempty"`     // requests
	RequestID string     `json:"request_id,omitempty"` // responses: the request answered
	Reliable  bool       `json:"reliable"`
	Created   *time.Time `json:"created"` // null for an unknown id
	Updated   *time.Time `json:"updated"`
	AckedAt   *time.Time `json:"acked_at"`             // null until acknowledged
	Attempts  int        `json:"attempts"`             // failed attempts
	LastError string     `json:"last_error,omitempty"` // of the last failed attempt
	Reason    string     `json:"reason,omitempty"`     // dead, failed: why
	DiedAt    *time.Time `json:"died_at,omitempty"`
	// RequestState is a request's state in list_requests (open, answered,
	// timed_out: its deadline passed unanswered, cancelled: this node
	// cancelled it), RequestNote the note given with its cancel; "" when
	// not known here (no daemon, or the record pruned).
	RequestState string `json:"request_state,omitempty"`
	RequestNote  string `json:"request_note,omitempty"`
	// Answer is a request's final response (completed or failed).
	Answer *SendAnswer `json:"answer,omitempty"`
	// Progress counts a request's "accepted" responses: progress, never
	// the answer (the state stays acked).
	Progress *SendProgress `json:"progress,omitempty"`
}

// SendAnswer is the final response to a request.
type SendAnswer struct {
	ResponseID string    `json:"response_id"`
	Status     string    `json:"status"` // completed or failed
	At         time.Time `json:"at"`
}

// SendProgress is the "accepted" responses to a request.
type SendProgress struct {
	Accepted   int       `json:"accepted"`
	ResponseID string    `json:"response_id"` // the last one
	At         time.Time `json:"at"`
}

// sentBackend keeps send records and idempotency keys: [*store.Sent] in
// the home's database, or memSent.
type sentBackend interface {
	Put(store.SentRecord) error
	Update(store.SentUpdate) error
	Get(ids ...identity.UUID) ([]store.SentRecord, error)
	List(store.SentQuery) ([]store.SentRecord, error)
	Answered(to identity.PeerID, request identity.UUID) (bool, error)
	Prune(before, keysBefore time.Time) (int, int, error)
	ClaimKey(k store.Idem, expired time.Time) (store.Idem, bool, error)
	FinishKey(store.Idem) error
	ReleaseKey(store.Idem) error
}

var _ sentBackend = (*store.Sent)(nil)

// sentState is the node's send record and idempotency keys; its zero
// value is ready.
type sentState struct {
	mu    sync.Mutex
	st    sentBackend              // opened on first use
	owner string                   // this node's name for the keys it runs
	busy  map[string]chan struct{} // keys being run in this process: closed when done
	mem   *memSent                 // a memory-mode home's records
}

// sentStore returns where the node writes its send records: the serving
// node's database or, without one, the home's database (a memory-mode
// home: this process's memory).
func (n *Node) sentStore() (sentBackend, error) {
	n.sent.mu.Lock()
	defer n.sent.mu.Unlock()
	if n.sent.st != nil {
		return n.sent.st, nil
	}
	if n.closing() {
		return nil, ErrClosed
	}
	n.obMu.Lock()
	db, err := n.homeDBLocked()
	n.obMu.Unlock()
	switch {
	case errors.Is(err, errMemoryHome):
		n.sent.mem = newMemSent()
		n.sent.st = n.sent.mem
	case err != nil:
		return nil, err
	default:
		n.sent.st = db.Sent()
	}
	return n.sent.st, nil
}

// initSent sets up a serving node's send record, before its goroutines
// start: in its durable store, or in memory for a memory-mode home.
func (n *Node) initSent() {
	if d, ok := n.mail.(*durableMail); ok {
		// Keys claimed by a daemon that crashed in their call: a retry
		// makes the call again (the same envelope ids: a peer that got
		// them drops the repeat), not idempotency_conflict for a day.
		if err := d.st.Sent().ReleaseRunningKeys(); err != nil {
			n.log.Warn("idempotency keys of calls cut short by the last stop not released", "err", err)
		}
		n.sent.st = newQueuedSent(d.st.Sent(), n.log)
		return
	}
	n.sent.mem = newMemSent()
	n.sent.st = n.sent.mem
}

// sentView returns the records to read: those this node writes, or for a
// command without a daemon the home's database read only (nil with no
// error when it has none yet).
func (n *Node) sentView() (sentBackend, error) {
	n.sent.mu.Lock()
	st := n.sent.st
	n.sent.mu.Unlock()
	if st != nil || n.mode == ModeServe {
		return n.sentStore()
	}
	db, err := n.readDB()
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return nil, nil
	case errors.Is(err, errMemoryHome):
		return nil, errorf(CodeNoDaemon, "a memory-mode home keeps its send records in the running node: start it (meerkatd run) to see them")
	case err != nil:
		return nil, err
	}
	return db.Sent(), nil
}

// sentWarn logs a failure to record a send: the send itself goes on.
func (n *Node) sentWarn(err error) {
	if err != nil && !errors.Is(err, ErrClosed) && !errors.Is(err, store.ErrClosed) {
		n.log.Warn("send record: not written", "err", err)
	}
}

// sentSealed records an envelope just sealed, before it is sent.
func (n *Node) sentSealed(s comms.Sealed, kind wire.Kind, reliable bool) {
	st, err := n.sentStore()
	if err != nil {
		n.sentWarn(err)
		return
	}
	now := time.Now()
	r := store.SentRecord{ID: s.ID, To: s.Peer.ID, Peer: s.Peer.Name, Kind: s.Kind, CorrID: s.CorrID,
		Reliable: reliable, State: store.SentQueued, Created: now, Updated: now}
	switch s.Kind {
	case wire.TypeRequest:
		r.Intent = kind.Intent()
		if len(r.Intent) > maxSentIntent {
			r.Intent = strings.ToValidUTF8(r.Intent[:maxSentIntent], "")
		}
	case wire.TypeResponse:
		// Its own status: whether it answered the request finally
		// (Answered) is known after a restart too.
		r.ResponseStatus = string(kind.Status())
	}
	if !reliable {
		r.State = store.SentInFlight
	}
	n.sentWarn(st.Put(r))
}

// sentEvent records one event of envelope id.
func (n *Node) sentEvent(id identity.UUID, event string, attempts int, text string) {
	n.sentUpdate(store.SentUpdate{ID: id, Event: event, At: time.Now(), Attempts: attempts, Text: text})
}

// sentUpdate applies u to its send record, warning of a failure.
func (n *Node) sentUpdate(u store.SentUpdate) {
	st, err := n.sentStore()
	if err != nil {
		n.sentWarn(err)
		return
	}
	n.sentWarn(st.Update(u))
}

// lateAck records the ack of an envelope that came when no send waited
// for it: a direct send that a broker stored is acked now (a reliable one
// is too, a moment before its outbox entry finds the ack).
func (n *Node) lateAck(from identity.PeerID, id identity.UUID) {
	st, err := n.sentStore()
	if err != nil {
		n.sentWarn(err)
		return
	}
	// A dead letter to the acking peer, by the record of what was sent:
	// another peer's ack (it may know the id) lifts nothing.
	recs, err := st.Get(id)
	dead := err == nil && len(recs) == 1 && recs[0].State == store.SentDead && recs[0].To == from
	n.sentWarn(st.Update(store.SentUpdate{ID: id, Event: store.SentEventAcked, At: time.Now(), From: from}))
	if !dead || n.ob == nil {
		return
	}
	// Delivered after all (a broker held it past its time-to-live): it
	// is no dead letter, and a retry would only send it again.
	if k, err := n.ob.Drop(id); err != nil {
		n.log.Warn("cannot take a delivered envelope out of the dead letters", "id", id.String(), "err", err)
	} else if k > 0 {
		n.log.Info("an envelope a broker held past its time-to-live was delivered: no longer a dead letter", "id", id.String())
	}
}

// sentOutbox records what the outbox did with an envelope.
func (n *Node) sentOutbox(ev outbox.Event) {
	switch ev.Type {
	case outbox.EventSent:
		n.sentEvent(ev.Entry.ID, store.SentEventAttempt, 0, "")
	case outbox.EventAcked:
		n.sentEvent(ev.Entry.ID, store.SentEventAcked, 0, "")
	case outbox.EventRetry:
		n.sentEvent(ev.Entry.ID, store.SentEventRetry, ev.Attempt, ev.Reason)
	case outbox.EventStored:
		n.sentEvent(ev.Entry.ID, store.SentEventStored, 0, "")
	case outbox.EventExpired, outbox.EventDeadLetter:
		n.sentEvent(ev.Entry.ID, store.SentEventDead, 0, ev.Reason)
	}
}

// sentAnswered records a response admitted to the inbox against the
// request this node sent, if it is one (the record checks that the
// response comes from the request's recipient).
func (n *Node) sentAnswered(it comms.Item) {
	if it.Type != comms.ItemExternal || it.Envelope.Kind.Type() != wire.TypeResponse {
		return
	}
	rid, ok := it.Envelope.Kind.InReplyTo()
	if !ok {
		return
	}
	n.sentUpdate(store.SentUpdate{ID: rid, Event: store.SentEventResponse, At: time.Now(), From: it.Envelope.From,
		ResponseID: it.Envelope.ID, Status: string(it.Envelope.Kind.Status())})
}

// sawResponse passes an admitted response to the node's send record.
func (ri *recordingInbox) sawResponse(it comms.Item) {
	if ri.onResponse != nil && it.Type == comms.ItemExternal && it.Envelope.Kind.Type() == wire.TypeResponse {
		ri.onResponse(it)
	}
}

// seeResponse returns the admission of it, which passes it to the send
// record once it is stored, if it is a response.
func (ri *recordingInbox) seeResponse(it comms.Item, a comms.Admission) comms.Admission {
	if ri.onResponse == nil || it.Type != comms.ItemExternal || it.Envelope.Kind.Type() != wire.TypeResponse {
		return a
	}
	return responseAdmission{Admission: a, ri: ri, it: it}
}

// responseAdmission tells the send record of a response once it is
// stored.
type responseAdmission struct {
	comms.Admission
	ri *recordingInbox
	it comms.Item
}

func (r responseAdmission) Wait() error {
	err := r.Admission.Wait()
	if err == nil {
		r.ri.sawResponse(r.it)
	}
	return err
}

// sentPruneLoop deletes send records older than agent.sent_history_hours
// and idempotency keys past agent.idempotency_window_secs, at start and
// every expireInterval, until ctx ends.
func (n *Node) sentPruneLoop(ctx context.Context) {
	t := time.NewTicker(expireInterval)
	defer t.Stop()
	for {
		if st, err := n.sentStore(); err == nil {
			now := time.Now()
			if recs, keys, err := st.Prune(now.Add(-n.sentHistory()), now.Add(-n.idempotencyWindow())); err != nil {
				if ctx.Err() == nil {
					n.log.Warn("send record: pruning failed", "err", err)
				}
			} else if recs+keys > 0 {
				n.log.Debug("send record: pruned", "records", recs, "keys", keys)
			}
		}
		select {
		case <-t.C:
		case <-ctx.Done():
			return
		}
	}
}

// sendStatus is toSendStatus for what this node reads now: a direct send
// still in flight long after any attempt could have ended (its ack
// timeout and a minute more) was left by a process that ended before its
// outcome, interrupted or killed: nothing will settle it, and it shows
// as failed, saying what is known.
func (n *Node) sendStatus(r store.SentRecord) SendStatus {
	s := toSendStatus(r)
	if r.Kind == wire.TypeRequest && n.lc != nil {
		if q, ok, err := n.lc.st.SentRequest(s.ID); err == nil && ok {
			s.RequestState, s.RequestNote = q.State, q.Note
		}
	}
	if r.State == store.SentInFlight && !r.Reliable && !r.Updated.IsZero() &&
		time.Since(r.Updated) > n.h.Config.Comms.AckTimeout()+abandonedAfter {
		s.State = StateFailed
		s.Reason = abandonedReason
	}
	return s
}

// abandonedAfter is how long past its ack timeout a direct send still in
// flight is taken for abandoned (sendStatus).
const abandonedAfter = time.Minute

// abandonedReason is the reason an abandoned direct send shows.
const abandonedReason = "the sending process ended before the peer's ack came (interrupted or killed): the peer may or may not have it; a send with an idempotency key can be retried safely"

func toSendStatus(r store.SentRecord) SendStatus {
	s := SendStatus{ID: r.ID.String(), State: r.State, Peer: r.Peer, PubKey: r.To.String(), Kind: r.Kind, Intent: r.Intent,
		Reliable: r.Reliable, Created: timeOrNil(r.Created), Updated: timeOrNil(r.Updated), AckedAt: timeOrNil(r.AckedAt),
		Attempts: r.Attempts, LastError: userText(r.LastError), Reason: userText(r.Reason), DiedAt: timeOrNil(r.DiedAt)}
	if r.Kind == wire.TypeResponse && !r.CorrID.IsZero() {
		s.RequestID = r.CorrID.String()
	}
	if !r.ResponseID.IsZero() {
		s.Answer = &SendAnswer{ResponseID: r.ResponseID.String(), Status: r.ResponseStatus, At: r.AnsweredAt.UTC()}
	}
	if r.Progress > 0 {
		s.Progress = &SendProgress{Accepted: r.Progress, ResponseID: r.ProgressID.String(), At: r.ProgressAt.UTC()}
	}
	return s
}

// MessageStatus implements [API].
func (n *Node) MessageStatus(ctx context.Context, ids []string) ([]SendStatus, error) {
	if n.closing() {
		return nil, Coded(ErrClosed)
	}
	if len(ids) == 0 || len(ids) > MaxStatusIDs {
		return nil, errorf(CodeBadArgument, "give 1 to %d envelope ids, got %d", MaxStatusIDs, len(ids))
	}
	us := make([]identity.UUID, len(ids))
	for i, s := range ids {
		u, err := identity.ParseUUID(s)
		if err != nil {
			return nil, errorf(CodeBadArgument, "%q is not an envelope id", s)
		}
		us[i] = u
	}
	out := make([]SendStatus, len(ids))
	for i, u := range us {
		out[i] = SendStatus{ID: u.String(), State: StateUnknown}
	}
	st, err := n.sentView()
	if err != nil || st == nil {
		return out, Coded(err)
	}
	recs, err := st.Get(us...)
	if err != nil {
		return nil, Coded(err)
	}
	for _, r := range recs {
		for i, u := range us {
			if u == r.ID {
				out[i] = n.sendStatus(r)
			}
		}
	}
	return out, nil
}

// SentList implements [API].
func (n *Node) SentList(ctx context.Context, q SentQuery) ([]SendStatus, error) {
	if n.closing() {
		return nil, Coded(ErrClosed)
	}
	if q.Limit < 0 || q.Limit > MaxSentList {
		return nil, errorf(CodeBadArgument, "limit %d: want 0 to %d", q.Limit, MaxSentList)
	}
	if q.Limit == 0 {
		q.Limit = DefaultSentList
	}
	sq := store.SentQuery{Limit: q.Limit}
	if q.Peer != "" {
		p, err := n.r.ResolvePeer(q.Peer)
		if err != nil {
			// A peer no longer trusted may still have records: a key works.
			id, kerr := identity.ParsePeerID(q.Peer)
			if kerr != nil {
				return nil, Coded(err)
			}
			sq.To = id
		} else {
			sq.To = p.ID
		}
	}
	out := []SendStatus{}
	st, err := n.sentView()
	if err != nil || st == nil {
		return out, Coded(err)
	}
	recs, err := st.List(sq)
	if err != nil {
		return nil, Coded(err)
	}
	for _, r := range recs {
		out = append(out, n.sendStatus(r))
	}
	return out, nil
}

// memSent is the send record of a memory-mode node: bounded (maxMemSent
// records, the oldest dropped first), gone when the process ends. It is
// safe for concurrent use.
type memSent struct {
	mu    sync.Mutex
	recs  map[identity.UUID]*store.SentRecord
	order []identity.UUID // oldest first
	keys  map[string]store.Idem
}

func newMemSent() *memSent {
	return &memSent{recs: map[identity.UUID]*store.SentRecord{}, keys: map[string]store.Idem{}}
}

func (m *memSent) Put(r store.SentRecord) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if _, ok := m.recs[r.ID]; ok {
		return nil
	}
	if len(m.order) >= maxMemSent {
		delete(m.recs, m.order[0])
		m.order = m.order[1:]
	}
	m.recs[r.ID] = &r
	m.order = append(m.order, r.ID)
	return nil
}

func (m *memSent) Update(u store.SentUpdate) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if r, ok := m.recs[u.ID]; ok {
		store.ApplySent(r, u)
	}
	return nil
}

func (m *memSent) Get(ids ...identity.UUID) ([]store.SentRecord, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	var out []store.SentRecord
	for _, id := range ids {
		if r, ok := m.recs[id]; ok {
			out = append(out, *r)
		}
	}
	return out, nil
}

func (m *memSent) Answered(to identity.PeerID, request identity.UUID) (bool, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, r := range m.recs {
		if r.Kind == wire.TypeResponse && r.To == to && r.CorrID == request &&
			(r.ResponseStatus == string(wire.StatusCompleted) || r.ResponseStatus == string(wire.StatusFailed)) &&
			r.State != store.SentFailed {
			return true, nil
		}
	}
	return false, nil
}

func (m *memSent) List(q store.SentQuery) ([]store.SentRecord, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	var out []store.SentRecord
	for i := len(m.order) - 1; i >= 0 && len(out) < q.Limit; i-- {
		r := m.recs[m.order[i]]
		if q.To.IsZero() || r.To == q.To {
			out = append(out, *r)
		}
	}
	return out, nil
}

func (m *memSent) Prune(before, keysBefore time.Time) (int, int, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	n := 0
	m.order = slices.DeleteFunc(m.order, func(id identity.UUID) bool {
		r := m.recs[id]
		if r.Created.Before(before) && r.State != store.SentQueued && r.State != store.SentInFlight {
			delete(m.recs, id)
			n++
			return true
		}
		return false
	})
	k := 0
	for key, v := range m.keys {
		if v.Created.Before(keysBefore) {
			delete(m.keys, key)
			k++
		}
	}
	return n, k, nil
}

func (m *memSent) ClaimKey(k store.Idem, expired time.Time) (store.Idem, bool, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if old, ok := m.keys[k.Key]; ok && !old.Created.Before(expired) {
		switch released := old.Released(); {
		case released && old.Op == k.Op && bytes.Equal(old.ArgsHash, k.ArgsHash):
			// The same call again: claimed now, named as at first.
			old.Owner, old.Created = k.Owner, k.Created
			m.keys[k.Key] = old
			return old, true, nil
		case !released:
			return old, false, nil
		}
	}
	if len(m.keys) >= maxMemSent {
		for key, v := range m.keys { // full: drop a finished or released key
			if v.Result != nil || v.Released() {
				delete(m.keys, key)
				break
			}
		}
	}
	k.CallAt = k.Created
	m.keys[k.Key] = k
	return k, true, nil
}

func (m *memSent) FinishKey(k store.Idem) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if old, ok := m.keys[k.Key]; ok && old.Owner == k.Owner && old.Result == nil {
		old.Result = slices.Clone(k.Result)
		m.keys[k.Key] = old
	}
	return nil
}

func (m *memSent) ReleaseKey(k store.Idem) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if old, ok := m.keys[k.Key]; ok && old.Owner == k.Owner && old.Result == nil {
		old.Owner = "" // released: kept, so the same call again is the same call
		m.keys[k.Key] = old
	}
	return nil
}

// maxSentQueue bounds the send-record writes a serving node holds before
// they are written; beyond it the oldest are dropped (logged, counted).
const maxSentQueue = 1 << 16

// queuedSent is a serving node's send record in its database: writes are
// queued in memory and written in batches by sentWriteLoop (or flush), so
// the outbox and the Router never wait for the database on its account.
// Reads flush first, so they see every write made before them. It is
// safe for concurrent use.
type queuedSent struct {
	*store.Sent
	log  *slog.Logger
	wake chan struct{} // 1-buffered: writes are waiting

	mu      sync.Mutex
	ops     []store.SentOp
	dropped int

	flushMu sync.Mutex // one flush at a time: batches commit in order
}

func newQueuedSent(st *store.Sent, log *slog.Logger) *queuedSent {
	return &queuedSent{Sent: st, log: log, wake: make(chan struct{}, 1)}
}

func (q *queuedSent) add(op store.SentOp) {
	q.mu.Lock()
	if len(q.ops) >= maxSentQueue {
		q.ops = q.ops[1:]
		q.dropped++
	}
	q.ops = append(q.ops, op)
	q.mu.Unlock()
	select {
	case q.wake <- struct{}{}:
	default:
	}
}

func (q *queuedSent) Put(r store.SentRecord) error    { q.add(store.SentOp{Put: &r}); return nil }
func (q *queuedSent) Update(u store.SentUpdate) error { q.add(store.SentOp{Update: u}); return nil }

// flush writes what is queued.
func (q *queuedSent) flush() error {
	q.flushMu.Lock()
	defer q.flushMu.Unlock()
	q.mu.Lock()
	ops, dropped := q.ops, q.dropped
	q.ops, q.dropped = nil, 0
	q.mu.Unlock()
	if dropped > 0 {
		q.log.Warn("send record: writes dropped, the database fell behind", "count", dropped)
	}
	if len(ops) == 0 {
		return nil
	}
	return q.Write(ops)
}

func (q *queuedSent) Get(ids ...identity.UUID) ([]store.SentRecord, error) {
	if err := q.flush(); err != nil {
		return nil, err
	}
	return q.Sent.Get(ids...)
}

func (q *queuedSent) Answered(to identity.PeerID, request identity.UUID) (bool, error) {
	if err := q.flush(); err != nil {
		return false, err
	}
	return q.Sent.Answered(to, request)
}

func (q *queuedSent) List(sq store.SentQuery) ([]store.SentRecord, error) {
	if err := q.flush(); err != nil {
		return nil, err
	}
	return q.Sent.List(sq)
}

func (q *queuedSent) Prune(before, keysBefore time.Time) (int, int, error) {
	if err := q.flush(); err != nil {
		return 0, 0, err
	}
	return q.Sent.Prune(before, keysBefore)
}

// sentWriteLoop writes the queued send-record writes as they come, until
// ctx ends (Close flushes the rest before the store closes).
func (q *queuedSent) writeLoop(ctx context.Context) {
	for {
		select {
		case <-q.wake:
			if err := q.flush(); err != nil && ctx.Err() == nil && !errors.Is(err, store.ErrClosed) {
				q.log.Warn("send record: not written", "err", err)
			}
		case <-ctx.Done():
			return
		}
	}
}

// flushSent writes a serving node's queued send-record writes; Close
// calls it once the outbox and the Router stopped, before the store
// closes.
func (n *Node) flushSent() {
	n.sent.mu.Lock()
	st := n.sent.st
	n.sent.mu.Unlock()
	if q, ok := st.(*queuedSent); ok {
		if err := q.flush(); err != nil {
			n.log.Warn("send record: not written at shutdown", "err", err)
		}
	}
}
