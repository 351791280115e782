package main

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/meerkatd/meerkatd/comms/control"
	"github.com/meerkatd/meerkatd/comms/node"
	"github.com/meerkatd/meerkatd/internal/testutil"
)

// guardedPair starts two daemons, alice and bob, that trust each other,
// with the loop guard's settings in env.
func guardedPair(t *testing.T, env ...string) (alice, bob *testNode) {
	t.Helper()
	alice, bob = newNode(t, "alice"), newNode(t, "bob")
	for _, n := range []*testNode{alice, bob} {
		n.env = append(n.env, env...)
	}
	alice.trusts(bob)
	bob.trusts(alice)
	alice.start()
	bob.start()
	return alice, bob
}

// scriptedAgent works a node's inbox as an agent would, through its
// control socket: it reads each message from peer and answers it, after
// delay (0: at once), until it has sent max replies, a send fails (that
// error is returned) or ctx ends.
func scriptedAgent(ctx context.Context, c *control.Client, peer string, delay time.Duration, max int) (replies int, err error) {
	var cursor uint64
	for {
		b, err := c.Receive(ctx, node.Query{After: cursor, Kinds: []string{"message"}, From: peer, Order: node.OrderArrival, Wait: 5 * time.Second}) // not the node's own notices
		if err != nil {
			if ctx.Err() != nil {
				return replies, nil
			}
			return replies, err
		}
		cursor = b.Cursor
		for range b.Messages {
			if delay > 0 {
				select {
				case <-time.After(delay): // a person reads and writes
				case <-ctx.Done():
					return replies, nil
				}
			}
			// A send once started is not cancelled with the agent: the
			// other agent may stop (and the test cancel ctx) while this
			// reply waits for its ack. The node bounds the send itself.
			if _, err := c.SendMessage(context.WithoutCancel(ctx), peer, fmt.Sprintf("reply %d", replies+1), node.SendOptions{}); err != nil {
				return replies, err
			}
			replies++
			if replies >= max {
				return replies, nil
			}
		}
	}
}

type agentResult struct {
	replies int
	err     error
}

// runAgents runs one scripted agent on each node, answering the other,
// starts the conversation with a message from alice, and returns what
// each agent did once both stopped (bob's first: the one a loop guard
// holds first, since he replies first).
func runAgents(t *testing.T, alice, bob *testNode, delay time.Duration, max int) (a, b agentResult) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	ares, bres := make(chan agentResult, 1), make(chan agentResult, 1)
	go func() {
		n, err := scriptedAgent(ctx, alice.control(), "bob", delay, max)
		ares <- agentResult{n, err}
	}()
	go func() {
		n, err := scriptedAgent(ctx, bob.control(), "alice", delay, max)
		bres <- agentResult{n, err}
	}()
	alice.ok("send", "message", "bob", "let us talk")
	b = <-bres
	if b.err != nil {
		// Alice waits for a reply that will not come.
		cancel()
	}
	a = <-ares
	return a, b
}

