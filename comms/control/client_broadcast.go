package control

import (
	"context"
	"encoding/json"
	"time"

	"github.com/meerkatd/meerkatd/comms/node"
)

// Broadcast implements node.API.
func (c *Client) Broadcast(ctx context.Context, a node.BroadcastArgs) (b node.Broadcasted, err error) {
	err = c.call(ctx, OpBroadcast, a, &b)
	return b, err
}

// TaskComplete implements node.API.
func (c *Client) TaskComplete(ctx context.Context, taskID string, result json.RawMessage, opts node.SendOptions) (t node.TaskCompleted, err error) {
	err = c.call(ctx, OpTaskComplete, TaskCompleteArgs{TaskID: taskID, Result: result, Options: opts}, &t)
	return t, err
}

// Tasks implements node.API.
func (c *Client) Tasks(ctx context.Context, q node.TaskQuery) (tl node.TaskList, err error) {
	err = c.call(ctx, OpTasks, q, &tl)
	return tl, err
}

// WaitTask implements node.API.
func (c *Client) WaitTask(ctx context.Context, taskID string, wait time.Duration) (w node.TaskWaited, err error) {
	err = c.call(ctx, OpWaitTask, WaitTaskArgs{TaskID: taskID, Wait: wait}, &w)
	return w, err
}

// Broadcast implements node.API.
func (s *Session) Broadcast(ctx context.Context, a node.BroadcastArgs) (node.Broadcasted, error) {
	return do(s, ctx, func(api node.API) (node.Broadcasted, error) { return api.Broadcast(ctx, a) })
}

// TaskComplete implements node.API.
func (s *Session) TaskComplete(ctx context.Context, taskID string, result json.RawMessage, opts node.SendOptions) (node.TaskCompleted, error) {
	return do(s, ctx, func(api node.API) (node.TaskCompleted, error) { return api.TaskComplete(ctx, taskID, result, opts) })
}

// Tasks implements node.API.
func (s *Session) Tasks(ctx context.Context, q node.TaskQuery) (node.TaskList, error) {
	return doRead(s, ctx, func(api node.API) (node.TaskList, error) { return api.Tasks(ctx, q) })
}

// WaitTask implements node.API.
func (s *Session) WaitTask(ctx context.Context, taskID string, wait time.Duration) (node.TaskWaited, error) {
	return doRead(s, ctx, func(api node.API) (node.TaskWaited, error) { return api.WaitTask(ctx, taskID, wait) })
}
