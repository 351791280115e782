package bench

// The processes of a run: the node under test (a real `meerkatd run` in a
// temporary home made by `meerkatd init`), the raw echo server of the
// anchors (`meerkatd bench echo`, hidden), and the bench's own peers,
// which talk to the node with the project's code (comms.Router) or, where
// one connection per envelope is the point, raw frames.

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/meerkatd/meerkatd/comms"
	"github.com/meerkatd/meerkatd/comms/natsrelay"
	"github.com/meerkatd/meerkatd/comms/wire"
	"github.com/meerkatd/meerkatd/config"
	"github.com/meerkatd/meerkatd/identity"
	"github.com/meerkatd/meerkatd/transport"
	"github.com/meerkatd/meerkatd/trust"
)

// Bounds on the bench's child processes.
const (
	readyTimeout = 15 * time.Second // a node must listen this soon after exec
	stopTimeout  = 5 * time.Second  // then SIGKILL
	ackTimeout   = 10 * time.Second // comms.ack_timeout of nodes and peers
	statusBound  = 10 * time.Second // one `status --json`
)

// body is the ~100-byte message body every scenario sends.
var body = strings.Repeat("m", 100)

// runner is the state of one `meerkatd bench`: the temporary root that
// holds every home and socket, the peers' identities, and the children
// that must die with it.
type runner struct {
	opts     settings
	exe      string
	root     string   // removed by cleanup
	env      []string // base environment of every child
	peers    []*identity.Keypair
	flooder  *identity.Keypair // trusted; sends envelopes with bad signatures
	stranger *identity.Keypair // never trusted
	log      io.Writer         // progress (stderr)

	mu       sync.Mutex
	homes    int
	children map[*child]struct{}
}

// ChildEnv is the environment for a meerkatd child process: this
// process's, without MEERKAT_* settings that would change its
// configuration, and with GORACE atexit_sleep_ms=0 (a race-built child
// would otherwise sleep a second at every exit).
func ChildEnv() []string {
	var env []string
	gorace := "atexit_sleep_ms=0"
	for _, kv := range os.Environ() {
		switch {
		case strings.HasPrefix(kv, "MEERKAT_"):
		case strings.HasPrefix(kv, "GORACE="):
			gorace = strings.TrimPrefix(kv, "GORACE=") + " " + gorace
		default:
			env = append(env, kv)
		}
	}
	return append(env, "GORACE="+gorace)
}

// numPeers is how many trusted peer identities the node knows: the
// 16-connection closed loop uses all of them.
const numPeers = 16

func newRunner(opts settings, exe string, log io.Writer) (*runner, error) {
	root, err := os.MkdirTemp("", "mkbench")
	if err != nil {
		return nil, err
	}
	b := &runner{opts: opts, exe: exe, root: root, log: log, children: map[*child]struct{}{}}
	// Nodes announce themselves for local discovery in the run's own
	// directory, not the user's.
	rt := filepath.Join(root, "run")
	if err := os.Mkdir(rt, 0o700); err != nil {
		os.RemoveAll(root)
		return nil, err
	}
	b.env = append(ChildEnv(), "XDG_RUNTIME_DIR="+rt)
	gen := func() *identity.Keypair {
		kp, e := identity.GenerateKeypair()
		if e != nil && err == nil {
			err = e
		}
		return kp
	}
	for range numPeers {
		b.peers = append(b.peers, gen())
	}
	b.flooder, b.stranger = gen(), gen()
	if err != nil {
		os.RemoveAll(root)
		return nil, err
	}
	return b, nil
}

// cleanup kills every child still running and removes the root.
func (b *runner) cleanup() {
	b.mu.Lock()
	kids := make([]*child, 0, len(b.children))
	for c := range b.children {
		kids = append(kids, c)
	}
	b.mu.Unlock()
	for _, c := range kids {
		c.kill()
	}
	os.RemoveAll(b.root)
}

// path returns a new path in the root, starting with prefix.
func (b *runner) path(prefix string) string {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.homes++
	return filepath.Join(b.root, prefix+strconv.Itoa(b.homes))
}

