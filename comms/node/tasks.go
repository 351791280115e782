package node

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/meerkatd/meerkatd/comms"
	"github.com/meerkatd/meerkatd/comms/wire"
	"github.com/meerkatd/meerkatd/config"
	"github.com/meerkatd/meerkatd/identity"
	"github.com/meerkatd/meerkatd/inbox/store"
)

// BroadcastAPI is the part of [API] that broadcasts to many peers and
// keeps tasks (docs/agents.md).
type BroadcastAPI interface {
	// Broadcast sends one message to every trusted peer, to a group of
	// them (trust entry meta "groups") or to the peers listed: one signed
	// copy each, reliable unless a.Direct. It returns each copy's outcome.
	Broadcast(ctx context.Context, a BroadcastArgs) (Broadcasted, error)
	// TaskComplete marks a task completed here and tells every
	// participant with a reliable request of intent meerkat.task_complete.
	// Completing a completed task sends nothing and returns it as it is.
	TaskComplete(ctx context.Context, taskID string, result json.RawMessage, opts SendOptions) (TaskCompleted, error)
	// Tasks lists the tasks this node knows, the most recently updated
	// first, a page at a time (TaskList.More, TaskQuery.Cursor).
	Tasks(ctx context.Context, q TaskQuery) (TaskList, error)
	// WaitTask waits up to wait for a task to be completed and returns it;
	// if it is still open then, TimedOut is set. It may be called again
	// at any time (also after a restart, with the SQLite store).
	WaitTask(ctx context.Context, taskID string, wait time.Duration) (TaskWaited, error)
}

// Task limits and names.
const (
	// MaxTaskIDLen bounds a task id in bytes.
	MaxTaskIDLen = 128
	// IntentTaskComplete is the reserved request intent that tells a
	// task's participants it is completed; its params are {"task_id":
	// ID, "result": any JSON}.
	IntentTaskComplete = "meerkat.task_complete"
	// FieldObjectiveID is the signed kind field that carries a task id
	// (the Rust reference's objective_id).
	FieldObjectiveID = "objective_id"
	// MaxTasksListed bounds one Tasks call.
	MaxTasksListed = 1000
	// TaskStateOpen and TaskStateCompleted are a task's states.
	TaskStateOpen      = store.TaskOpen
	TaskStateCompleted = store.TaskCompleted
)

// CodeUnknownTask: no task with that id is known to this node.
const CodeUnknownTask = "unknown_task"

// Task is one task as this node knows it.
type Task struct {
	ID    string `json:"id"`
	State string `json:"state"` // open or completed
	// Participants are the peers this node sent to or received from
	// under the task id.
	Participants []TaskParticipant `json:"participants"`
	Created      time.Time         `json:"created"`
	Updated      time.Time         `json:"updated"`
	// Completed: who completed it ("self" for this node, else the peer's
	// name or key), when, and the result it gave (any JSON value).
	CompletedBy string     `json:"completed_by,omitempty"`
	CompletedAt *time.Time `json:"completed_at,omitempty"`
	Result      any        `json:"result,omitempty"`
}

// TaskParticipant is one participant of a task.
type TaskParticipant struct {
	Peer   string `json:"peer"` // its trust-list name ("" if no longer trusted)
	PubKey string `json:"pubkey"`
}

// TaskQuery selects tasks.
type TaskQuery struct {
	State string `json:"state,omitempty"` // open, completed, "": both
	Limit int    `json:"limit,omitempty"` // 0 or above MaxTasksListed: MaxTasksListed
	// Cursor continues a list: the TaskList.Cursor of the page before
	// ("": from the most recently updated task).
	Cursor string `json:"cursor,omitempty"`
}

// TaskList is one page of tasks. A page holds at most TaskQuery.Limit
// tasks and about MaxBatchBytes of JSON (a task's result may be 64 KiB),
// but at least one task. While More is true, the same query with Cursor
// lists the tasks that follow. Pages follow the MaxTasksListed most
// recently updated tasks; a task updated between two pages moves to the
// front and is not shown again.
type TaskList struct {
	Tasks  []Task `json:"tasks"`
	More   bool   `json:"more"`
	Cursor string `json:"cursor,omitempty"` // set when More
}

