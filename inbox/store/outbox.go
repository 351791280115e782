package store

import (
	"cmp"
	"context"
	"database/sql"
	"fmt"
	"math"
	"slices"
	"time"

	"github.com/meerkatd/meerkatd/comms/outbox"
	"github.com/meerkatd/meerkatd/identity"
)

// Outbox is the durable [outbox.Store] of a [Store]: the outbox, dead
// letters and breaker states in the same database file as the inbox
// (tables outbox, dead_letters and breakers, schema version 2). Its writes
// go through the Store's committer like admissions, so they group-commit
// with them; after the Store is closed every method returns [ErrClosed].
//
// It is safe for concurrent use. Get one from [Store.Outbox]; the zero
// value is not usable.
//
// Reads ([Outbox.Entries], [Outbox.DeadLetters], [Outbox.Breakers]) return
// every row of their table: the caller bounds the outbox, and dead letters
// stay until revived or dropped. A row with a malformed id, key or seq (a
// file edited by hand) fails the read with an error naming the row.
// Payloads read back are never nil: a nil Payload is stored as empty.
// Times round-trip at nanosecond precision in the local time zone; the
// zero time is stored as NULL. Times outside the int64 Unix-nanosecond
// range (years 1678 to 2262) are refused; any other is kept as given, even
// years ahead (a clock that was wrong): the outbox bounds what it loads
// ([outbox.Bounds]).
type Outbox struct{ s *Store }

var _ outbox.Store = (*Outbox)(nil)

// Outbox returns the store's outbox. It is cheap; every call returns a
// view of the same tables.
func (s *Store) Outbox() *Outbox { return &Outbox{s: s} }

// outboxReq carries the arguments of an outbox op to the committer. Times
// were checked by the caller (checkTime), so nanos cannot fail there.
type outboxReq struct {
	entry   outbox.Entry    // opOutboxAdd
	ids     []identity.UUID // opOutboxDelivered, opOutboxRevive (nil: all), opOutboxDrop
	id      identity.UUID   // opOutboxAttempted, opOutboxKill
	n       int             // opOutboxAttempted: attempts; opOutboxPrune: most kept
	at      time.Time       // opOutboxAttempted: next; opOutboxKill: died at; opOutboxPrune: died before
	text    string          // opOutboxAttempted: last error; opOutboxKill: reason
	breaker outbox.Breaker  // opOutboxSaveBreaker
}

// Add stores e with a new Seq (above every Seq ever assigned, also across
// restarts) and returns it once committed, in a group commit shared with
// concurrent writes. An e.ID already in the outbox is an error and stores
// nothing (a dead letter with the same ID does not count: see [Outbox.Kill]).
func (o *Outbox) Add(e outbox.Entry) (outbox.Entry, error) {
	for _, t := range []time.Time{e.Created, e.Expires, e.NextAttempt} {
		if err := checkTime("add", t); err != nil {
			return outbox.Entry{}, err
		}
	}
	res := o.s.do(context.Background(), &request{op: opOutboxAdd, ob: &outboxReq{entry: e}})
	if res.err != nil {
		return outbox.Entry{}, res.err
	}
	e.Seq = res.seq
	return e, nil
}

// Entries returns the whole outbox in Seq order. It first waits for the
// committer to apply every write queued before it (Delivered included), so
// it reflects every call that returned before it was made.
func (o *Outbox) Entries() ([]outbox.Entry, error) {
	if o.s.opts.ReadOnly {
		// No writer in this process to wait for.
	} else if res := o.s.do(context.Background(), &request{op: opOutboxSync}); res.err != nil {
		return nil, res.err
	}
	var out []outbox.Entry
	err := o.s.read("entries", `SELECT `+entryCols+` FROM outbox ORDER BY seq`, func(rows *sql.Rows) error {
		var r entryRow
		if err := rows.Scan(r.dest()...); err != nil {
			return err
		}
		e, err := r.entry("outbox entry")
		if err != nil {
			return err
		}
		out = append(out, e)
		return nil
	})
	return out, err
}

// Delivered queues the removal of the entries with the given ids and
// returns without waiting for the commit: the removal commits with the
// next group, in order with every later write, and Close commits it if it
// is still queued. Unknown ids are ignored; any number of ids is one
// request. It blocks only while the committer's queue is full.
//
// A removal that fails to commit (a disk error) leaves the entry queued,
// to be delivered once more after a restart; the next Delivered call
// reports that failure after queueing its own ids.
func (o *Outbox) Delivered(ids ...identity.UUID) error {
	s := o.s
	if len(ids) == 0 {
		return s.checkOpen()
	}
	req := &request{op: opOutboxDelivered, ob: &outboxReq{ids: slices.Clone(ids)}, done: make(chan result, 1)}
	if err := s.send(context.Background(), req); err != nil {
		return err
	}
	if p := s.deliveredErr.Swap(nil); p != nil {
		return fmt.Errorf("store: outbox: an earlier Delivered was not stored: %w", *p)
	}
	return nil
}