// child is a child process and the channel closed when it exited.
type child struct {
	b     *runner
	cmd   *exec.Cmd
	done  chan struct{}
	stdin io.Closer // the echo process ends when it closes
}

// startChild starts cmd, registered for cleanup, and then closes
// closeAfterStart (our copies of files the child inherited). The child
// gets SIGKILL if this process dies first (Linux).
func (b *runner) startChild(cmd *exec.Cmd, closeAfterStart ...io.Closer) (*child, error) {
	cmd.SysProcAttr = sysProcAttr()
	err := cmd.Start()
	for _, f := range closeAfterStart {
		f.Close()
	}
	if err != nil {
		return nil, err
	}
	c := &child{b: b, cmd: cmd, done: make(chan struct{})}
	b.mu.Lock()
	b.children[c] = struct{}{}
	b.mu.Unlock()
	go func() {
		cmd.Wait()
		close(c.done)
	}()
	return c, nil
}

func (c *child) exited() bool {
	select {
	case <-c.done:
		return true
	default:
		return false
	}
}

// stop sends SIGTERM and waits, with SIGKILL after a bound.
func (c *child) stop() {
	c.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-c.done:
	case <-time.After(stopTimeout):
		c.cmd.Process.Kill()
		<-c.done
	}
	c.forget()
}

// finish ends the echo process by closing its stdin, so that it exits on
// its own (and writes its profile under MEERKATD_CPUPROFILE), with
// SIGKILL after a bound.
func (c *child) finish() {
	c.stdin.Close()
	select {
	case <-c.done:
		c.forget()
	case <-time.After(stopTimeout):
		c.kill()
	}
}

func (c *child) kill() {
	c.cmd.Process.Kill()
	<-c.done
	c.forget()
}

func (c *child) forget() {
	c.b.mu.Lock()
	delete(c.b.children, c)
	c.b.mu.Unlock()
}

func (c *child) pid() int { return c.cmd.Process.Pid }

// node is a node under test: a home and, while it runs, its
// `meerkatd run` process.
type node struct {
	b     *runner
	home  string
	id    identity.PeerID
	addr  transport.Addr
	env   []string
	log   string
	child *child
	// relayed is trNATS or trNATSUnsealed when the node is reached
	// through the NATS server of natsURL, "" otherwise.
	relayed, natsURL string
}

