package control

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/meerkatd/meerkatd/comms/node"
	"github.com/meerkatd/meerkatd/config"
	"github.com/meerkatd/meerkatd/identity"
	"github.com/meerkatd/meerkatd/internal/filemode"
	"github.com/meerkatd/meerkatd/internal/testutil"
	"github.com/meerkatd/meerkatd/transport"
	"github.com/meerkatd/meerkatd/trust"
)

// testHome is a home in a short temporary directory (socket paths must
// fit) that trusts "bob" at an address where nothing listens, with a
// memory inbox and an outbox that retries every 20 ms.
func testHome(t testing.TB) *node.Home {
	t.Helper()
	if _, ok := t.(*testing.T); ok { // the fuzzing engine runs goroutines of its own
		testutil.CheckGoroutines(t) // first: it runs after the cleanups that stop the node
	}
	dir, err := os.MkdirTemp("", "mkc")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	h, _, err := node.OpenHome(dir, node.OpenOptions{Create: true})
	if err != nil {
		t.Fatal(err)
	}
	h.Config.Store.Mode = config.StoreMemory
	h.Config.Outbox.Backoff = "20ms"
	bob, _ := identity.GenerateKeypair()
	l, err := trust.New(trust.Peer{Name: "bob", ID: bob.ID(), Addr: transport.Addr{Scheme: transport.SchemeUDS, Path: "/nonexistent/bob.sock"}})
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Save(h.TrustPath()); err != nil {
		t.Fatal(err)
	}
	return h
}

// served runs the node of a test home with its control socket until the
// test ends, and returns a client of it.
func served(t *testing.T) (*Served, *Client) {
	t.Helper()
	h := testHome(t)
	sv, err := ServeHome(h, HostOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(sv.Close)
	return sv, NewClient(h.ControlPath())
}

// servedWith starts a serving node on a new home and serves its control
// socket with opts (Serve itself, not ServeHome), both stopped at the
// end of the test.
func servedWith(t *testing.T, opts Options) *node.Home {
	t.Helper()
	h := testHome(t)
	n, err := node.Start(h, node.Options{Mode: node.ModeServe})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { n.Close() })
	serveAt(t, h.ControlPath(), n, opts)
	return h
}

func codeOf(err error) string {
	var e *node.Error
	if errors.As(err, &e) {
		return e.Code
	}
	return ""
}

// waitFor polls f until it holds, failing t after d.
func waitFor(t *testing.T, d time.Duration, what string, f func() bool) {
	t.Helper()
	testutil.WaitFor(t, d, what, f)
}

