package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"log"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"

	"github.com/meerkatd/meerkatd/comms/wire"
	"github.com/meerkatd/meerkatd/identity"
)

// responderArg, as the first argument, makes the program the responder.
// It is not a flag so that a test binary's TestMain can dispatch on it
// before the testing package parses flags.
const responderArg = "__natsbench_responder"

// keysFD is the responder's inherited descriptor carrying its 32-byte seed
// and then the requester's 32-byte public key (the first of
// exec.Cmd.ExtraFiles).
const keysFD = 3

// Bounds on the responder's lifecycle.
const (
	startTimeout = 15 * time.Second // exec to URL printed
	stopTimeout  = 5 * time.Second  // stdin closed to exit, else killed
)

// serverVersion is the version of the embedded nats-server.
func serverVersion() string { return server.VERSION }

// responderMain is the responder process's main; it returns the exit code.
func responderMain() int {
	keys := os.NewFile(keysFD, "keys")
	if keys == nil {
		fmt.Fprintln(os.Stderr, "natsbench responder: no key descriptor: this mode is started by natsbench itself")
		return 2
	}
	if err := runResponder(keys, os.Stdin, os.Stdout, log.New(os.Stderr, "natsbench responder: ", 0)); err != nil {
		fmt.Fprintln(os.Stderr, "natsbench responder:", err)
		return 1
	}
	return 0
}

// runResponder reads its keys from keys, starts the server and the
// subscriber, prints "url <client URL>" on out, then serves until ctl ends.
// On ctl, the line "cpu" is answered on out with "cpu <nanoseconds>", the
// process's user+system CPU time.
func runResponder(keys io.ReadCloser, ctl io.Reader, out io.Writer, logger *log.Logger) error {
	var material [2 * 32]byte
	_, err := io.ReadFull(keys, material[:])
	keys.Close()
	if err != nil {
		return fmt.Errorf("read keys: %w", err)
	}
	kp, err := identity.KeypairFromSeed(material[:32])
	clear(material[:32])
	if err != nil {
		return err
	}
	var requester identity.PeerID
	copy(requester[:], material[32:])

	ns, err := server.NewServer(&server.Options{Host: "127.0.0.1", Port: -1, NoLog: true, NoSigs: true})
	if err != nil {
		return fmt.Errorf("nats-server: %w", err)
	}
	go ns.Start()
	defer ns.WaitForShutdown()
	defer ns.Shutdown()
	if !ns.ReadyForConnections(startTimeout) {
		return errors.New("nats-server: not ready in time")
	}
	url := ns.ClientURL()

	nc, err := nats.Connect(url, nats.Name("natsbench responder"), nats.NoReconnect())
	if err != nil {
		return fmt.Errorf("connect to %s: %w", url, err)
	}
	defer nc.Close()
	// nats.go hands messages to the channel from its read loop; a worker
	// per core opens them and replies, so the responder can use both
	// cores as a meerkatd node does. 1024 slots are far more than the 128
	// requests ever in flight, so nats.go never finds it full (which it
	// would report as a slow consumer and drop).
	msgs := make(chan *nats.Msg, 1024)
	sub, err := nc.ChanSubscribe(subject, msgs)
	if err != nil {
		return fmt.Errorf("subscribe: %w", err)
	}
	if err := nc.Flush(); err != nil {
		return fmt.Errorf("subscribe: %w", err)
	}
	r := &replier{kp: kp, requester: requester, logger: logger}
	done := make(chan struct{})
	var wg sync.WaitGroup
	for range runtime.GOMAXPROCS(0) {
		wg.Go(func() { r.replyLoop(msgs, done) })
	}
	// The channel is never closed (nats.go may still be sending to it
	// while the subscription goes); the workers stop on done.
	defer wg.Wait()
	defer close(done)
	defer sub.Unsubscribe()

	if _, err := fmt.Fprintf(out, "url %s\n", url); err != nil {
		return err
	}
	sc := bufio.NewScanner(ctl)
	for sc.Scan() {
		switch sc.Text() {
		case "cpu":
			cpu, err := selfCPU()
			if err != nil {
				return err
			}
			if _, err := fmt.Fprintf(out, "cpu %d\n", cpu.Nanoseconds()); err != nil {
				return err
			}
		default:
			return fmt.Errorf("unknown control line %q", sc.Text())
		}
	}
	if n := r.refused.Load(); n > 0 {
		return fmt.Errorf("refused %d envelopes", n)
	}
	return sc.Err()
}

// replier answers requests. It is safe for concurrent use.
type replier struct {
	kp        *identity.Keypair
	requester identity.PeerID // the one trusted sender
	logger    *log.Logger
	refused   atomic.Int64
}

// replyLoop answers the messages from msgs until done is closed.
func (r *replier) replyLoop(msgs <-chan *nats.Msg, done <-chan struct{}) {
	buf := make([]byte, 0, 512)
	for {
		select {
		case <-done:
			return
		case m := <-msgs:
			var err error
			if buf, err = r.reply(m, buf); err != nil && r.refused.Add(1) == 1 {
				r.logger.Printf("refused an envelope (further refusals only counted): %v", err)
			}
		}
	}
}

