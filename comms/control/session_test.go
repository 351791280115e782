package control

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/meerkatd/meerkatd/comms/node"
	"github.com/meerkatd/meerkatd/comms/wire"
	"github.com/meerkatd/meerkatd/identity"
	"github.com/meerkatd/meerkatd/internal/testutil"
	"github.com/meerkatd/meerkatd/transport"
	"github.com/meerkatd/meerkatd/trust"
)

// Bounds of the session tests: generous for a loaded machine under -race.
const (
	sessionWait = 20 * time.Second // any one wait for a condition
	callTimeout = 30 * time.Second // any one session call
	// testTakeOver is the take-over delay of the tests' sessions: short,
	// but not none, so that the wait before a take-over runs too.
	testTakeOver = 50 * time.Millisecond
)

// sessionHome is a test home (memory inbox; testHome checks for leaked
// goroutines) that trusts bob, whose key the test holds so that it can
// deliver messages to whatever node serves the home.
func sessionHome(t *testing.T) (*node.Home, *identity.Keypair) {
	t.Helper()
	h := testHome(t)
	bob, err := identity.GenerateKeypair()
	if err != nil {
		t.Fatal(err)
	}
	l, err := trust.New(trust.Peer{Name: "bob", ID: bob.ID(), Addr: transport.Addr{Scheme: transport.SchemeUDS, Path: "/nonexistent/bob.sock"}})
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Save(h.TrustPath()); err != nil {
		t.Fatal(err)
	}
	return h, bob
}

// deliver sends a message from bob to the home's listening address, as
// bob's node would, and waits for the ack: it reached whichever node
// serves the home now.
func deliver(t *testing.T, h *node.Home, bob *identity.Keypair, body string) {
	t.Helper()
	if err := tryDeliver(h, bob, body); err != nil {
		t.Fatal(err)
	}
}

// tryDeliver is deliver returning why the message was not acknowledged.
func tryDeliver(h *node.Home, bob *identity.Keypair, body string) error {
	ls, err := h.Config.Resolve(h.Dir)
	if err != nil {
		return err
	}
	addr := ls.All()[0]
	id := identity.NewUUID()
	e, err := wire.Seal(bob, id, h.Key.ID(), wire.Message(body))
	if err != nil {
		return err
	}
	payload, err := e.MarshalBinary()
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	c, err := transport.Dial(ctx, addr)
	cancel()
	if err != nil {
		return fmt.Errorf("deliver %q: %w", body, err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(sessionWait))
	if err := transport.WriteFrame(c, payload); err != nil {
		return fmt.Errorf("deliver %q: %w", body, err)
	}
	ackBytes, err := transport.ReadFrame(c, 0)
	if err != nil {
		return fmt.Errorf("deliver %q: no ack: %w", body, err)
	}
	ack, err := wire.Open(ackBytes)
	if err != nil {
		return fmt.Errorf("deliver %q: %w", body, err)
	}
	if got, _ := ack.Kind.InReplyTo(); got != id || ack.From != h.Key.ID() {
		return fmt.Errorf("deliver %q: bad ack %+v", body, ack)
	}
	return nil
}

// attach returns a session on h, closed when the test ends.
func attach(t *testing.T, h *node.Home) *Session {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), callTimeout)
	defer cancel()
	s, err := Attach(ctx, h, HostOptions{TakeOverDelay: testTakeOver})
	if err != nil {
		t.Fatalf("attach: %v", err)
	}
	t.Cleanup(s.Close)
	return s
}

// received waits up to sessionWait for a message with body to show in
// api's inbox.
func received(t *testing.T, api node.API, body string) {
	t.Helper()
	deadline := time.Now().Add(sessionWait)
	var last node.Batch
	var err error
	for time.Now().Before(deadline) {
		ctx, cancel := context.WithTimeout(context.Background(), callTimeout)
		last, err = api.Receive(ctx, node.Query{Wait: 200 * time.Millisecond})
		cancel()
		if err == nil {
			for _, m := range last.Messages {
				if m.Body == body {
					return
				}
			}
		}
	}
	t.Fatalf("%q never showed in the inbox: last read %+v, %v", body, last, err)
}

// call runs one bounded call of the session.
func call[T any](t *testing.T, f func(context.Context) (T, error)) (T, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), callTimeout)
	defer cancel()
	return f(ctx)
}

