package store

import (
	"bytes"
	"cmp"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/meerkatd/meerkatd/identity"
)

// Send states of a [SentRecord].
const (
	SentQueued   = "queued"           // reliable, in the outbox, not being attempted now
	SentInFlight = "in_flight"        // an attempt is on its way
	SentAcked    = "acked"            // the peer acknowledged it (messages, requests)
	SentWritten  = "written"          // written to the peer (responses are not acknowledged)
	SentDead     = "dead"             // a reliable send given up on (a dead letter)
	SentFailed   = "failed"           // a direct send whose one attempt failed: nothing was delivered
	SentAnswered = "answered"         // a request with a final response (completed or failed)
	SentStored   = "stored_in_broker" // a broker on the way (NATS JetStream) stored it; the peer has not acknowledged it yet
)

// Events that change a [SentRecord] (SentUpdate.Event).
const (
	SentEventAttempt  = "attempt"  // an attempt starts
	SentEventRetry    = "retry"    // an attempt failed; queued for the next one
	SentEventAcked    = "acked"    // acknowledged (or written, for a response)
	SentEventDead     = "dead"     // moved to the dead letters
	SentEventFailed   = "failed"   // a direct send failed
	SentEventResponse = "response" // a response to it was admitted to the inbox
	SentEventStored   = "stored"   // a broker on the way stored it; the peer's ack is awaited
)

// SentRecord is what this node remembers of one envelope it sent: never
// its body. Times are the zero time when they have not happened.
type SentRecord struct {
	ID        identity.UUID
	To        identity.PeerID
	Peer      string // the recipient's trust-list name when sealed
	Kind      string // message, request, response
	Intent    string // requests: what was asked
	CorrID    identity.UUID
	Reliable  bool
	State     string // a Sent… state
	Created   time.Time
	Updated   time.Time
	AckedAt   time.Time
	Attempts  int    // failed attempts
	LastError string // the last failed attempt's error
	Reason    string // dead, failed: why
	DiedAt    time.Time
	// The final response (completed or failed) of a request.
	ResponseID     identity.UUID
	ResponseStatus string
	AnsweredAt     time.Time
	// Progress: "accepted" responses seen, and the last one.
	Progress   int
	ProgressID identity.UUID
	ProgressAt time.Time
}

// SentUpdate is one event in a sent envelope's life.
type SentUpdate struct {
	ID       identity.UUID // the envelope (for SentEventResponse: the request answered)
	Event    string        // a SentEvent… value
	At       time.Time
	Attempts int    // retry: failed attempts so far
	Text     string // retry: the attempt's error; dead, failed: the reason
	// SentEventResponse: who answered (it must be the request's
	// recipient), the response's id and status. SentEventAcked: who
	// acknowledged it, if known (then it must be the recipient).
	From       identity.PeerID
	ResponseID identity.UUID
	Status     string
}

// ApplySent applies u to r and reports whether it changed anything. The
// rules make the order of events from different sources harmless: an
// acknowledgement or an answer is never undone by a late attempt or
// retry event, a dead or failed send can still be acknowledged (a
// revived dead letter), an answer needs the request's own recipient,
// and only the first final response counts. An "accepted" response is
// progress and leaves the state as it is.
func ApplySent(r *SentRecord, u SentUpdate) bool {
	settled := r.State == SentAcked || r.State == SentWritten || r.State == SentAnswered
	switch u.Event {
	case SentEventAttempt:
		if settled || r.State == SentInFlight {
			return false
		}
		r.State = SentInFlight
		r.Reason, r.DiedAt = "", time.Time{}
	case SentEventRetry:
		if settled {
			return false
		}
		r.State, r.Attempts, r.LastError = SentQueued, u.Attempts, u.Text
	case SentEventStored:
		if settled || r.State == SentStored {
			return false
		}
		r.State, r.LastError = SentStored, ""
	case SentEventAcked:
		if !u.From.IsZero() && u.From != r.To {
			return false // an ack from another than the recipient
		}
		if r.State == SentAnswered {
			if r.AckedAt.IsZero() {
				r.AckedAt = u.At
				break
			}
			return false
		}
		if settled {
			return false
		}
		r.State, r.AckedAt, r.LastError, r.Reason, r.DiedAt = SentAcked, u.At, "", "", time.Time{}
		if r.Kind == "response" {
			r.State = SentWritten
		}
	case SentEventDead, SentEventFailed:
		if settled {
			return false
		}
		r.State, r.Reason, r.DiedAt = SentDead, u.Text, u.At
		if u.Event == SentEventFailed {
			r.State = SentFailed
		}
	case SentEventResponse:
		if r.Kind != "request" || u.From != r.To || r.State == SentAnswered {
			return false
		}
		if u.Status == "accepted" {
			r.Progress++
			r.ProgressID, r.ProgressAt = u.ResponseID, u.At
			break
		}
		if u.Status != "completed" && u.Status != "failed" {
			return false
		}
		if r.AckedAt.IsZero() {
			// An answer proves it arrived; the ack may still be on its way.
			r.AckedAt = u.At
		}
		r.State, r.ResponseID, r.ResponseStatus, r.AnsweredAt = SentAnswered, u.ResponseID, u.Status, u.At
		r.Reason, r.DiedAt = "", time.Time{}
	default:
		return false
	}
	r.Updated = u.At
	return true
}

