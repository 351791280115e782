package store

import (
	"context"
	"database/sql"
	"fmt"
	"strings"
	"time"

	"github.com/meerkatd/meerkatd/identity"
)

// Request states of a [SentRequest].
const (
	RequestOpen      = "open"      // no final response yet, no deadline passed, not cancelled
	RequestAnswered  = "answered"  // a final response (completed, failed) arrived while open
	RequestTimedOut  = "timed_out" // its deadline passed with no final response
	RequestCancelled = "cancelled" // this node cancelled it
)

// SentRequest is one request this node sent, as the request lifecycle
// tracks it (tables sent_requests). Times are zero when absent.
type SentRequest struct {
	ID        string // the request id (lower-case UUID text)
	Recipient identity.PeerID
	Peer      string // the recipient's trust-list name when sent
	Intent    string
	Created   time.Time
	Deadline  time.Time // zero: none
	State     string    // a Request… state
	Updated   time.Time // when State last changed
	Note      string    // cancelled: the note given with the cancel
	// ResponseID and FinalStatus name the first final response that
	// arrived, whatever the state was then ("" if none yet).
	ResponseID  string
	FinalStatus string
}

// HeldCancel is a cancellation a peer sent for a request this node holds
// from it (table held_cancels).
type HeldCancel struct {
	Sender identity.PeerID
	ID     string // the request id (lower-case UUID text)
	At     time.Time
	Reason string // cancelled or deadline
	Note   string
}

// SentRequestQuery selects sent requests, newest first.
type SentRequestQuery struct {
	States []string         // only these states (empty: all)
	Peer   *identity.PeerID // only to this peer (nil: all)
	Before time.Time        // only created before this (zero: no bound), for paging
	Limit  int              // at most this many (0: 100)
}

const (
	sqlReqPut = `INSERT INTO sent_requests (id, recipient, peer, intent, created, deadline, state, updated, note, response_id, final_status)
		VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT (id) DO NOTHING`
	sqlReqCount = `SELECT count(*) FROM sent_requests`
	// The oldest closed request goes first; an open one only if none is
	// closed.
	sqlReqTrim = `DELETE FROM sent_requests WHERE id IN (SELECT id FROM sent_requests
		ORDER BY state = 'open', created LIMIT ?)`
	sqlReqMove = `UPDATE sent_requests SET state = ?, updated = ?, note = ? WHERE id = ? AND state = ?`
	sqlReqDrop = `DELETE FROM sent_requests WHERE id = ? AND state = ?`
	sqlReqResp = `UPDATE sent_requests SET response_id = ?, final_status = ? WHERE id = ? AND response_id = ''`
	sqlReqCols = `id, recipient, peer, intent, created, deadline, state, updated, note, response_id, final_status`
	sqlReqGet  = `SELECT ` + sqlReqCols + ` FROM sent_requests WHERE id = ?`
	sqlReqDue  = `SELECT ` + sqlReqCols + ` FROM sent_requests WHERE state = 'open' AND deadline IS NOT NULL`

	sqlCancelPut = `INSERT INTO held_cancels (sender, id, at, reason, note) VALUES (?, ?, ?, ?, ?)
		ON CONFLICT (sender, id) DO NOTHING`
	sqlCancelCount = `SELECT count(*) FROM held_cancels`
	sqlCancelTrim  = `DELETE FROM held_cancels WHERE (sender, id) IN (SELECT sender, id FROM held_cancels ORDER BY at LIMIT ?)`
	sqlCancelGet   = `SELECT sender, id, at, reason, note FROM held_cancels WHERE sender = ? AND id = ?`

	sqlReqPrune    = `DELETE FROM sent_requests WHERE state <> 'open' AND updated < ?`
	sqlCancelPrune = `DELETE FROM held_cancels WHERE at < ?`
)

// runRequests runs fn in the committer's next batch and returns its
// result: it returns once committed.
func (s *Store) runRequests(fn func(t *outboxTx, res *result) error) result {
	return s.do(context.Background(), &request{op: opRequests, rq: fn})
}

// count runs a count query in t.
func (t *outboxTx) count(q string) (int, error) {
	st, err := t.stmt(q)
	if err != nil {
		return 0, err
	}
	var n int
	err = st.QueryRowContext(t.ctx).Scan(&n)
	return n, err
}

// PutSentRequest records a request sent, keeping at most max rows (the
// oldest closed ones go first, then the oldest open ones). A request id
// recorded before is left as it is.
func (s *Store) PutSentRequest(r SentRequest, max int) error {
	return s.runRequests(func(t *outboxTx, _ *result) error {
		if _, err := t.exec(sqlReqPut, r.ID, r.Recipient[:], r.Peer, r.Intent, r.Created.UnixNano(), nanos(r.Deadline),
			r.State, r.Updated.UnixNano(), r.Note, r.ResponseID, r.FinalStatus); err != nil {
			return err
		}
		n, err := t.count(sqlReqCount)
		if err != nil || n <= max {
			return err
		}
		_, err = t.exec(sqlReqTrim, n-max)
		return err
	}).err
}

// MoveSentRequest changes request id's state from from to to, at at,
// with note, and reports whether it was in state from (nothing changes
// otherwise).
func (s *Store) MoveSentRequest(id, from, to string, at time.Time, note string) (bool, error) {
	res := s.runRequests(func(t *outboxTx, res *result) error {
		n, err := t.exec(sqlReqMove, to, at.UnixNano(), note, id, from)
		res.n = int(n)
		return err
	})
	return res.n > 0, res.err
}

