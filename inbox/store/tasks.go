package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/meerkatd/meerkatd/identity"
)

// Task states.
const (
	TaskOpen      = "open"
	TaskCompleted = "completed"
)

// Task limits: a peer can name any task id, so the table is bounded.
const (
	// MaxTasks bounds the tasks kept. A new task beyond it replaces the
	// completed task updated longest ago, else the open task updated
	// longest ago that only peers brought (this node sent nothing under
	// it); with neither it is refused with [ErrTasksFull]. So peers that
	// name many task ids cannot crowd out the tasks this node started.
	MaxTasks = 10000
	// MaxTaskParticipants bounds the participants of one task; one more
	// is refused with [ErrTasksFull].
	MaxTaskParticipants = 256
	// MaxTaskResult bounds a task's result, in bytes of JSON text.
	MaxTaskResult = 64 << 10
)

// Task errors.
var (
	// ErrTasksFull: the task table or a task's participants are at their
	// limit (MaxTasks, MaxTaskParticipants).
	ErrTasksFull = errors.New("store: tasks: at the limit of tasks or of a task's participants")
	// ErrUnknownTask: no task with that id.
	ErrUnknownTask = errors.New("store: tasks: no such task")
)

// Task is one task as the store keeps it.
type Task struct {
	ID               string
	State            string // TaskOpen or TaskCompleted
	Local            bool   // this node sent under it (not only peers)
	Created, Updated time.Time
	// Participants are the peers this node sent to or received from under
	// the task id, in the order they joined.
	Participants []identity.PeerID
	// Result is the completion's result as JSON text (nil: none).
	Result []byte
	// CompletedBy is who completed it (this node's own key for a local
	// completion); zero while open or when none was given.
	CompletedBy identity.PeerID
	CompletedAt time.Time
}

// Tasks is the durable task table of a [Store] (tables tasks and
// task_participants). Writes go through the Store's committer; reads run
// beside it and see every write that returned before them. It is safe
// for concurrent use; after Close every method returns [ErrClosed].
type Tasks struct{ s *Store }

// Tasks returns the store's task table. It is cheap.
func (s *Store) Tasks() *Tasks { return &Tasks{s: s} }

// taskReq carries the arguments of a task op to the committer.
type taskReq struct {
	id     string
	peer   identity.PeerID // opTaskTouch: participant (zero: none); opTaskComplete: by
	local  bool            // opTaskTouch: this node sends under it
	result []byte          // opTaskComplete
	at     time.Time
}

// Touch creates task id (open) if it does not exist and adds peer to its
// participants (a zero peer adds none); local says this node sends under
// it (a task once local stays so). It reports whether the task is new.
// It returns after the commit.
func (t *Tasks) Touch(id string, peer identity.PeerID, local bool, at time.Time) (created bool, err error) {
	if err := checkTime("task touch", at); err != nil {
		return false, err
	}
	res := t.s.do(context.Background(), &request{op: opTaskTouch, tk: &taskReq{id: id, peer: peer, local: local, at: at}})
	return res.n == 1, res.err
}

// Complete marks task id completed by by with result (JSON text or nil)
// unless it is completed already. It reports whether it changed the
// task; an unknown id is [ErrUnknownTask].
func (t *Tasks) Complete(id string, by identity.PeerID, result []byte, at time.Time) (changed bool, err error) {
	if err := checkTime("task complete", at); err != nil {
		return false, err
	}
	if len(result) > MaxTaskResult {
		return false, fmt.Errorf("store: tasks: a result of %d bytes exceeds %d", len(result), MaxTaskResult)
	}
	res := t.s.do(context.Background(), &request{op: opTaskComplete, tk: &taskReq{id: id, peer: by, result: result, at: at}})
	return res.n == 1, res.err
}

// Get returns task id, and false if there is none.
func (t *Tasks) Get(id string) (Task, bool, error) {
	ts, err := t.query(`WHERE id = ?1`, id, 1)
	if err != nil || len(ts) == 0 {
		return Task{}, false, err
	}
	return ts[0], true, nil
}

// List returns up to limit tasks in state ("": any), the most recently
// updated first.
func (t *Tasks) List(state string, limit int) ([]Task, error) {
	return t.query(`WHERE ?1 = '' OR state = ?1`, state, limit)
}

func (t *Tasks) query(where, arg string, limit int) ([]Task, error) {
	var out []Task
	err := t.s.readArgs("store: tasks: read tasks", `SELECT id, state, local, created, updated, result, completed_by, completed_at
		FROM tasks `+where+` ORDER BY updated DESC, id LIMIT ?2`, []any{arg, limit}, func(rows *sql.Rows) error {
		var (
			k                        Task
			created, updated, doneAt sql.NullInt64
			result                   sql.NullString
			by                       []byte
		)
		if err := rows.Scan(&k.ID, &k.State, &k.Local, &created, &updated, &result, &by, &doneAt); err != nil {
			return err
		}
		if k.State != TaskOpen && k.State != TaskCompleted {
			return fmt.Errorf("task %q: unknown state %q", k.ID, k.State)
		}
		k.Created, k.Updated, k.CompletedAt = fromNanos(created), fromNanos(updated), fromNanos(doneAt)
		if result.Valid {
			k.Result = []byte(result.String)
		}
		if by != nil {
			id, err := identity.PeerIDFromBytes(by)
			if err != nil {
				return fmt.Errorf("task %q: completed_by: %w", k.ID, err)
			}
			k.CompletedBy = id
		}
		out = append(out, k)
		return nil
	})
	if err != nil {
		return nil, err
	}
	for i := range out {
		err := t.s.readArgs("store: tasks: read task_participants", `SELECT peer FROM task_participants WHERE task = ?1 ORDER BY joined`,
			[]any{out[i].ID}, func(rows *sql.Rows) error {
				var b []byte
				if err := rows.Scan(&b); err != nil {
					return err
				}
				id, err := identity.PeerIDFromBytes(b)
				if err != nil {
					return fmt.Errorf("task %q: participant: %w", out[i].ID, err)
				}
				out[i].Participants = append(out[i].Participants, id)
				return nil
			})
		if err != nil {
			return nil, err
		}
	}
	return out, nil
}