// newNode creates a home that trusts the bench's peers and the flooder,
// listening on one address of the given transport; storeMode is
// config.StoreMemory or config.StoreSQLite. It does not start it.
func (b *runner) newNode(network, storeMode string) (*node, error) {
	dir := b.path("n")
	cmd := exec.Command(b.exe, "init", "--home", dir, "--name", "bench-node")
	cmd.Env = b.env
	if out, err := cmd.CombinedOutput(); err != nil {
		return nil, fmt.Errorf("meerkatd init: %w\n%s", err, out)
	}
	kp, err := identity.LoadKeypair(dir)
	if err != nil {
		return nil, err
	}
	nowhere := transport.Addr{Scheme: transport.SchemeUDS, Path: filepath.Join(b.root, "peer.sock")} // peers never listen
	if isNATS(network) {
		nowhere = transport.Addr{Scheme: transport.SchemeNATS} // peers are reached through the server
	}
	var peers []trust.Peer
	for i, p := range b.peers {
		peers = append(peers, trust.Peer{Name: fmt.Sprintf("peer%02d", i), ID: p.ID(), Addr: nowhere})
	}
	peers = append(peers, trust.Peer{Name: "flooder", ID: b.flooder.ID(), Addr: nowhere})
	list, err := trust.New(peers...)
	if err != nil {
		return nil, err
	}
	if err := list.Save(filepath.Join(dir, trust.FileName)); err != nil {
		return nil, err
	}
	n := &node{b: b, home: dir, id: kp.ID(), log: filepath.Join(dir, "daemon.log")}
	n.env = append(append([]string(nil), b.env...),
		"MEERKAT_STORE_MODE="+storeMode,
		"MEERKAT_COMMS_ACK_TIMEOUT="+strconv.Itoa(int(ackTimeout/time.Second)),
		// Nobody drains the inbox during a run.
		"MEERKAT_COMMS_INBOX_MAX=10000000",
		"MEERKAT_COMMS_INBOX_MAX_BYTES=4000000000",
		// Room for the idle connections, which must not time out; they
		// come from a few peers' keys, many connections each.
		"MEERKAT_COMMS_MAX_CONNECTIONS=4096",
		"MEERKAT_COMMS_PEER_MAX_CONNECTIONS=4096",
		"MEERKAT_COMMS_IDLE_TIMEOUT_SECS=3600",
	)
	switch network {
	case transport.SchemeUDS:
		n.addr = transport.Addr{Scheme: transport.SchemeUDS, Path: filepath.Join(dir, config.DefaultSocketName)}
	case transport.SchemeTCP:
		port, err := freePort()
		if err != nil {
			return nil, err
		}
		n.addr = transport.Addr{Scheme: transport.SchemeTCP, Host: "127.0.0.1", Port: uint16(port)}
		n.env = append(n.env, "MEERKAT_COMMS_LISTEN_UDS="+config.UDSOff, "MEERKAT_COMMS_LISTEN_TCP=127.0.0.1:"+strconv.Itoa(port))
	case transport.SchemeTLS:
		// The TCP listener, reached at tls://, refusing plaintext: every
		// figure is over TLS.
		port, err := freePort()
		if err != nil {
			return nil, err
		}
		n.addr = transport.Addr{Scheme: transport.SchemeTLS, Host: "127.0.0.1", Port: uint16(port)}
		n.env = append(n.env, "MEERKAT_COMMS_LISTEN_UDS="+config.UDSOff, "MEERKAT_COMMS_LISTEN_TCP=127.0.0.1:"+strconv.Itoa(port),
			"MEERKAT_COMMS_TCP_PLAINTEXT="+config.Refuse)
	case trNATS, trNATSUnsealed:
		// Its Unix socket tells when it runs (and serves status); the
		// envelopes go through the NATS server, which start waits for the
		// node to be connected to.
		n.addr = transport.Addr{Scheme: transport.SchemeUDS, Path: filepath.Join(dir, config.DefaultSocketName)}
		n.relayed, n.natsURL = network, b.opts.natsURL
		// Subjects of their own: a fleet's JetStream stream on the same
		// server (meerkat.node.>) would take the bench's envelopes and
		// answer them with its own acks.
		n.env = append(n.env, "MEERKAT_NATS_SERVERS="+b.opts.natsURL, "MEERKAT_NATS_SUBJECT_PREFIX="+benchSubjectPrefix)
	default:
		return nil, fmt.Errorf("bug: transport %q", network)
	}
	return n, nil
}

// benchSubjectPrefix is the NATS subject prefix of the bench's nodes.
const benchSubjectPrefix = "meerkat-bench"

// freePort returns a TCP port of 127.0.0.1 that was free a moment ago.
func freePort() (int, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port, nil
}

// start execs `meerkatd run` and returns the time from exec to the first
// connection its listener accepts.
func (n *node) start(ctx context.Context) (time.Duration, error) {
	if n.child != nil {
		return 0, errors.New("bug: node already started")
	}
	logf, err := os.OpenFile(n.log, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return 0, err
	}
	defer logf.Close() // the child has its own descriptor
	cmd := exec.Command(n.b.exe, "run", "--home", n.home, "--log-level", "warn")
	cmd.Env = n.env
	cmd.Stdout, cmd.Stderr = logf, logf
	t0 := time.Now()
	c, err := n.b.startChild(cmd)
	if err != nil {
		return 0, err
	}
	n.child = c
	deadline := t0.Add(readyTimeout)
	for {
		conn, err := net.DialTimeout(n.addr.Network(), n.addr.Address(), time.Second)
		if err == nil {
			d := time.Since(t0)
			conn.Close()
			if n.relayed != "" {
				if err := n.waitNATS(ctx); err != nil {
					n.stop()
					return 0, err
				}
			}
			return d, nil
		}
		if c.exited() {
			n.child = nil
			c.forget()
			return 0, fmt.Errorf("node exited before listening (%v); log:\n%s", cmd.ProcessState, n.logTail())
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			n.stop()
			if ctx.Err() != nil {
				return 0, ctx.Err()
			}
			return 0, fmt.Errorf("node not listening on %s after %v; log:\n%s", n.addr, readyTimeout, n.logTail())
		}
		time.Sleep(200 * time.Microsecond)
	}
}