// Attempted records a failed attempt of entry id: its attempt count, the
// time before which it is not tried again (zero: at once) and why it
// failed. It returns after the commit. An id not in the outbox is ignored:
// the entry may have been delivered or killed meanwhile.
func (o *Outbox) Attempted(id identity.UUID, attempts int, next time.Time, lastErr string) error {
	if err := checkTime("attempted", next); err != nil {
		return err
	}
	res := o.s.do(context.Background(), &request{op: opOutboxAttempted, ob: &outboxReq{id: id, n: attempts, at: next, text: lastErr}})
	return res.err
}

// Kill moves entry id from the outbox to the end of the dead letters with
// reason and at as its DeadLetter.Reason and DiedAt, keeping every other
// field (Seq included, for display). It returns after the commit; an id not
// in the outbox is an error wrapping [outbox.ErrNotFound]. A dead letter
// with the same id (the envelope was added again after an earlier Kill) is
// replaced.
func (o *Outbox) Kill(id identity.UUID, reason string, at time.Time) error {
	if err := checkTime("kill", at); err != nil {
		return err
	}
	res := o.s.do(context.Background(), &request{op: opOutboxKill, ob: &outboxReq{id: id, at: at, text: reason}})
	return res.err
}

// DeadLetterCount returns how many dead letters are kept.
func (o *Outbox) DeadLetterCount() (int, error) {
	n := 0
	err := o.s.read("dead letter count", `SELECT count(*) FROM dead_letters`, func(rows *sql.Rows) error { return rows.Scan(&n) })
	return n, err
}

// DeadLetters returns the dead letters in the order they were killed.
func (o *Outbox) DeadLetters() ([]outbox.DeadLetter, error) {
	var out []outbox.DeadLetter
	err := o.s.read("dead letters", `SELECT `+entryCols+`, reason, died_at FROM dead_letters ORDER BY dl`, func(rows *sql.Rows) error {
		var (
			r    entryRow
			d    outbox.DeadLetter
			died sql.NullInt64
		)
		if err := rows.Scan(append(r.dest(), &d.Reason, &died)...); err != nil {
			return err
		}
		e, err := r.entry("dead letter")
		if err != nil {
			return err
		}
		d.Entry, d.DiedAt = e, fromNanos(died)
		out = append(out, d)
		return nil
	})
	return out, err
}

// Revive moves the dead letters with the given ids (no ids: all of them)
// back to the end of the outbox, in the order they were killed, with new
// Seqs and Attempts, NextAttempt, LastError and Expires cleared. Ids that
// are not dead letters are ignored. A dead letter whose id is in the
// outbox again is removed but not revived: the envelope is already queued.
// It returns the revived entries, after the commit.
func (o *Outbox) Revive(ids ...identity.UUID) ([]outbox.Entry, error) {
	var req outboxReq // ids nil: all
	if len(ids) > 0 {
		req.ids = slices.Clone(ids)
	}
	res := o.s.do(context.Background(), &request{op: opOutboxRevive, ob: &req})
	return res.revd, res.err
}

// Drop deletes the dead letters with the given ids for good and returns
// how many there were. Unknown ids are ignored; no ids drops nothing (an
// empty selection never means "all" for a deletion).
func (o *Outbox) Drop(ids ...identity.UUID) (int, error) {
	if len(ids) == 0 {
		return 0, o.s.checkOpen()
	}
	res := o.s.do(context.Background(), &request{op: opOutboxDrop, ob: &outboxReq{ids: slices.Clone(ids)}})
	return res.n, res.err
}

// Prune deletes the dead letters that died before before (zero: none for
// their age) and, of the others, all but the max newest (max < 0: no
// count limit), in one transaction. It returns them in the order they
// were killed, after the commit.
func (o *Outbox) Prune(max int, before time.Time) ([]outbox.DeadLetter, error) {
	if err := checkTime("prune", before); err != nil {
		return nil, err
	}
	res := o.s.do(context.Background(), &request{op: opOutboxPrune, ob: &outboxReq{n: max, at: before}})
	return res.dead, res.err
}