// reply checks a request envelope as a meerkatd node checks an inbound one
// (decode, addressed to us, sender trusted, signature: the trust check
// comes before the signature so untrusted senders cost no verify) and
// answers it with a signed ack. A refused envelope gets no reply, as on
// meerkatd. buf is scratch space, returned maybe grown.
func (r *replier) reply(m *nats.Msg, buf []byte) ([]byte, error) {
	e, err := wire.Decode(m.Data)
	if err != nil {
		return buf, err
	}
	switch {
	case e.To != r.kp.ID():
		return buf, errors.New("not addressed to us")
	case e.From != r.requester:
		return buf, errors.New("untrusted sender")
	}
	if err := e.Verify(); err != nil {
		return buf, err
	}
	ack, err := wire.Seal(r.kp, identity.NewUUID(), e.From, wire.Ack(e.ID))
	if err != nil {
		return buf, err
	}
	if buf, err = ack.AppendBinary(buf[:0]); err != nil {
		return buf, err
	}
	return buf, m.Respond(buf)
}

// responderProc is the requester's handle on the responder process. It is
// not safe for concurrent use.
type responderProc struct {
	cmd    *exec.Cmd
	stdin  io.WriteCloser
	stdout *bufio.Reader
	url    string
	once   sync.Once
	err    error
}

// startResponder re-executes this program as the responder with kp's seed
// and the requester's public key on an inherited pipe, and waits for the
// server's URL. The process is killed when ctx is done; stop ends it.
func startResponder(ctx context.Context, kp *identity.Keypair, requester identity.PeerID, stderr io.Writer) (*responderProc, error) {
	exe, err := os.Executable()
	if err != nil {
		return nil, fmt.Errorf("start responder: %w", err)
	}
	keysR, keysW, err := os.Pipe()
	if err != nil {
		return nil, fmt.Errorf("start responder: %w", err)
	}
	defer keysR.Close()
	defer keysW.Close()

	cmd := exec.CommandContext(ctx, exe, responderArg)
	cmd.ExtraFiles = []*os.File{keysR} // descriptor keysFD
	cmd.Stderr = stderr
	cmd.WaitDelay = stopTimeout
	setDeathSignal(cmd)
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return nil, fmt.Errorf("start responder: %w", err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, fmt.Errorf("start responder: %w", err)
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start responder: %w", err)
	}
	p := &responderProc{cmd: cmd, stdin: stdin, stdout: bufio.NewReader(stdout)}
	keysR.Close()
	// 64 bytes fit in any pipe buffer: this does not wait for the child.
	seed := kp.Seed()
	_, err = keysW.Write(append(seed, requester[:]...))
	clear(seed)
	keysW.Close()
	if err != nil {
		return nil, errors.Join(fmt.Errorf("start responder: send keys: %w", err), p.kill())
	}

	kill := time.AfterFunc(startTimeout, func() { cmd.Process.Kill() })
	line, err := p.line("url")
	kill.Stop()
	if err != nil {
		return nil, errors.Join(fmt.Errorf("start responder: %w", err), p.kill())
	}
	p.url = line
	return p, nil
}

// line reads the responder's next stdout line and returns what follows
// "<key> ".
func (p *responderProc) line(key string) (string, error) {
	s, err := p.stdout.ReadString('\n')
	if err != nil {
		return "", fmt.Errorf("responder: %w (it exited?)", err)
	}
	v, ok := strings.CutPrefix(strings.TrimSuffix(s, "\n"), key+" ")
	if !ok {
		return "", fmt.Errorf("responder said %q, want %s", s, key)
	}
	return v, nil
}

// cpu returns the responder's user+system CPU time so far.
func (p *responderProc) cpu() (time.Duration, error) {
	if _, err := io.WriteString(p.stdin, "cpu\n"); err != nil {
		return 0, fmt.Errorf("responder cpu: %w", err)
	}
	v, err := p.line("cpu")
	if err != nil {
		return 0, err
	}
	ns, err := strconv.ParseInt(v, 10, 64)
	if err != nil {
		return 0, fmt.Errorf("responder cpu: %w", err)
	}
	return time.Duration(ns), nil
}

// stop closes the responder's stdin, which makes it shut down, and waits
// for it, killing it after stopTimeout. It returns the responder's error,
// if it failed. It is idempotent.
func (p *responderProc) stop() error {
	p.once.Do(func() {
		p.stdin.Close()
		kill := time.AfterFunc(stopTimeout, func() { p.cmd.Process.Kill() })
		defer kill.Stop()
		if err := p.cmd.Wait(); err != nil {
			p.err = fmt.Errorf("responder: %w", err)
		}
	})
	return p.err
}

// kill ends the responder at once and waits for it.
func (p *responderProc) kill() error {
	p.cmd.Process.Kill()
	p.once.Do(func() { p.cmd.Wait() })
	return nil
}