// checkNATS connects to the NATS server of --nats-url once, so that a
// wrong URL or a server not running fails the run at once.
func (b *runner) checkNATS(ctx context.Context) error {
	list, err := trust.New()
	if err != nil {
		return err
	}
	r, err := comms.New(b.stranger, list, comms.Options{AckTimeout: ackTimeout})
	if err != nil {
		return err
	}
	defer r.Close()
	rl, err := natsrelay.Start(ctx, r, natsrelay.Options{Servers: []string{b.opts.natsURL}, Name: "meerkatd bench", ConnectTimeout: 5 * time.Second})
	if err != nil {
		return fmt.Errorf("--nats-url %s: %w (is the server running? make nats-dev starts one)", redactURL(b.opts.natsURL), err)
	}
	return rl.Close()
}

// waitNATS waits until the node's status says its NATS connection is
// up: it connects in the background after it listens, and a send before
// that would find no one subscribed.
func (n *node) waitNATS(ctx context.Context) error {
	deadline := time.Now().Add(readyTimeout)
	for {
		st, err := n.status(ctx)
		if err != nil {
			return err
		}
		if st.NATS != nil && st.NATS.State == "connected" {
			return nil
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			return fmt.Errorf("node not connected to NATS at %s after %v (status %+v); log:\n%s", n.natsURL, readyTimeout, st.NATS, n.logTail())
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// stop stops the node's process, if it runs.
func (n *node) stop() {
	if n.child != nil {
		n.child.stop()
		n.child = nil
	}
}

func (n *node) logTail() string { return fileTail(n.log) }

// fileTail is the last 2000 bytes of the file at path ("" if it cannot be
// read): what a child wrote last, for an error.
func fileTail(path string) string {
	b, _ := os.ReadFile(path)
	return string(b[max(0, len(b)-2000):])
}

// nodeStatus is what the bench reads of `meerkatd status --json`. A field
// the command renamed would read as zero: the flood and idle_rss_1000
// scenarios would fail, and TestBenchQuick with them.
type nodeStatus struct {
	Conns    int               `json:"connections"`
	Rejected map[string]uint64 `json:"rejected"` // by reason: comms.RejectUntrusted, …
	NATS     *struct {
		State     string `json:"state"` // "connected" once up
		LastError string `json:"last_error"`
	} `json:"nats"` // nil: NATS is off
}

// status runs `meerkatd status --json` against the node.
func (n *node) status(ctx context.Context) (nodeStatus, error) {
	ctx, cancel := context.WithTimeout(ctx, statusBound)
	defer cancel()
	cmd := exec.CommandContext(ctx, n.b.exe, "status", "--json", "--home", n.home)
	cmd.Env = n.env
	out, err := cmd.Output()
	var s nodeStatus
	if err == nil {
		err = json.Unmarshal(out, &s)
	}
	if err != nil {
		return s, fmt.Errorf("status --json: %w", err)
	}
	return s, nil
}

// peerRouter is a bench peer's Router and, for a node reached through
// NATS, its connection to the server.
type peerRouter struct {
	*comms.Router
	relay *natsrelay.Relay
}

// Close closes the NATS connection, then the Router.
func (p *peerRouter) Close() error {
	if p.relay != nil {
		p.relay.Close()
	}
	return p.Router.Close()
}

// router returns a send-only Router for kp that trusts the node as
// "node"; for a node reached through NATS, connected to the server, and
// with nats-unsealed sending its envelopes unsealed.
func (n *node) router(ctx context.Context, kp *identity.Keypair) (*peerRouter, error) {
	addr := n.addr
	if n.relayed != "" {
		addr = transport.Addr{Scheme: transport.SchemeNATS}
	}
	list, err := trust.New(trust.Peer{Name: "node", ID: n.id, Addr: addr})
	if err != nil {
		return nil, err
	}
	r, err := comms.New(kp, list, comms.Options{AckTimeout: ackTimeout, RelayUnsealed: n.relayed == trNATSUnsealed})
	if err != nil {
		return nil, err
	}
	p := &peerRouter{Router: r}
	if n.relayed != "" {
		if p.relay, err = natsrelay.Start(ctx, r, natsrelay.Options{Servers: []string{n.natsURL}, Name: "meerkatd bench", SubjectPrefix: benchSubjectPrefix}); err != nil {
			r.Close()
			return nil, err
		}
	}
	return p, nil
}

// rssMB returns the node's resident memory in MB.
func (n *node) rssMB() (float64, error) { return procRSSMB(n.child.pid()) }

// procCPU reads utime+stime of a process from /proc/PID/stat.
func procCPU(pid int) (time.Duration, error) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0, err
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')') // the command name may hold spaces
	if i < 0 {
		return 0, errors.New("unexpected /proc stat format")
	}
	f := strings.Fields(s[i+1:])
	if len(f) < 13 {
		return 0, errors.New("unexpected /proc stat format")
	}
	utime, err1 := strconv.ParseInt(f[11], 10, 64)
	stime, err2 := strconv.ParseInt(f[12], 10, 64)
	if err1 != nil || err2 != nil {
		return 0, errors.New("unexpected /proc stat format")
	}
	const clockTicks = 100 // USER_HZ: 100 on every Linux ABI Go supports
	return time.Duration(utime+stime) * time.Second / clockTicks, nil
}

// procRSSMB reads VmRSS of a process from /proc/PID/status, in MB.
func procRSSMB(pid int) (float64, error) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		return 0, err
	}
	for line := range strings.Lines(string(b)) {
		if rest, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			kb, err := strconv.ParseFloat(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 64)
			if err != nil {
				return 0, fmt.Errorf("VmRSS %q: %w", rest, err)
			}
			return kb / 1024, nil
		}
	}
	return 0, errors.New("no VmRSS in /proc status")
}