// SentQuery selects sent records for [Sent.List].
type SentQuery struct {
	To    identity.PeerID // zero: every peer
	Limit int             // at most this many, newest first (<= 0: 100)
}

// Idem is one idempotency key's record.
type Idem struct {
	Key      string
	Op       string
	ArgsHash []byte
	Result   []byte // the first call's result as JSON; nil while it runs
	Owner    string // who runs it while Result is nil
	Created  time.Time
	// CallAt is when the call was first claimed: it names the call
	// (envelope ids derive from it) across retries of a failed call, while
	// Created, its latest claim, starts the key's window.
	CallAt time.Time
}

// Sent is the durable record of sends and idempotency keys of a [Store]
// (tables sent and idempotency). Get one from [Store.Sent].
//
// Put and Update queue their write and return without waiting for the
// commit: it commits with the next group, in order with every later write,
// and Close commits what is still queued (a send is not slowed by a sync
// of its record). Reads first wait for the writes queued before them. The
// idempotency operations wait for their commit. It is safe for concurrent
// use; after the Store is closed every method returns [ErrClosed].
type Sent struct{ s *Store }

// Sent returns the store's send record.
func (s *Store) Sent() *Sent { return &Sent{s: s} }

// sentReq carries the arguments of a sent op to the committer.
type sentReq struct {
	rec    SentRecord // opSentPut
	upd    SentUpdate // opSentUpdate
	before time.Time  // opSentPrune: sent records created before; idempotency keys created before
	idem   Idem       // opIdemClaim, opIdemFinish, opIdemRelease
	all    bool       // opIdemRelease: every key still running, whoever's
	keyAt  time.Time  // opIdemClaim: keys created before it have expired
	batch  []SentOp   // opSentBatch
}

// SentOp is one write of a batch ([Sent.Write]): a new record (Put set)
// or an update.
type SentOp struct {
	Put    *SentRecord
	Update SentUpdate
}

// Write applies ops in order, in one request to the committer, and
// returns once they are committed (a record put and updated in one batch
// ends up updated).
func (sn *Sent) Write(ops []SentOp) error {
	for _, op := range ops {
		t := op.Update.At
		if op.Put != nil {
			t = op.Put.Created
		}
		if err := checkTime("sent write", t); err != nil {
			return err
		}
	}
	return sn.s.do(context.Background(), &request{op: opSentBatch, sn: &sentReq{batch: ops}}).err
}

// Put records a new send (a second record with the same id is ignored).
func (sn *Sent) Put(r SentRecord) error {
	for _, t := range []time.Time{r.Created, r.Updated} {
		if err := checkTime("sent put", t); err != nil {
			return err
		}
	}
	return sn.s.send(context.Background(), &request{op: opSentPut, sn: &sentReq{rec: r}, done: make(chan result, 1)})
}

// Update applies u (see [ApplySent]) to the record of u.ID, if there is one.
func (sn *Sent) Update(u SentUpdate) error {
	if err := checkTime("sent update", u.At); err != nil {
		return err
	}
	return sn.s.send(context.Background(), &request{op: opSentUpdate, sn: &sentReq{upd: u}, done: make(chan result, 1)})
}

// Prune deletes the records created before before that are settled (not
// queued or in flight), and the idempotency keys created before
// keysBefore; it returns how many records and keys it deleted.
func (sn *Sent) Prune(before, keysBefore time.Time) (records, keys int, err error) {
	if err := checkTime("sent prune", before); err != nil {
		return 0, 0, err
	}
	if err := checkTime("sent prune", keysBefore); err != nil {
		return 0, 0, err
	}
	res := sn.s.do(context.Background(), &request{op: opSentPrune, sn: &sentReq{before: before, keyAt: keysBefore}})
	return res.n, res.m, res.err
}