// AllTasks reads every page of q through api into one list (the
// command line lists them all; a tool gets pages).
func AllTasks(ctx context.Context, api BroadcastAPI, q TaskQuery) (TaskList, error) {
	all := TaskList{Tasks: []Task{}}
	for {
		tl, err := api.Tasks(ctx, q)
		if err != nil {
			return TaskList{}, err
		}
		all.Tasks = append(all.Tasks, tl.Tasks...)
		if !tl.More || tl.Cursor == "" || tl.Cursor == q.Cursor {
			return all, nil
		}
		q.Cursor = tl.Cursor
	}
}

// TaskCompleted reports a TaskComplete.
type TaskCompleted struct {
	Task Task `json:"task"`
	// Already is true when the task was completed before: nothing was
	// sent.
	Already bool `json:"already,omitempty"`
	// Copies are the meerkat.task_complete requests, one per participant.
	Copies []BroadcastCopy `json:"copies"`
	// Replayed is true when an idempotency key used before returned the
	// first call's result: nothing was sent again.
	Replayed bool `json:"replayed,omitempty"`
}

// TaskWaited is what WaitTask returns.
type TaskWaited struct {
	Task     Task `json:"task"`
	TimedOut bool `json:"timed_out"` // waited, and the task is still open
}

// CheckTaskID reports why id cannot be a task id: empty, longer than
// MaxTaskIDLen bytes, not UTF-8, or holding a character that is not
// printable (spaces are allowed, controls are not).
func CheckTaskID(id string) error {
	switch {
	case id == "":
		return errors.New("a task id must not be empty")
	case len(id) > MaxTaskIDLen:
		return fmt.Errorf("a task id has at most %d bytes (this one has %d)", MaxTaskIDLen, len(id))
	case !utf8.ValidString(id):
		return errors.New("a task id must be UTF-8")
	}
	for _, r := range id {
		if !unicode.IsPrint(r) {
			return fmt.Errorf("a task id holds only printable characters (not %U)", r)
		}
	}
	return nil
}

// checkNewTaskID is CheckTaskID for a task id this node starts a task
// under: it must also not start or end with a space, which nobody would
// see in a listing (a peer's task id is taken as it came).
func checkNewTaskID(id string) error {
	if err := CheckTaskID(id); err != nil {
		return err
	}
	if strings.TrimSpace(id) != id {
		return errors.New("a task id must not start or end with spaces")
	}
	return nil
}

// checkSendTaskID checks a task id a send goes under: a task already
// known here (one a peer started, whatever its id) as it is, a new one as
// checkNewTaskID does.
func checkSendTaskID(tb *tasks, id string) error {
	if err := CheckTaskID(id); err != nil {
		return err
	}
	if _, known, err := tb.st.Get(id); err == nil && known {
		return nil
	}
	return checkNewTaskID(id)
}

// taskIDOf returns the task id a kind carries, if it carries a valid one.
func taskIDOf(k wire.Kind) (string, bool) {
	v, ok := k.Field(FieldObjectiveID)
	if !ok {
		return "", false
	}
	s, ok := v.Text()
	if !ok || CheckTaskID(s) != nil {
		return "", false
	}
	return s, true
}

// tasks is the node's task table with a signal for waiters.
type tasks struct {
	st taskStore

	mu      sync.Mutex
	changed chan struct{} // closed and replaced when a task is completed
}

func newTasks(st taskStore) *tasks { return &tasks{st: st, changed: make(chan struct{})} }

// wait returns a channel closed at the next completion.
func (t *tasks) wait() <-chan struct{} {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.changed
}

func (t *tasks) signal() {
	t.mu.Lock()
	close(t.changed)
	t.changed = make(chan struct{})
	t.mu.Unlock()
}

