package control

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/meerkatd/meerkatd/comms/node"
	"github.com/meerkatd/meerkatd/transport"
)

// ErrServing is returned by ServeHome when another process already serves
// the home (its control socket answers).
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
}

// Served is a home's node running in this process with its control
// socket.
type Served struct {
	Node *node.Node
	stop func()
}

// Close stops accepting control connections, stops the node (finishing
// acks in flight), removes the sockets and waits.
func (s *Served) Close() { s.stop() }

// ServeHome runs the node of h in this process with its listeners and its
// control socket, as the daemon and an embedded meerkatd mcp do, and
// announces it for local discovery. It fails with ErrServing when another
// process serves h.
func ServeHome(h *node.Home, opts HostOptions) (*Served, error) {
	log := opts.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	a, err := transport.ParseAddr("uds://" + h.ControlPath())
	if err != nil {
		return nil, err
	}
	// The lock makes "exactly one node per home" hold even when two
	// processes start at the same instant: the socket checks alone leave
	// a window between another process's bind and its listen.
	unlock, err := lockHome(h)
	if err != nil {
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
	served := make(chan struct{})
	go func() {
		defer close(served)
		Serve(ctx, ctl, n, Options{Logger: log, SendTimeout: n.SendTimeout()})
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
			unlock()
		})
	}}, nil
}

// Session is a node.API for a long-lived face such as meerkatd mcp: it
// uses the home's daemon when one serves it, and otherwise serves the
// home itself (so other commands attach to it). Of several sessions
// started at once for one home, exactly one serves it.
//
// When the process serving the home goes away, what the session does
// depends on what it was. Another session's node (Self.Embedded): the
// session takes over, serving the home or attaching to whichever process
// got there first. A daemon: the session does not take the home (the
// daemon being restarted would then find it taken); its calls fail with
// CodeUnavailable until a node serves the home again, and then reach it.
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
	closed bool
}

var _ node.API = (*Session)(nil)

// attachAttempts bounds how often a session tries to serve or attach
// before it gives up (another process won the socket but does not answer
// yet).
const attachAttempts = 20

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
	var last error
	for i := 0; i < attachAttempts; i++ {
		dctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		c := NewClient(s.h.ControlPath())
		self, err := c.Self(dctx)
		cancel()
		if err == nil {
			if s.api != nil {
				s.log.Info("attached to the node serving the home", "home", s.h.Dir, "embedded", self.Embedded)
			}
			s.api, s.daemon = c, !self.Embedded
			return nil
		}
		last = err
		if !errors.Is(err, ErrNoDaemon) {
			return err
		}
		if s.daemon {
			// The daemon is gone, perhaps being restarted: leave the home
			// for it.
			return &node.Error{Code: node.CodeUnavailable, Err: ErrNoDaemon,
				Msg: fmt.Sprintf("the daemon serving %s is not running (start it again with: meerkatd run --home %s)", s.h.Dir, s.h.Dir)}
		}
		opts := s.opts
		opts.Embedded = true
		sv, err := ServeHome(s.h, opts)
		if err == nil {
			if s.api != nil {
				s.log.Info("took over the home: serving it in this process", "home", s.h.Dir)
			}
			s.api, s.served = sv.Node, sv
			return nil
		}
		last = err
		if !errors.Is(err, ErrServing) {
			return err
		}
		// Another process took the socket a moment ago: attach to it once
		// it answers.
		select {
		case <-time.After(time.Duration(10*(i+1)) * time.Millisecond):
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return fmt.Errorf("neither attached to nor serving %s: %w", s.h.Dir, last)
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
	api, err := s.current()
	if err != nil {
		var zero T
		return zero, err
	}
	v, err := f(api)
	if err == nil || !errors.Is(err, ErrNoDaemon) {
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
	return do(s, ctx, func(a node.API) (node.Self, error) { return a.Self(ctx) })
}

// Status implements node.API.
func (s *Session) Status(ctx context.Context) (node.Status, error) {
	return do(s, ctx, func(a node.API) (node.Status, error) { return a.Status(ctx) })
}

// Peers implements node.API.
func (s *Session) Peers(ctx context.Context) ([]node.Peer, error) {
	return do(s, ctx, func(a node.API) ([]node.Peer, error) { return a.Peers(ctx) })
}

// SendMessage implements node.API.
func (s *Session) SendMessage(ctx context.Context, peer, body string, opts node.SendOptions) (node.Sent, error) {
	return do(s, ctx, func(a node.API) (node.Sent, error) { return a.SendMessage(ctx, peer, body, opts) })
}

// SendRequest implements node.API.
func (s *Session) SendRequest(ctx context.Context, peer, intent string, params json.RawMessage, opts node.SendOptions) (node.Sent, error) {
	return do(s, ctx, func(a node.API) (node.Sent, error) { return a.SendRequest(ctx, peer, intent, params, opts) })
}

// SendResponse implements node.API.
func (s *Session) SendResponse(ctx context.Context, peer, requestID, status string, result json.RawMessage, opts node.SendOptions) (node.Sent, error) {
	return do(s, ctx, func(a node.API) (node.Sent, error) {
		return a.SendResponse(ctx, peer, requestID, status, result, opts)
	})
}

// Receive implements node.API.
func (s *Session) Receive(ctx context.Context, q node.Query) (node.Batch, error) {
	return do(s, ctx, func(a node.API) (node.Batch, error) { return a.Receive(ctx, q) })
}

// Ack implements node.API.
func (s *Session) Ack(ctx context.Context, r node.AckRequest) (node.Acked, error) {
	return do(s, ctx, func(a node.API) (node.Acked, error) { return a.Ack(ctx, r) })
}

// Outbox implements node.API.
func (s *Session) Outbox(ctx context.Context) (node.Outbox, error) {
	return do(s, ctx, func(a node.API) (node.Outbox, error) { return a.Outbox(ctx) })
}

// DeadLetters implements node.API.
func (s *Session) DeadLetters(ctx context.Context) ([]node.DeadLetter, error) {
	return do(s, ctx, func(a node.API) ([]node.DeadLetter, error) { return a.DeadLetters(ctx) })
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
func (s *Session) PairCancel(ctx context.Context, id string) error {
	_, err := do(s, ctx, func(a node.API) (struct{}, error) { return struct{}{}, a.PairCancel(ctx, id) })
	return err
}

// PairAccept implements node.API.
func (s *Session) PairAccept(ctx context.Context, line, name string) (node.Paired, error) {
	return do(s, ctx, func(a node.API) (node.Paired, error) { return a.PairAccept(ctx, line, name) })
}