func (sn *Sent) sync() error {
	if sn.s.opts.ReadOnly {
		return sn.s.checkOpen() // no writer in this process to wait for
	}
	return sn.s.do(context.Background(), &request{op: opOutboxSync}).err
}

// Get returns the records of the given ids that exist, in the order
// given.
func (sn *Sent) Get(ids ...identity.UUID) ([]SentRecord, error) {
	if err := sn.sync(); err != nil {
		return nil, err
	}
	out := make([]SentRecord, 0, len(ids))
	for _, id := range ids {
		err := sn.s.readArgs("store: sent: read", sqlSentGet, []any{id[:]}, func(rows *sql.Rows) error {
			r, err := scanSent(rows)
			if err != nil {
				return err
			}
			out = append(out, r)
			return nil
		})
		if err != nil {
			return nil, err
		}
	}
	return out, nil
}

// Answered reports whether this node gave request (received from to) a
// final answer: it sent a response to it with status completed or
// failed (a record's ResponseStatus, for a response, is its own status)
// that did not fail outright. A reliable one counts from when it was
// queued, also once it is a dead letter (which can be retried).
func (sn *Sent) Answered(to identity.PeerID, request identity.UUID) (bool, error) {
	if err := sn.sync(); err != nil {
		return false, err
	}
	found := false
	err := sn.s.readArgs("store: sent: answered", `SELECT 1 FROM sent WHERE corr_id = ? AND kind = 'response' AND recipient = ?
		AND response_status IN ('completed', 'failed') AND state <> '`+SentFailed+`' LIMIT 1`,
		[]any{request[:], to[:]}, func(*sql.Rows) error {
			found = true
			return nil
		})
	return found, err
}

// List returns the newest records matching q, newest first.
func (sn *Sent) List(q SentQuery) ([]SentRecord, error) {
	if err := sn.sync(); err != nil {
		return nil, err
	}
	if q.Limit <= 0 {
		q.Limit = 100
	}
	var to any = []byte{}
	if !q.To.IsZero() {
		to = q.To[:]
	}
	var out []SentRecord
	err := sn.s.readArgs("store: sent: list", `SELECT `+sentCols+` FROM sent
		WHERE length(?1) = 0 OR recipient = ?1 ORDER BY created DESC, rowid DESC LIMIT ?2`, []any{to, q.Limit}, func(rows *sql.Rows) error {
		r, err := scanSent(rows)
		if err != nil {
			return err
		}
		out = append(out, r)
		return nil
	})
	return out, err
}

// Released reports whether k's call failed and was let go (ReleaseKey):
// no owner, no result.
func (k Idem) Released() bool { return k.Owner == "" && k.Result == nil }

// ClaimKey claims key k.Key for a call made at k.Created: a key created
// (last claimed) before expired counts as unused (and is replaced). It
// returns the stored record and false if the key is in use (its Result
// nil while its call runs; or it has a result, to replay). It returns
// the claimed record and true once the key is stored as running, owned
// by k.Owner: k itself, CallAt k.Created, for a new claim; for the same
// call again (the same Op and ArgsHash) after its key was released, the
// stored record claimed anew (owner k.Owner, Created k.Created) with the
// CallAt it had, so that every attempt of one call is the same call and
// a use of the key after its window is not.
func (sn *Sent) ClaimKey(k Idem, expired time.Time) (Idem, bool, error) {
	if k.Owner == "" {
		return Idem{}, false, errors.New("bug: store: claim key without an owner")
	}
	if err := checkTime("claim key", k.Created); err != nil {
		return Idem{}, false, err
	}
	if err := checkTime("claim key", expired); err != nil {
		return Idem{}, false, err
	}
	res := sn.s.do(context.Background(), &request{op: opIdemClaim, sn: &sentReq{idem: k, keyAt: expired}})
	if res.err != nil {
		return Idem{}, false, res.err
	}
	if res.idem != nil {
		return *res.idem, res.claim, nil
	}
	k.CallAt = k.Created
	return k, true, nil
}

// FinishKey stores the result of the call that owns key k.Key.
func (sn *Sent) FinishKey(k Idem) error {
	return sn.s.do(context.Background(), &request{op: opIdemFinish, sn: &sentReq{idem: k}}).err
}