// A session attached to another session's node keeps working when that
// session closes: it takes the home over, and what reaches the home
// afterwards is received through it.
func TestSessionTakesOverFromSession(t *testing.T) {
	h, bob := sessionHome(t)
	a := attach(t, h)
	if !a.Serving() {
		t.Fatal("the first session on a home nobody serves does not serve it")
	}
	b := attach(t, h)
	if b.Serving() {
		t.Fatal("the second session serves the home too")
	}
	deliver(t, h, bob, "before")
	received(t, b, "before") // b reads a's node

	a.Close()
	peers, err := call(t, b.Peers)
	if err != nil || len(peers) != 1 || peers[0].Name != "bob" {
		t.Fatalf("b's first call after a closed: %+v, %v", peers, err)
	}
	if !b.Serving() {
		t.Fatal("b answered but does not serve the home")
	}
	deliver(t, h, bob, "after")
	received(t, b, "after")
	if _, err := call(t, a.Peers); !errors.Is(err, node.ErrClosed) {
		t.Fatalf("a call on the closed session: %v", err)
	}
}

// A session attached to a daemon keeps working across a restart of the
// daemon: its calls go to the new node.
func TestSessionSurvivesDaemonRestart(t *testing.T) {
	h, bob := sessionHome(t)
	d1, err := ServeHome(h, HostOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { d1.Close() }()
	s := attach(t, h)
	if s.Serving() {
		t.Fatal("the session serves a home its daemon serves")
	}
	deliver(t, h, bob, "to the first daemon")
	received(t, s, "to the first daemon")

	d1.Close()
	d1, err = ServeHome(h, HostOptions{})
	if err != nil {
		t.Fatalf("the daemon's restart: %v", err)
	}
	st, err := call(t, s.Status)
	if err != nil || !st.Running {
		t.Fatalf("status after the restart: %+v, %v", st, err)
	}
	if s.Serving() {
		t.Fatal("the session took the home over from the restarted daemon")
	}
	deliver(t, h, bob, "to the second daemon")
	received(t, s, "to the second daemon")
	b, err := call(t, func(ctx context.Context) (node.Batch, error) { return s.Receive(ctx, node.Query{}) })
	if err != nil || len(b.Messages) != 1 || b.Messages[0].Body != "to the second daemon" {
		t.Fatalf("the session does not read the new node's (memory) inbox: %+v, %v", b, err)
	}
}

// A session whose daemon stopped does not take the home over at once: a
// daemon restarted meanwhile gets its home back, and the call made in
// between goes to it.
func TestSessionWaitsForRestartingDaemon(t *testing.T) {
	h, bob := sessionHome(t)
	d, err := ServeHome(h, HostOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { d.Close() }()
	logs := &testutil.SyncBuffer{}
	ctx, cancel := context.WithTimeout(context.Background(), callTimeout)
	defer cancel()
	s, err := Attach(ctx, h, HostOptions{Logger: slog.New(slog.NewTextHandler(logs, nil))}) // the default delay
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()

	d.Close()
	type res struct {
		peers []node.Peer
		err   error
	}
	called := make(chan res, 1)
	go func() {
		p, err := s.Peers(ctx)
		called <- res{p, err}
	}()
	testutil.WaitFor(t, sessionWait, "the session to wait for the daemon", func() bool {
		return strings.Contains(logs.String(), "waiting for it to come back")
	})
	if d, err = ServeHome(h, HostOptions{}); err != nil {
		t.Fatalf("the daemon's restart: %v", err)
	}
	select {
	case r := <-called:
		if r.err != nil || len(r.peers) != 1 {
			t.Fatalf("the call made while the daemon restarted: %+v, %v", r.peers, r.err)
		}
	case <-time.After(sessionWait):
		t.Fatal("the call made while the daemon restarted did not return")
	}
	if s.Serving() {
		t.Fatal("the session took the home from the restarted daemon")
	}
	deliver(t, h, bob, "to the restarted daemon")
	received(t, s, "to the restarted daemon")
}

// Sessions started at the same instant for one home end with exactly one
// node: one serves it, the others are attached to it. When it closes,
// exactly one of the others takes over, and the rest attach to it. The
// same holds when the home's sockets were left behind by a process that
// was killed: only one of the sessions may take their place.
func TestSessionsStartTogether(t *testing.T) {
	for _, stale := range []bool{false, true} {
		name := "clean"
		if stale {
			name = "stale sockets"
		}
		t.Run(name, func(t *testing.T) { testSessionsStartTogether(t, stale) })
	}
}

func testSessionsStartTogether(t *testing.T, stale bool) {
	h, bob := sessionHome(t)
	if stale {
		ls, err := h.Config.Resolve(h.Dir)
		if err != nil {
			t.Fatal(err)
		}
		leaveStaleSocket(t, h.ControlPath())
		leaveStaleSocket(t, ls.All()[0].Path)
	}
	const n = 8
	sessions := startTogether(t, h, n)
	server := onlyServing(t, sessions)
	deliver(t, h, bob, "one node")
	for _, s := range sessions {
		received(t, s, "one node")
	}

	server.Close()
	var rest []*Session
	for _, s := range sessions {
		if s != server {
			rest = append(rest, s)
		}
	}
	var wg sync.WaitGroup
	errs := make([]error, len(rest))
	gate := make(chan struct{})
	for i, s := range rest {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-gate
			ctx, cancel := context.WithTimeout(context.Background(), callTimeout)
			defer cancel()
			_, errs[i] = s.Peers(ctx)
		}()
	}
	close(gate)
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Errorf("session %d after the server closed: %v", i, err)
		}
	}
	onlyServing(t, rest)
	deliver(t, h, bob, "still one node")
	for _, s := range rest {
		received(t, s, "still one node")
	}
}

