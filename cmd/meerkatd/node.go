package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/meerkatd/meerkatd/comms"
	"github.com/meerkatd/meerkatd/comms/audit"
	"github.com/meerkatd/meerkatd/comms/outbox"
	"github.com/meerkatd/meerkatd/comms/wire"
	"github.com/meerkatd/meerkatd/config"
	"github.com/meerkatd/meerkatd/identity"
	"github.com/meerkatd/meerkatd/inbox"
	"github.com/meerkatd/meerkatd/inbox/store"
	"github.com/meerkatd/meerkatd/transport"
	"github.com/meerkatd/meerkatd/trust"
)

// Files in a node's home besides the identity.
const (
	controlSocketName = "control.sock"
)

// itemOverhead is what an inbox item costs beyond its wire size (the decoded
// tree, bookkeeping), for the inbox byte limit.
const itemOverhead = 512

// home is a node's home directory and what it holds.
type home struct {
	dir string
	cfg config.Config
	kp  *identity.Keypair
}

func (h *home) trustPath() string   { return filepath.Join(h.dir, trust.FileName) }
func (h *home) controlPath() string { return filepath.Join(h.dir, controlSocketName) }

// initHome creates whatever the home lacks: the directory (0700), an
// identity, meerkat.toml with the defaults (and name), an empty
// trusted_peers.json. It reports what it created.
func initHome(dir, name string) (created []string, err error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	if _, err := identity.LoadKeypair(dir); errors.Is(err, fs.ErrNotExist) {
		kp, err := identity.GenerateKeypair()
		if err != nil {
			return nil, err
		}
		if err := kp.Save(dir); err != nil {
			return nil, err
		}
		created = append(created, identity.KeyFile)
	} else if err != nil {
		return nil, err
	}
	cfgPath := filepath.Join(dir, config.FileName)
	if _, err := os.Stat(cfgPath); errors.Is(err, fs.ErrNotExist) {
		cfg := config.Default()
		if name != "" {
			cfg.Name = name
		}
		if err := cfg.Validate(); err != nil {
			return nil, err
		}
		b, err := config.Marshal(cfg)
		if err != nil {
			return nil, err
		}
		if err := os.WriteFile(cfgPath, b, 0o600); err != nil {
			return nil, err
		}
		created = append(created, config.FileName)
	}
	trustPath := filepath.Join(dir, trust.FileName)
	if _, err := os.Stat(trustPath); errors.Is(err, fs.ErrNotExist) {
		var empty *trust.List
		if err := empty.Save(trustPath); err != nil {
			return nil, err
		}
		created = append(created, trust.FileName)
	}
	return created, nil
}

// openHome loads the home named by the flag (creating it if empty) with
// the configuration in effect: defaults < meerkat.toml < MEERKAT_*
// variables < the given flag settings (key path → value).
func (e *env) openHome(flagHome string, overrides map[string]string) (*home, error) {
	dir, err := e.homeDir(flagHome)
	if err != nil {
		return nil, err
	}
	created, err := initHome(dir, "")
	if err != nil {
		return nil, err
	}
	if len(created) > 0 {
		fmt.Fprintf(e.stderr, "initialised %s (%v)\n", dir, created)
	}
	cfg, err := config.LoadOrDefault(filepath.Join(dir, config.FileName))
	if err != nil {
		return nil, err
	}
	if err := cfg.ApplyEnv(e.lookupEnv); err != nil {
		return nil, err
	}
	for k, v := range overrides {
		if err := cfg.Set(k, v); err != nil {
			return nil, fmt.Errorf("%w: %v", errUsage, err)
		}
	}
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	kp, err := identity.LoadKeypair(dir)
	if err != nil {
		return nil, err
	}
	return &home{dir: dir, cfg: cfg, kp: kp}, nil
}