// The control operations carry the send options, the outbox views and
// the error codes to a client in another process.
func TestClientOutbox(t *testing.T) {
	_, c := served(t)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if _, err := c.SendMessage(ctx, "bob", "x", node.SendOptions{}); codeOf(err) != node.CodePeerOffline {
		t.Fatalf("direct: %v", err)
	}
	sent, err := c.SendMessage(ctx, "bob", "x", node.SendOptions{Reliable: true, TTL: 2 * time.Second})
	if err != nil || sent.Delivery != node.DeliveryQueued || sent.LastError == "" {
		t.Fatalf("reliable: %+v, %v", sent, err)
	}
	peers, err := c.Peers(ctx)
	if err != nil || len(peers) != 1 || peers[0].Queued != 1 || peers[0].LastError == "" {
		t.Fatalf("peers: %+v, %v", peers, err)
	}
	o, err := c.Outbox(ctx)
	if err != nil || len(o.Entries) != 1 || o.Entries[0].ID != sent.ID || o.Entries[0].Expires == nil || len(o.Peers) != 1 {
		t.Fatalf("outbox: %+v, %v", o, err)
	}
	var dl []node.DeadLetter
	waitFor(t, 10*time.Second, "the dead letter", func() bool {
		dl, err = c.DeadLetters(ctx)
		return err == nil && len(dl) == 1
	})
	if dl[0].ID != sent.ID || !strings.HasPrefix(dl[0].Reason, "expired") {
		t.Fatalf("dead letter %+v", dl[0])
	}
	if _, err := c.RetryDeadLetters(ctx, []string{"bad"}, false); codeOf(err) != node.CodeBadArgument {
		t.Fatalf("retry a bad id: %v", err)
	}
	if n, err := c.RetryDeadLetters(ctx, nil, true); err != nil || n != 1 {
		t.Fatalf("retry all: %d, %v", n, err)
	}
	if _, err := c.RetryOutbox(ctx, "nobody"); codeOf(err) != node.CodeUnknownPeer {
		t.Fatalf("retry the outbox of an unknown peer: %v", err)
	}
	// The revived send is queued for bob, who is down: a retry makes it
	// due (once it is not being attempted at that very moment).
	waitFor(t, 10*time.Second, "a retry making bob's send due", func() bool {
		n, err := c.RetryOutbox(ctx, "bob")
		return err == nil && n == 1
	})
	if n, err := c.RetryOutbox(ctx, ""); err != nil || n > 1 {
		t.Fatalf("retry every peer: %d, %v", n, err)
	}
	// A sub-millisecond ttl is not lost on the way (0 would mean "none").
	sent, err = c.SendMessage(ctx, "bob", "y", node.SendOptions{Reliable: true, TTL: time.Microsecond, NoWait: true})
	if err != nil {
		t.Fatal(err)
	}
	o, _ = c.Outbox(ctx)
	for _, e := range o.Entries {
		if e.ID == sent.ID && e.Expires == nil {
			t.Fatalf("a 1µs ttl arrived as none: %+v", e)
		}
	}
	if _, err := c.SendResponse(ctx, "bob", identity.NewUUID().String(), "completed", nil, node.SendOptions{}); codeOf(err) != node.CodeUnknownRequest {
		t.Fatalf("a response to a request never received: %v", err)
	}
}

// Params and results keep their exact JSON through the socket: integers
// stay integers.
func TestClientKeepsJSONValues(t *testing.T) {
	m := node.Message{ID: "x", Params: json.RawMessage(`{"n":12345678901234567890,"f":1.5}`)}
	b, err := json.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	var back node.Message
	if err := json.Unmarshal(b, &back); err != nil {
		t.Fatal(err)
	}
	raw, ok := back.Params.(json.RawMessage)
	if !ok || string(raw) != `{"n":12345678901234567890,"f":1.5}` || back.Result != nil {
		t.Fatalf("params came back as %#v, result %#v", back.Params, back.Result)
	}
}

// A process of another user is refused before any operation runs: the
// server asks the kernel who connected.
func TestServerRefusesOtherUser(t *testing.T) {
	other := uint32(os.Getuid()) + 1
	h := servedWith(t, Options{allowUID: &other})
	c := NewClient(h.ControlPath())
	if _, err := c.Self(context.Background()); codeOf(err) != node.CodeForbidden {
		t.Fatalf("a client of the wrong user: %v", err)
	}
	if _, err := c.SendMessage(context.Background(), "bob", "x", node.SendOptions{}); codeOf(err) != node.CodeForbidden {
		t.Fatalf("a send from the wrong user: %v", err)
	}
}

// With a real second user (the test runs as root): a process running as
// nobody that reaches the socket (its mode opened up for the test) is
// refused by the uid check.
func TestServerRefusesOtherUserProcess(t *testing.T) {
	if os.Getuid() != 0 {
		t.Log("not root: the uid check is covered by TestServerRefusesOtherUser only")
		return
	}
	if os.Getenv("MEERKAT_CONTROL_PROBE") != "" {
		return // the probe runs in TestMain's child
	}
	_, c := served(t)
	if err := os.Chmod(c.path, 0o666); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(filepath.Dir(c.path), 0o755); err != nil {
		t.Fatal(err)
	}
	out, err := probeAs(t, 65534, c.path)
	if err != nil {
		t.Fatalf("probe: %v: %s", err, out)
	}
	var resp Response
	if err := json.Unmarshal(out, &resp); err != nil {
		t.Fatalf("probe output %q: %v", out, err)
	}
	if resp.OK || resp.Code != node.CodeForbidden {
		t.Fatalf("a process of uid 65534 got %+v", resp)
	}
}

