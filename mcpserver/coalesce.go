package mcpserver

import (
	"context"
	"sync"
	"time"

	"github.com/meerkatd/meerkatd/comms/node"
)

// coalescer holds the arrivals not announced yet while arrival
// notifications are rate limited (Options.NotifyInterval). The watcher
// adds to it; notifyLoop takes everything at once. It is safe for
// concurrent use; the zero value is not (use newCoalescer).
//
// Its state is bounded whatever arrives: a count, the latest arrival
// and the pending count, never a list.
type coalescer struct {
	mu      sync.Mutex
	count   int          // arrivals since the last notification
	last    node.Message // the latest of them (its kind, peer, id and seq)
	pending int          // the node's pending count as of the latest
	wake    chan struct{}
}

func newCoalescer() *coalescer { return &coalescer{wake: make(chan struct{}, 1)} }

// add records a batch of arrivals and wakes the notifier.
func (c *coalescer) add(b node.Batch) {
	if len(b.Messages) == 0 {
		return
	}
	c.mu.Lock()
	c.count += len(b.Messages)
	c.last = b.Messages[len(b.Messages)-1]
	c.pending = b.Pending
	c.mu.Unlock()
	select {
	case c.wake <- struct{}{}:
	default: // already woken: it takes these too
	}
}

// take returns and forgets what arrived since the last take.
func (c *coalescer) take() (n int, last node.Message, pending int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	n, last, pending = c.count, c.last, c.pending
	c.count, c.last = 0, node.Message{}
	return n, last, pending
}

// notifyLoop sends the coalesced notifications until ctx ends: as soon as
// something arrived, then nothing for the interval, then one notification
// for everything that arrived meanwhile, as soon as the interval ended.
// Arrivals during the interval leave the wake-up set, so the notification
// after it is never lost.
func (s *Server) notifyLoop(ctx context.Context, c *coalescer) {
	for {
		select {
		case <-c.wake:
		case <-ctx.Done():
			return
		}
		n, last, pending := c.take()
		if n == 0 {
			continue
		}
		s.inboxChanged()
		s.announceArrival(last, pending, n)
		select {
		case <-s.after(s.notifyInterval):
		case <-ctx.Done():
			return
		}
	}
}

// after is the clock's timer (tests replace it with notifyAfter).
func (s *Server) after(d time.Duration) <-chan time.Time {
	if s.notifyAfter != nil {
		return s.notifyAfter(d)
	}
	return time.After(d)
}
