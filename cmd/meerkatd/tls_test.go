package main

import (
	"net"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/meerkatd/meerkatd/comms/wire"
	"github.com/meerkatd/meerkatd/identity"
)

// A peer that speaks plaintext TCP, as the reference implementation does,
// is served while comms.tcp_plaintext allows it; with "refuse" its
// connection is closed unread and the node does not send to it.
func TestPlaintextPeerPolicy(t *testing.T) {
	t.Parallel()
	for _, policy := range []string{"allow", "refuse"} {
		t.Run(policy, func(t *testing.T) {
			rusty, err := identity.GenerateKeypair()
			if err != nil {
				t.Fatal(err)
			}
			// rusty's own listener counts the connections it gets.
			ln, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			var dialled atomic.Int32
			go func() {
				for {
					c, err := ln.Accept()
					if err != nil {
						return
					}
					dialled.Add(1)
					c.Close()
				}
			}()
			t.Cleanup(func() { ln.Close() })

			bob := newNode(t, "bob")
			bob.addr = "tcp://127.0.0.1:" + strconv.Itoa(freeTCPPort(t))
			// Trusted at a plaintext address while plaintext was allowed
			// (a node that refuses it does not take such a peer: below).
			bob.ok("peers", "add", "rusty", rusty.ID().String(), "tcp://"+ln.Addr().String())
			bob.env = append(bob.env, "MEERKAT_COMMS_TCP_PLAINTEXT="+policy)
			if policy == "refuse" {
				carol, err := identity.GenerateKeypair()
				if err != nil {
					t.Fatal(err)
				}
				bob.wantCode(exitUsage, []string{"comms.tcp_plaintext", "tls://"}, "peers", "add", "carol", carol.ID().String(), "tcp://127.0.0.1:9")
				if out := bob.ok("config", "check"); !strings.Contains(out, "note:") || !strings.Contains(out, "rusty") {
					t.Fatalf("config check says nothing of rusty's plaintext address:\n%s", out)
				}
			}
			bob.start(bob.runArgs()...)
			bobKey, err := identity.ParsePeerID(bob.key)
			if err != nil {
				t.Fatal(err)
			}
			e, err := wire.Seal(rusty, identity.NewUUID(), bobKey, wire.Message("hello from the reference"))
			if err != nil {
				t.Fatal(err)
			}
			if policy == "allow" {
				deliverRaw(t, bob, e)
				if s := bob.status(); s.Accepted != 1 {
					t.Fatalf("bob accepted %d", s.Accepted)
				}
				return
			}
			refusedUnread(t, bob, e)
			if s := bob.status(); s.Accepted != 0 || s.Rejected["plaintext"] != 1 {
				t.Fatalf("bob's counters: %s", jsonText(s))
			}
			bob.wantCode(exitUsage, []string{"comms.tcp_plaintext", "tls://"}, "send", "message", "rusty", "in the clear?")
			if n := dialled.Load(); n != 0 {
				t.Fatalf("bob dialled rusty %d times", n)
			}
		})
	}
}

// refusedUnread sends e to n's TCP port in plaintext and requires that n
// closes the connection without a byte.
func refusedUnread(t *testing.T, n *testNode, e wire.Envelope) {
	t.Helper()
	c, _ := sendRaw(t, n, e) // the write may fail: the node may have closed already
	var b [64]byte
	if k, err := c.Read(b[:]); k > 0 || err == nil {
		t.Fatalf("%s answered %x to a plaintext frame", n.name, b[:k])
	} else if ne, ok := err.(net.Error); ok && ne.Timeout() {
		t.Fatalf("%s left the plaintext connection open", n.name)
	}
}
