package node

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"github.com/meerkatd/meerkatd/comms"
	"github.com/meerkatd/meerkatd/comms/audit"
	"github.com/meerkatd/meerkatd/comms/metrics"
	"github.com/meerkatd/meerkatd/comms/outbox"
	"github.com/meerkatd/meerkatd/comms/space"
	"github.com/meerkatd/meerkatd/comms/wire"
	"github.com/meerkatd/meerkatd/config"
	"github.com/meerkatd/meerkatd/identity"
	"github.com/meerkatd/meerkatd/inbox"
	"github.com/meerkatd/meerkatd/inbox/store"
	"github.com/meerkatd/meerkatd/transport"
	"github.com/meerkatd/meerkatd/trust"
)

// itemOverhead is what an inbox item costs beyond its wire size and its
// decoded values (bookkeeping), for the inbox byte limit.
const itemOverhead = 512

// memSize is what an item of the memory inbox counts against
// comms.inbox_max_bytes: its wire size, its decoded values (a small
// payload can decode into a tree many times its size) and itemOverhead.
func memSize(it comms.Item) int {
	return it.Size + it.Envelope.Kind.Value().Footprint() + itemOverhead
}

// expireInterval is how often the durable inbox drops expired dedup rows
// and old history.
const expireInterval = time.Hour

// Mode says what a node is started for.
type Mode int

const (
	// ModeSend signs and sends; it does not listen. A command run without
	// a daemon uses it: its inbox is the home's database read-only (or
	// nothing, for a memory-mode home), and reliable sends go to the
	// home's outbox for the daemon to finish.
	ModeSend Mode = iota
	// ModeReplies is ModeSend that also listens, to receive the responses
	// a SendRequest with Wait waits for and to complete a pairing offer:
	// anything else is refused (not acknowledged) so that its sender
	// retries when the real node is up. Responses are not acknowledged,
	// so their senders never send them again: those it admits (the one
	// awaited, and any other arriving meanwhile) go to the home's SQLite
	// inbox, where the daemon and inbox find them later.
	ModeReplies
	// ModeServe is a daemon (or the node embedded in meerkatd mcp): it
	// listens, keeps its inbox ([store] mode), runs the outbox, writes
	// the audit log and answers pairing.
	ModeServe
)

// Options configure Start. The zero value starts a ModeSend node that
// logs nothing.
type Options struct {
	Mode   Mode
	Logger *slog.Logger // nil: discard
	// Embedded marks a serving node that runs inside meerkatd mcp (Self
	// reports it), not a daemon.
	Embedded bool
}

