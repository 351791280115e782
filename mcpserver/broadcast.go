package mcpserver

import (
	"context"
	"time"

	"github.com/mark3labs/mcp-go/mcp"

	"github.com/meerkatd/meerkatd/comms/node"
)

// Results of the broadcast and task tools.
type (
	broadcastResult struct {
		node.Broadcasted
		Pending int `json:"pending"`
	}
	taskCompleteResult struct {
		node.TaskCompleted
		Pending int `json:"pending"`
	}
	listTasksResult struct {
		node.TaskList
		Pending int `json:"pending"`
	}
	waitTaskResult struct {
		node.TaskWaited
		Pending int `json:"pending"`
	}
)

// taskArg is the task_id argument of the send tools.
var taskArg = mcp.WithString("task_id", mcp.MinLength(1), mcp.Description("put this send under a task (printable text, at most 128 bytes; a new task's id has no space at either end): the peer sees it as task_id, and becomes one of the task's participants; see list_tasks, wait_task and task_complete"))

func (s *Server) addBroadcastTools() {
	broadcast := mcp.NewTool("broadcast",
		mcp.WithDescription("Send one message to every trusted peer, to a group of them (named in the trust file's meta \"groups\"), or to the peers listed: one signed copy each (a peer named twice gets one), reliable by default. Peers that run meerkatd see it marked as a broadcast (broadcast_id); others get a plain message. Returns each copy's outcome."),
		mcp.WithString("body", mcp.Required(), mcp.Description("the message text")),
		mcp.WithString("group", mcp.Description("only the trusted peers in this group (an unknown group is an error that lists the known ones)")),
		mcp.WithArray("peers", mcp.WithStringItems(), mcp.Description("instead of group: these peers (names, keys or peer UUIDs)")),
		mcp.WithBoolean("reliable", mcp.DefaultBool(true), mcp.Description("true (default): each copy is stored in the outbox and retried until its peer acknowledges it; false: one attempt per peer")),
		mcp.WithNumber("ttl_seconds", mcp.Min(0), mcp.Max(node.MaxTTL.Seconds()), mcp.Description("reliable copies only: give up on a copy not delivered within this many seconds")),
		taskArg,
		idempotencyKeyArg,
		mcp.WithOutputSchema[broadcastResult](),
		mcp.WithToolAnnotation(mcp.ToolAnnotation{Title: "Broadcast", ReadOnlyHint: readOnly(false), DestructiveHint: readOnly(false), IdempotentHint: readOnly(false), OpenWorldHint: readOnly(true)}),
	)
	s.mcp.AddTool(broadcast, s.broadcast)
	complete := mcp.NewTool("task_complete",
		mcp.WithDescription("Mark a task completed and tell each of its participants (the peers you sent to or received from under its task_id) with a reliable request of intent meerkat.task_complete carrying the result. Their nodes mark the task completed, and their wait_task returns. Completing a completed task sends nothing (already: true)."),
		mcp.WithString("task_id", mcp.Required(), mcp.Description("the task")),
		mcp.WithAny("result", mcp.Description("any JSON value: what came of the task (default null)")),
		idempotencyKeyArg,
		mcp.WithOutputSchema[taskCompleteResult](),
		mcp.WithToolAnnotation(mcp.ToolAnnotation{Title: "Complete task", ReadOnlyHint: readOnly(false), DestructiveHint: readOnly(false), IdempotentHint: readOnly(true), OpenWorldHint: readOnly(true)}),
	)
	admitAnyJSON(complete.OutputSchema.Properties, "task", "properties", "result")
	s.mcp.AddTool(complete, s.taskComplete)
	list := mcp.NewTool("list_tasks",
		mcp.WithDescription("Show the tasks this node knows (from sends and arrivals carrying a task_id), the most recently updated first: state (open or completed), participants, and for completed ones who completed it, when, and the result. A list holds at most limit tasks and about 4 MiB of JSON; while more is true, call again with the same arguments and the returned cursor for the tasks that follow."),
		mcp.WithString("state", mcp.Enum(node.TaskStateOpen, node.TaskStateCompleted), mcp.Description("only tasks in this state")),
		mcp.WithInteger("limit", mcp.Min(1), mcp.Max(node.MaxTasksListed), mcp.Description("at most this many (1-1000, default 100)")),
		mcp.WithString("cursor", mcp.Description("the cursor of the previous list (while it said more: true): continue after it")),
		mcp.WithOutputSchema[listTasksResult](),
		mcp.WithToolAnnotation(mcp.ToolAnnotation{Title: "List tasks", ReadOnlyHint: readOnly(true), DestructiveHint: readOnly(false), IdempotentHint: readOnly(true), OpenWorldHint: readOnly(false)}),
	)
	admitAnyJSON(list.OutputSchema.Properties, "tasks", "items", "properties", "result")
	s.mcp.AddTool(list, s.listTasks)
	wait := mcp.NewTool("wait_task",
		mcp.WithDescription("Wait for a task to be completed (by task_complete, here or by a participant). It returns the task once completed, or after wait_ms with timed_out true and state open: call it again whenever you like, also after a restart; only a completion resolves it."),
		mcp.WithString("task_id", mcp.Required(), mcp.Description("the task")),
		mcp.WithInteger("wait_ms", mcp.Min(0), mcp.Max(int(MaxWait/time.Millisecond)), mcp.Description("wait up to this many milliseconds (0-25000, default 0: just look)")),
		mcp.WithOutputSchema[waitTaskResult](),
		mcp.WithToolAnnotation(mcp.ToolAnnotation{Title: "Wait for task", ReadOnlyHint: readOnly(true), DestructiveHint: readOnly(false), IdempotentHint: readOnly(true), OpenWorldHint: readOnly(false)}),
	)
	admitAnyJSON(wait.OutputSchema.Properties, "task", "properties", "result")
	s.mcp.AddTool(wait, s.waitTask)
}

