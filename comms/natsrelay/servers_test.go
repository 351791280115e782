package natsrelay

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"

	"github.com/meerkatd/meerkatd/comms"
	"github.com/meerkatd/meerkatd/identity"
	"github.com/meerkatd/meerkatd/transport"
	"github.com/meerkatd/meerkatd/trust"
)

// Real NATS servers, run in this process on loopback: never a mock.

// startServer runs one nats-server with JetStream on 127.0.0.1 and a
// random port; conf, if not empty, is a server configuration (accounts,
// users, permissions) in the server's own syntax.
func startServer(t *testing.T, name, conf string, routes []string, clusterName string) *server.Server {
	t.Helper()
	opts := &server.Options{}
	if conf != "" {
		path := t.TempDir() + "/server.conf"
		if err := writeFile(path, conf); err != nil {
			t.Fatal(err)
		}
		o, err := server.ProcessConfigFile(path)
		if err != nil {
			t.Fatalf("server config: %v", err)
		}
		opts = o
	}
	opts.ServerName = name
	opts.Host = "127.0.0.1"
	opts.Port = server.RANDOM_PORT
	opts.NoLog, opts.NoSigs = true, true
	opts.JetStream = true
	opts.StoreDir = t.TempDir()
	if clusterName != "" {
		opts.Cluster.Name = clusterName
		opts.Cluster.Host = "127.0.0.1"
		opts.Cluster.Port = server.RANDOM_PORT
		opts.Routes = server.RoutesFromStr(strings.Join(routes, ","))
	}
	s, err := server.NewServer(opts)
	if err != nil {
		t.Fatalf("nats-server: %v", err)
	}
	go s.Start()
	if !s.ReadyForConnections(10 * time.Second) {
		s.Shutdown()
		t.Fatalf("nats-server %s did not start", name)
	}
	t.Cleanup(func() {
		s.Shutdown()
		s.WaitForShutdown()
	})
	return s
}

// startCluster runs n routed servers and waits until they see each other.
func startCluster(t *testing.T, n int, conf string) []*server.Server {
	t.Helper()
	first := startServer(t, "s1", conf, nil, "meerkat-test")
	route := "nats://" + first.ClusterAddr().String()
	servers := []*server.Server{first}
	for i := 2; i <= n; i++ {
		servers = append(servers, startServer(t, fmt.Sprintf("s%d", i), conf, []string{route}, "meerkat-test"))
	}
	deadline := time.Now().Add(20 * time.Second)
	for _, s := range servers {
		for s.NumRoutes() < n-1 {
			if time.Now().After(deadline) {
				t.Fatalf("%s has %d routes, want %d", s.Name(), s.NumRoutes(), n-1)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	return servers
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
