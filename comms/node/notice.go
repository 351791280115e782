package node

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/meerkatd/meerkatd/comms"
	"github.com/meerkatd/meerkatd/comms/outbox"
	"github.com/meerkatd/meerkatd/comms/wire"
	"github.com/meerkatd/meerkatd/identity"
	"github.com/meerkatd/meerkatd/inbox"
	"github.com/meerkatd/meerkatd/trust"
)

// ClassesAPI is the part of [API] about local items.
type ClassesAPI interface {
	// Tell adds a user item to this node's inbox: a note from the local
	// person to their agent, which a priority read returns before
	// anything a peer sent. It needs the running node.
	Tell(ctx context.Context, body string) (Told, error)
}

// Told is what Tell returns.
type Told struct {
	ID      string `json:"id"` // the item's envelope id
	Pending int    `json:"pending"`
}

// Notice is what a system item tells the agent: an event the node
// noticed, the peer it concerns (trust-list name) and the envelope or
// request id it is about, where there is one. Text, a sentence for the
// agent, becomes the item's body (Message.Body), so it is not repeated
// in the item's notice. A notice never holds a message body.
type Notice struct {
	Event string `json:"event"`
	Peer  string `json:"peer,omitempty"`
	ID    string `json:"id,omitempty"`
	Text  string `json:"-"`
}

// Notice events (Notice.Event).
const (
	NoticeDeadLetter  = "dead_letter"  // a reliable send was given up on
	NoticeBreakerOpen = "breaker_open" // a peer's circuit breaker opened
	NoticePaired      = "paired"       // a pairing completed: a new trusted peer
	// NoticeLoopGuard: the loop guard began holding sends to a peer.
	NoticeLoopGuard = "loop_guard"
	// NoticeRequestTimedOut: a request this node sent passed its
	// deadline with no final response.
	NoticeRequestTimedOut = "request_timed_out"
	// NoticeRequestCancelled: a peer cancelled a request this node holds.
	NoticeRequestCancelled = "request_cancelled"
)

// noticeQueue bounds the notices raised but not yet stored. A notice
// beyond it is dropped and logged: notices tell the agent about state
// the node keeps anyway (dead letters, breakers, the trust list), and
// raising one must never block (the outbox raises them with its lock
// held).
const noticeQueue = 256

// notices is a serving node's notice machinery.
type notices struct {
	q chan Notice

	mu sync.Mutex
	// open holds the peers whose breaker-open notice was raised and whose
	// breaker has not closed since: one notice per outage, not one per
	// failed probe. Entries leave when the breaker closes.
	open map[identity.PeerID]bool
}

// startNotices makes a serving node raise notices: raiseNotice queues
// them and noticeLoop stores them. Call it before anything raises one.
func (n *Node) startNotices() {
	n.notes = &notices{q: make(chan Notice, noticeQueue), open: map[identity.PeerID]bool{}}
	n.wg.Add(1)
	go func() {
		defer n.wg.Done()
		n.noticeLoop(n.ctx)
	}()
}

// raiseNotice adds a system item to the inbox of a serving node (for
// other nodes it does nothing). It never blocks: the item is stored
// shortly after, by noticeLoop.
func (n *Node) raiseNotice(nt Notice) {
	if n.notes == nil {
		return
	}
	select {
	case n.notes.q <- nt:
	default:
		n.log.Warn("notice dropped: too many waiting", "event", nt.Event, "peer", nt.Peer, "id", nt.ID)
	}
}

// noticeLoop stores queued notices until ctx ends.
func (n *Node) noticeLoop(ctx context.Context) {
	for {
		select {
		case nt := <-n.notes.q:
			if _, err := n.pushNotice(nt); err != nil && ctx.Err() == nil {
				n.log.Warn("notice not stored", "event", nt.Event, "peer", nt.Peer, "id", nt.ID, "err", err)
			}
		case <-ctx.Done():
			return
		}
	}
}

// pushNotice stores nt as a system item.
func (n *Node) pushNotice(nt Notice) (identity.UUID, error) {
	members := []wire.Member{{Key: "event", Value: wire.Text(nt.Event)}}
	if nt.Peer != "" {
		members = append(members, wire.Member{Key: "peer", Value: wire.Text(nt.Peer)})
	}
	if nt.ID != "" {
		members = append(members, wire.Member{Key: "id", Value: wire.Text(nt.ID)})
	}
	m, err := wire.Map(members...)
	if err != nil {
		return identity.UUID{}, err
	}
	k, err := wire.Message(nt.Text).With(fieldNotice, m)
	if err != nil {
		return identity.UUID{}, err
	}
	return n.pushLocal(ClassSystem, k)
}