const (
	sqlTaskState      = `SELECT state FROM tasks WHERE id = ?`
	sqlTaskCount      = `SELECT count(*) FROM tasks`
	sqlTaskEvict      = `DELETE FROM tasks WHERE id = (SELECT id FROM tasks WHERE state = 'completed' OR local = 0 ORDER BY state = 'open', updated, id LIMIT 1) RETURNING id`
	sqlTaskEvictPeers = `DELETE FROM task_participants WHERE task = ?`
	sqlTaskInsert     = `INSERT INTO tasks (id, state, local, created, updated) VALUES (?, 'open', ?, ?, ?)`
	sqlTaskLocal      = `UPDATE tasks SET local = 1 WHERE id = ? AND local = 0`
	sqlTaskHasPeer    = `SELECT count(*) FROM task_participants WHERE task = ? AND peer = ?`
	sqlTaskPeerCount  = `SELECT count(*) FROM task_participants WHERE task = ?`
	sqlTaskAddPeer    = `INSERT INTO task_participants (task, peer, joined) VALUES (?, ?, ?)`
	sqlTaskUpdated    = `UPDATE tasks SET updated = max(updated, ?) WHERE id = ?`
	sqlTaskComplete   = `UPDATE tasks SET state = 'completed', updated = ?, result = ?, completed_by = ?, completed_at = ? WHERE id = ? AND state = 'open'`
)

// taskTx runs task ops inside a batch's transaction.
type taskTx struct{ *outboxTx }

// one runs a query returning one integer or text column into dst.
func (t taskTx) one(q string, dst any, args ...any) error {
	st, err := t.stmt(q)
	if err != nil {
		return err
	}
	return st.QueryRowContext(t.ctx, args...).Scan(dst)
}

// run executes req, setting res. A returned error is the transaction's;
// errors of req alone go into res.err and change nothing.
func (t taskTx) run(req *request, res *result) error {
	r := req.tk
	switch req.op {
	case opTaskTouch:
		var state string
		switch err := t.one(sqlTaskState, &state, r.id); err {
		case nil:
		case sql.ErrNoRows:
			var n int
			if err := t.one(sqlTaskCount, &n); err != nil {
				return err
			}
			if n >= MaxTasks {
				var evicted string
				switch err := t.one(sqlTaskEvict, &evicted); err {
				case nil:
					if _, err := t.exec(sqlTaskEvictPeers, evicted); err != nil {
						return err
					}
				case sql.ErrNoRows:
					res.err = ErrTasksFull
					return nil
				default:
					return err
				}
			}
			if _, err := t.exec(sqlTaskInsert, r.id, r.local, nanos(r.at), nanos(r.at)); err != nil {
				return err
			}
			res.n = 1
		default:
			return err
		}
		if r.local && res.n == 0 {
			if _, err := t.exec(sqlTaskLocal, r.id); err != nil {
				return err
			}
		}
		if res.n == 0 { // a send or an arrival under it: the task was active
			if _, err := t.exec(sqlTaskUpdated, nanos(r.at), r.id); err != nil {
				return err
			}
		}
		if r.peer.IsZero() {
			return nil
		}
		var has int
		if err := t.one(sqlTaskHasPeer, &has, r.id, r.peer[:]); err != nil {
			return err
		}
		if has > 0 {
			return nil
		}
		var count int
		if err := t.one(sqlTaskPeerCount, &count, r.id); err != nil {
			return err
		}
		if count >= MaxTaskParticipants {
			res.err = ErrTasksFull
			return nil
		}
		_, err := t.exec(sqlTaskAddPeer, r.id, r.peer[:], nanos(r.at)) // updated: set above, or at creation
		return err
	case opTaskComplete:
		var result any
		if r.result != nil {
			result = string(r.result)
		}
		var by any // NULL: completed by nobody named
		if !r.peer.IsZero() {
			by = r.peer[:]
		}
		n, err := t.exec(sqlTaskComplete, nanos(r.at), result, by, nanos(r.at), r.id)
		if err != nil {
			return err
		}
		if n == 1 {
			res.n = 1
			return nil
		}
		var state string
		switch err := t.one(sqlTaskState, &state, r.id); err {
		case nil:
		case sql.ErrNoRows:
			res.err = ErrUnknownTask
		default:
			return err
		}
	}
	return nil
}
