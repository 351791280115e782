package node

import (
	"errors"
	"log/slog"
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
	// meup, set on serving nodes, runs meup items through the space
	// engine: refused ones and presence are acknowledged without being
	// stored; undo takes back the engine's record if storing fails.
	meup func(comms.Item) (deliver bool, undo func(), err error)
	// onResponse, if set, is told of every response admitted (the
	// node's send record: sent.go).
	onResponse func(comms.Item)
	// task, set on serving nodes, records a received item's task id and
	// completions (broadcast and tasks slice).
	task func(comms.Item)
	// intercept, if set, takes items the node handles itself before the
	// inbox (card.go): a taken item is admitted (acknowledged) without
	// being stored or recorded.
	intercept func(comms.Item) bool
	// lc, set on serving nodes, takes the meerkat.cancel requests (the
	// node answers them), the answers to its own, and learns of final
	// responses.
	lc *lifecycle
	// seen, set on serving nodes, is told of every item a peer sent
	// before it is admitted (the loop guard's receipts).
	seen func(comms.Item)

	mu       sync.Mutex
	requests map[identity.UUID]*trackedRequest
	order    []identity.UUID
}

type trackedRequest struct {
	from     identity.PeerID
	answered bool // a final (completed or failed) response was sent
	// restored: found in an inbox kept from before this process started
	// (a daemon's restart, a command run without one). A final answer
	// given before then is known only to the send record, which the
	// first answer here asks (Node.answeredBefore).
	restored bool
}

func newRecordingInbox(mail mailStore) *recordingInbox {
	return &recordingInbox{mail: mail, requests: map[identity.UUID]*trackedRequest{}}
}

// Push admits it. A request is recorded first: once admitted it can be
// read (the inbox wakes its readers as it stores it), and a reader that
// answers at once must find it recorded. A request whose admission then
// fails stays recorded; it was never shown, so nobody answers it.
func (ri *recordingInbox) Push(it comms.Item) error {
	if ri.intercept != nil && ri.intercept(it) {
		return nil
	}
	if isMEUP(it) {
		deliver, undo, err := ri.admitMEUP(it)
		if !deliver || err != nil {
			return err
		}
		if err := ri.mail.Push(it); err != nil {
			if !errors.Is(err, comms.ErrDuplicate) {
				undo()
			}
			return err
		}
		return nil
	}
	if ri.lc != nil {
		if took, err := ri.lc.handle(it); took {
			return err
		}
		if ri.lc.consumes(it) {
			return nil
		}
	}
	ri.track(it)
	ri.see(it)
	if ri.task != nil {
		ri.task(it)
	}
	if err := ri.mail.Push(it); err != nil {
		return err
	}
	ri.sawResponse(it)
	if ri.lc != nil {
		ri.lc.answered(it)
	}
	return nil
}

// errNoSpaces refuses meup envelopes on a node that runs no spaces (not
// acknowledged: the sender retries when the daemon is up).
var errNoSpaces = errors.New("this node runs no MEUP spaces")

func isMEUP(it comms.Item) bool {
	return it.Type == comms.ItemExternal && it.Envelope.Kind.Type() == wire.TypeMEUP
}

// admitMEUP asks the space engine about a meup item.
func (ri *recordingInbox) admitMEUP(it comms.Item) (deliver bool, undo func(), err error) {
	if ri.meup == nil {
		return false, nil, errNoSpaces
	}
	return ri.meup(it)
}

// undoAdmission takes back the space engine's record of a meup item
// whose admission failed.
type undoAdmission struct {
	comms.Admission
	undo func()
}