// selfCPU returns the CPU time this process has used.
func selfCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// sealFrame seals kind from kp to to and returns its id and frame. With
// badSig the signature is corrupted after signing.
func sealFrame(kp *identity.Keypair, to identity.PeerID, kind wire.Kind, badSig bool) (identity.UUID, []byte, error) {
	id := identity.NewUUID()
	e, err := wire.Seal(kp, id, to, kind)
	if err != nil {
		return id, nil, err
	}
	if badSig {
		e.Sig[0] ^= 0xff
	}
	frame, start := transport.StartFrame(make([]byte, 0, 512))
	if frame, err = e.AppendBinary(frame); err != nil {
		return id, nil, err
	}
	return id, frame, transport.FinishFrame(frame, start)
}

// rawExchange writes one message envelope from kp on c and reads and
// verifies its ack from to.
func rawExchange(c net.Conn, kp *identity.Keypair, to identity.PeerID) error {
	id, frame, err := sealFrame(kp, to, wire.Message(body), false)
	if err != nil {
		return err
	}
	c.SetDeadline(time.Now().Add(ackTimeout))
	if _, err := c.Write(frame); err != nil {
		return err
	}
	payload, err := transport.ReadFrame(c, 0)
	if err != nil {
		return fmt.Errorf("read ack: %w", err)
	}
	ack, err := wire.Open(payload)
	if err != nil {
		return fmt.Errorf("ack: %w", err)
	}
	if u, ok := ack.Kind.InReplyTo(); ack.From != to || ack.Kind.Type() != wire.TypeAck || !ok || u != id {
		return errors.New("reply is not the ack of the envelope sent")
	}
	c.SetDeadline(time.Time{})
	return nil
}