// ReleaseRunningKeys lets go of every key whose call was still running
// when the process running it stopped (it crashed, or was killed): a
// daemon calls it as it starts, before any call of its own, so that a
// retry with such a key is made again, as the same call (ClaimKey),
// rather than refused as running for the rest of the key's window.
func (sn *Sent) ReleaseRunningKeys() error {
	return sn.s.do(context.Background(), &request{op: opIdemRelease, sn: &sentReq{all: true}}).err
}

// ReleaseKey lets key k.Key go if k.Owner still runs it: its call failed
// and may be made again. The key is kept, without an owner, until it
// expires, so the same call made again is claimed under the first
// claim's time (ClaimKey).
func (sn *Sent) ReleaseKey(k Idem) error {
	return sn.s.do(context.Background(), &request{op: opIdemRelease, sn: &sentReq{idem: k}}).err
}

const (
	sentCols = `id, recipient, peer, kind, intent, corr_id, reliable, state, created, updated, acked_at,
		attempts, last_error, reason, died_at, response_id, response_status, answered_at, progress, progress_id, progress_at`
	sqlSentPut = `INSERT INTO sent (` + sentCols + `)
		VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT (id) DO NOTHING`
	sqlSentGet    = `SELECT ` + sentCols + ` FROM sent WHERE id = ?`
	sqlSentUpdate = `UPDATE sent SET state = ?, updated = ?, acked_at = ?, attempts = ?, last_error = ?, reason = ?, died_at = ?,
		response_id = ?, response_status = ?, answered_at = ?, progress = ?, progress_id = ?, progress_at = ? WHERE id = ?`
	sqlSentPrune   = `DELETE FROM sent WHERE created < ? AND state NOT IN ('queued', 'in_flight')`
	sqlIdemPrune   = `DELETE FROM idempotency WHERE created < ?`
	sqlIdemGet     = `SELECT key, op, args_hash, result, owner, created, call_at FROM idempotency WHERE key = ?`
	sqlIdemDelete  = `DELETE FROM idempotency WHERE key = ?`
	sqlIdemInsert  = `INSERT INTO idempotency (key, op, args_hash, result, owner, created, call_at) VALUES (?, ?, ?, NULL, ?, ?, ?)`
	sqlIdemFinish  = `UPDATE idempotency SET result = ? WHERE key = ? AND owner = ? AND result IS NULL`
	sqlIdemRel     = `UPDATE idempotency SET owner = '' WHERE key = ? AND owner = ? AND result IS NULL`
	sqlIdemRelAll  = `UPDATE idempotency SET owner = '' WHERE owner != '' AND result IS NULL`
	sqlIdemReclaim = `UPDATE idempotency SET owner = ?, created = ? WHERE key = ? AND owner = '' AND result IS NULL`
)

func uuidBytes(u identity.UUID) []byte {
	if u.IsZero() {
		return nil
	}
	return u[:]
}

func sentArgs(r SentRecord) []any {
	rel := 0
	if r.Reliable {
		rel = 1
	}
	return []any{r.ID[:], r.To[:], r.Peer, r.Kind, r.Intent, uuidBytes(r.CorrID), rel, r.State, nanos(r.Created), nanos(r.Updated),
		nanos(r.AckedAt), r.Attempts, r.LastError, r.Reason, nanos(r.DiedAt), uuidBytes(r.ResponseID), r.ResponseStatus,
		nanos(r.AnsweredAt), r.Progress, uuidBytes(r.ProgressID), nanos(r.ProgressAt)}
}

// scanSent reads one row of sentCols; a malformed row is an error naming
// it, never a panic.
func scanSent(rows interface{ Scan(...any) error }) (SentRecord, error) {
	var (
		r                                      SentRecord
		id, to, corr, resp, prog               []byte
		rel                                    int
		created, updated, acked, died, ans, pa sql.NullInt64
	)
	if err := rows.Scan(&id, &to, &r.Peer, &r.Kind, &r.Intent, &corr, &rel, &r.State, &created, &updated, &acked,
		&r.Attempts, &r.LastError, &r.Reason, &died, &resp, &r.ResponseStatus, &ans, &r.Progress, &prog, &pa); err != nil {
		return r, err
	}
	if len(id) != 16 || len(to) != 32 {
		return r, fmt.Errorf("sent row with a malformed id or recipient")
	}
	copy(r.ID[:], id)
	copy(r.To[:], to)
	for _, f := range []struct {
		dst *identity.UUID
		b   []byte
	}{{&r.CorrID, corr}, {&r.ResponseID, resp}, {&r.ProgressID, prog}} {
		switch len(f.b) {
		case 0:
		case 16:
			copy(f.dst[:], f.b)
		default:
			return r, fmt.Errorf("sent row %s with a malformed id", r.ID)
		}
	}
	r.Reliable = rel != 0
	r.Created, r.Updated, r.AckedAt, r.DiedAt, r.AnsweredAt, r.ProgressAt =
		fromNanos(created), fromNanos(updated), fromNanos(acked), fromNanos(died), fromNanos(ans), fromNanos(pa)
	return r, nil
}