func parseBroadcast(a args) (node.BroadcastArgs, error) {
	var b node.BroadcastArgs
	var err error
	if b.Body, err = a.str("body", true); err != nil {
		return b, err
	}
	if b.Group, err = a.str("group", false); err != nil {
		return b, err
	}
	if b.Peers, err = a.strings("peers"); err != nil {
		return b, err
	}
	// The node reads an empty group or list as "every trusted peer" (and
	// the control socket cannot tell them from absent ones): a client
	// that names no one must not reach everyone.
	if v, ok := a.m["group"]; ok && v != nil && b.Group == "" {
		return b, invalidParams{`argument "group" must not be empty (leave it out to send to every trusted peer)`}
	}
	if v, ok := a.m["peers"]; ok && v != nil && len(b.Peers) == 0 {
		return b, invalidParams{`argument "peers" must not be empty (leave it out to send to every trusted peer)`}
	}
	if b.Group != "" && len(b.Peers) > 0 {
		return b, invalidParams{`give "group" or "peers", not both`}
	}
	opts, err := parseSendOptions(a)
	if err != nil {
		return b, err
	}
	b.Direct = !opts.Reliable
	opts.Reliable = false
	b.SendOptions = opts
	b.TaskID, err = a.optStr("task_id", "none")
	return b, err
}

func parseTaskQuery(a args) (node.TaskQuery, error) {
	var q node.TaskQuery
	var err error
	if q.State, err = a.str("state", false); err != nil {
		return q, err
	}
	if q.State != "" && q.State != node.TaskStateOpen && q.State != node.TaskStateCompleted {
		return q, invalidParams{`argument "state" must be open or completed`}
	}
	limit, ok, err := a.num("limit", 1, node.MaxTasksListed)
	if err != nil {
		return q, err
	}
	q.Limit = 100
	if ok {
		q.Limit = int(limit)
	}
	q.Cursor, err = a.str("cursor", false)
	return q, err
}

func parseWaitTask(a args) (string, time.Duration, error) {
	id, err := a.str("task_id", true)
	if err != nil {
		return "", 0, err
	}
	wait, _, err := a.num("wait_ms", 0, float64(MaxWait/time.Millisecond))
	return id, time.Duration(wait) * time.Millisecond, err
}

func (s *Server) broadcast(ctx context.Context, req mcp.CallToolRequest) (*mcp.CallToolResult, error) {
	b, err := parseBroadcast(args{req.GetArguments()})
	if err != nil {
		return nil, err
	}
	res, err := s.api.Broadcast(ctx, b)
	if err != nil {
		return s.failed(ctx, err)
	}
	return result(broadcastResult{Broadcasted: res, Pending: s.pending(ctx)})
}

// parseTaskComplete reads task_complete's task_id and idempotency_key.
func parseTaskComplete(a args) (id string, opts node.SendOptions, err error) {
	if id, err = a.str("task_id", true); err != nil {
		return
	}
	err = parseIdempotencyKey(a, &opts)
	return
}

func (s *Server) taskComplete(ctx context.Context, req mcp.CallToolRequest) (*mcp.CallToolResult, error) {
	id, opts, err := parseTaskComplete(args{req.GetArguments()})
	if err != nil {
		return nil, err
	}
	res, err := s.api.TaskComplete(ctx, id, rawJSON(req, "result"), opts)
	if err != nil {
		return s.failed(ctx, err)
	}
	return result(taskCompleteResult{TaskCompleted: res, Pending: s.pending(ctx)})
}

func (s *Server) listTasks(ctx context.Context, req mcp.CallToolRequest) (*mcp.CallToolResult, error) {
	q, err := parseTaskQuery(args{req.GetArguments()})
	if err != nil {
		return nil, err
	}
	tl, err := s.api.Tasks(ctx, q)
	if err != nil {
		return s.failed(ctx, err)
	}
	if tl.Tasks == nil {
		tl.Tasks = []node.Task{}
	}
	return result(listTasksResult{TaskList: tl, Pending: s.pending(ctx)})
}

func (s *Server) waitTask(ctx context.Context, req mcp.CallToolRequest) (*mcp.CallToolResult, error) {
	id, wait, err := parseWaitTask(args{req.GetArguments()})
	if err != nil {
		return nil, err
	}
	w, err := waitUnlessInputEnds(s, ctx,
		func(ctx context.Context) (node.TaskWaited, error) { return s.api.WaitTask(ctx, id, wait) },
		func(ctx context.Context) (node.TaskWaited, error) { return s.api.WaitTask(ctx, id, 0) })
	if err != nil {
		return s.failed(ctx, err)
	}
	return result(waitTaskResult{TaskWaited: w, Pending: s.pending(ctx)})
}