// node is a running meerkatd node: the Router, the mailbox that holds what
// it received, its listeners and the trust-file watcher.
type node struct {
	h      *home
	r      *comms.Router
	mail   mailStore
	inbox  *recordingInbox // the Router's Admitter: mail plus received requests
	log    *slog.Logger
	addrs  []transport.Addr // what it listens on
	cancel context.CancelFunc
	wg     sync.WaitGroup
	reload func() // re-read the trust file now (SIGHUP)

	ob      *outbox.Outbox // reliable sends (daemon nodes only)
	obStore outbox.Store   // the outbox's store; for other nodes opened on first use
	obDB    *store.Store   // the database opened for obStore, if this node opened one
	audit   *audit.Log     // nil: no audit log (disabled, or not a daemon node)
	pairing *pairing       // offers and pairing exchanges (listening nodes)

	stopOnce sync.Once
	stopped  chan struct{} // closed when stop begins; waits on the mailbox end
}

// dbFileName is the durable inbox inside the home.
const dbFileName = "meerkat.db"

// expireInterval is how often the durable inbox drops expired dedup rows
// and old history.
const expireInterval = time.Hour

// openMail opens where the node keeps what it receives: for a daemon (or
// embedded MCP node) the home's SQLite store unless [store] mode is
// "memory"; for the short-lived standalone command nodes, memory (they
// keep only responses they wait for).
func openMail(h *home, log *slog.Logger, mode nodeMode) (mailStore, error) {
	if mode != nodeFull || h.cfg.Store.Mode == config.StoreMemory {
		mail := inbox.NewMailbox[comms.Item](h.cfg.Comms.InboxMax)
		mail.SetByteLimit(h.cfg.Comms.InboxMaxBytes, func(it comms.Item) int { return it.Size + itemOverhead })
		return memMail{mail}, nil
	}
	st, err := store.Open(filepath.Join(h.dir, dbFileName), store.Options{
		MaxItems:         h.cfg.Comms.InboxMax,
		MaxBytes:         int64(h.cfg.Comms.InboxMaxBytes),
		DedupWindow:      time.Duration(h.cfg.Store.DedupWindowHours) * time.Hour,
		HistoryRetention: time.Duration(h.cfg.Store.HistoryHours) * time.Hour,
	})
	if err != nil {
		return nil, err
	}
	return &durableMail{st: st, log: log}, nil
}

func expireLoop(ctx context.Context, d *durableMail, log *slog.Logger) {
	t := time.NewTicker(expireInterval)
	defer t.Stop()
	for {
		if dedup, history, err := d.st.Expire(); err != nil {
			if ctx.Err() == nil {
				log.Warn("inbox store: expiry failed", "err", err)
			}
		} else if dedup+history > 0 {
			log.Debug("inbox store: expired", "dedup", dedup, "history", history)
		}
		select {
		case <-t.C:
		case <-ctx.Done():
			return
		}
	}
}

// nodeMode says what a node in this process is for.
type nodeMode int

const (
	// nodeSendOnly signs and sends; it does not listen (standalone send).
	nodeSendOnly nodeMode = iota
	// nodeReplies listens only to receive the responses a standalone
	// `send request --wait` waits for: anything else is refused (not
	// acknowledged) so its sender retries when the real node is up.
	nodeReplies
	// nodeFull is a daemon (or the embedded node of meerkatd mcp).
	nodeFull
)

// responsesOnly admits responses and refuses everything else.
type responsesOnly struct{ inner comms.Admitter }

func (a responsesOnly) Push(it comms.Item) error {
	if it.Type != comms.ItemExternal || it.Envelope.Kind.Type() != wire.TypeResponse {
		return errors.New("this node is only waiting for a response")
	}
	return a.inner.Push(it)
}