// Breakers returns the stored breaker states, ordered by peer key.
func (o *Outbox) Breakers() ([]outbox.Breaker, error) {
	var out []outbox.Breaker
	err := o.s.read("breakers", `SELECT peer, failures, open_until FROM breakers ORDER BY peer`, func(rows *sql.Rows) error {
		var (
			b    outbox.Breaker
			peer []byte
			open sql.NullInt64
		)
		if err := rows.Scan(&peer, &b.Failures, &open); err != nil {
			return err
		}
		if len(peer) != len(b.Peer) {
			return fmt.Errorf("a breaker has a malformed peer key (%d bytes)", len(peer))
		}
		copy(b.Peer[:], peer)
		b.OpenUntil = fromNanos(open)
		out = append(out, b)
		return nil
	})
	return out, err
}

// SaveBreaker stores b, replacing b.Peer's state, and returns after the
// commit. A closed breaker (Failures zero and OpenUntil zero) is deleted.
func (o *Outbox) SaveBreaker(b outbox.Breaker) error {
	if err := checkTime("save breaker", b.OpenUntil); err != nil {
		return err
	}
	return o.s.do(context.Background(), &request{op: opOutboxSaveBreaker, ob: &outboxReq{breaker: b}}).err
}

// read runs query outside the committer (WAL readers do not block it) and
// calls scan for every row.
func (s *Store) read(what, query string, scan func(*sql.Rows) error) error {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.closed {
		return ErrClosed
	}
	rows, err := s.db.Query(query)
	if err != nil {
		return fmt.Errorf("store: outbox: read %s: %w", what, err)
	}
	defer rows.Close()
	for rows.Next() {
		if err := scan(rows); err != nil {
			return fmt.Errorf("store: outbox: read %s: %w", what, err)
		}
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("store: outbox: read %s: %w", what, err)
	}
	return s.awaitSynced()
}

// entryCols are the columns outbox and dead_letters share, in the order
// entryRow.dest scans them.
const entryCols = `seq, id, recipient, peer, kind, corr_id, payload, created, expires, attempts, next_attempt, last_error`

// entryRow receives entryCols.
type entryRow struct {
	e                      outbox.Entry
	seq                    int64
	id, to, corr           []byte
	created, expires, next sql.NullInt64
}

func (r *entryRow) dest() []any {
	return []any{&r.seq, &r.id, &r.to, &r.e.Peer, &r.e.Kind, &r.corr, &r.e.Payload,
		&r.created, &r.expires, &r.e.Attempts, &r.next, &r.e.LastError}
}

// entry validates the scanned row and returns it as an Entry.
func (r *entryRow) entry(what string) (outbox.Entry, error) {
	e := r.e
	switch {
	case r.seq <= 0:
		return e, fmt.Errorf("%s with invalid seq %d", what, r.seq)
	case len(r.id) != len(e.ID):
		return e, fmt.Errorf("%s %d has a malformed id (%d bytes)", what, r.seq, len(r.id))
	case len(r.to) != len(e.To):
		return e, fmt.Errorf("%s %d has a malformed recipient key (%d bytes)", what, r.seq, len(r.to))
	case len(r.corr) != len(e.CorrID):
		return e, fmt.Errorf("%s %d has a malformed corr_id (%d bytes)", what, r.seq, len(r.corr))
	case e.Attempts < 0:
		return e, fmt.Errorf("%s %d has a negative attempt count (%d)", what, r.seq, e.Attempts)
	}
	e.Seq = uint64(r.seq)
	copy(e.ID[:], r.id)
	copy(e.To[:], r.to)
	copy(e.CorrID[:], r.corr)
	if e.Payload == nil {
		e.Payload = []byte{}
	}
	e.Created, e.Expires, e.NextAttempt = fromNanos(r.created), fromNanos(r.expires), fromNanos(r.next)
	return e, nil
}

// checkTime refuses a non-zero t that Unix nanoseconds cannot hold.
func checkTime(op string, t time.Time) error {
	if t.IsZero() {
		return nil
	}
	if t.Before(time.Unix(0, math.MinInt64)) || t.After(time.Unix(0, math.MaxInt64)) {
		return fmt.Errorf("store: outbox: %s: time %s out of range", op, t.UTC().Format(time.RFC3339))
	}
	return nil
}

// nanos is t for a nullable time column: the zero time is NULL.
func nanos(t time.Time) sql.NullInt64 {
	if t.IsZero() {
		return sql.NullInt64{}
	}
	return sql.NullInt64{Int64: t.UnixNano(), Valid: true}
}

func fromNanos(n sql.NullInt64) time.Time {
	if !n.Valid {
		return time.Time{}
	}
	return time.Unix(0, n.Int64)
}