// The client refuses a control socket that belongs to another user: that
// user could read what it sends.
func TestClientRefusesForeignSocket(t *testing.T) {
	_, c := served(t)
	c.uid = os.Getuid() + 1
	if _, err := c.Self(context.Background()); codeOf(err) != node.CodeForbidden || !strings.Contains(err.Error(), "belongs to user") {
		t.Fatalf("a socket of another user: %v", err)
	}
	if os.Getuid() == 0 {
		c.uid = 0
		if err := os.Lchown(c.path, 65534, 65534); err != nil {
			t.Fatal(err)
		}
		if _, err := c.Self(context.Background()); codeOf(err) != node.CodeForbidden {
			t.Fatalf("a socket chowned to nobody: %v", err)
		}
	}
	dir := t.TempDir()
	notSock := filepath.Join(dir, "control.sock")
	os.WriteFile(notSock, nil, 0o600)
	if _, err := NewClient(notSock).Self(context.Background()); codeOf(err) != node.CodeForbidden {
		t.Fatalf("a regular file as the socket: %v", err)
	}
	if _, err := NewClient(filepath.Join(dir, "none.sock")).Self(context.Background()); !errors.Is(err, ErrNoDaemon) {
		t.Fatalf("no socket: %v", err)
	}
}

// The control socket is created private, whatever the umask.
func TestControlSocketMode(t *testing.T) {
	old := syscall.Umask(0)
	defer syscall.Umask(old)
	_, c := served(t)
	fi, err := os.Lstat(c.path)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm()&0o077 != 0 {
		t.Fatalf("control socket mode %v", fi.Mode().Perm())
	}
}