// complete marks id completed and wakes waiters if it changed.
func (t *tasks) complete(id string, by identity.PeerID, result []byte) (bool, error) {
	changed, err := t.st.Complete(id, by, result, time.Now())
	if changed {
		t.signal()
	}
	return changed, err
}

// errTasksNeedStore: a command without a daemon in a memory-mode home.
var errTasksNeedStore = &Error{Code: CodeNoDaemon, Msg: "tasks need the running daemon or store.mode = \"sqlite\" to be kept"}

// taskBook returns the node's task table: the serving node's, or for a
// command without a daemon the home's database, opened on first use.
func (n *Node) taskBook() (*tasks, error) {
	if n.tasks != nil {
		return n.tasks, nil
	}
	n.obMu.Lock()
	defer n.obMu.Unlock()
	if n.cmdTasks != nil {
		return n.cmdTasks, nil
	}
	db, err := n.homeDBLocked()
	if errors.Is(err, errMemoryHome) {
		return nil, errTasksNeedStore
	}
	if err != nil {
		return nil, Coded(err)
	}
	n.cmdTasks = newTasks(db.Tasks())
	return n.cmdTasks, nil
}

// taskReader is the task table to read: the serving node's, or for a
// command without a daemon the home's database read only (empty while
// the home has no database yet).
func (n *Node) taskReader() (*tasks, error) {
	if n.tasks != nil {
		return n.tasks, nil
	}
	db, err := n.readDB()
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return newTasks(newMemTasks()), nil
	case errors.Is(err, errMemoryHome):
		return nil, errTasksNeedStore
	case err != nil:
		return nil, Coded(err)
	}
	return newTasks(db.Tasks()), nil
}

// openTasks makes the task table of a serving node: in the store of its
// durable inbox, else in memory.
func openTasks(h *Home, mail mailStore) *tasks {
	if d, ok := mail.(*durableMail); ok && h.Config.Store.Mode != config.StoreMemory {
		return newTasks(d.st.Tasks())
	}
	return newTasks(newMemTasks())
}

// taskErr gives store errors their API codes.
func taskErr(err error) error {
	switch {
	case errors.Is(err, store.ErrUnknownTask):
		return &Error{Code: CodeUnknownTask, Msg: UserText(err), Err: err}
	case errors.Is(err, store.ErrTasksFull):
		return &Error{Code: CodeBadArgument, Msg: UserText(err), Err: err}
	}
	return Coded(err)
}

// withTask adds the task id of opts to kind and records peer as a
// participant before the send, so that a fast answer finds it. It
// returns kind unchanged without a task id.
func (n *Node) withTask(kind wire.Kind, peer identity.PeerID, taskID string) (wire.Kind, error) {
	if taskID == "" {
		return kind, nil
	}
	if err := CheckTaskID(taskID); err != nil {
		return kind, errorf(CodeBadArgument, "task_id: %v", err)
	}
	tb, err := n.taskBook()
	if err != nil {
		return kind, err
	}
	if err := checkSendTaskID(tb, taskID); err != nil {
		return kind, errorf(CodeBadArgument, "task_id: %v", err)
	}
	if _, err := tb.st.Touch(taskID, peer, true, time.Now()); err != nil {
		return kind, taskErr(err)
	}
	k, err := kind.With(FieldObjectiveID, wire.Text(taskID))
	if err != nil {
		return kind, Coded(err)
	}
	return k, nil
}

// receivedTask records a received item's task: a meerkat.task_complete
// request from a participant completes the task (a completion from a
// peer that took no part is left to the agent, in the inbox), and the
// sender becomes a participant. The item goes to the inbox either way.
func (n *Node) receivedTask(it comms.Item) {
	if it.Type != comms.ItemExternal || n.tasks == nil {
		return
	}
	e := it.Envelope
	id, ok := taskIDOf(e.Kind)
	if !ok {
		return
	}
	if e.Kind.Type() == wire.TypeRequest && e.Kind.Intent() == IntentTaskComplete {
		n.receivedCompletion(id, e.From, e.Kind.Params())
	}
	if _, err := n.tasks.st.Touch(id, e.From, false, time.Now()); err != nil {
		n.log.Warn("tasks: not recorded", "peer", e.From, "err", err)
	}
}