// Two agents answering each other at once are stopped by the loop guard:
// after loop_max_exchanges fast replies each, the next send fails with
// loop_guard, saying what was seen and how to release it; status and
// release show the hold, a CLI send is refused too, and a person's
// release lets sends go again.
func TestLoopGuardStopsInstantAgents(t *testing.T) {
	testutil.CheckGoroutines(t)
	alice, bob := guardedPair(t, "MEERKAT_AGENT_LOOP_MAX_EXCHANGES=5")
	a, b := runAgents(t, alice, bob, 0, 50)
	var e *node.Error
	if !errors.As(b.err, &e) || e.Code != node.CodeLoopGuard {
		t.Fatalf("bob's agent: %d replies, err %v; want it stopped with %s", b.replies, b.err, node.CodeLoopGuard)
	}
	if b.replies != 5 {
		t.Fatalf("bob's agent sent %d replies before the guard held it, want 5", b.replies)
	}
	for _, want := range []string{"5 replies in a row to alice", "no person in between since", "meerkatd release alice"} {
		if !strings.Contains(e.Msg, want) {
			t.Fatalf("loop_guard error %q lacks %q", e.Msg, want)
		}
	}
	if a.err != nil || a.replies != 5 {
		t.Fatalf("alice's agent: %d replies, err %v; want 5 and no error (her fifth reply made her guard hold bob)", a.replies, a.err)
	}

	// Both nodes hold the other now.
	for _, c := range []struct {
		n    *testNode
		peer string
	}{{bob, "alice"}, {alice, "bob"}} {
		var st struct {
			LoopGuards []struct {
				Peer      string     `json:"peer"`
				Exchanges int        `json:"exchanges"`
				Held      bool       `json:"held"`
				HeldUntil *time.Time `json:"held_until"`
			} `json:"loop_guards"`
		}
		c.n.okJSON(&st, "status", "--json")
		if len(st.LoopGuards) != 1 || st.LoopGuards[0].Peer != c.peer || !st.LoopGuards[0].Held || st.LoopGuards[0].Exchanges != 5 || st.LoopGuards[0].HeldUntil == nil {
			t.Fatalf("%s's status loop_guards: %+v", c.n.name, st.LoopGuards)
		}
		if out := c.n.ok("release"); !strings.Contains(out, c.peer) || !strings.Contains(out, "HELD UNTIL") {
			t.Fatalf("%s: release lists %q", c.n.name, out)
		}
	}
	// Each agent is told by a system notice, read before anything else.
	for _, n := range []*testNode{alice, bob} {
		waitUntil(t, n.name+"'s loop_guard notice", func() bool { return n.notice("loop_guard", "") })
	}
	if out := bob.ok("status"); !strings.Contains(out, "held       alice: loop guard, 5 fast replies in a row, until ") {
		t.Fatalf("status does not show the hold:\n%s", out)
	}
	bob.wantCode(exitError, []string{"(loop_guard)", "meerkatd release alice"}, "send", "message", "alice", "one more")
	bob.wantCode(exitError, []string{"(loop_guard)"}, "send", "message", "alice", "queued?", "--reliable")
	var ob struct {
		Entries []any `json:"entries"`
	}
	bob.okJSON(&ob, "outbox", "--json")
	if len(ob.Entries) != 0 {
		t.Fatalf("a held reliable send was queued: %+v", ob.Entries)
	}

	if out := bob.ok("release", "alice"); !strings.Contains(out, "released alice") {
		t.Fatalf("release alice: %q", out)
	}
	if out := bob.ok("release", "alice"); !strings.Contains(out, "was not held") {
		t.Fatalf("second release: %q", out)
	}
	bob.ok("send", "message", "alice", "a person stepped in")
	var gs []any
	bob.okJSON(&gs, "release", "--json")
	if len(gs) != 0 {
		t.Fatalf("after the release bob's guard still counts %+v", gs)
	}
}

// Agents that answer at a person's pace (slower than agent.loop_fast_ms)
// are never held, however long they talk.
func TestLoopGuardHumanPace(t *testing.T) {
	testutil.CheckGoroutines(t)
	alice, bob := guardedPair(t, "MEERKAT_AGENT_LOOP_MAX_EXCHANGES=3", "MEERKAT_AGENT_LOOP_FAST_MS=200")
	const replies = 8
	a, b := runAgents(t, alice, bob, 300*time.Millisecond, replies)
	if a.err != nil || b.err != nil || a.replies != replies || b.replies != replies {
		t.Fatalf("alice: %d replies, err %v; bob: %d replies, err %v; want %d each, no error", a.replies, a.err, b.replies, b.err, replies)
	}
	for _, n := range []*testNode{alice, bob} {
		var gs []any
		n.okJSON(&gs, "release", "--json")
		if len(gs) != 0 {
			t.Fatalf("%s's loop guard counts %+v after replies at a person's pace", n.name, gs)
		}
	}
}