// rawCall sends one raw line and reads the reply.
func rawCall(t *testing.T, path string, line []byte) Response {
	t.Helper()
	conn, err := net.Dial("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(20 * time.Second))
	// A refused connection may be closed before the request is written:
	// its answer is read all the same.
	conn.Write(line)
	reply, err := readReply(bufio.NewReader(conn))
	if err != nil {
		t.Fatalf("no reply: %v", err)
	}
	var r Response
	if err := json.Unmarshal(reply, &r); err != nil {
		t.Fatalf("reply %q: %v", reply, err)
	}
	return r
}

// Hostile or broken requests get an error, never a crash, and the server
// keeps serving.
func TestServerBadRequests(t *testing.T) {
	_, c := served(t)
	for _, tc := range []struct {
		line string
		code string
	}{
		{"not json\n", node.CodeBadArgument},
		{`{"op":"frobnicate"}` + "\n", node.CodeBadArgument},
		{`{"op":"send_message","args":[1,2]}` + "\n", node.CodeBadArgument},
		{`{"op":"receive","args":{"limit":"many"}}` + "\n", node.CodeBadArgument},
		{`{"op":"send_message","args":{"peer":"carol","body":"x"}}` + "\n", node.CodeUnknownPeer},
		{`{"op":"ack","args":{"from":"carol","up_to":3}}` + "\n", node.CodeUnknownPeer},
	} {
		r := rawCall(t, c.path, []byte(tc.line))
		if r.OK || r.Code != tc.code {
			t.Errorf("%q: %+v, want code %s", tc.line, r, tc.code)
		}
	}
	long := append([]byte(`{"op":"self","args":"`), make([]byte, MaxRequest)...)
	if r := rawCall(t, c.path, append(long, '"', '}', '\n')); r.OK || r.Code != node.CodeBadArgument {
		t.Errorf("a request over %d bytes: %+v", MaxRequest, r)
	}
	if _, err := c.Self(context.Background()); err != nil {
		t.Fatalf("after bad requests: %v", err)
	}
}

// Beyond MaxConns connections at once, a new one is told the socket is
// busy instead of hanging.
func TestServerBoundsConnections(t *testing.T) {
	h := servedWith(t, Options{MaxConns: 2})
	var held []net.Conn
	for range 2 {
		conn, err := net.Dial("unix", h.ControlPath())
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		held = append(held, conn)
	}
	// The held connections take both slots once the server accepted
	// them; a third is refused as busy.
	var r Response
	waitFor(t, 10*time.Second, "a busy answer", func() bool {
		r = rawCall(t, h.ControlPath(), []byte(`{"op":"self"}`+"\n"))
		return !r.OK && r.Code == node.CodeUnavailable
	})
	for _, c := range held {
		c.Close()
	}
	waitFor(t, 10*time.Second, "a free slot", func() bool {
		return rawCall(t, h.ControlPath(), []byte(`{"op":"self"}`+"\n")).OK
	})
}

// Calls that wait take at most three quarters of the connections: with
// those all waiting, another wait is told so at once, and a call that
// does not wait (status) is still answered.
func TestWaitsLeaveRoomForOtherCalls(t *testing.T) {
	h := servedWith(t, Options{MaxConns: 8})
	wait := []byte(`{"op":"receive","args":{"wait":20000000000}}` + "\n")
	var wg sync.WaitGroup
	defer wg.Wait() // after the connections are closed
	// 8 connections, less the quarter kept from waits.
	for range 6 {
		conn, err := net.Dial("unix", h.ControlPath())
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		// Asked again while refused: a probe below may hold a wait
		// slot for its millisecond as this one comes.
		wg.Go(func() {
			br := bufio.NewReader(conn)
			for {
				if _, err := conn.Write(wait); err != nil {
					return
				}
				reply, err := readReply(br)
				if err != nil || !bytes.Contains(reply, []byte(node.CodeUnavailable)) {
					return
				}
			}
		})
	}
	// A connection just closed may hold its slot a moment longer: a call
	// refused for that (the socket busy) is made again.
	call := func(line string) (r Response) {
		waitFor(t, 10*time.Second, "a connection slot", func() bool {
			r = rawCall(t, h.ControlPath(), []byte(line+"\n"))
			return !strings.Contains(r.Error, "too many connections")
		})
		return r
	}
	// Once the six are waiting, a seventh (of a millisecond, so that one
	// let through before them returns at once) is refused.
	var r Response
	waitFor(t, 10*time.Second, "a seventh wait refused", func() bool {
		r = call(`{"op":"receive","args":{"wait":1000000}}`)
		return !r.OK
	})
	if r.Code != node.CodeUnavailable || !strings.Contains(r.Error, "6 calls are waiting") {
		t.Fatalf("a seventh wait: %+v, want unavailable naming the 6 waiting", r)
	}
	for _, line := range []string{`{"op":"send_request","args":{"peer":"bob","intent":"x","options":{"wait":20000000000}}}`,
		`{"op":"space_send","args":{"space":"s","kind":"chat","wait":20000000000}}`} {
		if r := call(line); r.Code != node.CodeUnavailable || !strings.Contains(r.Error, "calls are waiting") {
			t.Fatalf("%s with every wait slot taken: %+v, want unavailable", line, r)
		}
	}
	for _, line := range []string{`{"op":"status"}`, `{"op":"receive","args":{"limit":1}}`, `{"op":"wait_task","args":{"task_id":"x"}}`} {
		if r := call(line); r.Code == node.CodeUnavailable {
			t.Fatalf("%s with every wait slot taken: %+v", line, r)
		}
	}
}

// FuzzServerRequest feeds arbitrary request lines to the server's
// handler over a node: it must answer each with a valid response and
// never panic.
func FuzzServerRequest(f *testing.F) {
	for _, s := range []string{`{"op":"self"}`, `{"op":"receive","args":{"limit":5,"kinds":["message"]}}`,
		`{"op":"ack","args":{"seqs":[1,2,3]}}`, `{"op":"send_message","args":{"peer":"bob","body":"hi","options":{"reliable":true,"ttl":-5}}}`,
		`{"op":"pair_wait","args":{"id":"zz"}}`, `{"op":"drop_dead_letters","args":{"all":true}}`, `{}`, `[]`, `null`} {
		f.Add([]byte(s))
	}
	h := testHome(f)
	n, err := node.Start(h, node.Options{Mode: node.ModeServe})
	if err != nil {
		f.Fatal(err)
	}
	defer n.Close()
	f.Fuzz(func(t *testing.T, line []byte) {
		var req Request
		if json.Unmarshal(line, &req) != nil {
			return
		}
		// Operations that wait (receive, pair_wait, sends) end with this
		// context.
		ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
		defer cancel()
		s := &server{api: n, opts: Options{SendTimeout: time.Second, Logger: slog.New(slog.DiscardHandler)}, ctx: ctx, waits: make(chan struct{}, 1)}
		resp := s.handle(ctx, req)
		if resp.OK == (resp.Code != "") {
			t.Fatalf("response %+v: ok and code disagree", resp)
		}
		if _, err := json.Marshal(resp); err != nil {
			t.Fatal(err)
		}
	})
}

// Of several processes (here goroutines) serving one home at the same
// instant, exactly one does; the others are told another one serves it.
func TestServeHomeOnce(t *testing.T) {
	h := testHome(t)
	const n = 8
	start := make(chan struct{})
	type outcome struct {
		sv  *Served
		err error
	}
	out := make(chan outcome, n)
	for range n {
		go func() {
			<-start
			sv, err := ServeHome(h, HostOptions{})
			out <- outcome{sv, err}
		}()
	}
	close(start)
	served := 0
	for range n {
		o := <-out
		switch {
		case o.err == nil:
			served++
			defer o.sv.Close()
		case !errors.Is(o.err, ErrServing):
			t.Errorf("ServeHome: %v, want ErrServing", o.err)
		}
	}
	if served != 1 {
		t.Fatalf("%d of %d concurrent ServeHome serve the home, want 1", served, n)
	}
}

// parseReply turns every reply into a result or a coded error.
func TestParseReply(t *testing.T) {
	for _, tc := range []struct {
		reply string
		code  string // "" for success
		id    string // the Sent decoded
	}{
		{`{"ok":true,"result":{"id":"a","peer":"bob","delivery":"acked"}}`, "", "a"},
		{`{"ok":false,"code":"peer_offline","error":"no ack","result":{"id":"b"}}`, node.CodePeerOffline, "b"},
		{`{"ok":false,"error":"no code"}`, node.CodeInternal, ""},
		{`{"ok":true,"result":[1,2]}`, node.CodeInternal, ""},
		{`{"ok":false,"code":"unknown_peer","result":[1,2]}`, node.CodeUnknownPeer, ""},
		{`not json`, node.CodeInternal, ""},
		{``, node.CodeInternal, ""},
		{`{"ok":true}`, "", ""},
	} {
		var s node.Sent
		err := parseReply([]byte(tc.reply), &s)
		if codeOf(err) != tc.code || s.ID != tc.id {
			t.Errorf("%q: %+v, %v; want code %q, id %q", tc.reply, s, err, tc.code, tc.id)
		}
	}
}

// A call the daemon failed because it was stopping is reported as one the
// daemon stopped during, which may or may not have taken effect: not as
// "the node is shutting down", which leaves a caller guessing whether to
// send again.
func TestParseReplyClosing(t *testing.T) {
	err := parseReply([]byte(`{"ok":false,"code":"unavailable","error":"the node is shutting down","closing":true}`), nil)
	if !errors.Is(err, ErrConnLost) || codeOf(err) != node.CodeUnavailable {
		t.Fatalf("%v: want unavailable, ErrConnLost", err)
	}
	for _, want := range []string{"the daemon stopped during the call (the node is shutting down)", "may or may not have taken effect", "idempotency key"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("%q does not say %q", err, want)
		}
	}
}

