package bench

// The MEUP space broadcast scenario: three real nodes in one space, the
// node under test broadcasting chat envelopes to the other two through
// its control socket, as an agent would.

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/meerkatd/meerkatd/comms/control"
	api "github.com/meerkatd/meerkatd/comms/node"
	"github.com/meerkatd/meerkatd/config"
	"github.com/meerkatd/meerkatd/trust"
)

const (
	scSpace = "space_broadcast"
	// spaceName is the space of the scenario.
	spaceName = "bench"
	// spaceInFlight is how many space sends are in flight at once: each
	// waits for both copies' acks, so twice as many copies are. The
	// control socket serves 64 connections at once (control.DefaultMaxConns),
	// which bounds it below that.
	spaceInFlight = 32
)

// spaceMembers are the participant ids of the space: the node under test
// first, then the receivers.
var spaceMembers = []string{"sender", "r1", "r2"}

// Metric names of space_broadcast.
const (
	mEnvRate     = "envelopes_per_s"  // MEUP envelopes sent (every copy acked) per second
	mCopyRate    = "copies_per_s"     // copies delivered per second (envelopes × receivers)
	mCPUCopy     = "cpu_us_per_copy"  // CPU µs per delivered copy, every process
	mCPURatio    = "cpu_ratio"        // CPU per copy / pipelined's CPU per exchange, same repetition
	mReceived    = "copies_received"  // copies the receivers' inboxes hold, warm-in included
	mDelivered   = "_delivered_ratio" // copies received / copies sent
	mWrongCopies = "_wrong_copies"    // copies missing or extra, over the receivers
)

// spaceResult is the outcome of one space_broadcast.
type spaceResult struct {
	envPerS    float64 // MEUP envelopes per second
	copiesPerS float64 // delivered copies per second
	cpuPerCopy float64 // CPU µs per copy: this process and the three nodes
	sent       int64   // copies sent and acked in the whole run (warm-in included)
	received   int64   // copies the receivers hold
	wrong      int64   // copies missing or extra, summed over the receivers
	problem    string  // what was wrong, for the report's notes ("" if nothing)
}

// trustAlso adds peers to the trust list of n's home (before it starts).
func (n *node) trustAlso(peers ...trust.Peer) error {
	path := filepath.Join(n.home, trust.FileName)
	_, err := trust.Update(path, func(l *trust.List) (*trust.List, error) {
		for _, p := range peers {
			var err error
			if l, err = l.With(p); err != nil {
				return nil, err
			}
		}
		return l, nil
	})
	return err
}

