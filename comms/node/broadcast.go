package node

import (
	"context"
	"encoding/json"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/meerkatd/meerkatd/comms/wire"
	"github.com/meerkatd/meerkatd/identity"
	"github.com/meerkatd/meerkatd/trust"
)

// FieldBroadcast is the signed kind field that marks a message as one
// copy of a broadcast; its value, the broadcast id, is the same on every
// copy. It is sent only to peers known to run meerkatd ([Node.speaksMeerkat]):
// the Rust reference verifies signatures over the fields it knows, and
// would refuse a message carrying it.
const FieldBroadcast = "meerkat_broadcast"

// SoftwareMeerkatd is the trust entry meta "software" value that marks a
// peer as running meerkatd; pairing writes it.
const SoftwareMeerkatd = "meerkatd"

// maxFanOut bounds the copies of one broadcast sent at once.
const maxFanOut = 16

// BroadcastArgs is a broadcast: a message body, to whom, and how.
type BroadcastArgs struct {
	Body string `json:"body"`
	// Group picks the trusted peers whose trust entry meta "groups" lists
	// it; Peers names peers (names, keys or UUIDs; each gets one copy
	// even if named twice). Neither: every trusted peer. Not both.
	Group string   `json:"group,omitempty"`
	Peers []string `json:"peers,omitempty"`
	// Direct sends each copy once, without the outbox (a broadcast is
	// reliable by default).
	Direct bool `json:"direct,omitempty"`
	// SendOptions: TTL and NoWait apply to the reliable copies, TaskID
	// puts the broadcast under a task (every target joins it).
	SendOptions
}

// Broadcasted reports a broadcast.
type Broadcasted struct {
	ID     string          `json:"broadcast_id"` // shared by every copy
	TaskID string          `json:"task_id,omitempty"`
	Copies []BroadcastCopy `json:"copies"`
	// Replayed is true when an idempotency key used before returned the
	// first broadcast's result: nothing was sent this time.
	Replayed bool `json:"replayed,omitempty"`
}

// CopiesError is the error of a broadcast some of whose copies failed,
// nil if every copy was delivered or queued.
func (b Broadcasted) CopiesError() error {
	failed := 0
	for _, c := range b.Copies {
		if c.Delivery == DeliveryFailed {
			failed++
		}
	}
	return copiesError(failed, len(b.Copies))
}

// copiesError is the error of a send to many with failed of its total
// copies failed (nil for none): the command line exits 1 with it.
func copiesError(failed, total int) error {
	if failed == 0 {
		return nil
	}
	return errorf(CodeCopiesFailed, "%d of %d copies failed (see their notes)", failed, total)
}

// BroadcastCopy is the outcome of one peer's copy.
type BroadcastCopy struct {
	Peer   string `json:"peer"`
	PubKey string `json:"pubkey"`
	ID     string `json:"id,omitempty"` // the copy's envelope id ("" if it was never sealed)
	// Delivery is a Delivery… value, or "failed" with Error and Code.
	Delivery  string `json:"delivery"`
	LastError string `json:"last_error,omitempty"`
	// Marked is true when the copy carries the broadcast mark (the peer
	// runs meerkatd); other peers get a plain message.
	Marked bool   `json:"marked"`
	Code   string `json:"code,omitempty"`
	Error  string `json:"error,omitempty"`
}

// DeliveryFailed is the Delivery of a send, or of a copy, that failed.
const DeliveryFailed = "failed"

// peerMeta is what the node reads from a trust entry's meta.
type peerMeta struct {
	Software string   `json:"software"`
	Groups   []string `json:"groups"`
}

func metaOf(p trust.Peer) peerMeta {
	var m peerMeta
	if len(p.Meta) > 0 {
		// A meta whose fields have other types (edited by hand) counts
		// as none of them.
		var raw map[string]json.RawMessage
		if json.Unmarshal(p.Meta, &raw) == nil {
			json.Unmarshal(raw["software"], &m.Software)
			json.Unmarshal(raw["groups"], &m.Groups)
		}
	}
	return m
}

// speaksMeerkat reports whether peer is known to run meerkatd, so that
// signed fields the Rust reference does not know may be sent to it: its
// trust entry's meta says "software": "meerkatd" (pairing writes it), or
// this node holds its verified agent card (only meerkatd publishes one).
func (n *Node) speaksMeerkat(peer identity.PeerID) bool {
	p, ok := n.r.Trust().Lookup(peer)
	return ok && (metaOf(p).Software == SoftwareMeerkatd || n.hasVerifiedCard(peer))
}

