package node

import (
	"context"
	"errors"
	"net"
	"sync"

	"github.com/meerkatd/meerkatd/comms"
	"github.com/meerkatd/meerkatd/comms/metrics"
	"github.com/meerkatd/meerkatd/comms/outbox"
	"github.com/meerkatd/meerkatd/identity"
)

// Send outcomes counted for the metrics (the outbox's retry, expired and
// dead_letter events are counted under their own names).
const (
	sendAcked   = DeliveryAcked
	sendWritten = DeliveryWritten
	sendFailed  = "failed" // a direct send that was not acknowledged
)

// sendOutcomes are every outcome counted, each with its series from the
// start (at 0 until it happens), so that alerts on one work.
var sendOutcomes = []string{sendAcked, sendWritten, sendFailed, outbox.EventRetry, outbox.EventExpired, outbox.EventDeadLetter}

// sendCounts counts send outcomes.
type sendCounts struct {
	mu sync.Mutex
	m  map[string]uint64
}

func (n *Node) countSend(outcome string) {
	c := &n.sends
	c.mu.Lock()
	if c.m == nil {
		c.m = map[string]uint64{}
	}
	c.m[outcome]++
	c.mu.Unlock()
}

func (c *sendCounts) snapshot() map[string]uint64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make(map[string]uint64, len(sendOutcomes))
	for _, k := range sendOutcomes {
		out[k] = 0
	}
	for k, v := range c.m {
		out[k] = v
	}
	return out
}

// MetricsAddr is the address the node serves its metrics on (nil if it
// serves none).
func (n *Node) MetricsAddr() net.Addr {
	if n.metricsSrv == nil {
		return nil
	}
	return n.metricsSrv.Addr()
}

// peerConnected is told when a trusted peer authenticates an inbound
// connection: the peer is up, so its queue is tried now.
func (n *Node) peerConnected(id identity.PeerID) {
	if ob := n.ob; ob != nil {
		ob.Kick(id)
	}
}

// metricsSource is the node as its metrics read it.
type metricsSource struct{ n *Node }

// deadLetterCounter is an outbox store that counts its dead letters
// without reading them.
type deadLetterCounter interface{ DeadLetterCount() (int, error) }

// Figures implements [metrics.Source].
func (s metricsSource) Figures() metrics.Figures {
	n := s.n
	st := n.r.Stats()
	f := metrics.Figures{Received: st.Accepted, Duplicates: st.Duplicates, AcksSent: st.AcksSent, Refused: st.Rejected,
		Sends: n.sends.snapshot(), Connections: st.Connections, Authenticated: st.Authenticated, DBBytes: n.dbBytes()}
	for _, r := range comms.RejectReasons { // every series from the start, at 0 until a refusal
		if _, ok := f.Refused[r]; !ok && f.Refused != nil {
			f.Refused[r] = 0
		}
	}
	f.InboxItems = n.mail.Len()
	f.WaitingReads = int(n.waits.Load())
	if ns := n.natsStatus(); ns != nil {
		f.NATS = &metrics.NATSFigures{Connected: ns.State == "connected", Reconnects: ns.Reconnects, Stored: ns.Stored}
	}
	switch m := n.mail.(type) {
	case *durableMail:
		f.InboxBytes, _ = m.st.Bytes()
	case memMail:
		f.InboxBytes = int64(m.Bytes())
	}
	if ob := n.ob; ob != nil {
		list := n.r.Trust()
		seen := map[identity.PeerID]bool{}
		for _, ps := range ob.Peers() {
			name := ""
			if p, ok := list.Lookup(ps.Peer); ok {
				name = p.Name
			}
			seen[ps.Peer] = true
			f.Peers = append(f.Peers, metrics.PeerFigures{Name: name, Queued: ps.Queued, Breaker: ps.Breaker})
		}
		// Every trusted peer has its series, also with nothing queued.
		for _, p := range list.Peers() {
			if !seen[p.ID] {
				f.Peers = append(f.Peers, metrics.PeerFigures{Name: p.Name, Breaker: outbox.BreakerClosed})
			}
		}
		if c, ok := n.obStore.(deadLetterCounter); ok {
			f.DeadLetters, _ = c.DeadLetterCount()
		} else if dl, err := ob.DeadLetters(); err == nil {
			f.DeadLetters = len(dl)
		}
	}
	return f
}

// Ready implements [metrics.Source]: the node is not closing, every
// listener serves (and every socket file is still its own), and the
// store takes writes.
func (s metricsSource) Ready(ctx context.Context) error {
	n := s.n
	if n.closing() {
		return errors.New("the node is shutting down")
	}
	if got, want := int(n.serving.Load()), len(n.addrs); got < want || want == 0 {
		return errors.New("not every listener is serving")
	}
	if p := n.problems(); len(p) > 0 {
		return errors.New(p[0])
	}
	if d, ok := n.mail.(*durableMail); ok {
		if err := d.st.Writable(ctx); err != nil {
			return err
		}
	}
	return nil
}