// FuzzParseReply: any reply is a result or an error, never a panic.
func FuzzParseReply(f *testing.F) {
	for _, s := range []string{`{"ok":true,"result":{"messages":[{"seq":1,"params":{"a":1}}],"cursor":1}}`,
		`{"ok":false,"code":"x","error":"y"}`, `{"result":null}`, `[]`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, reply []byte) {
		var b node.Batch
		err := parseReply(reply, &b)
		if err != nil && codeOf(err) == "" {
			t.Fatalf("an error without a code: %v", err)
		}
	})
}

// waitingAPI is a node.API whose Receive waits until its context ends
// and reports that it ended.
type waitingAPI struct {
	node.API
	started, ended chan struct{}
}

func newWaitingAPI() waitingAPI {
	return waitingAPI{started: make(chan struct{}), ended: make(chan struct{})}
}

func (w waitingAPI) Receive(ctx context.Context, q node.Query) (node.Batch, error) {
	close(w.started)
	<-ctx.Done()
	close(w.ended)
	return node.Batch{}, ctx.Err()
}

// hangUpMidCall makes a waiting Receive call to the server at path, hangs
// up once api runs it, and checks that the call failed on the client and
// ended on the server.
func hangUpMidCall(t *testing.T, path string, api waitingAPI) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	errc := make(chan error, 1)
	go func() {
		_, err := NewClient(path).Receive(ctx, node.Query{Wait: node.MaxWait})
		errc <- err
	}()
	select {
	case <-api.started:
	case <-time.After(10 * time.Second):
		t.Fatal("the call did not reach the server in 10s")
	}
	cancel()
	if err := <-errc; err == nil {
		t.Fatal("the client's call outlived its hang-up")
	}
	select {
	case <-api.ended:
	case <-time.After(10 * time.Second):
		t.Fatal("the server still runs the call of a client that hung up")
	}
}