// pushLocal seals kind, marked with class, from this node's key to its
// own key and stores it in the inbox as a local item: it then flows
// through the same store, reads and acks as what peers send.
func (n *Node) pushLocal(class string, kind wire.Kind) (identity.UUID, error) {
	kind, err := kind.With(fieldClass, wire.Text(class))
	if err != nil {
		return identity.UUID{}, err
	}
	id := identity.NewUUID()
	e, err := wire.Seal(n.h.Key, id, n.h.Key.ID(), kind)
	if err != nil {
		return identity.UUID{}, err
	}
	payload, err := e.MarshalBinary()
	if err != nil {
		return identity.UUID{}, err
	}
	it := comms.Item{Type: comms.ItemExternal, Received: time.Now(), Envelope: e, PeerName: n.h.Config.Name, Size: len(payload), Local: true}
	return id, n.mail.Push(it)
}

// Tell implements [API].
func (n *Node) Tell(_ context.Context, body string) (Told, error) {
	if n.closing() {
		return Told{}, Coded(ErrClosed)
	}
	if n.mode != ModeServe {
		return Told{}, errorf(CodeNoDaemon, "no daemon is running for %s: telling the agent needs it (start it with meerkatd run --home %s)", n.h.Dir, n.h.Dir)
	}
	if strings.TrimSpace(body) == "" {
		return Told{}, errorf(CodeBadArgument, "a note needs a body")
	}
	if max := n.h.Config.Comms.MaxMessageBytes; max > 0 && len(body) > max {
		return Told{}, errorf(CodeBodyTooLarge, "the note is %d bytes; comms.max_message_bytes allows %d", len(body), max)
	}
	id, err := n.pushLocal(ClassUser, wire.Message(body))
	switch {
	case err == nil:
		n.loop.userActivity() // a person is in the exchange: the loop guard starts its counts again
		return Told{ID: id.String(), Pending: n.mail.Pending()}, nil
	case errors.Is(err, wire.ErrTooLarge):
		return Told{}, Coded(err)
	case errors.Is(err, inbox.ErrFull): // the store's ErrFull and ErrShare wrap it
		return Told{}, errorf(CodeUnavailable, "the inbox is full: the agent must acknowledge items first")
	}
	return Told{}, Coded(err)
}

// noticeOutbox raises a dead_letter notice for an envelope the outbox
// gave up on. The notice names the peer, the envelope id and kind, and
// the reason's first word (the outbox's own word: expired,
// retries_exhausted, unknown_peer, rejected), never the body nor a text
// a peer could have chosen. A request withdrawn at its deadline or by a
// cancel raises none: the deadline's notice says so, and a cancel is the
// agent's own doing.
func (n *Node) noticeOutbox(ev outbox.Event) {
	if ev.Type != outbox.EventExpired && ev.Type != outbox.EventDeadLetter || withdrawnReason(ev.Reason) {
		return
	}
	e := ev.Entry
	why, _, _ := strings.Cut(ev.Reason, ":")
	what := "it was not delivered"
	if ev.Stored {
		what = "no ack came in time, but a NATS broker holds it and may still deliver it (its ack then takes it out of the dead letters): do not send it again"
	}
	n.raiseNotice(Notice{Event: NoticeDeadLetter, Peer: e.Peer, ID: e.ID.String(),
		Text: fmt.Sprintf("A reliable %s to %s (envelope %s) became a dead letter (%s): %s. "+
			"meerkatd deadletters (MCP: list_dead_letters) lists it; it can be retried or dropped there.", e.Kind, e.Peer, e.ID, why, what)})
}

// breakerChanged is the outbox's OnBreaker: it logs the change and raises
// a breaker_open notice when a peer's breaker opens after being closed.
func (n *Node) breakerChanged(ev outbox.BreakerEvent) {
	n.events.logBreaker(ev)
	if n.notes == nil {
		return
	}
	n.notes.mu.Lock()
	first := false
	switch ev.State {
	case outbox.BreakerOpen:
		first = !n.notes.open[ev.Peer]
		n.notes.open[ev.Peer] = true
	case outbox.BreakerClosed:
		delete(n.notes.open, ev.Peer)
	}
	n.notes.mu.Unlock()
	if first {
		n.raiseNotice(Notice{Event: NoticeBreakerOpen, Peer: ev.Name,
			Text: fmt.Sprintf("%s failed %d delivery rounds in a row: its circuit breaker opened, and reliable sends to it (%d waiting) are held until %s, when one probe is tried.",
				ev.Name, ev.Failures, ev.Waiting, ev.Until.UTC().Format(time.RFC3339))})
	}
}

// noticePaired raises a paired notice for a peer a pairing added.
func (n *Node) noticePaired(p trust.Peer) {
	n.raiseNotice(Notice{Event: NoticePaired, Peer: p.Name,
		Text: fmt.Sprintf("Pairing completed: %s (%s) is now a trusted peer.", p.Name, p.ID)})
}

// localNotice reads the notice of a system item's kind (nil if none).
func localNotice(k wire.Kind) *Notice {
	v, ok := k.Field(fieldNotice)
	if !ok {
		return nil
	}
	text := func(name string) string {
		f, _ := v.Get(name)
		s, _ := f.Text()
		return s
	}
	return &Notice{Event: text("event"), Peer: text("peer"), ID: text("id"), Text: k.Body()}
}