const (
	sqlOutboxAdd = `INSERT INTO outbox (id, recipient, peer, kind, corr_id, payload, created, expires, attempts, next_attempt, last_error)
		VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT (id) DO NOTHING RETURNING seq`
	sqlOutboxDelete    = `DELETE FROM outbox WHERE id = ?`
	sqlOutboxAttempted = `UPDATE outbox SET attempts = ?, next_attempt = ?, last_error = ? WHERE id = ?`
	// INSERT OR REPLACE: a dead letter with the same id is replaced (and
	// moves to the end, since the new row gets a new dl).
	sqlOutboxKill = `INSERT OR REPLACE INTO dead_letters (` + entryCols + `, reason, died_at)
		SELECT ` + entryCols + `, ?, ? FROM outbox WHERE id = ?`
	sqlOutboxReviveSome = `DELETE FROM dead_letters WHERE id = ? RETURNING dl, ` + entryCols
	sqlOutboxReviveAll  = `DELETE FROM dead_letters RETURNING dl, ` + entryCols
	sqlOutboxDrop       = `DELETE FROM dead_letters WHERE id = ?`
	// sqlOutboxPrune deletes the dead letters that died before ?1 and
	// those older than the ?2 newest (?2 < 0: none for their number).
	sqlOutboxPrune = `DELETE FROM dead_letters WHERE died_at < ?1
		OR ?2 >= 0 AND dl <= (SELECT dl FROM dead_letters ORDER BY dl DESC LIMIT 1 OFFSET ?2)
		RETURNING dl, ` + entryCols + `, reason, died_at`
	sqlOutboxBreakerDel = `DELETE FROM breakers WHERE peer = ?`
	sqlOutboxBreakerSet = `INSERT INTO breakers (peer, failures, open_until) VALUES (?, ?, ?)
		ON CONFLICT (peer) DO UPDATE SET failures = excluded.failures, open_until = excluded.open_until`
)

// outboxTx runs outbox ops inside a committer transaction. Statements are
// the store's prepared ones (Store.prepared), bound to the transaction
// once per batch.
type outboxTx struct {
	ctx   context.Context
	tx    *sql.Tx
	s     *Store
	stmts map[string]*sql.Stmt
}

func (t *outboxTx) stmt(q string) (*sql.Stmt, error) {
	if st := t.stmts[q]; st != nil {
		return st, nil
	}
	st, err := t.s.txStmt(t.ctx, t.tx, q)
	if err != nil {
		return nil, err
	}
	if t.stmts == nil {
		t.stmts = make(map[string]*sql.Stmt)
	}
	t.stmts[q] = st
	return st, nil
}

func (t *outboxTx) exec(q string, args ...any) (int64, error) {
	st, err := t.stmt(q)
	if err != nil {
		return 0, err
	}
	r, err := st.ExecContext(t.ctx, args...)
	if err != nil {
		return 0, err
	}
	return r.RowsAffected()
}

// run executes req, setting res. A returned error is the transaction's
// (the batch fails); errors of req alone, such as an unknown id, go into
// res.err and leave the database as it was.
func (t *outboxTx) run(req *request, res *result) error {
	ob := req.ob
	switch req.op {
	case opOutboxAdd:
		seq, ok, err := t.insert(ob.entry)
		if err != nil {
			return err
		}
		if !ok {
			res.err = fmt.Errorf("store: outbox: add %s: %w", ob.entry.ID, outbox.ErrQueued)
			return nil
		}
		res.seq = seq
	case opOutboxDelivered:
		for _, id := range ob.ids {
			if _, err := t.exec(sqlOutboxDelete, id[:]); err != nil {
				return err
			}
		}
	case opOutboxAttempted:
		if _, err := t.exec(sqlOutboxAttempted, ob.n, nanos(ob.at), ob.text, ob.id[:]); err != nil {
			return err
		}
	case opOutboxKill:
		n, err := t.exec(sqlOutboxKill, ob.text, nanos(ob.at), ob.id[:])
		if err != nil {
			return err
		}
		if n == 0 {
			res.err = fmt.Errorf("store: outbox: kill %s: %w", ob.id, outbox.ErrNotFound)
			return nil
		}
		if _, err := t.exec(sqlOutboxDelete, ob.id[:]); err != nil {
			return err
		}
	case opOutboxRevive:
		revd, err := t.revive(ob.ids)
		if err != nil {
			return err
		}
		res.revd = revd
	case opOutboxDrop:
		for _, id := range ob.ids {
			n, err := t.exec(sqlOutboxDrop, id[:])
			if err != nil {
				return err
			}
			res.n += int(n)
		}
	case opOutboxSaveBreaker:
		b := ob.breaker
		var err error
		if b.Failures == 0 && b.OpenUntil.IsZero() {
			_, err = t.exec(sqlOutboxBreakerDel, b.Peer[:])
		} else {
			_, err = t.exec(sqlOutboxBreakerSet, b.Peer[:], b.Failures, nanos(b.OpenUntil))
		}
		return err
	case opOutboxPrune:
		dead, err := t.prune(ob.n, ob.at)
		if err != nil {
			return err
		}
		res.dead = dead
	case opOutboxSync: // nothing: answering it means everything before it committed
	default:
		panic(fmt.Sprintf("bug: store: unknown outbox op %d", req.op))
	}
	return nil
}