// leaveStaleSocket leaves a socket file at path that nothing listens on,
// as a killed process does.
func leaveStaleSocket(t *testing.T, path string) {
	t.Helper()
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: path, Net: "unix"})
	if err != nil {
		t.Fatal(err)
	}
	ln.SetUnlinkOnClose(false)
	ln.Close()
}

// startTogether attaches n sessions to h at the same instant.
func startTogether(t *testing.T, h *node.Home, n int) []*Session {
	t.Helper()
	sessions := make([]*Session, n)
	errs := make([]error, n)
	var ready, done sync.WaitGroup
	gate := make(chan struct{})
	for i := range n {
		ready.Add(1)
		done.Add(1)
		go func() {
			defer done.Done()
			ready.Done()
			<-gate
			ctx, cancel := context.WithTimeout(context.Background(), callTimeout)
			defer cancel()
			sessions[i], errs[i] = Attach(ctx, h, HostOptions{TakeOverDelay: testTakeOver})
		}()
	}
	ready.Wait()
	close(gate)
	done.Wait()
	for i, s := range sessions {
		if s != nil {
			t.Cleanup(s.Close)
		}
		if errs[i] != nil {
			t.Errorf("session %d: %v", i, errs[i])
		}
	}
	if t.Failed() {
		t.FailNow()
	}
	return sessions
}

// onlyServing checks that exactly one of sessions serves the home, and
// returns it.
func onlyServing(t *testing.T, sessions []*Session) *Session {
	t.Helper()
	var server *Session
	k := 0
	for _, s := range sessions {
		if s.Serving() {
			server = s
			k++
		}
	}
	if k != 1 {
		t.Fatalf("%d of %d sessions serve the home, want 1", k, len(sessions))
	}
	return server
}

// A session waits for a home whose lock another process holds without
// answering yet (it is starting or stopping its node), longer than a
// stopping node may take, and serves the home once it is let go.
func TestSessionWaitsForHomeInTransition(t *testing.T) {
	h, bob := sessionHome(t)
	unlock, err := node.LockHome(h.Dir)
	if err != nil {
		t.Fatal(err)
	}
	attached := make(chan *Session, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), callTimeout)
		defer cancel()
		s, err := Attach(ctx, h, HostOptions{TakeOverDelay: testTakeOver})
		if err != nil {
			t.Errorf("attach: %v", err)
		}
		attached <- s
	}()
	// The other process takes a while: longer than a few quick retries.
	select {
	case s := <-attached:
		unlock()
		if s != nil {
			s.Close()
		}
		t.Fatal("the session attached or served while another process held the home")
	case <-time.After(3 * time.Second):
	}
	unlock()
	s := <-attached
	if s == nil {
		t.FailNow()
	}
	defer s.Close()
	if !s.Serving() {
		t.Fatal("the session does not serve the home it was let have")
	}
	deliver(t, h, bob, "let go")
	received(t, s, "let go")
}