// startNode builds the Router for h and, unless mode is nodeSendOnly,
// starts its listeners and the trust watcher.
func startNode(h *home, log *slog.Logger, mode nodeMode) (*node, error) {
	list, err := trust.LoadOrEmpty(h.trustPath())
	if err != nil {
		return nil, err
	}
	mail, err := openMail(h, log, mode)
	if err != nil {
		return nil, err
	}
	rec := newRecordingInbox(mail)
	for _, en := range mail.List(0, 0) { // requests still unanswered from before a restart
		rec.track(en.Item)
	}
	var admit comms.Admitter = rec
	if mode == nodeReplies {
		admit = responsesOnly{rec}
	}
	n := &node{h: h, mail: mail, inbox: rec, log: log, reload: func() {}, stopped: make(chan struct{})}
	var observe func(comms.Event)
	var pairHook func(net.Conn, io.Reader)
	if mode != nodeSendOnly {
		n.pairing = newPairing(n)
		pairHook = n.pairing.serve
	}
	if mode == nodeFull {
		if n.audit, err = openAudit(h); err != nil {
			mail.Close()
			return nil, err
		}
		observe = n.observeInbound
	}
	r, err := comms.New(h.kp, list, comms.Options{
		Logger:          log,
		AckTimeout:      h.cfg.Comms.AckTimeout(),
		FrameTimeout:    h.cfg.Comms.FrameTimeout(),
		IdleTimeout:     h.cfg.Comms.IdleTimeout(),
		MaxConnections:  h.cfg.Comms.MaxConnections,
		MaxMessageBytes: h.cfg.Comms.MaxMessageBytes,
		Inbox:           admit,
		Observe:         observe,
		Pairing:         pairHook,
	})
	if err != nil {
		mail.Close()
		n.audit.Close()
		return nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	n.r, n.cancel = r, cancel
	if mode == nodeFull {
		if d, ok := mail.(*durableMail); ok {
			n.obStore = d.st.Outbox()
		} else {
			n.obStore = outbox.NewMemStore()
		}
		if n.ob, err = newOutbox(h, r, n.obStore, n.observeOutbox); err != nil {
			n.stop()
			return nil, err
		}
	}
	if d, ok := mail.(*durableMail); ok {
		n.wg.Add(1)
		go func() {
			defer n.wg.Done()
			expireLoop(ctx, d, log)
		}()
	}
	if mode == nodeSendOnly {
		return n, nil
	}
	ls, err := h.cfg.Resolve(h.dir)
	if err != nil {
		n.stop()
		return nil, err
	}
	for _, a := range ls.All() {
		ln, err := transport.Listen(ctx, a)
		if err != nil {
			n.stop()
			return nil, err
		}
		if a.Scheme == transport.SchemeTCP {
			a.Port = uint16(ln.Addr().(*net.TCPAddr).Port)
		}
		n.addrs = append(n.addrs, a)
		n.wg.Add(1)
		go func() {
			defer n.wg.Done()
			if err := r.Serve(ln); err != nil {
				log.Error("listener stopped", "addr", a.String(), "err", err)
			}
		}()
	}
	w := trust.NewWatcher(h.trustPath(), list, trust.DefaultWatchInterval, func(l *trust.List, err error) {
		if err != nil {
			log.Error("trusted peers file not reloaded; keeping the previous list", "err", err)
			return
		}
		r.SetTrust(l)
		log.Info("trusted peers reloaded", "peers", l.Len())
	})
	n.reload = w.Reload
	n.wg.Add(1)
	go func() {
		defer n.wg.Done()
		w.Run(ctx)
	}()
	if n.ob != nil {
		n.ob.Start() // what earlier runs left in the outbox goes out now
	}
	return n, nil
}

// closing reports whether stop has begun.
func (n *node) closing() bool {
	select {
	case <-n.stopped:
		return true
	default:
		return false
	}
}

// stop closes the Router (finishing acks in flight) and waits for the
// listeners and the watcher.
func (n *node) stop() {
	n.stopOnce.Do(func() { close(n.stopped) })
	n.cancel()
	if n.ob != nil {
		n.ob.Close() // first: attempts it cancels are not failures, and it writes to the store
	}
	n.r.Close()
	n.mail.Close()
	if n.obDB != nil {
		if err := n.obDB.Close(); err != nil {
			n.log.Error("outbox store: close failed", "err", err)
		}
	}
	n.wg.Wait()
	if err := n.audit.Close(); err != nil {
		n.log.Error("audit log: close failed", "err", err)
	}
}

// sendTimeout bounds a CLI send beyond the ack timeout: dialing and queueing.
func (n *node) sendTimeout() time.Duration { return n.h.cfg.Comms.AckTimeout() + 5*time.Second }