// Node is a node running in this process: the Router, the inbox that
// holds what it received, its listeners, the trust-file watcher and, when
// serving, the outbox and audit log. It implements [API]; its methods are
// safe for concurrent use. Close stops it; afterwards its methods fail
// with ErrClosed (or CodeUnavailable).
type Node struct {
	h        *Home
	mode     Mode
	embedded bool // Options.Embedded
	r        *comms.Router
	nats     *natsLink       // nil unless [nats] servers are configured
	mail     mailStore       // memory for command nodes; the home's store ([store] mode) when serving
	inbox    *recordingInbox // the Router's Admitter: mail plus received requests
	log      *slog.Logger
	// unlockHome releases the home's lock a ModeReplies node holds (nil
	// for the others: a daemon's host holds it).
	unlockHome func()
	// relayed holds the envelopes (identity.UUID) whose latest attempt
	// went through NATS, until their audit rows are written: they are
	// marked sealed, as those to nats: peers are. Used only with [nats]
	// servers configured.
	relayed sync.Map
	// waits counts the Receive calls waiting for an item now (the
	// meerkatd_inbox_waiting_reads gauge).
	waits   atomic.Int32
	addrs   []transport.Addr // what it listens on
	started time.Time
	cancel  context.CancelFunc
	wg      sync.WaitGroup
	reload  func() // re-read the trust and spaces files now (SIGHUP)
	trusted trustState

	ob       *outbox.Outbox // reliable sends (serving nodes only)
	obStore  outbox.Store   // the outbox's store; for other nodes opened on first use
	obMu     sync.Mutex     // guards obStore and obDB when opened on first use
	obDB     *store.Store   // the database opened for obStore, if this node opened one
	roDB     *store.Store   // the database opened read only (readDB), if this node opened one
	audit    *audit.Log     // nil: no audit log (disabled, or not serving)
	auditSum *auditSummary  // what strangers cause, summed into audit (nil with no audit log)
	events   *eventLog      // info lines about what peers cause, rate limited
	pairing  *pairing       // offers and pairing exchanges (listening nodes)
	spaces   *spaces        // MEUP spaces (serving nodes only)
	tasks    *tasks         // the task table (serving nodes only; broadcast and tasks slice)
	cmdTasks *tasks         // the home's task table for other nodes, opened on first use (guarded by obMu)
	cards    *cards         // agent cards: kept peer cards, fetches, answering (slice E)
	lc       *lifecycle     // request deadlines and cancels (serving nodes only)
	loop     *loopGuard     // the loop guard (serving nodes with agent.loop_max_exchanges > 0; nil: none)

	trackOnce sync.Once // trackStored
	watchOnce sync.Once // watchAnnouncements

	stopOnce sync.Once
	stopped  chan struct{} // closed when Close begins; ends waits on the inbox

	ctx        context.Context // ends when Close begins
	serving    atomic.Int32    // listeners serving now
	sockMu     sync.Mutex
	sockets    []socketFile     // the Unix socket files serving depends on, as created (WatchSocket)
	sends      sendCounts       // send outcomes, for the metrics
	metrics    *metrics.Metrics // nil: no metrics kept (not a daemon, or metrics.listen "")
	metricsSrv *metrics.Server  // serves metrics.listen

	notes *notices  // system notices (serving nodes only; classes: notice.go)
	sent  sentState // slice B: send records and idempotency keys (sent.go)

	shown shownSet // the unacknowledged items reads returned (Ack with UpTo)
}

var _ API = (*Node)(nil)

// openMail opens where the node keeps what it receives: for a node that
// listens the home's SQLite store unless [store] mode is "memory"; for a
// ModeSend node, which receives nothing, memory.
func openMail(h *Home, log *slog.Logger, mode Mode) (mailStore, error) {
	if mode == ModeSend || h.Config.Store.Mode == config.StoreMemory {
		mail := inbox.NewMailbox[comms.Item](h.Config.Comms.InboxMax)
		mail.SetByteLimit(h.Config.Comms.InboxMaxBytes, memSize)
		mail.SetShare(h.Config.Comms.PeerInboxShare, senderOf)
		return newMemMail(mail), nil
	}
	st, err := store.Open(filepath.Join(h.Dir, DBFileName), store.Options{
		MaxItems:         h.Config.Comms.InboxMax,
		MaxBytes:         int64(h.Config.Comms.InboxMaxBytes),
		PeerShare:        h.Config.Comms.PeerInboxShare,
		DedupWindow:      time.Duration(h.Config.Store.DedupWindowHours) * time.Hour,
		HistoryRetention: time.Duration(h.Config.Store.HistoryHours) * time.Hour,
		HistoryMaxBytes:  int64(h.Config.Store.HistoryMaxBytes),
		SearchText:       recordText,
	})
	if err != nil {
		return nil, storeError(err)
	}
	return &durableMail{st: st, log: log}, nil
}

// storeError codes an error opening the home's database: a file that is
// empty, damaged, of a newer build or a -wal without its database is
// [CodeBadConfig], as config check reports it.
func storeError(err error) error {
	if errors.Is(err, store.ErrEmptyFile) || errors.Is(err, store.ErrDamaged) || errors.Is(err, store.ErrOrphanWAL) || errors.Is(err, store.ErrNewerSchema) {
		return badConfig(err)
	}
	return err
}

