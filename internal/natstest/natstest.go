// Package natstest runs real nats-server instances in the test process,
// on 127.0.0.1 at random ports, and writes the server configuration that
// docs/nats.md gives operators, for the tests of the NATS relay and of the
// daemons that use it. Only tests import it.
package natstest

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
)

// readyTimeout bounds a server's start and a cluster's routing.
const readyTimeout = 20 * time.Second

// Server runs one nats-server named name with conf (the server's own
// configuration syntax; "" for none), JetStream if jetStream, and, if
// cluster is not empty, a cluster port of its own routed to routes. It is
// shut down when the test ends.
func Server(t testing.TB, name, conf string, routes []string, cluster string, jetStream bool) *server.Server {
	t.Helper()
	opts := &server.Options{}
	if conf != "" {
		path := filepath.Join(t.TempDir(), "server.conf")
		if err := os.WriteFile(path, []byte(conf), 0o600); err != nil {
			t.Fatal(err)
		}
		o, err := server.ProcessConfigFile(path)
		if err != nil {
			t.Fatalf("server config: %v\n%s", err, conf)
		}
		opts = o
	}
	opts.ServerName = name
	opts.Host = "127.0.0.1"
	opts.Port = server.RANDOM_PORT
	opts.NoLog, opts.NoSigs = true, true
	opts.JetStream = jetStream
	if jetStream {
		opts.StoreDir = t.TempDir()
	}
	if cluster != "" {
		opts.Cluster.Name = cluster
		opts.Cluster.Host = "127.0.0.1"
		opts.Cluster.Port = server.RANDOM_PORT
		opts.Routes = server.RoutesFromStr(strings.Join(routes, ","))
	}
	return run(t, opts)
}

// ServerAt runs a nats-server with JetStream on 127.0.0.1:port, storing
// in dir: a test stands a new server (say, with an empty store) where
// another was. It is shut down when the test ends.
func ServerAt(t testing.TB, port int, dir string) *server.Server {
	t.Helper()
	return run(t, &server.Options{ServerName: "s", Host: "127.0.0.1", Port: port, JetStream: true, StoreDir: dir, NoLog: true, NoSigs: true})
}

// run starts a server with opts, waits until it takes connections and
// shuts it down when the test ends.
func run(t testing.TB, opts *server.Options) *server.Server {
	t.Helper()
	s, err := server.NewServer(opts)
	if err != nil {
		t.Fatalf("nats-server: %v", err)
	}
	go s.Start()
	if !s.ReadyForConnections(readyTimeout) {
		s.Shutdown()
		t.Fatalf("nats-server %s on port %d did not start", opts.ServerName, opts.Port)
	}
	t.Cleanup(func() {
		s.Shutdown()
		s.WaitForShutdown()
	})
	return s
}

// Cluster runs n routed servers named s1…sn and waits until each has a
// route to every other.
func Cluster(t testing.TB, n int, conf string, jetStream bool) []*server.Server {
	t.Helper()
	const name = "meerkat-test"
	first := Server(t, "s1", conf, nil, name, jetStream)
	route := "nats://" + first.ClusterAddr().String()
	servers := []*server.Server{first}
	for i := 2; i <= n; i++ {
		servers = append(servers, Server(t, fmt.Sprintf("s%d", i), conf, []string{route}, name, jetStream))
	}
	deadline := time.Now().Add(readyTimeout)
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

// User is one node's NATS user.
type User struct {
	Name, Password string
	PeerUUID       string // the node's peer UUID, as meerkatd id prints it
}

// Admin is the administrative user LeastPrivilege adds (it may create the
// stream, which node users may not).
const Admin = "admin"

// LeastPrivilege returns a server configuration with one user per node as
// the nats-node-user block of the document at docPath (docs/nats.md)
// gives it, and the user Admin (password Admin), in one account with
// JetStream enabled.
func LeastPrivilege(t testing.TB, docPath string, users ...User) string {
	t.Helper()
	doc, err := os.ReadFile(docPath)
	if err != nil {
		t.Fatal(err)
	}
	_, rest, ok := strings.Cut(string(doc), "<!-- nats-node-user")
	if !ok {
		t.Fatalf("%s has no nats-node-user block", docPath)
	}
	_, rest, _ = strings.Cut(rest, "```\n")
	block, _, ok := strings.Cut(rest, "```")
	if !ok {
		t.Fatalf("the nats-node-user block of %s is not closed", docPath)
	}
	var blocks []string
	for _, u := range users {
		blocks = append(blocks, strings.NewReplacer("NODE_UUID", u.PeerUUID, "NODE_PASSWORD", u.Password, "NODE", u.Name).Replace(block))
	}
	blocks = append(blocks, fmt.Sprintf("{user: %q, password: %q}", Admin, Admin))
	return "accounts {\n  MEERKAT {\n    jetstream: enabled\n    users: [\n" + strings.Join(blocks, "\n") + "\n    ]\n  }\n}\n"
}