// DropSentRequest forgets request id if it is still open: a request
// whose only delivery failed (nothing arrived) is nobody's to answer or
// cancel.
func (s *Store) DropSentRequest(id string) error {
	return s.runRequests(func(t *outboxTx, _ *result) error {
		_, err := t.exec(sqlReqDrop, id, "open")
		return err
	}).err
}

// AnswerSentRequest records a final response arriving for request id:
// the first one's id and status are kept, and an open request becomes
// answered. It reports whether the request was open.
func (s *Store) AnswerSentRequest(id, responseID, status string, at time.Time) (bool, error) {
	res := s.runRequests(func(t *outboxTx, res *result) error {
		if _, err := t.exec(sqlReqResp, responseID, status, id); err != nil {
			return err
		}
		n, err := t.exec(sqlReqMove, RequestAnswered, at.UnixNano(), "", id, RequestOpen)
		res.n = int(n)
		return err
	})
	return res.n > 0, res.err
}

// PutHeldCancel records a cancellation of a request this node holds,
// keeping at most max rows (the oldest go first). It reports whether it
// is new: a cancellation recorded before is kept as it was.
func (s *Store) PutHeldCancel(c HeldCancel, max int) (bool, error) {
	res := s.runRequests(func(t *outboxTx, res *result) error {
		n, err := t.exec(sqlCancelPut, c.Sender[:], c.ID, c.At.UnixNano(), c.Reason, c.Note)
		if err != nil {
			return err
		}
		res.n = int(n)
		total, err := t.count(sqlCancelCount)
		if err != nil || total <= max {
			return err
		}
		_, err = t.exec(sqlCancelTrim, total-max)
		return err
	})
	return res.n > 0, res.err
}

// PruneRequests deletes the sent requests closed before closedBefore and
// the held cancellations recorded before cancelsBefore; it returns how
// many rows it deleted.
func (s *Store) PruneRequests(closedBefore, cancelsBefore time.Time) (int, error) {
	res := s.runRequests(func(t *outboxTx, res *result) error {
		a, err := t.exec(sqlReqPrune, closedBefore.UnixNano())
		if err != nil {
			return err
		}
		b, err := t.exec(sqlCancelPrune, cancelsBefore.UnixNano())
		res.n = int(a + b)
		return err
	})
	return res.n, res.err
}

// SentRequest returns the sent request with id, if recorded.
func (s *Store) SentRequest(id string) (SentRequest, bool, error) {
	rs, err := s.sentRequests(sqlReqGet, []any{id})
	if err != nil || len(rs) == 0 {
		return SentRequest{}, false, err
	}
	return rs[0], true, nil
}

// OpenDeadlines returns the open sent requests that have a deadline.
func (s *Store) OpenDeadlines() ([]SentRequest, error) {
	return s.sentRequests(sqlReqDue, nil)
}

// SentRequests lists the sent requests q selects, newest first.
func (s *Store) SentRequests(q SentRequestQuery) ([]SentRequest, error) {
	var where []string
	var args []any
	if len(q.States) > 0 {
		where = append(where, "state IN (?"+strings.Repeat(", ?", len(q.States)-1)+")")
		for _, st := range q.States {
			args = append(args, st)
		}
	}
	if q.Peer != nil {
		where = append(where, "recipient = ?")
		args = append(args, q.Peer[:])
	}
	if !q.Before.IsZero() {
		where = append(where, "created < ?")
		args = append(args, q.Before.UnixNano())
	}
	query := `SELECT ` + sqlReqCols + ` FROM sent_requests`
	if len(where) > 0 {
		query += " WHERE " + strings.Join(where, " AND ")
	}
	limit := q.Limit
	if limit <= 0 {
		limit = 100
	}
	query += " ORDER BY created DESC, id LIMIT ?"
	args = append(args, limit)
	return s.sentRequests(query, args)
}

func (s *Store) sentRequests(query string, args []any) ([]SentRequest, error) {
	var out []SentRequest
	err := s.readArgs("store: sent requests", query, args, func(rows *sql.Rows) error {
		var r SentRequest
		var key []byte
		var created, updated int64
		var deadline sql.NullInt64
		if err := rows.Scan(&r.ID, &key, &r.Peer, &r.Intent, &created, &deadline, &r.State, &updated, &r.Note, &r.ResponseID, &r.FinalStatus); err != nil {
			return err
		}
		if len(key) != len(r.Recipient) {
			return fmt.Errorf("row %s: recipient key of %d bytes", r.ID, len(key))
		}
		copy(r.Recipient[:], key)
		r.Created, r.Updated, r.Deadline = time.Unix(0, created), time.Unix(0, updated), fromNanos(deadline)
		out = append(out, r)
		return nil
	})
	return out, err
}

// HeldCancel returns the cancellation sender sent for request id, if
// recorded.
func (s *Store) HeldCancel(sender identity.PeerID, id string) (HeldCancel, bool, error) {
	var out []HeldCancel
	err := s.readArgs("store: held cancels", sqlCancelGet, []any{sender[:], id}, func(rows *sql.Rows) error {
		var c HeldCancel
		var key []byte
		var at int64
		if err := rows.Scan(&key, &c.ID, &at, &c.Reason, &c.Note); err != nil {
			return err
		}
		if len(key) != len(c.Sender) {
			return fmt.Errorf("row %s: sender key of %d bytes", c.ID, len(key))
		}
		copy(c.Sender[:], key)
		c.At = time.Unix(0, at)
		out = append(out, c)
		return nil
	})
	if err != nil || len(out) == 0 {
		return HeldCancel{}, false, err
	}
	return out[0], true, nil
}
