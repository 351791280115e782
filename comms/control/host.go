package control

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/meerkatd/meerkatd/comms/node"
	"github.com/meerkatd/meerkatd/transport"
)

// ErrServing is returned by ServeHome when another process already serves
// the home, or is starting or stopping its node there (it holds the
// home's lock, or its control socket answers).
var ErrServing = errors.New("control: a node already serves this home")

// HostOptions configure ServeHome and Attach.
type HostOptions struct {
	Logger *slog.Logger // nil: discard
	// RuntimeDir is the local-discovery directory the node announces
	// itself in ("": not announced).
	RuntimeDir string
	// Embedded marks the node as running inside meerkatd mcp (Attach
	// sets it for the node a session serves), not as a daemon.
	Embedded bool
	// TakeOverDelay is how long a Session whose node went away waits for
	// another process to serve the home (a daemon restarting) before it
	// serves the home itself. 0: DefaultTakeOverDelay; negative: none.
	TakeOverDelay time.Duration
}

// DefaultTakeOverDelay is the default HostOptions.TakeOverDelay: long
// enough for a daemon to restart (stop, start, open its home) without
// finding its home taken by the sessions that were attached to it.
const DefaultTakeOverDelay = 3 * time.Second

// Served is a home's node running in this process with its control
// socket.
type Served struct {
	Node *node.Node
	stop func()
}

// Close stops accepting control connections, stops the node (finishing
// acks in flight), removes the sockets, waits, and then lets go of the
// home.
func (s *Served) Close() { s.stop() }

// ServeHome runs the node of h in this process with its listeners and its
// control socket, as the daemon and an embedded meerkatd mcp do, and
// announces it for local discovery. It fails with ErrServing when another
// process (or another ServeHome in this one) serves h.
//
// Who serves a home is decided by a lock on the home directory, held until
// Close has stopped the node, not by the control socket: two processes
// replacing a socket left behind by a killed one could otherwise both
// listen, one of them on a file the other has just removed.
func ServeHome(h *node.Home, opts HostOptions) (*Served, error) {
	log := opts.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	a, err := transport.ParseAddr("uds://" + h.ControlPath())
	if err != nil {
		return nil, err
	}
	unlock, err := node.LockHome(h.Dir)
	if errors.Is(err, node.ErrHomeServed) {
		return nil, fmt.Errorf("%w: %s", ErrServing, h.Dir)
	}
	if err != nil {
		return nil, err
	}
	// The identity was read before the lock was taken: a keygen in
	// between (it takes the lock to write) must not leave this node
	// serving the old key while the home holds the new one.
	if err := h.CheckKey(); err != nil {
		unlock()
		return nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	ctl, err := transport.Listen(ctx, a)
	if err != nil {
		cancel()
		unlock()
		if errors.Is(err, transport.ErrAddrInUse) {
			return nil, fmt.Errorf("%w: %s", ErrServing, h.Dir)
		}
		return nil, err
	}
	n, err := node.Start(h, node.Options{Mode: node.ModeServe, Logger: log, Embedded: opts.Embedded})
	if err != nil {
		cancel()
		ctl.Close()
		unlock()
		return nil, err
	}
	n.WatchSocket(h.ControlPath()) // commands and MCP reach the node through it
	served := make(chan struct{})
	go func() {
		defer close(served)
		keepControlSocket(ctx, a, ctl, log, func(ln net.Listener) {
			Serve(ctx, ln, n, Options{Logger: log, SendTimeout: n.SendTimeout()})
		}, n.WatchSocket)
	}()
	unannounce := func() {}
	if opts.RuntimeDir != "" {
		if unannounce, err = n.Announce(opts.RuntimeDir); err != nil {
			log.Warn("not announced for local discovery", "err", err)
		}
	}
	var once sync.Once
	return &Served{Node: n, stop: func() {
		once.Do(func() {
			unannounce()
			cancel() // the control server ends attached clients' waits
			n.Close()
			<-served
			unlock() // last: whoever takes over finds the node stopped
		})
	}}, nil
}

// controlSocketCheck is how often a serving host looks whether its
// control socket file is still there.
var controlSocketCheck = 2 * time.Second

// keepControlSocket serves ln with serve until ctx ends and, when the
// socket file at a is removed meanwhile (say by a cleaner of /tmp),
// listens there again and serves the new listener too, telling watch its
// file. Without it every command would find no daemon (status says none
// runs) and run a node of its own on the home, storing sends the daemon
// never picks up. A file put in its place by someone else is left alone
// (status reports it). It returns once every listener's serve has.
func keepControlSocket(ctx context.Context, a transport.Addr, ln net.Listener, log *slog.Logger, serve func(net.Listener), watch func(path string)) {
	var wg sync.WaitGroup
	wg.Go(func() { serve(ln) })
	defer wg.Wait()
	t := time.NewTicker(controlSocketCheck)
	defer t.Stop()
	failed := false // the last try to make it again failed (said once)
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if ctx.Err() != nil { // stopping: the socket is being removed
			return
		}
		if _, err := os.Lstat(a.Path); !errors.Is(err, fs.ErrNotExist) {
			continue
		}
		again, err := transport.Listen(ctx, a)
		if err != nil {
			if !failed {
				log.Warn("the control socket was removed and cannot be made again (the home's directory gone?)", "path", a.Path, "err", err)
			}
			failed = true
			continue
		}
		failed = false
		log.Warn("the control socket was removed (by another program); made it again", "path", a.Path)
		watch(a.Path)
		ln.Close() // its file is gone: Close leaves the new one
		ln = again
		wg.Go(func() { serve(again) })
	}
}