// receivedCompletion completes task id if from is one of its
// participants.
func (n *Node) receivedCompletion(id string, from identity.PeerID, params wire.Value) {
	t, ok, err := n.tasks.st.Get(id)
	if err != nil {
		n.log.Warn("tasks: read failed", "err", err)
		return
	}
	if !ok || !containsPeer(t.Participants, from) {
		n.log.Info("tasks: a completion from a peer that is no participant of the task; left to the agent", "peer", from)
		return
	}
	var result []byte
	if r, ok := params.Get("result"); ok {
		if b, err := r.MarshalJSON(); err == nil && len(b) <= store.MaxTaskResult {
			result = b
		}
	}
	changed, err := n.tasks.complete(id, from, result)
	if err != nil {
		n.log.Warn("tasks: completion not recorded", "peer", from, "err", err)
		return
	}
	if changed {
		n.relayCompletion(id, from, t.Participants, params)
	}
}

// relayCompletion passes a completion received from one participant on
// to the task's other participants here (reliable sends, queued in the
// background), so that everybody who took part hears of it even if the
// completing peer never dealt with them. A node relays a task's
// completion at most once: only when it turns the task completed.
func (n *Node) relayCompletion(id string, from identity.PeerID, participants []identity.PeerID, params wire.Value) {
	var others []identity.PeerID
	for _, p := range participants {
		if p != from {
			others = append(others, p)
		}
	}
	if len(others) == 0 || n.closing() {
		return
	}
	kind, err := wire.Request(IntentTaskComplete, params).With(FieldObjectiveID, wire.Text(id))
	if err != nil {
		n.log.Warn("tasks: completion not relayed", "err", err)
		return
	}
	n.wg.Add(1)
	go func() {
		defer n.wg.Done()
		n.fanOut(n.ctx, others, func(identity.PeerID) wire.Kind { return kind }, sendSpec{reliable: true, noWait: true})
	}()
}

func containsPeer(ps []identity.PeerID, p identity.PeerID) bool {
	for _, q := range ps {
		if q == p {
			return true
		}
	}
	return false
}

// taskView is a stored task as the API shows it.
func (n *Node) taskView(t store.Task) Task {
	v := Task{ID: t.ID, State: t.State, Created: t.Created.UTC(), Updated: t.Updated.UTC(), Participants: []TaskParticipant{}}
	trusted := n.r.Trust()
	name := func(k identity.PeerID) string {
		if p, ok := trusted.Lookup(k); ok {
			return p.Name
		}
		return ""
	}
	for _, k := range t.Participants {
		v.Participants = append(v.Participants, TaskParticipant{Peer: name(k), PubKey: k.String()})
	}
	if t.State == store.TaskCompleted {
		at := t.CompletedAt.UTC()
		v.CompletedAt = &at
		switch {
		case t.CompletedBy == n.h.Key.ID():
			v.CompletedBy = "self"
		case name(t.CompletedBy) != "":
			v.CompletedBy = name(t.CompletedBy)
		default:
			v.CompletedBy = t.CompletedBy.String()
		}
		if t.Result != nil {
			v.Result = json.RawMessage(t.Result)
		}
	}
	return v
}