// markMeerkatd returns meta with "software": "meerkatd" set, keeping its
// other members (a meta that is not an object is replaced).
func markMeerkatd(meta json.RawMessage) json.RawMessage {
	var m map[string]json.RawMessage
	if len(meta) > 0 && json.Unmarshal(meta, &m) != nil || m == nil { // not an object, or null
		m = map[string]json.RawMessage{}
	}
	m["software"] = json.RawMessage(`"` + SoftwareMeerkatd + `"`)
	b, _ := json.Marshal(m) // cannot fail: valid raw members
	return b
}

// groupPeers returns the trusted peers in group, or an error listing the
// groups the trust file names.
func groupPeers(l *trust.List, group string) ([]trust.Peer, error) {
	var out []trust.Peer
	known := map[string]bool{}
	for _, p := range l.Peers() {
		for _, g := range metaOf(p).Groups {
			known[g] = true
			if g == group {
				out = append(out, p)
			}
		}
	}
	if len(out) == 0 {
		names := make([]string, 0, len(known))
		for g := range known {
			names = append(names, g)
		}
		slices.Sort(names)
		if len(names) == 0 {
			return nil, errorf(CodeBadArgument, "no group %q: no trusted peer has groups in its meta (like \"meta\": {\"groups\": [\"%s\"]})", group, group)
		}
		return nil, errorf(CodeBadArgument, "no group %q: the trusted peers' groups are %s", group, strings.Join(names, ", "))
	}
	return out, nil
}

// broadcastTargets resolves a broadcast's peers, each once.
func (n *Node) broadcastTargets(a BroadcastArgs) ([]identity.PeerID, error) {
	l := n.r.Trust()
	var ps []trust.Peer
	switch {
	case a.Group != "" && len(a.Peers) > 0:
		return nil, errorf(CodeBadArgument, "a broadcast goes to a group or to listed peers, not both")
	case a.Group != "":
		g, err := groupPeers(l, a.Group)
		if err != nil {
			return nil, err
		}
		ps = g
	case len(a.Peers) > 0:
		for _, ref := range a.Peers {
			p, err := n.r.ResolvePeer(ref)
			if err != nil {
				return nil, Coded(err)
			}
			ps = append(ps, p)
		}
	default:
		ps = l.Peers()
	}
	var out []identity.PeerID
	for _, p := range ps {
		if !slices.Contains(out, p.ID) {
			out = append(out, p.ID)
		}
	}
	if len(out) == 0 {
		return nil, errorf(CodeUnknownPeer, "no trusted peer to broadcast to: pair with one first (meerkatd pair)")
	}
	return out, nil
}

