package natsrelay

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"

	"github.com/meerkatd/meerkatd/comms"
	"github.com/meerkatd/meerkatd/identity"
	"github.com/meerkatd/meerkatd/internal/natstest"
	"github.com/meerkatd/meerkatd/transport"
	"github.com/meerkatd/meerkatd/trust"
)

// Real NATS servers, run in this process on loopback: never a mock.

// startServer runs one nats-server with JetStream (internal/natstest).
func startServer(t *testing.T, name, conf string, routes []string, clusterName string) *server.Server {
	t.Helper()
	return natstest.Server(t, name, conf, routes, clusterName, true)
}

// node is a Router with a memory inbox and its Relay.
type testNode struct {
	kp    *identity.Keypair
	r     *comms.Router
	relay *Relay
}

// newNodes makes n nodes that trust each other at nats: addresses.
func newNodes(t *testing.T, n int) []*testNode {
	t.Helper()
	nodes := make([]*testNode, n)
	for i := range nodes {
		kp, err := identity.GenerateKeypair()
		if err != nil {
			t.Fatal(err)
		}
		nodes[i] = &testNode{kp: kp}
	}
	natsAddr, _ := transport.ParseAddr("nats:")
	for i, nd := range nodes {
		var l *trust.List
		for j, o := range nodes {
			if i == j {
				continue
			}
			var err error
			l, err = l.With(trust.Peer{Name: fmt.Sprintf("n%d", j), ID: o.kp.ID(), Addr: natsAddr})
			if err != nil {
				t.Fatal(err)
			}
		}
		r, err := comms.New(nd.kp, l, comms.Options{AckTimeout: 5 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		nd.r = r
		t.Cleanup(func() { r.Close() })
	}
	return nodes
}

// connect starts nd's relay to url with opts (servers set here).
func (nd *testNode) connect(t *testing.T, url string, opts Options) {
	t.Helper()
	opts.Servers = []string{url}
	opts.ReconnectWait = 50 * time.Millisecond
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	rl, err := Start(ctx, nd.r, opts)
	if err != nil {
		t.Fatalf("Start: %v", err)
	}
	nd.relay = rl
	t.Cleanup(func() { rl.Close() })
}

// rawConn is a plain NATS client of the test, for what a node would not
// do: publish forged envelopes, spy on subjects.
func rawConn(t *testing.T, url string, opts ...nats.Option) *nats.Conn {
	t.Helper()
	nc, err := nats.Connect(url, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	return nc
}

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// twoOnOneServer starts a server and two nodes connected to it that trust
// each other, with default options.
func twoOnOneServer(t *testing.T) (s *server.Server, a, b *testNode) {
	t.Helper()
	s = startServer(t, "s1", "", nil, "")
	nodes := newNodes(t, 2)
	a, b = nodes[0], nodes[1]
	a.connect(t, s.ClientURL(), Options{})
	b.connect(t, s.ClientURL(), Options{})
	return s, a, b
}