// A session attached to a daemon never takes the home: with the daemon
// gone past the delay its calls fail as unavailable, the home stays free
// for the daemon to start again, and then the session reaches it.
func TestSessionLeavesDaemonHomeFree(t *testing.T) {
	h, bob := sessionHome(t)
	d, err := ServeHome(h, HostOptions{})
	if err != nil {
		t.Fatal(err)
	}
	s := attach(t, h)
	d.Close()
	_, err = call(t, func(ctx context.Context) ([]node.Peer, error) { return s.Peers(ctx) })
	if codeOf(err) != node.CodeUnavailable || !strings.Contains(err.Error(), "meerkatd run") {
		t.Fatalf("a call with the daemon down: %v", err)
	}
	if s.Serving() {
		t.Fatal("the session took the home from the daemon")
	}
	if d, err = ServeHome(h, HostOptions{}); err != nil {
		t.Fatalf("the daemon could not start again: %v", err)
	}
	defer d.Close()
	deliver(t, h, bob, "back again")
	received(t, s, "back again")
}

// With the daemon down past the delay, a session waits for it once, not
// on every call: the calls after the first fail at once (several tool
// calls, and the MCP server's watch of the inbox, queued behind one
// another's waits). Once the daemon is back they reach it.
func TestSessionWaitsForAGoneDaemonOnce(t *testing.T) {
	h, bob := sessionHome(t)
	d, err := ServeHome(h, HostOptions{})
	if err != nil {
		t.Fatal(err)
	}
	logs := &testutil.SyncBuffer{}
	ctx, cancel := context.WithTimeout(context.Background(), callTimeout)
	defer cancel()
	s, err := Attach(ctx, h, HostOptions{TakeOverDelay: testTakeOver, Logger: slog.New(slog.NewTextHandler(logs, nil))})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	d.Close()
	for i := range 3 {
		if _, err := call(t, func(ctx context.Context) (node.Status, error) { return s.Status(ctx) }); codeOf(err) != node.CodeUnavailable {
			t.Fatalf("call %d with the daemon down: %v", i, err)
		}
	}
	if n := strings.Count(logs.String(), "waiting for it to come back"); n != 1 {
		t.Fatalf("the session waited for the daemon %d times, want once:\n%s", n, logs.String())
	}
	if d, err = ServeHome(h, HostOptions{}); err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	deliver(t, h, bob, "back")
	received(t, s, "back")
	// Gone again: it waits once more.
	d.Close()
	if _, err := call(t, func(ctx context.Context) (node.Status, error) { return s.Status(ctx) }); codeOf(err) != node.CodeUnavailable {
		t.Fatalf("with the daemon down again: %v", err)
	}
	if n := strings.Count(logs.String(), "waiting for it to come back"); n != 2 {
		t.Fatalf("the session waited for the daemon %d times after it went away twice, want 2:\n%s", n, logs.String())
	}
}

// The node a session serves tells attached clients it is embedded, so
// that they take over from it; a daemon's does not.
func TestSelfEmbedded(t *testing.T) {
	h, _ := sessionHome(t)
	s := attach(t, h)
	if !s.Serving() {
		t.Fatal("the first session does not serve the home")
	}
	self, err := call(t, func(ctx context.Context) (node.Self, error) { return NewClient(h.ControlPath()).Self(ctx) })
	if err != nil || !self.Embedded {
		t.Fatalf("the session's node: %+v, %v", self, err)
	}
	s.Close()
	d, err := ServeHome(h, HostOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	self, err = call(t, func(ctx context.Context) (node.Self, error) { return NewClient(h.ControlPath()).Self(ctx) })
	if err != nil || self.Embedded {
		t.Fatalf("a daemon's node: %+v, %v", self, err)
	}
}

// A call that changes nothing, under way when the daemon stops, is made
// again on the daemon that serves the home next instead of failing with
// "shutting down".
func TestReadCallSurvivesDaemonRestart(t *testing.T) {
	h, _ := sessionHome(t)
	d, err := ServeHome(h, HostOptions{})
	if err != nil {
		t.Fatal(err)
	}
	s := attach(t, h)
	type outcome struct {
		b   node.Batch
		err error
	}
	done := make(chan outcome, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), callTimeout)
		defer cancel()
		b, err := s.Receive(ctx, node.Query{Wait: 2 * time.Second})
		done <- outcome{b, err}
	}()
	time.Sleep(300 * time.Millisecond) // the wait is under way in the daemon
	d.Close()
	d, err = ServeHome(h, HostOptions{})
	if err != nil {
		t.Fatalf("the daemon's restart: %v", err)
	}
	defer d.Close()
	if o := <-done; o.err != nil {
		t.Fatalf("a read under way when the daemon stopped: %v", o.err)
	}
	if s.Serving() {
		t.Fatal("the session took the home over from the restarted daemon")
	}
}