// controlClient returns a client of n's control socket once the node answers
// on it.
func (n *node) controlClient(ctx context.Context) (*control.Client, error) {
	path := filepath.Join(n.home, api.ControlSocketName)
	deadline := time.Now().Add(readyTimeout)
	for {
		c, err := control.Dial(ctx, path)
		if err == nil {
			return c, nil
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return nil, fmt.Errorf("control socket of %s: %w", n.home, err)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// spaceBroadcast starts three nodes with memory inboxes that trust each
// other, makes them one space (the node under test "sender", receivers
// "r1" and "r2", each node's roster naming all three), and has the sender
// broadcast chat envelopes, spaceInFlight at a time, through its control
// socket: SpaceSend, direct (one attempt per copy, returning once both
// copies are acked). After a warm-in it measures a window of
// b.opts.duration; then it checks that every send's copies were acked and
// that each receiver's inbox holds every copy sent to it.
func (b *runner) spaceBroadcast(ctx context.Context, tr string) (spaceResult, error) {
	nodes := make([]*node, len(spaceMembers))
	for i := range nodes {
		n, err := b.newNode(tr, config.StoreMemory)
		if err != nil {
			return spaceResult{}, err
		}
		nodes[i] = n
	}
	for i, n := range nodes {
		var peers []trust.Peer
		for j, o := range nodes {
			if j != i {
				peers = append(peers, trust.Peer{Name: "space-" + spaceMembers[j], ID: o.id, Addr: o.addr})
			}
		}
		if err := n.trustAlso(peers...); err != nil {
			return spaceResult{}, err
		}
	}
	clients := make([]*control.Client, len(nodes))
	for i, n := range nodes {
		if _, err := n.start(ctx); err != nil {
			return spaceResult{}, err
		}
		defer n.stop()
		c, err := n.controlClient(ctx)
		if err != nil {
			return spaceResult{}, err
		}
		clients[i] = c
	}
	// The rosters: each node creates the space as itself and adds the
	// other two (chat among their default capabilities).
	for i, c := range clients {
		if _, err := c.SpaceEdit(ctx, api.SpaceEdit{Op: api.SpaceCreate, Space: spaceName, As: spaceMembers[i]}); err != nil {
			return spaceResult{}, fmt.Errorf("space create on %s: %w", spaceMembers[i], err)
		}
		for j, o := range nodes {
			if j == i {
				continue
			}
			if _, err := c.SpaceEdit(ctx, api.SpaceEdit{Op: api.SpaceAdd, Space: spaceName, Peer: o.id.String(), ID: spaceMembers[j]}); err != nil {
				return spaceResult{}, fmt.Errorf("space add %s on %s: %w", spaceMembers[j], spaceMembers[i], err)
			}
		}
	}
	sender, receivers := clients[0], clients[1:]
	copiesPer := int64(len(receivers))

	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var (
		done     atomic.Int64 // sends whose every copy was acked
		stop     atomic.Bool
		wg       sync.WaitGroup
		errOnce  sync.Once
		firstErr error
	)
	fail := func(err error) {
		errOnce.Do(func() { firstErr = err })
		stop.Store(true)
	}
	msg := api.SpaceMessage{Space: spaceName, Action: api.ActChat, Text: body} // direct: Reliable false
	for range spaceInFlight {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for !stop.Load() {
				sent, err := sender.SpaceSend(ctx, msg)
				if err == nil {
					err = allAcked(sent, len(receivers))
				}
				if err != nil {
					if !stop.Load() {
						fail(err)
					}
					return
				}
				done.Add(1)
			}
		}()
	}
	pids := make([]int, len(nodes))
	for i, n := range nodes {
		pids[i] = n.child.pid()
	}
	b.warmIn(ctx, func() bool { return done.Load() > 0 || stop.Load() })
	s0 := sampleLoad(done.Load(), pids...)
	sleepCtx(ctx, b.opts.duration)
	waitMore(ctx, func() bool { return done.Load() > s0.done || stop.Load() })
	s1 := sampleLoad(done.Load(), pids...)
	stop.Store(true)
	wg.Wait()
	if firstErr != nil {
		return spaceResult{}, firstErr
	}
	if err := ctx.Err(); err != nil {
		return spaceResult{}, err
	}
	res, err := s1.resultSince(s0)
	if err != nil {
		return spaceResult{}, err
	}
	out := spaceResult{envPerS: res.perS, copiesPerS: res.perS * float64(copiesPer), cpuPerCopy: res.cpuPerEx / float64(copiesPer)}

	// Every copy acked must be in its receiver's inbox (a receiver acks an
	// envelope it refuses too): nobody drains them, and nothing else
	// reaches them (presence and welcome update state only).
	want := done.Load()
	out.sent = want * copiesPer
	counts := make([]int64, len(receivers))
	count := func() error {
		for i, c := range receivers {
			st, err := c.Status(ctx)
			if err != nil {
				return fmt.Errorf("status of %s: %w", spaceMembers[i+1], err)
			}
			counts[i] = int64(st.Inbox)
		}
		return nil
	}
	var cerr error
	waitMore(ctx, func() bool {
		if cerr = count(); cerr != nil {
			return true
		}
		for _, n := range counts {
			if n < want {
				return false
			}
		}
		return true
	})
	if cerr != nil {
		return spaceResult{}, cerr
	}
	// A copy missing or extra fails the check; the run goes on, so that
	// its other figures are reported.
	var problems []string
	for i, n := range counts {
		out.received += n
		if n != want {
			out.wrong += max(n-want, want-n)
			problems = append(problems, fmt.Sprintf("receiver %s holds %d copies, want %d (one per acknowledged send)", spaceMembers[i+1], n, want))
		}
	}
	out.problem = strings.Join(problems, "; ")
	return out, nil
}

// allAcked checks that a space send went to every receiver and that each
// copy was acknowledged.
func allAcked(s api.SpaceSent, receivers int) error {
	if len(s.Copies) != receivers {
		return fmt.Errorf("space send made %d copies, want %d", len(s.Copies), receivers)
	}
	for _, c := range s.Copies {
		if c.Skipped != "" || c.Delivery != api.DeliveryAcked || c.LastError != "" {
			return fmt.Errorf("copy to %s not acked: delivery %q, skipped %q, error %q", c.Participant, c.Delivery, c.Skipped, c.LastError)
		}
	}
	return nil
}