// A call whose client hangs up (an interrupted inbox --wait, a cancelled
// MCP wait) ends at once, not when its wait would have: else it holds one
// of the server's few connection slots all that time.
func TestServerCancelsCallOfClientThatHungUp(t *testing.T) {
	testutil.CheckGoroutines(t)
	path := tempSocket(t)
	api := newWaitingAPI()
	serveAt(t, path, api, Options{})
	hangUpMidCall(t, path, api)
}

// A connection carries one request after another: the server's watch for
// a hang-up does not lose the start of the next request.
func TestServerKeepsNextRequest(t *testing.T) {
	_, c := served(t)
	conn, err := net.Dial("unix", c.path)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(20 * time.Second))
	br := bufio.NewReader(conn)
	// The second request is written while the first is being handled.
	if _, err := conn.Write([]byte(`{"op":"receive","args":{"wait":200000000}}` + "\n" + `{"op":"self"}` + "\n")); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"messages", "pubkey"} {
		reply, err := readReply(br)
		if err != nil {
			t.Fatal(err)
		}
		var r Response
		if err := json.Unmarshal(reply, &r); err != nil || !r.OK || !strings.Contains(string(r.Result), want) {
			t.Fatalf("reply %s (%v), want a result with %q", reply, err, want)
		}
	}
}

// A call that reaches its own deadline says so (context.DeadlineExceeded),
// not that the daemon's socket broke: the connection's deadline is the
// context's, and the read may time out a moment before the context
// reports it.
func TestClientCallDeadline(t *testing.T) {
	testutil.CheckGoroutines(t)
	path := tempSocket(t)
	serveAt(t, path, waitForever{}, Options{})
	for range 20 {
		cctx, ccancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
		_, err := NewClient(path).Receive(cctx, node.Query{Wait: node.MaxWait})
		ccancel()
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("a call past its deadline: %v (code %q), want context.DeadlineExceeded", err, codeOf(err))
		}
	}
}