// Broadcast implements [API].
func (n *Node) Broadcast(ctx context.Context, a BroadcastArgs) (Broadcasted, error) {
	if n.closing() {
		return Broadcasted{}, Coded(ErrClosed)
	}
	switch {
	case a.Body == "":
		return Broadcasted{}, errorf(CodeBadArgument, "a broadcast needs a body")
	case a.Wait != 0:
		return Broadcasted{}, errorf(CodeBadArgument, "waiting for responses applies to requests only")
	case a.TTL < 0 || a.TTL > MaxTTL:
		return Broadcasted{}, errorf(CodeBadArgument, "ttl %s: want 0 to %s", a.TTL, MaxTTL)
	case a.Direct && (a.Reliable || a.TTL != 0 || a.NoWait):
		return Broadcasted{}, errorf(CodeBadArgument, "a direct broadcast takes no reliable, ttl or no_wait")
	}
	targets, err := n.broadcastTargets(a)
	if err != nil {
		return Broadcasted{}, err
	}
	base := wire.Message(a.Body)
	if a.TaskID != "" {
		if err := CheckTaskID(a.TaskID); err != nil {
			return Broadcasted{}, errorf(CodeBadArgument, "task_id: %v", err)
		}
		tb, err := n.taskBook()
		if err != nil {
			return Broadcasted{}, err
		}
		if err := checkSendTaskID(tb, a.TaskID); err != nil {
			return Broadcasted{}, errorf(CodeBadArgument, "task_id: %v", err)
		}
		for _, p := range targets {
			if _, err := tb.st.Touch(a.TaskID, p, true, time.Now()); err != nil {
				return Broadcasted{}, taskErr(err)
			}
		}
		if base, err = base.With(FieldObjectiveID, wire.Text(a.TaskID)); err != nil {
			return Broadcasted{}, Coded(err)
		}
	}
	// guard: the loop guard holds the copies to a peer it holds, as it
	// holds every other send to it.
	spec := sendSpec{reliable: !a.Direct, ttl: a.TTL, noWait: a.NoWait, guard: true}
	// run sends the copies, under call if the broadcast has a key: then
	// its id and each copy's envelope id are derived from the call (and
	// the peer), the same at every run, so a run after one whose copies
	// all failed (an ack lost, say) is dropped by the peers that got one.
	run := func(call []byte) (Broadcasted, bool, error) {
		id := identity.NewUUID()
		if call != nil {
			id = n.r.CallID(call, identity.PeerID{})
		}
		marked, err := base.With(FieldBroadcast, wire.Text(id.String()))
		if err != nil {
			return Broadcasted{}, false, Coded(err)
		}
		kindFor := func(p identity.PeerID) wire.Kind {
			if n.speaksMeerkat(p) {
				return marked
			}
			return base
		}
		s := spec
		s.call = call
		copies := n.fanOut(ctx, targets, kindFor, s)
		if len(copies) > 0 && !slices.ContainsFunc(copies, func(c BroadcastCopy) bool { return c.Code != CodeBodyTooLarge }) {
			// The body fits no envelope: an error of the call, as for one send.
			return Broadcasted{}, false, errorf(CodeBodyTooLarge, "%s", copies[0].Error)
		}
		sent := false
		for i := range copies {
			copies[i].Marked = n.speaksMeerkat(targets[i])
			d := copies[i].Delivery
			sent = sent || d != "" && d != DeliveryFailed
		}
		return Broadcasted{ID: id.String(), TaskID: a.TaskID, Copies: copies}, sent, nil
	}
	if a.IdempotencyKey == "" {
		b, _, err := run(nil)
		return b, err
	}
	// Kept once a copy was sent (acked or queued); if every copy failed,
	// the key is released and a retry sends again, as for one send.
	args := a
	args.IdempotencyKey = ""
	b, replayed, err := idempotentCall(n, ctx, a.IdempotencyKey, "broadcast", args, run)
	b.Replayed = replayed
	return b, err
}

// fanOut sends kindFor(peer) to every peer, at most maxFanOut at once,
// and returns the outcomes in the order of peers. It returns once every
// send returned.
func (n *Node) fanOut(ctx context.Context, peers []identity.PeerID, kindFor func(identity.PeerID) wire.Kind, spec sendSpec) []BroadcastCopy {
	out := make([]BroadcastCopy, len(peers))
	sem := make(chan struct{}, maxFanOut)
	var wg sync.WaitGroup
	for i, p := range peers {
		out[i] = BroadcastCopy{PubKey: p.String()}
		if tp, ok := n.r.Trust().Lookup(p); ok {
			out[i].Peer = tp.Name
		}
		select {
		case sem <- struct{}{}:
		case <-ctx.Done():
			out[i].Delivery, out[i].Code, out[i].Error = DeliveryFailed, CodeUnavailable, "not sent: "+ctx.Err().Error()
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			s := spec
			s.peer, s.kind = p.String(), kindFor(p)
			if s.guard {
				if err := n.guardSend(s.peer); err != nil {
					err = Coded(err)
					out[i].Delivery, out[i].Code, out[i].Error = DeliveryFailed, CodeOf(err), UserText(err)
					return
				}
			}
			res, err := n.send(ctx, s)
			if !res.id.IsZero() {
				out[i].ID = res.id.String()
			}
			out[i].Delivery, out[i].LastError = res.delivery, userText(res.lastError)
			if err != nil {
				err = Coded(err)
				out[i].Delivery, out[i].Code, out[i].Error = DeliveryFailed, CodeOf(err), UserText(err)
			}
		}()
	}
	wg.Wait()
	return out
}

// kindText returns a text field of kind ("" if absent or not text).
func kindText(k wire.Kind, name string) string {
	v, _ := k.Field(name)
	s, _ := v.Text()
	return s
}