// senderOf names an item's sender for the inbox's fair share: the peer's
// key for an envelope, "" (no share) for a local subagent result.
func senderOf(it comms.Item) string {
	if it.Type != comms.ItemExternal {
		return ""
	}
	return string(it.Envelope.From[:])
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

// pruneLoop deletes the dead letters past outbox.dead_letters_max and
// outbox.dead_letter_hours, at start and every expireInterval, until ctx
// ends; the outbox reports each to the audit log.
func pruneLoop(ctx context.Context, ob *outbox.Outbox, log *slog.Logger) {
	t := time.NewTicker(expireInterval)
	defer t.Stop()
	for {
		if n, err := ob.Prune(); err != nil {
			if ctx.Err() == nil {
				log.Warn("outbox: pruning dead letters failed", "err", err)
			}
		} else if n > 0 {
			log.Info("outbox: deleted dead letters past their cap or retention", "count", n)
		}
		select {
		case <-t.C:
		case <-ctx.Done():
			return
		}
	}
}

// responsesOnly admits responses and refuses everything else.
type responsesOnly struct{ inner comms.Admitter }

func (a responsesOnly) Push(it comms.Item) error {
	if it.Type != comms.ItemExternal || it.Envelope.Kind.Type() != wire.TypeResponse {
		return comms.ErrNotServing
	}
	return a.inner.Push(it)
}

// Start builds the node of home h and, unless opts.Mode is ModeSend,
// starts its listeners and the trust watcher.
func Start(h *Home, opts Options) (n *Node, err error) {
	log := opts.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	mode := opts.Mode
	if mode == ModeReplies {
		// It listens on the node's addresses for as long as it runs (a
		// pairing offer, a request's answer): it holds the home as a
		// daemon does, so that a keygen waits for it rather than leave
		// it answering with a key the home no longer holds.
		unlock, err := LockHome(h.Dir)
		if errors.Is(err, ErrHomeServed) {
			return nil, errorf(CodeUnavailable, "a node serves this home (%s) already: a daemon, or another command listening for it", h.Dir)
		}
		if err != nil {
			return nil, err
		}
		defer func() { // the node releases it when it closes; a start that failed, now
			if n != nil {
				n.unlockHome = unlock
			} else {
				unlock()
			}
		}()
		if err := h.CheckKey(); err != nil {
			return nil, err
		}
	}
	if mode == ModeServe {
		if err := checkNATSSecrets(h.Config.NATS, h.Dir); err != nil {
			return nil, badConfig(err)
		}
	}
	list, err := trust.LoadOrEmpty(h.TrustPath())
	if err != nil {
		return nil, err
	}
	mail, err := openMail(h, log, mode)
	if err != nil {
		return nil, err
	}
	rec := newRecordingInbox(mail)
	if mode == ModeServe {
		rec.trackStoredRequests(mail, log) // requests still unanswered from before a restart
	}
	var admit comms.Admitter = rec
	if mode == ModeReplies {
		admit = responsesOnly{rec}
	}
	n = &Node{h: h, mode: mode, embedded: opts.Embedded, mail: mail, inbox: rec, log: log, reload: func() {}, stopped: make(chan struct{}), started: time.Now()}
	n.trusted.list = list
	n.events = newEventLog(log, logInterval)
	rec.onResponse = n.sentAnswered       // slice B: answers to requests sent
	n.cards = newCards(mode == ModeServe) // slice E: agent cards
	rec.intercept = n.interceptCard
	if mode == ModeServe { // loop guard (slice G)
		a := h.Config.Agent
		n.loop = newLoopGuard(a.LoopMaxExchanges, a.LoopFast(), a.LoopHold(), nil)
		rec.seen = n.guardReceipt
	}
	var observe func(comms.Event)
	var pairHook func(net.Conn, io.Reader)
	if mode != ModeSend {
		n.pairing = newPairing(n)
		pairHook = n.pairing.serve
	}
	if mode == ModeServe {
		if n.audit, err = openAudit(h); err != nil {
			mail.Close()
			return nil, err
		}
		if n.audit != nil {
			n.auditSum = newAuditSummary(n.audit.Record)
		}
		observe = n.observeInbound
		if h.Config.Metrics.Listen != "" && !opts.Embedded {
			n.metrics = metrics.New(metricsSource{n})
		}
	}
	r, err := comms.New(h.Key, list, comms.Options{
		Logger:             log,
		AckTimeout:         h.Config.Comms.AckTimeout(),
		FrameTimeout:       h.Config.Comms.FrameTimeout(),
		IdleTimeout:        h.Config.Comms.IdleTimeout(),
		MaxConnections:     h.Config.Comms.MaxConnections,
		PeerMaxConnections: h.Config.Comms.PeerMaxConnections,
		MaxMessageBytes:    h.Config.Comms.MaxMessageBytes,
		Inbox:              admit,
		Observe:            observe,
		PeerConnected:      n.peerConnected,
		LateAck:            n.lateAck,
		Pairing:            pairHook,
		RefusePlaintext:    h.Config.Comms.RefusePlaintext(),
		RelayExpected:      mode == ModeServe && h.Config.NATS.Enabled(),
	})
	if err != nil {
		mail.Close()
		n.audit.Close()
		return nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	n.r, n.ctx, n.cancel = r, ctx, cancel
	if mode == ModeServe {
		if d, ok := mail.(*durableMail); ok {
			n.obStore = d.st.Outbox()
		} else {
			n.obStore = outbox.NewMemStore()
		}
		n.initSent() // slice B
		d := routerDeliverer{meup: n.meupAttempted, ackRTT: n.metrics.ObserveRoundTrip}
		if h.Config.NATS.Enabled() {
			d.relayed = &n.relayed // else nothing goes through NATS: no bookkeeping per send
		}
		n.startNotices() // before the outbox, which may raise some at once
		if n.ob, err = newOutbox(h, r, n.obStore, n.observeOutbox, n.breakerChanged, d, log); err != nil {
			n.Close()
			return nil, err
		}
		ob := n.ob
		n.wg.Add(2)
		go func() {
			defer n.wg.Done()
			pruneLoop(ctx, ob, log)
		}()
		go func() { // slice B
			defer n.wg.Done()
			n.sentPruneLoop(ctx)
		}()
		if q, ok := n.sent.st.(*queuedSent); ok {
			n.wg.Add(1)
			go func() {
				defer n.wg.Done()
				q.writeLoop(ctx)
			}()
		}
		if n.spaces, err = startSpaces(n); err != nil {
			n.Close()
			return nil, err
		}
		rec.meup = n.spaces.admit
		n.tasks = openTasks(h, mail) // broadcast and tasks slice
		rec.task = n.receivedTask
		var lst lifecycleStore = newMemLifecycle()
		if d, ok := mail.(*durableMail); ok {
			lst = d.st
		}
		if n.lc, err = newLifecycle(n, lst); err != nil {
			n.Close()
			return nil, err
		}
		rec.lc = n.lc
		// A request whose deadline passed while no node ran, still queued,
		// becomes a dead letter here, before the outbox starts: it never
		// goes out. (The deadline loop would race the outbox for it.)
		n.lc.expire(ctx)
		n.lc.start(ctx, &n.wg)
		n.startNATS(ctx)
	}
	if d, ok := mail.(*durableMail); ok {
		n.wg.Add(1)
		go func() {
			defer n.wg.Done()
			expireLoop(ctx, d, log)
		}()
	}
	if mode == ModeSend {
		return n, nil
	}
	n.wg.Add(1)
	go func() {
		defer n.wg.Done()
		n.summaryLoop(ctx)
	}()
	ls, err := h.Config.Resolve(h.Dir)
	if err == nil {
		err = h.Sources.Attribute(checkSocketDir(ls))
	}
	if err != nil {
		n.Close()
		return nil, badConfig(err)
	}
	for _, a := range ls.All() {
		ln, err := transport.Listen(ctx, a)
		if err != nil {
			n.Close()
			key := "comms.listen_tcp"
			if a.Scheme == transport.SchemeUDS {
				key = "comms.listen_uds"
			}
			return nil, fmt.Errorf("%s: %w", key, err) // the setting to change (another program holds a port)
		}
		if a.Scheme == transport.SchemeTCP {
			a.Port = uint16(ln.Addr().(*net.TCPAddr).Port)
		}
		if a.Scheme == transport.SchemeUDS {
			n.WatchSocket(a.Path)
		}
		n.addrs = append(n.addrs, a)
		n.wg.Add(1)
		n.serving.Add(1)
		go func() {
			defer n.wg.Done()
			defer n.serving.Add(-1)
			if err := r.Serve(ln); err != nil {
				log.Error("listener stopped", "addr", a.String(), "err", err)
			}
		}()
	}
	w := trust.NewWatcher(h.TrustPath(), list, trust.DefaultWatchInterval, n.trustChanged)
	n.reload = func() { n.trusted.forced.Store(true); w.Reload() }
	n.wg.Add(1)
	go func() {
		defer n.wg.Done()
		w.Run(ctx)
	}()
	if n.spaces != nil {
		n.reload = func() { n.trusted.forced.Store(true); w.Reload(); n.spaces.reload() }
		n.wg.Add(2)
		go func() {
			defer n.wg.Done()
			n.spaces.watch(ctx, trust.DefaultWatchInterval)
		}()
		go func() {
			defer n.wg.Done()
			n.spaces.expire(ctx)
		}()
	}
	if n.cards.queue != nil { // slice E: answers meerkat.card requests
		n.wg.Add(1)
		go func() {
			defer n.wg.Done()
			n.cardLoop(ctx)
		}()
	}
	if n.ob != nil {
		n.ob.Start() // what earlier runs left in the outbox goes out now
	}
	if n.spaces != nil {
		n.spaces.eng.Announce(ctx, space.EventJoin) // queued in the outbox: it does not wait for peers
	}
	if n.metrics != nil {
		if n.metricsSrv, err = n.metrics.Listen(transport.TCPNetwork(h.Config.Metrics.Listen), h.Config.Metrics.Listen, log); err != nil {
			n.Close()
			return nil, fmt.Errorf("metrics.listen: %w", err)
		}
		log.Info("serving metrics and health checks", "addr", n.metricsSrv.Addr().String())
	}
	return n, nil
}

// leaveTimeout bounds the presence "leave" a closing node sends.
const leaveTimeout = 2 * time.Second

// meupAttempted passes a reliable MEUP attempt's outcome to the spaces.
func (n *Node) meupAttempted(peer identity.PeerID, err error) error {
	if n.spaces == nil {
		return err
	}
	return n.spaces.attempted(peer, err)
}

// listPage is how many inbox items the node reads at a time.
const listPage = 256

// Addrs returns the addresses the node listens on (TCP with the port
// actually bound).
func (n *Node) Addrs() []transport.Addr { return n.addrs }

// ReloadTrust has the node re-read the trust file (and a serving node its
// spaces file) soon, logging the outcome even if nothing changed (SIGHUP).
// It does not wait: [Node.ApplyTrust] does.
func (n *Node) ReloadTrust() { n.reload() }

// closing reports whether Close has begun.
func (n *Node) closing() bool {
	select {
	case <-n.stopped:
		return true
	default:
		return false
	}
}

// Close stops the node: the outbox, then the Router (finishing acks in
// flight), the inbox, and waits for the listeners and the watcher. It is
// idempotent.
func (n *Node) Close() error {
	first := false
	n.stopOnce.Do(func() { close(n.stopped); first = true })
	if !first {
		return nil
	}
	if n.metricsSrv != nil {
		n.metricsSrv.Close()
	}
	if n.spaces != nil {
		// Tell the spaces' members this node leaves: one direct attempt
		// each, bounded, before the links close.
		ctx, cancel := context.WithTimeout(context.Background(), leaveTimeout)
		n.spaces.eng.Announce(ctx, space.EventLeave)
		cancel()
	}
	n.cancel()
	if n.ob != nil {
		n.ob.Close() // first: attempts it cancels are not failures, and it writes to the store
	}
	n.closeNATS() // settles what it admitted, before the Router closes
	n.r.Close()
	n.flushSent() // slice B: before the store closes
	n.mail.Close()
	n.obMu.Lock()
	for _, db := range []*store.Store{n.obDB, n.roDB} {
		if db == nil {
			continue
		}
		if err := db.Close(); err != nil {
			n.log.Error("inbox store: close failed", "err", err)
		}
	}
	n.obMu.Unlock()
	n.wg.Wait()
	n.flushSummaries() // the Router has stopped: nothing more is summed
	if err := n.audit.Close(); err != nil {
		n.log.Error("audit log: close failed", "err", err)
	}
	if n.unlockHome != nil {
		n.unlockHome() // last: the home is no longer served
	}
	return nil
}

// SendTimeout bounds a send beyond the ack timeout: dialing and queueing.
func (n *Node) SendTimeout() time.Duration { return n.h.Config.Comms.AckTimeout() + 5*time.Second }