// insert adds e to the outbox, reporting ok=false (and storing nothing) if
// its id is there already.
func (t *outboxTx) insert(e outbox.Entry) (seq uint64, ok bool, err error) {
	st, err := t.stmt(sqlOutboxAdd)
	if err != nil {
		return 0, false, err
	}
	payload := e.Payload
	if payload == nil {
		payload = []byte{} // NOT NULL: store an empty blob
	}
	var s int64
	switch err := st.QueryRowContext(t.ctx, e.ID[:], e.To[:], e.Peer, e.Kind, e.CorrID[:], payload,
		nanos(e.Created), nanos(e.Expires), e.Attempts, nanos(e.NextAttempt), e.LastError).Scan(&s); err {
	case nil:
		return uint64(s), true, nil
	case sql.ErrNoRows:
		return 0, false, nil
	default:
		return 0, false, err
	}
}

// prune runs sqlOutboxPrune and returns the deleted rows in kill order.
func (t *outboxTx) prune(max int, before time.Time) ([]outbox.DeadLetter, error) {
	st, err := t.stmt(sqlOutboxPrune)
	if err != nil {
		return nil, err
	}
	rows, err := st.QueryContext(t.ctx, nanos(before), max)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	type dead struct {
		dl int64
		d  outbox.DeadLetter
	}
	var found []dead
	for rows.Next() {
		var (
			d    dead
			r    entryRow
			died sql.NullInt64
		)
		if err := rows.Scan(append([]any{&d.dl}, append(r.dest(), &d.d.Reason, &died)...)...); err != nil {
			return nil, err
		}
		// A malformed row is deleted all the same; it is reported as
		// well as it reads.
		d.d.Entry, _ = r.entry("dead letter")
		d.d.DiedAt = fromNanos(died)
		found = append(found, d)
	}
	if err := rows.Err(); err != nil {
		return nil, err
	}
	slices.SortFunc(found, func(a, b dead) int { return cmp.Compare(a.dl, b.dl) })
	out := make([]outbox.DeadLetter, len(found))
	for i, d := range found {
		out[i] = d.d
	}
	return out, nil
}

// revive removes the dead letters with the given ids (nil: all) and adds
// them to the outbox in kill order with their retry state cleared.
func (t *outboxTx) revive(ids []identity.UUID) ([]outbox.Entry, error) {
	type dead struct {
		dl int64
		e  outbox.Entry
	}
	var found []dead
	take := func(q string, args ...any) error {
		st, err := t.stmt(q)
		if err != nil {
			return err
		}
		rows, err := st.QueryContext(t.ctx, args...)
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			var (
				d dead
				r entryRow
			)
			if err := rows.Scan(append([]any{&d.dl}, r.dest()...)...); err != nil {
				return err
			}
			if d.e, err = r.entry("dead letter"); err != nil {
				return err
			}
			found = append(found, d)
		}
		return rows.Err()
	}
	if ids == nil {
		if err := take(sqlOutboxReviveAll); err != nil {
			return nil, fmt.Errorf("revive: %w", err)
		}
	} else {
		for _, id := range ids {
			if err := take(sqlOutboxReviveSome, id[:]); err != nil {
				return nil, fmt.Errorf("revive: %w", err)
			}
		}
	}
	slices.SortFunc(found, func(a, b dead) int { return cmp.Compare(a.dl, b.dl) })
	var out []outbox.Entry
	for _, d := range found {
		e := d.e
		e.Attempts, e.NextAttempt, e.LastError, e.Expires = 0, time.Time{}, "", time.Time{}
		seq, ok, err := t.insert(e)
		if err != nil {
			return nil, err
		}
		if !ok {
			continue // queued again meanwhile: the dead letter is just removed
		}
		e.Seq = seq
		out = append(out, e)
	}
	return out, nil
}