// Session is a node.API for a long-lived face such as meerkatd mcp: it
// uses the home's daemon when one serves it, and otherwise serves the
// home itself (so other commands attach to it). Of several sessions
// started at once for one home, exactly one serves it.
//
// When the process serving the home goes away, what the session does
// depends on what it was. Another session's node (Self.Embedded): the
// session waits HostOptions.TakeOverDelay for a node to serve the home
// again, then serves it itself, or attaches to whichever process got
// there first. A daemon: the session waits as long for it to come back (a
// call made while it restarts reaches the restarted daemon) but never
// takes the home (the daemon, restarted later, would find it taken); past
// the delay its calls fail with CodeUnavailable (at once, without
// waiting again) until a node serves the home again, and then reach it.
//
// It is safe for concurrent use; Close stops what it serves.
type Session struct {
	h    *node.Home
	opts HostOptions
	log  *slog.Logger

	mu     sync.Mutex
	api    node.API // the daemon's client, or the served node
	served *Served  // non-nil while this session serves the home
	daemon bool     // attached to a daemon (not to another session's node)
	// gone: the daemon was waited for in vain; until a call reaches a
	// node again, calls look once and fail at once instead of each
	// waiting.
	gone   atomic.Bool
	closed bool
}

var _ node.API = (*Session)(nil)

// takeOverTimeout bounds how long a session keeps trying to serve or
// attach: another process may hold the home while it starts or stops its
// node, and its control socket does not answer meanwhile.
const takeOverTimeout = 15 * time.Second

// Pauses between a session's attempts to serve or attach.
const (
	firstRetryPause = 10 * time.Millisecond
	maxRetryPause   = 200 * time.Millisecond
)

// Attach returns a session on home h: attached to its daemon if one
// answers, else serving it.
func Attach(ctx context.Context, h *node.Home, opts HostOptions) (*Session, error) {
	s := &Session{h: h, opts: opts, log: opts.Logger}
	if s.log == nil {
		s.log = slog.New(slog.DiscardHandler)
	}
	if err := s.connect(ctx, nil); err != nil {
		return nil, err
	}
	return s, nil
}

// Serving reports whether this session serves the home itself.
func (s *Session) Serving() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.served != nil
}

