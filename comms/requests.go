package comms

import (
	"context"
	"sync"

	"github.com/meerkatd/meerkatd/comms/wire"
	"github.com/meerkatd/meerkatd/identity"
)

// maxOutstanding bounds the requests whose responses are held for
// AwaitResponse; the oldest is forgotten first. Responses also go to the
// inbox, so forgetting loses nothing.
const maxOutstanding = 4096

// requests correlates responses with the requests this node sent.
type requests struct {
	mu    sync.Mutex
	byID  map[identity.UUID]*outstanding
	order []identity.UUID // oldest first, for eviction
	done  chan struct{}   // closed by closeAll
}

type outstanding struct {
	peer      identity.PeerID
	responses chan wire.Envelope // buffered; a full buffer drops (the inbox has it)
}

func (q *requests) init() {
	q.byID = map[identity.UUID]*outstanding{}
	q.done = make(chan struct{})
}

// open starts correlating responses to request id, sent to peer. A
// request sealed again under its id (a retry of one call, callid.go)
// keeps its correlation and the responses held for it.
func (q *requests) open(id identity.UUID, peer identity.PeerID) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if o := q.byID[id]; o != nil && o.peer == peer {
		return
	}
	if len(q.order) >= maxOutstanding {
		delete(q.byID, q.order[0])
		q.order = q.order[1:]
	}
	q.byID[id] = &outstanding{peer: peer, responses: make(chan wire.Envelope, 4)}
	q.order = append(q.order, id)
}

func (q *requests) forget(id identity.UUID) {
	q.mu.Lock()
	defer q.mu.Unlock()
	delete(q.byID, id)
	for i, o := range q.order {
		if o == id {
			q.order = append(q.order[:i], q.order[i+1:]...)
			break
		}
	}
}

// peer returns the peer request id was sent to, if its responses are
// still correlated (not answered finally, not forgotten).
func (q *requests) peer(id identity.UUID) (identity.PeerID, bool) {
	q.mu.Lock()
	defer q.mu.Unlock()
	o := q.byID[id]
	if o == nil {
		return identity.PeerID{}, false
	}
	return o.peer, true
}

// deliver hands a response to its request's waiter, if the request is ours
// and the response comes from the peer we asked.
func (q *requests) deliver(e wire.Envelope) {
	id, ok := e.Kind.InReplyTo()
	if !ok {
		return
	}
	// Under q.mu: every send on a request's channel is, so a final
	// answer that makes room below keeps it.
	q.mu.Lock()
	defer q.mu.Unlock()
	o := q.byID[id]
	if o == nil || o.peer != e.From {
		return
	}
	select {
	case o.responses <- e:
		return
	default:
	}
	// Full of progress (accepted) nobody has taken yet: a final answer
	// takes the place of the oldest, so that a wait still ends on it.
	if s := e.Kind.Status(); s != wire.StatusCompleted && s != wire.StatusFailed {
		return
	}
	select {
	case <-o.responses:
	default:
	}
	o.responses <- e // room was made, and no other send can take it
}

func (q *requests) await(ctx context.Context, id identity.UUID) (wire.Envelope, error) {
	q.mu.Lock()
	o := q.byID[id]
	q.mu.Unlock()
	if o == nil {
		return wire.Envelope{}, ErrUnknownRequest
	}
	select {
	case e := <-o.responses:
		if s := e.Kind.Status(); s == wire.StatusCompleted || s == wire.StatusFailed {
			q.forget(id)
		}
		return e, nil
	case <-ctx.Done():
		return wire.Envelope{}, ctx.Err()
	case <-q.done:
		return wire.Envelope{}, ErrClosed
	}
}

func (q *requests) closeAll() {
	q.mu.Lock()
	defer q.mu.Unlock()
	select {
	case <-q.done:
	default:
		close(q.done)
	}
}