// waitForever is a node.API whose Receive waits until its context ends.
type waitForever struct{ node.API }

func (waitForever) Receive(ctx context.Context, q node.Query) (node.Batch, error) {
	<-ctx.Done()
	return node.Batch{}, ctx.Err()
}

// serveAt serves api on a control socket at path until the test ends.
func serveAt(t *testing.T, path string, api node.API, opts Options) {
	t.Helper()
	ln, err := transport.Listen(context.Background(), transport.Addr{Scheme: transport.SchemeUDS, Path: path})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		Serve(ctx, ln, api, opts)
	}()
	t.Cleanup(func() { cancel(); <-done })
}

// tempSocket is a control socket path in a short temporary directory.
func tempSocket(t *testing.T) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "mkc")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	return filepath.Join(dir, "control.sock")
}

// WaitServing reports a node that comes up while it waits, and gives up
// after its bound when none does.
func TestWaitServing(t *testing.T) {
	h := testHome(t)
	if WaitServing(h.ControlPath(), 200*time.Millisecond) {
		t.Fatal("WaitServing reports a node before any serves the home")
	}
	up := make(chan *Served, 1)
	go func() {
		time.Sleep(300 * time.Millisecond) // WaitServing is polling by now
		sv, err := ServeHome(h, HostOptions{})
		if err != nil {
			t.Error(err)
		}
		up <- sv
	}()
	ok := WaitServing(h.ControlPath(), 30*time.Second)
	if sv := <-up; sv != nil {
		defer sv.Close()
	}
	if !ok {
		t.Fatal("WaitServing missed the node that came up")
	}
}

// A keygen between opening a home and serving it (it takes the home's
// lock only while it writes) does not leave a node serving the old key
// while the home holds the new one: ServeHome reads the identity again
// once it holds the lock, and refuses.
func TestServeHomeRefusesAReplacedKey(t *testing.T) {
	h := testHome(t)
	if err := node.Keygen(h.Dir, true); err != nil {
		t.Fatal(err)
	}
	sv, err := ServeHome(h, HostOptions{})
	if err == nil {
		sv.Close()
		t.Fatal("ServeHome served a home whose identity was replaced after it was opened")
	}
	if codeOf(err) != node.CodeUnavailable || !strings.Contains(err.Error(), "changed") {
		t.Fatalf("ServeHome: %v (code %q), want unavailable, the identity changed", err, codeOf(err))
	}
	h2, _, err := node.OpenHome(h.Dir, node.OpenOptions{})
	if err != nil {
		t.Fatal(err)
	}
	sv, err = ServeHome(h2, HostOptions{})
	if err != nil {
		t.Fatalf("ServeHome after opening the home again: %v", err)
	}
	sv.Close()
}