// connect makes the session use the home's server: attach to whoever
// serves it, or serve it. stale is the API a failed call used (nil at
// start): if another call already replaced it, there is nothing to do.
func (s *Session) connect(ctx context.Context, stale node.API) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return &node.Error{Code: node.CodeUnavailable, Msg: "the session is closed", Err: node.ErrClosed}
	}
	if stale != nil && s.api != stale {
		return nil
	}
	// A session whose node went away gives whoever served the home a
	// moment to come back (a daemon restarting) before it serves the home
	// itself: else it would take the home from the restarted daemon.
	var wait time.Duration
	if stale != nil {
		wait = s.opts.TakeOverDelay
		if wait == 0 {
			wait = DefaultTakeOverDelay
		}
		wait = max(wait, 0)
		if s.gone.Load() {
			wait = 0 // waited already: look once
		}
		switch {
		case wait == 0:
		case s.daemon:
			s.log.Info("the daemon serving the home went away; waiting for it to come back", "home", s.h.Dir, "wait", wait)
		default:
			s.log.Info("the node serving the home went away; waiting for it to come back before taking over", "home", s.h.Dir, "wait", wait)
		}
	}
	start := time.Now()
	deadline := start.Add(wait + takeOverTimeout)
	pause := firstRetryPause
	for {
		dctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		c := NewClient(s.h.ControlPath())
		self, err := c.Self(dctx)
		cancel()
		if err == nil {
			if s.api != nil {
				s.log.Info("attached to the node serving the home", "home", s.h.Dir, "embedded", self.Embedded)
			}
			s.api, s.daemon = c, !self.Embedded
			s.gone.Store(false)
			return nil
		}
		switch {
		case ctx.Err() != nil:
			return ctx.Err()
		case errors.Is(err, ErrNoDaemon) && time.Since(start) < wait:
			// Nobody serves the home yet: ask again.
		case errors.Is(err, ErrNoDaemon) && s.daemon:
			// The daemon is gone, perhaps being restarted: leave the home
			// for it.
			s.gone.Store(true)
			return &node.Error{Code: node.CodeUnavailable, Err: ErrNoDaemon,
				Msg: fmt.Sprintf("the daemon serving %s is not running (start it again with: meerkatd run --home %s)", s.h.Dir, s.h.Dir)}
		case errors.Is(err, ErrNoDaemon):
			opts := s.opts
			opts.Embedded = true
			sv, serr := ServeHome(s.h, opts)
			if serr == nil {
				if s.api != nil {
					s.log.Info("took over the home: serving it in this process", "home", s.h.Dir)
				}
				s.api, s.served = sv.Node, sv
				return nil
			}
			if !errors.Is(serr, ErrServing) {
				return serr
			}
			// Another process holds the home: it is starting or stopping
			// its node, and answers (or lets go) in a moment.
			err = serr
		case errors.Is(err, context.DeadlineExceeded), node.CodeOf(err) == node.CodeUnavailable:
			// The server is starting (it answers slowly), stopping (it
			// dropped the connection) or busy: ask again.
		default:
			return err
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("neither attached to nor serving %s after %v: %w", s.h.Dir, time.Since(start).Round(time.Millisecond), err)
		}
		select {
		case <-time.After(pause):
			pause = min(2*pause, maxRetryPause)
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// Close stops the node the session serves, if any.
func (s *Session) Close() {
	s.mu.Lock()
	s.closed = true
	sv := s.served
	s.served = nil
	s.mu.Unlock()
	if sv != nil {
		sv.Close()
	}
}

// current is the API calls use now.
func (s *Session) current() (node.API, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil, &node.Error{Code: node.CodeUnavailable, Msg: "the session is closed", Err: node.ErrClosed}
	}
	return s.api, nil
}

// do runs f on the current API; when it finds nobody serving the home
// (nothing was sent), it takes over or re-attaches and runs f once more.
func do[T any](s *Session, ctx context.Context, f func(node.API) (T, error)) (T, error) {
	return doCall(s, ctx, false, f)
}

// doRead is do for a call that changes nothing (or nothing that a second
// try would change again): one the daemon went away during is also made
// again, on the daemon or node that serves the home next.
func doRead[T any](s *Session, ctx context.Context, f func(node.API) (T, error)) (T, error) {
	return doCall(s, ctx, true, f)
}

func doCall[T any](s *Session, ctx context.Context, read bool, f func(node.API) (T, error)) (T, error) {
	api, err := s.current()
	if err != nil {
		var zero T
		return zero, err
	}
	v, err := f(api)
	if err == nil && s.gone.Load() {
		s.gone.Store(false) // a node answered: wait for it again next time
	}
	if err == nil || !errors.Is(err, ErrNoDaemon) && !(read && errors.Is(err, ErrConnLost)) {
		return v, err
	}
	if cerr := s.connect(ctx, api); cerr != nil {
		return v, cerr
	}
	if api, err = s.current(); err != nil {
		return v, err
	}
	return f(api)
}

// Self implements node.API.
func (s *Session) Self(ctx context.Context) (node.Self, error) {
	return doRead(s, ctx, func(a node.API) (node.Self, error) { return a.Self(ctx) })
}

// Status implements node.API.
func (s *Session) Status(ctx context.Context) (node.Status, error) {
	return doRead(s, ctx, func(a node.API) (node.Status, error) { return a.Status(ctx) })
}

// Peers implements node.API.
func (s *Session) Peers(ctx context.Context) ([]node.Peer, error) {
	return doRead(s, ctx, func(a node.API) ([]node.Peer, error) { return a.Peers(ctx) })
}

// SendMessage implements node.API.
func (s *Session) SendMessage(ctx context.Context, peer, body string, opts node.SendOptions) (node.Sent, error) {
	return do(s, ctx, func(a node.API) (node.Sent, error) { return a.SendMessage(ctx, peer, body, opts) })
}

// SendRequest implements node.API.
func (s *Session) SendRequest(ctx context.Context, peer, intent string, params json.RawMessage, opts node.SendOptions) (node.Sent, error) {
	return do(s, ctx, func(a node.API) (node.Sent, error) { return a.SendRequest(ctx, peer, intent, params, opts) })
}

// AwaitResponses implements node.API.
func (s *Session) AwaitResponses(ctx context.Context, requestID string, wait time.Duration, deadline time.Time) (node.Sent, error) {
	return do(s, ctx, func(a node.API) (node.Sent, error) { return a.AwaitResponses(ctx, requestID, wait, deadline) })
}

// SendResponse implements node.API.
func (s *Session) SendResponse(ctx context.Context, peer, requestID, status string, result json.RawMessage, opts node.SendOptions) (node.Sent, error) {
	return do(s, ctx, func(a node.API) (node.Sent, error) {
		return a.SendResponse(ctx, peer, requestID, status, result, opts)
	})
}

// Receive implements node.API.
func (s *Session) Receive(ctx context.Context, q node.Query) (node.Batch, error) {
	return doRead(s, ctx, func(a node.API) (node.Batch, error) { return a.Receive(ctx, q) })
}

// Ack implements node.API.
func (s *Session) Ack(ctx context.Context, r node.AckRequest) (node.Acked, error) {
	return do(s, ctx, func(a node.API) (node.Acked, error) { return a.Ack(ctx, r) })
}

// Outbox implements node.API.
func (s *Session) Outbox(ctx context.Context) (node.Outbox, error) {
	return doRead(s, ctx, func(a node.API) (node.Outbox, error) { return a.Outbox(ctx) })
}

// DeadLetters implements node.API.
func (s *Session) DeadLetters(ctx context.Context) ([]node.DeadLetter, error) {
	return doRead(s, ctx, func(a node.API) ([]node.DeadLetter, error) { return a.DeadLetters(ctx) })
}

// RetryOutbox implements node.API.
func (s *Session) RetryOutbox(ctx context.Context, peer string) (int, error) {
	return do(s, ctx, func(a node.API) (int, error) { return a.RetryOutbox(ctx, peer) })
}

// DropQueued implements node.API.
func (s *Session) DropQueued(ctx context.Context, ids []string) (node.Dropped, error) {
	return do(s, ctx, func(a node.API) (node.Dropped, error) { return a.DropQueued(ctx, ids) })
}

// RetryDeadLetters implements node.API.
func (s *Session) RetryDeadLetters(ctx context.Context, ids []string, all bool) (int, error) {
	return do(s, ctx, func(a node.API) (int, error) { return a.RetryDeadLetters(ctx, ids, all) })
}

// DropDeadLetters implements node.API.
func (s *Session) DropDeadLetters(ctx context.Context, ids []string, all bool) (int, error) {
	return do(s, ctx, func(a node.API) (int, error) { return a.DropDeadLetters(ctx, ids, all) })
}

// PairOffer implements node.API.
func (s *Session) PairOffer(ctx context.Context, opts node.PairOptions) (node.PairOffer, error) {
	return do(s, ctx, func(a node.API) (node.PairOffer, error) { return a.PairOffer(ctx, opts) })
}

// PairWait implements node.API.
func (s *Session) PairWait(ctx context.Context, id string) (node.Paired, error) {
	return do(s, ctx, func(a node.API) (node.Paired, error) { return a.PairWait(ctx, id) })
}

// PairCancel implements node.API.
func (s *Session) PairCancel(ctx context.Context, which string) (int, error) {
	return do(s, ctx, func(a node.API) (int, error) { return a.PairCancel(ctx, which) })
}

// PairAccept implements node.API.
func (s *Session) PairAccept(ctx context.Context, line, name string) (node.Paired, error) {
	return do(s, ctx, func(a node.API) (node.Paired, error) { return a.PairAccept(ctx, line, name) })
}

// Spaces implements node.API.
func (s *Session) Spaces(ctx context.Context) ([]node.SpaceInfo, error) {
	return doRead(s, ctx, func(a node.API) ([]node.SpaceInfo, error) { return a.Spaces(ctx) })
}

// SpaceEdit implements node.API.
func (s *Session) SpaceEdit(ctx context.Context, e node.SpaceEdit) (node.SpaceInfo, error) {
	return do(s, ctx, func(a node.API) (node.SpaceInfo, error) { return a.SpaceEdit(ctx, e) })
}

// SpaceSend implements node.API.
func (s *Session) SpaceSend(ctx context.Context, m node.SpaceMessage) (node.SpaceSent, error) {
	return do(s, ctx, func(a node.API) (node.SpaceSent, error) { return a.SpaceSend(ctx, m) })
}

// Proposals implements node.API.
func (s *Session) Proposals(ctx context.Context, q node.ProposalQuery) (node.ProposalsPage, error) {
	return doRead(s, ctx, func(a node.API) (node.ProposalsPage, error) { return a.Proposals(ctx, q) })
}
