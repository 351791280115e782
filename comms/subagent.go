package comms

import (
	"context"
	"errors"
	"time"

	"github.com/meerkatd/meerkatd/comms/wire"
	"github.com/meerkatd/meerkatd/identity"
	"github.com/meerkatd/meerkatd/inbox"
)

// SubagentFunc is the work of a subagent. It gets no network access from
// the Router, only ctx, which ends when the Router closes or the Spawn
// context ends.
type SubagentFunc func(ctx context.Context) (result wire.Value, summary string, err error)

// Spawn runs f in its own goroutine, owned by the Router. When f returns,
// its result enters the inbox as an [ItemSubagentResult] with the returned
// id; if f fails, Result is {"error": message} and Summary says it failed.
// A full inbox delays the result (retrying) rather than dropping it.
func (r *Router) Spawn(ctx context.Context, f SubagentFunc) (identity.UUID, error) {
	id := identity.NewUUID()
	started := r.goOwned(func() {
		ctx, cancel := context.WithCancel(ctx)
		defer cancel()
		stop := context.AfterFunc(r.ctx, cancel)
		defer stop()
		result, summary, err := f(ctx)
		if err != nil {
			m, _ := wire.Map(wire.Member{Key: "error", Value: wire.Text(err.Error())})
			result, summary = m, "failed: "+err.Error()
		}
		item := Item{Type: ItemSubagentResult, SubagentID: id, Result: result, Summary: summary}
		for delay := 10 * time.Millisecond; ; delay = min(2*delay, time.Second) {
			item.Received = time.Now()
			err := r.inbox.Push(item)
			if err == nil {
				return
			}
			if errors.Is(err, inbox.ErrClosed) {
				r.log.Warn("subagent result not stored: inbox closed", "subagent", id.String())
				return
			}
			select {
			case <-time.After(delay):
			case <-r.ctx.Done():
				r.log.Warn("subagent result not stored: node stopping", "subagent", id.String())
				return
			}
		}
	})
	if !started {
		return identity.UUID{}, ErrClosed
	}
	return id, nil
}