// updateSent applies u to its record, if there is one.
func (t *outboxTx) updateSent(u SentUpdate, res *result) error {
	st, err := t.stmt(sqlSentGet)
	if err != nil {
		return err
	}
	r, err := scanSent(st.QueryRowContext(t.ctx, u.ID[:]))
	switch {
	case errors.Is(err, sql.ErrNoRows):
		return nil // not sent by this node, or pruned
	case err != nil:
		res.err = fmt.Errorf("store: sent: %w", err) // this row only: the batch goes on
		return nil
	}
	if !ApplySent(&r, u) {
		return nil
	}
	a := sentArgs(r)
	args := make([]any, 0, 14)
	args = append(args, a[7])
	args = append(args, a[9:]...)
	_, err = t.exec(sqlSentUpdate, append(args, r.ID[:])...)
	return err
}

// run executes a sent or idempotency op in the batch's transaction.
func (t *outboxTx) runSent(req *request, res *result) error {
	q := req.sn
	switch req.op {
	case opSentPut:
		_, err := t.exec(sqlSentPut, sentArgs(q.rec)...)
		return err
	case opSentUpdate:
		return t.updateSent(q.upd, res)
	case opSentBatch:
		for _, op := range q.batch {
			var err error
			if op.Put != nil {
				_, err = t.exec(sqlSentPut, sentArgs(*op.Put)...)
			} else {
				err = t.updateSent(op.Update, res)
			}
			if err != nil {
				return err
			}
		}
		return nil
	case opSentPrune:
		n, err := t.exec(sqlSentPrune, q.before.UnixNano())
		if err != nil {
			return err
		}
		m, err := t.exec(sqlIdemPrune, q.keyAt.UnixNano())
		res.n, res.m = int(n), int(m)
		return err
	case opIdemClaim:
		st, err := t.stmt(sqlIdemGet)
		if err != nil {
			return err
		}
		var k Idem
		var created int64
		var callAt sql.NullInt64
		err = st.QueryRowContext(t.ctx, q.idem.Key).Scan(&k.Key, &k.Op, &k.ArgsHash, &k.Result, &k.Owner, &created, &callAt)
		k.Created, k.CallAt = time.Unix(0, created), time.Unix(0, cmp.Or(callAt.Int64, created))
		switch {
		case err == nil && created >= q.keyAt.UnixNano() && k.Released() && k.Op == q.idem.Op && bytes.Equal(k.ArgsHash, q.idem.ArgsHash):
			// The same call again after a failed attempt: claimed now
			// (its window starts again), it keeps the time that names it.
			if _, err := t.exec(sqlIdemReclaim, q.idem.Owner, q.idem.Created.UnixNano(), q.idem.Key); err != nil {
				return err
			}
			k.Owner, k.Created = q.idem.Owner, q.idem.Created
			res.idem = &k
			res.claim = true
			return nil
		case err == nil && created >= q.keyAt.UnixNano() && !k.Released():
			res.idem = &k
			return nil
		case err == nil: // expired, or released and now used for another call
			if _, err := t.exec(sqlIdemDelete, q.idem.Key); err != nil {
				return err
			}
		case !errors.Is(err, sql.ErrNoRows):
			return err
		}
		_, err = t.exec(sqlIdemInsert, q.idem.Key, q.idem.Op, q.idem.ArgsHash, q.idem.Owner, q.idem.Created.UnixNano(), q.idem.Created.UnixNano())
		return err
	case opIdemFinish:
		_, err := t.exec(sqlIdemFinish, q.idem.Result, q.idem.Key, q.idem.Owner)
		return err
	case opIdemRelease:
		if q.all {
			_, err := t.exec(sqlIdemRelAll)
			return err
		}
		_, err := t.exec(sqlIdemRel, q.idem.Key, q.idem.Owner)
		return err
	}
	return fmt.Errorf("bug: store: sent op %d", req.op)
}
