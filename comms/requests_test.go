package comms

import (
	"context"
	"testing"
	"time"

	"github.com/meerkatd/meerkatd/comms/wire"
	"github.com/meerkatd/meerkatd/identity"
)

// Responses held for a request nobody waits on yet: more progress than
// the buffer holds is dropped (the inbox has it), but the final answer
// always finds a place, so a wait that starts late still ends on it.
func TestFinalResponseKeptWhenBufferFull(t *testing.T) {
	var q requests
	q.init()
	peer := newKP(t).ID()
	id := identity.NewUUID()
	q.open(id, peer)
	resp := func(status wire.Status) wire.Envelope {
		return wire.Envelope{From: peer, ID: identity.NewUUID(), Kind: wire.Response(id, status, wire.Null())}
	}
	for range 10 {
		q.deliver(resp(wire.StatusAccepted))
	}
	q.deliver(resp(wire.StatusCompleted))
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	for {
		e, err := q.await(ctx, id)
		if err != nil {
			t.Fatalf("the final response was lost: %v", err)
		}
		if e.Kind.Status() == wire.StatusCompleted {
			return
		}
	}
}