func (u undoAdmission) Wait() error {
	err := u.Admission.Wait()
	if err != nil && !errors.Is(err, comms.ErrDuplicate) {
		u.undo()
	}
	return err
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
	if ri.intercept != nil && ri.intercept(it) {
		return admitted
	}
	if isMEUP(it) {
		deliver, undo, err := ri.admitMEUP(it)
		if !deliver || err != nil {
			return admittedNow(err)
		}
		return undoAdmission{a.PushAsync(it), undo}
	}
	if ri.lc != nil {
		if took, err := ri.lc.handle(it); took {
			return admittedNow(err)
		}
		if it.Envelope.Kind.Type() == wire.TypeResponse {
			return admittedNow(ri.Push(it)) // responses are recorded once stored
		}
	}
	ri.track(it)
	ri.see(it)
	if ri.task != nil {
		ri.task(it)
	}
	return ri.seeResponse(it, a.PushAsync(it))
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

// see tells ri.seen of an item before its admission: like track, first,
// so that an agent answering at once finds it counted.
func (ri *recordingInbox) see(it comms.Item) {
	if ri.seen != nil {
		ri.seen(it)
	}
}

// track records it if it is a request, received now.
func (ri *recordingInbox) track(it comms.Item) {
	if it.Type == comms.ItemExternal && it.Envelope.Kind.Type() == wire.TypeRequest {
		ri.addRequest(it.Envelope.ID, it.Envelope.From, false)
	}
}

// addRequest records request id from peer from; restored: found in a
// durable inbox kept from before this process started.
func (ri *recordingInbox) addRequest(id identity.UUID, from identity.PeerID, restored bool) {
	ri.mu.Lock()
	defer ri.mu.Unlock()
	if _, ok := ri.requests[id]; ok {
		return
	}
	if len(ri.order) >= maxTrackedRequests {
		delete(ri.requests, ri.order[0])
		ri.order = ri.order[1:]
	}
	ri.requests[id] = &trackedRequest{from: from, restored: restored}
	ri.order = append(ri.order, id)
}

// trackStoredRequests records the requests a durable inbox holds from
// before this process started (a memory inbox holds none). It reads them
// by the items' columns only: a restart with many large requests waiting
// reads none of their bytes and decodes none of them (a request's params
// can decode into a tree twenty times its size).
func (ri *recordingInbox) trackStoredRequests(mail mailStore, log *slog.Logger) {
	d, ok := mail.(*durableMail)
	if !ok {
		return
	}
	for after := uint64(0); ; {
		recs, err := d.st.ListKind(wire.TypeRequest, after, listPage)
		if err != nil {
			log.Error("inbox store: cannot list the requests received", "err", err)
			return
		}
		for _, r := range recs {
			ri.addRequest(r.ID, r.Sender, true)
			after = r.Seq
		}
		if len(recs) < listPage {
			return
		}
	}
}

// checkAnswer reports whether request id from peer may be answered now.
// For a final answer it also reserves the request (marks it answered), so
// two concurrent final answers cannot both pass; call unreserve if the
// answer then fails. restored says the send record must be asked too
// (trackedRequest.restored); settle records its answer.
func (ri *recordingInbox) checkAnswer(id identity.UUID, peer identity.PeerID, final bool) (restored bool, err error) {
	ri.mu.Lock()
	defer ri.mu.Unlock()
	r, ok := ri.requests[id]
	switch {
	case !ok || r.from != peer:
		return false, errorf(CodeUnknownRequest, "no request %s from this peer is open here: none was received, or it was acknowledged before the node last started (answer a request before acknowledging it)", id)
	case r.answered:
		return false, errorf(CodeAlreadyAnswered, "request %s already has a final response", id)
	}
	if final {
		r.answered = true
	}
	return r.restored, nil
}

// settle records what the send record said of a restored request: a
// final answer given before (answered), or none, after which this
// process's own marks know all.
func (ri *recordingInbox) settle(id identity.UUID, answered bool) {
	ri.mu.Lock()
	if r, ok := ri.requests[id]; ok {
		r.restored = false
		r.answered = r.answered || answered
	}
	ri.mu.Unlock()
}

// holds reports whether request id was received from peer (and is
// still remembered).
func (ri *recordingInbox) holds(id identity.UUID, peer identity.PeerID) bool {
	ri.mu.Lock()
	defer ri.mu.Unlock()
	r, ok := ri.requests[id]
	return ok && r.from == peer
}

// unreserve undoes checkAnswer's reservation after a failed final answer.
func (ri *recordingInbox) unreserve(id identity.UUID) {
	ri.mu.Lock()
	if r, ok := ri.requests[id]; ok {
		r.answered = false
	}
	ri.mu.Unlock()
}