// A control socket removed while the node runs leaves every command
// without a way in until it is made again (TestControlSocketMadeAgain):
// the node's status and /readyz say so, and a second start says why it
// cannot serve the home (instead of pointing at status, which cannot
// reach the node either).
func TestControlSocketRemoved(t *testing.T) {
	was := controlSocketCheck
	controlSocketCheck = time.Hour // not made again during the test
	t.Cleanup(func() { controlSocketCheck = was })
	h := testHome(t)
	sv, err := ServeHome(h, HostOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(sv.Close)
	ctx := context.Background()
	if st, err := sv.Node.Status(ctx); err != nil || len(st.Problems) != 0 {
		t.Fatalf("status: problems %q, %v; want none", st.Problems, err)
	}
	if err := os.Remove(h.ControlPath()); err != nil {
		t.Fatal(err)
	}
	st, err := sv.Node.Status(ctx)
	if err != nil || len(st.Problems) != 1 || !strings.Contains(st.Problems[0], h.ControlPath()+" was removed") {
		t.Fatalf("status after the control socket was removed: problems %q, %v", st.Problems, err)
	}
	dctx, cancel := context.WithCancel(ctx)
	cancel() // it must refuse at once, not serve
	err = RunDaemon(dctx, h, DaemonOptions{})
	if err == nil || !strings.Contains(err.Error(), "its control socket "+h.ControlPath()+" is not there") {
		t.Fatalf("RunDaemon while the node serves without its control socket: %v", err)
	}
}

// A serving host makes its control socket again when the file is
// removed, so commands reach the node rather than run one of their own;
// a file someone put in its place is left there.
func TestControlSocketMadeAgain(t *testing.T) {
	was := controlSocketCheck
	controlSocketCheck = 10 * time.Millisecond
	t.Cleanup(func() { controlSocketCheck = was })
	h := testHome(t)
	sv, err := ServeHome(h, HostOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(sv.Close)
	ctx := context.Background()
	for round := range 2 {
		if err := os.Remove(h.ControlPath()); err != nil {
			t.Fatal(err)
		}
		waitFor(t, 10*time.Second, "the control socket made again", func() bool {
			c, err := Dial(ctx, h.ControlPath())
			if err != nil {
				return false
			}
			_, err = c.Self(ctx)
			return err == nil
		})
		if st, err := sv.Node.Status(ctx); err != nil || len(st.Problems) != 0 {
			t.Fatalf("round %d: status once the socket is back: problems %q, %v", round, st.Problems, err)
		}
	}
	// Replaced by another file at once (a rename): left alone.
	tmp := h.ControlPath() + ".tmp"
	if err := os.WriteFile(tmp, []byte("not a socket"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, h.ControlPath()); err != nil {
		t.Fatal(err)
	}
	time.Sleep(20 * controlSocketCheck) // checks that must leave it
	if b, err := os.ReadFile(h.ControlPath()); err != nil || string(b) != "not a socket" {
		t.Fatalf("the file put at the control socket's path: %q, %v", b, err)
	}
	st, err := sv.Node.Status(ctx)
	if err != nil || len(st.Problems) != 1 || !strings.Contains(st.Problems[0], "replaced by another file") {
		t.Fatalf("status with the socket replaced: problems %q, %v", st.Problems, err)
	}
}

// DaemonDespite answers through a running daemon when the home's
// configuration does not load, but never when the home's files or
// directories are unsafe (another user could have put a socket of their
// own in the daemon's place), nor without a daemon.
func TestDaemonDespite(t *testing.T) {
	h := testHome(t)
	var warn strings.Builder
	cfgErr := &node.Error{Code: node.CodeBadConfig, Msg: "meerkat.toml: line 2: expected ']'"}
	if b, err := DaemonDespite(h.Dir, cfgErr, &warn); b != nil || err != cfgErr {
		t.Fatalf("without a daemon: %v, %v", b, err)
	}
	sv, err := ServeHome(h, HostOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(sv.Close)
	b, err := DaemonDespite(h.Dir, cfgErr, &warn)
	if err != nil || b == nil || !b.Daemon || !strings.Contains(warn.String(), "warning: meerkat.toml: line 2") {
		t.Fatalf("with a daemon: %v, %v; warned %q", b, err, warn.String())
	}
	if _, err := b.Self(context.Background()); err != nil {
		t.Fatal(err)
	}
	for _, e := range []error{
		&node.Error{Code: node.CodeBadConfig, Msg: "the home is writable by others", Err: fmt.Errorf("%s: %w", h.Dir, filemode.ErrUnsafe)},
		&node.Error{Code: node.CodeUnavailable, Msg: "something else"},
	} {
		if b, err := DaemonDespite(h.Dir, e, io.Discard); b != nil || err != e {
			t.Errorf("%v: %v, %v; want the error", e, b, err)
		}
	}
}