// Tasks implements [API].
func (n *Node) Tasks(_ context.Context, q TaskQuery) (TaskList, error) {
	if n.closing() {
		return TaskList{}, Coded(ErrClosed)
	}
	switch q.State {
	case "", TaskStateOpen, TaskStateCompleted:
	default:
		return TaskList{}, errorf(CodeBadArgument, "state %q: want open, completed or nothing", q.State)
	}
	if q.Limit <= 0 || q.Limit > MaxTasksListed {
		q.Limit = MaxTasksListed
	}
	after, err := parseTaskCursor(q.Cursor)
	if err != nil {
		return TaskList{}, err
	}
	tb, err := n.taskReader()
	if err != nil {
		return TaskList{}, err
	}
	// The store lists from the most recently updated task: read as far as
	// the cursor and one task past the page (which tells More), within
	// the MaxTasksListed most recent.
	var ts []store.Task
	start := 0
	for k := min(q.Limit+1, MaxTasksListed); ; {
		if ts, err = tb.st.List(q.State, k); err != nil {
			return TaskList{}, taskErr(err)
		}
		start = 0
		for start < len(ts) && !after.before(ts[start]) {
			start++
		}
		if len(ts) < k || k == MaxTasksListed || len(ts)-start > q.Limit {
			break
		}
		k = min(max(2*k, start+q.Limit+1), MaxTasksListed)
	}
	out := TaskList{Tasks: []Task{}}
	size := 0
	for _, t := range ts[start:] {
		if len(out.Tasks) == q.Limit {
			out.More = true
			break
		}
		v := n.taskView(t)
		b, err := json.Marshal(v)
		if err != nil {
			return TaskList{}, Coded(err)
		}
		if len(out.Tasks) > 0 && size+len(b) > MaxBatchBytes {
			out.More = true
			break
		}
		size += len(b)
		out.Tasks = append(out.Tasks, v)
	}
	if out.More {
		out.Cursor = taskCursorAt(ts[start+len(out.Tasks)-1])
	}
	return out, nil
}

// taskCursor is a place in the list of tasks: after the task updated at
// updated (Unix nanoseconds) with id, in the store's order (the most
// recently updated first, then by id). The zero taskCursor is the start.
type taskCursor struct {
	set     bool
	updated int64
	id      string
}

// taskCursorAt is the cursor just after t, as TaskList.Cursor: the time,
// a slash, the id.
func taskCursorAt(t store.Task) string {
	return strconv.FormatInt(t.Updated.UnixNano(), 10) + "/" + t.ID
}

// parseTaskCursor reads a TaskList.Cursor ("": the start).
func parseTaskCursor(s string) (taskCursor, error) {
	if s == "" {
		return taskCursor{}, nil
	}
	at, id, ok := strings.Cut(s, "/")
	n, err := strconv.ParseInt(at, 10, 64)
	if !ok || err != nil || CheckTaskID(id) != nil {
		return taskCursor{}, errorf(CodeBadArgument, "cursor: %q is not a cursor a task list returned", s)
	}
	return taskCursor{set: true, updated: n, id: id}, nil
}

// before reports whether the cursor comes before t: t is listed after it.
func (c taskCursor) before(t store.Task) bool {
	if !c.set {
		return true
	}
	u := t.Updated.UnixNano()
	return u < c.updated || u == c.updated && t.ID > c.id
}

// getTask returns task id or a CodeUnknownTask error.
func (n *Node) getTask(tb *tasks, id string) (store.Task, error) {
	if err := CheckTaskID(id); err != nil {
		return store.Task{}, errorf(CodeBadArgument, "task_id: %v", err)
	}
	t, ok, err := tb.st.Get(id)
	if err != nil {
		return t, taskErr(err)
	}
	if !ok {
		return t, errorf(CodeUnknownTask, "no task %q is known here: a task starts with a send carrying its task_id", id)
	}
	return t, nil
}

// WaitTask implements [API].
func (n *Node) WaitTask(ctx context.Context, taskID string, wait time.Duration) (TaskWaited, error) {
	if n.closing() {
		return TaskWaited{}, Coded(ErrClosed)
	}
	if wait < 0 {
		return TaskWaited{}, errorf(CodeBadArgument, "wait must not be negative")
	}
	tb, err := n.taskReader()
	if err != nil {
		return TaskWaited{}, err
	}
	if n.mode != ModeServe {
		wait = 0 // no completion arrives without a node serving the home
	}
	var deadline <-chan time.Time
	if wait > 0 {
		t := time.NewTimer(min(wait, MaxWait))
		defer t.Stop()
		deadline = t.C
	}
	for {
		changed := tb.wait()
		t, err := n.getTask(tb, taskID)
		if err != nil {
			return TaskWaited{}, err
		}
		if t.State == store.TaskCompleted {
			return TaskWaited{Task: n.taskView(t)}, nil
		}
		timedOut := func() (TaskWaited, error) { return TaskWaited{Task: n.taskView(t), TimedOut: true}, nil }
		if wait <= 0 {
			return timedOut()
		}
		select {
		case <-changed:
		case <-deadline:
			return timedOut()
		case <-n.stopped:
			return timedOut()
		case <-ctx.Done():
			return TaskWaited{}, ctx.Err()
		}
	}
}

