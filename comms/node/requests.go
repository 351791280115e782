package node

import (
	"sync"

	"github.com/meerkatd/meerkatd/comms"
	"github.com/meerkatd/meerkatd/comms/wire"
	"github.com/meerkatd/meerkatd/identity"
)

// maxTrackedRequests bounds the requests remembered for SendResponse
// checks; the oldest is forgotten first.
const maxTrackedRequests = 1 << 16

// recordingInbox is the node's Admitter: the mailbox, plus a record of the
// requests received, so that answers to unknown or already answered
// requests are refused with a clear error.
type recordingInbox struct {
	mail mailStore

	mu       sync.Mutex
	requests map[identity.UUID]*trackedRequest
	order    []identity.UUID
}

type trackedRequest struct {
	from     identity.PeerID
	answered bool // a final (completed or failed) response was sent
}

func newRecordingInbox(mail mailStore) *recordingInbox {
	return &recordingInbox{mail: mail, requests: map[identity.UUID]*trackedRequest{}}
}

// Push admits it. A request is recorded first: once admitted it can be
// read (the inbox wakes its readers as it stores it), and a reader that
// answers at once must find it recorded. A request whose admission then
// fails stays recorded; it was never shown, so nobody answers it.
func (ri *recordingInbox) Push(it comms.Item) error {
	ri.track(it)
	return ri.mail.Push(it)
}

// PushAsync admits through the store's group commit when it has one (the
// durable inbox); the memory inbox admits at once. A request is recorded
// first, as in Push: the commit wakes readers before the admission's
// Wait returns.
func (ri *recordingInbox) PushAsync(it comms.Item) comms.Admission {
	a, ok := ri.mail.(interface {
		PushAsync(comms.Item) comms.Admission
	})
	if !ok {
		return admittedNow(ri.Push(it))
	}
	ri.track(it)
	return a.PushAsync(it)
}

// doneAdmission is an admission that already happened.
type doneAdmission struct{ err error }

// admitted is the outcome of every successful admission that already
// happened: one shared value, so the memory inbox allocates nothing per
// envelope for it.
var admitted comms.Admission = doneAdmission{}

// admittedNow returns the admission that already happened with outcome
// err.
func admittedNow(err error) comms.Admission {
	if err == nil {
		return admitted
	}
	return doneAdmission{err}
}

func (d doneAdmission) Ready() bool { return true }
func (d doneAdmission) Wait() error { return d.err }

var _ comms.AsyncAdmitter = (*recordingInbox)(nil)

// track records a received request (also those found in a durable inbox
// at start-up).
func (ri *recordingInbox) track(it comms.Item) {
	if it.Type == comms.ItemExternal && it.Envelope.Kind.Type() == wire.TypeRequest {
		ri.mu.Lock()
		if _, ok := ri.requests[it.Envelope.ID]; !ok {
			if len(ri.order) >= maxTrackedRequests {
				delete(ri.requests, ri.order[0])
				ri.order = ri.order[1:]
			}
			ri.requests[it.Envelope.ID] = &trackedRequest{from: it.Envelope.From}
			ri.order = append(ri.order, it.Envelope.ID)
		}
		ri.mu.Unlock()
	}
}

// checkAnswer reports whether request id from peer may be answered now.
// For a final answer it also reserves the request (marks it answered), so
// two concurrent final answers cannot both pass; call unreserve if the
// answer then fails.
func (ri *recordingInbox) checkAnswer(id identity.UUID, peer identity.PeerID, final bool) error {
	ri.mu.Lock()
	defer ri.mu.Unlock()
	r, ok := ri.requests[id]
	switch {
	case !ok || r.from != peer:
		return errorf(CodeUnknownRequest, "no request %s was received from this peer", id)
	case r.answered:
		return errorf(CodeAlreadyAnswered, "request %s already has a final response", id)
	}
	if final {
		r.answered = true
	}
	return nil
}

// unreserve undoes checkAnswer's reservation after a failed final answer.
func (ri *recordingInbox) unreserve(id identity.UUID) {
	ri.mu.Lock()
	if r, ok := ri.requests[id]; ok {
		r.answered = false
	}
	ri.mu.Unlock()
}