// childStdout gives cmd a pipe as its stdout and returns the read end,
// which (unlike exec.Cmd.StdoutPipe's) Wait does not close: what the child
// wrote before it exited stays readable. Pass w to startChild, which
// closes it once the child has its copy; the caller closes r.
func childStdout(cmd *exec.Cmd) (r, w *os.File, err error) {
	if r, w, err = os.Pipe(); err != nil {
		return nil, nil, err
	}
	cmd.Stdout = w
	return r, w, nil
}

// startEcho starts `meerkatd bench echo` for the transport and returns its
// address.
func (b *runner) startEcho(network string) (*child, transport.Addr, error) {
	var a transport.Addr
	arg := "127.0.0.1:0"
	if network == transport.SchemeUDS {
		arg = b.path("echo") + ".sock"
	}
	cmd := exec.Command(b.exe, "bench", "echo", network, arg)
	cmd.Env = b.env
	logPath := b.path("echo") + ".log" // its stderr: why it did not start, or what its crypto server refused
	logFile, err := os.Create(logPath)
	if err != nil {
		return nil, a, err
	}
	cmd.Stderr = logFile
	stdin, err := cmd.StdinPipe() // the echo server ends when this closes
	if err != nil {
		logFile.Close()
		return nil, a, err
	}
	stdout, w, err := childStdout(cmd)
	if err != nil {
		logFile.Close()
		return nil, a, err
	}
	defer stdout.Close()
	c, err := b.startChild(cmd, w, logFile)
	if err != nil {
		return nil, a, err
	}
	c.stdin = stdin
	line, err := bufio.NewReader(stdout).ReadString('\n')
	if err != nil {
		c.kill() // waits for it: its stderr is all written
		return nil, a, fmt.Errorf("echo server did not start: %w: %s", err, strings.TrimSpace(fileTail(logPath)))
	}
	a, err = transport.ParseAddr(network + "://" + strings.TrimSpace(line))
	if err != nil {
		c.kill()
		return nil, a, err
	}
	return c, a, nil
}

// RunEcho is the body of `meerkatd bench echo uds|tcp PATH|HOST:PORT`,
// a child process of [Run]; args are the two after "echo". It listens,
// prints its address to stdout, echoes 4-byte length-prefixed frames on
// every connection, and returns when stdin closes. A connection whose
// first frame is a raw hello gets the raw crypto anchors' server instead
// (raw.go), which reports its failures on stderr.
func RunEcho(args []string, stdin io.Reader, stdout, stderr io.Writer) error {
	if len(args) != 2 || (args[0] != transport.SchemeUDS && args[0] != transport.SchemeTCP) {
		return usagef("bench echo uds|tcp ADDRESS")
	}
	network := "tcp"
	if args[0] == transport.SchemeUDS {
		network = "unix"
	}
	ln, err := net.Listen(network, args[1])
	if err != nil {
		return err
	}
	defer ln.Close()
	fmt.Fprintln(stdout, ln.Addr().String())
	go func() {
		io.Copy(io.Discard, stdin)
		ln.Close()
	}()
	for {
		c, err := ln.Accept()
		if err != nil {
			return nil
		}
		go func() {
			defer c.Close()
			r := bufio.NewReader(c)
			buf := make([]byte, 0, 4096)
			for first := true; ; first = false {
				payload, err := transport.ReadFrame(r, 0)
				if err != nil {
					return
				}
				if key, ok := isRawHello(payload); ok && first {
					if err := serveRawCrypto(c, r, key); err != nil {
						fmt.Fprintf(stderr, "bench echo: %v\n", err)
					}
					return
				}
				if key, ok := isRawBatchHello(payload); ok && first {
					if err := serveRawBatched(c, r, key); err != nil {
						fmt.Fprintf(stderr, "bench echo: %v\n", err)
					}
					return
				}
				if buf, err = transport.AppendFrame(buf[:0], payload); err != nil {
					return
				}
				if _, err := c.Write(buf); err != nil {
					return
				}
			}
		}()
	}
}