// TaskComplete implements [API].
func (n *Node) TaskComplete(ctx context.Context, taskID string, result json.RawMessage, opts SendOptions) (TaskCompleted, error) {
	if opts.IdempotencyKey == "" {
		return n.taskComplete(ctx, taskID, result, opts)
	}
	key := opts.IdempotencyKey
	opts.IdempotencyKey = ""
	result = compactJSON(result)
	args := struct {
		TaskID string
		Result json.RawMessage
		TTL    time.Duration
	}{taskID, result, opts.TTL}
	t, replayed, err := idempotentResult(n, ctx, key, "task_complete", args, func() (TaskCompleted, bool, error) {
		t, err := n.taskComplete(ctx, taskID, result, opts)
		return t, t.Task.ID != "", err
	})
	t.Replayed = replayed
	return t, err
}

func (n *Node) taskComplete(ctx context.Context, taskID string, result json.RawMessage, opts SendOptions) (TaskCompleted, error) {
	if n.closing() {
		return TaskCompleted{}, Coded(ErrClosed)
	}
	if opts.Wait != 0 || opts.TaskID != "" && opts.TaskID != taskID {
		return TaskCompleted{}, errorf(CodeBadArgument, "task_complete takes no wait and no other task id")
	}
	if opts.TTL < 0 || opts.TTL > MaxTTL {
		return TaskCompleted{}, errorf(CodeBadArgument, "ttl %s: want 0 to %s", opts.TTL, MaxTTL)
	}
	rv, err := jsonValue("result", result)
	if err != nil {
		return TaskCompleted{}, err
	}
	rb, err := rv.MarshalJSON()
	if err != nil {
		return TaskCompleted{}, Coded(err)
	}
	if len(rb) > store.MaxTaskResult {
		return TaskCompleted{}, errorf(CodeBodyTooLarge, "a task result has at most %d bytes of JSON", store.MaxTaskResult)
	}
	tb, err := n.taskBook()
	if err != nil {
		return TaskCompleted{}, err
	}
	t, err := n.getTask(tb, taskID)
	if err != nil {
		return TaskCompleted{}, err
	}
	if t.State == store.TaskCompleted {
		return TaskCompleted{Task: n.taskView(t), Already: true, Copies: []BroadcastCopy{}}, nil
	}
	params, err := wire.Map(wire.Member{Key: "task_id", Value: wire.Text(taskID)}, wire.Member{Key: "result", Value: rv})
	if err != nil {
		return TaskCompleted{}, Coded(err)
	}
	kind, err := wire.Request(IntentTaskComplete, params).With(FieldObjectiveID, wire.Text(taskID))
	if err != nil {
		return TaskCompleted{}, Coded(err)
	}
	changed, err := tb.complete(taskID, n.h.Key.ID(), rb)
	if err != nil {
		return TaskCompleted{}, taskErr(err)
	}
	res := TaskCompleted{Copies: []BroadcastCopy{}}
	if changed {
		spec := sendSpec{reliable: true, ttl: opts.TTL, noWait: opts.NoWait}
		res.Copies = n.fanOut(ctx, t.Participants, func(identity.PeerID) wire.Kind { return kind }, spec)
	} else {
		res.Already = true // completed meanwhile by a participant
	}
	if t, err = n.getTask(tb, taskID); err != nil {
		return TaskCompleted{}, err
	}
	res.Task = n.taskView(t)
	return res, nil
}
