package comms

import (
	"context"
	"crypto/sha256"
	"crypto/tls"
	"errors"
	"io"
	"log/slog"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/meerkatd/meerkatd/comms/wire"
	"github.com/meerkatd/meerkatd/identity"
	"github.com/meerkatd/meerkatd/inbox"
	"github.com/meerkatd/meerkatd/transport"
	"github.com/meerkatd/meerkatd/trust"
)

// Defaults for [Options] fields left zero (docs/config.md).
const (
	DefaultAckTimeout     = 30 * time.Second
	DefaultFrameTimeout   = 10 * time.Second
	DefaultIdleTimeout    = 60 * time.Second
	DefaultMaxConnections = 1024
	// DefaultPeerMaxConnections bounds one peer's authenticated inbound
	// connections.
	DefaultPeerMaxConnections = 8
	DefaultInboxMax           = inbox.DefaultMax
	// dedupWindow is how many recent (sender, id) pairs are remembered to
	// drop repeats; older repeats may be delivered again.
	dedupWindow = 1 << 16
	// writeQueueLen bounds the envelopes queued on one outbound link;
	// senders block (with their context) when it is full.
	writeQueueLen = 256
)

// ItemType tells what an inbox [Item] holds.
type ItemType uint8

// Inbox item types.
const (
	ItemExternal       ItemType = iota + 1 // an envelope from a peer
	ItemSubagentResult                     // the result of a local subagent
)

// Item is one inbox entry: an envelope from a trusted peer (External) or a
// subagent's result.
type Item struct {
	Type     ItemType
	Received time.Time

	// ItemExternal
	Envelope wire.Envelope
	PeerName string // the sender's trust-list name when it arrived
	Size     int    // the envelope's size on the wire, in bytes
	// Local marks an envelope the node sealed from its own key to its
	// own key (a notice, a person's note); the Router never sets it, so
	// nothing received from the network is ever local.
	Local bool

	// ItemSubagentResult
	SubagentID identity.UUID
	Result     wire.Value
	Summary    string
}

// Admitter is where received envelopes go. Push must either store the item
// (then it will be acknowledged) or return an error (then it is not, and the
// sender retries). *inbox.Queue[Item] is one; a durable store is another.
type Admitter interface {
	Push(Item) error
}

// AsyncAdmitter is an Admitter that can admit without blocking: PushAsync
// starts storing the item and returns its [Admission]. A connection then
// keeps reading pipelined frames while their admissions commit together,
// and acknowledges each envelope once its admission succeeded. A durable
// store implements it.
type AsyncAdmitter interface {
	Admitter
	PushAsync(Item) Admission
}

// Admission is the outcome, possibly not yet known, of
// [AsyncAdmitter.PushAsync]. One goroutine uses it.
type Admission interface {
	// Ready reports whether the outcome is known: Wait would not block.
	Ready() bool
	// Wait blocks until the outcome is known and returns it: nil means
	// the item is stored.
	Wait() error
}

// maxPendingAdmissions bounds the admissions one connection leaves
// pending: a reader with this many unsettled waits for room.
const maxPendingAdmissions = 512

// Options are a Router's knobs; the zero value of each field means its
// default.
type Options struct {
	Logger         *slog.Logger // nil: discard
	AckTimeout     time.Duration
	FrameTimeout   time.Duration // a frame must complete this long after its first byte
	IdleTimeout    time.Duration // inbound connections idle this long are closed
	MaxConnections int           // concurrent inbound connections; more are closed at once
	// PeerMaxConnections bounds the authenticated inbound connections of
	// one peer: a connection whose first new envelope from a peer that
	// holds this many is refused (RejectPeerConnections) and closed.
	PeerMaxConnections int
	MaxMessageBytes    int      // largest frame payload, from transport.MinFrameLimit (a smaller one is taken as that) to transport.MaxFrameSize
	InboxMax           int      // length of the default memory inbox
	Inbox              Admitter // nil: a memory inbox of InboxMax items
	// Pairing, if set, is handed every inbound connection whose first byte
	// is PairingByte (a pairing exchange, not an envelope frame) with the
	// stream as read so far; it runs on the connection's goroutine, which
	// closes the connection when it returns.
	Pairing func(c net.Conn, r io.Reader)
	// Observe, if set, is told the outcome of every inbound envelope (for
	// an audit log). It is called on the connection's goroutine and must
	// not block.
	Observe func(Event)
	// PeerConnected, if set, is told when an inbound connection is
	// authenticated by a trusted peer: its TLS handshake presented the
	// peer's key, or the peer's first new envelope on it verified. It is
	// a sign the peer is up (the outbox tries its queue at once). It is
	// called on the connection's goroutine and must not block.
	PeerConnected func(identity.PeerID)
	// LateAck, if set, is told of each ack that came through the relay
	// when no send waited for it: id, an envelope this node sent to from,
	// was acknowledged after its send returned (a direct send a broker
	// stored, say). It is called on the relay's goroutine and must not
	// block.
	LateAck func(from identity.PeerID, id identity.UUID)
	// RefusePlaintext refuses plaintext TCP: an inbound TCP connection
	// that starts with a frame rather than a TLS handshake is closed
	// (RejectPlaintext), and tcp:// peers are not dialled. Unix sockets
	// are not affected.
	RefusePlaintext bool
	// RelayExpected says a Relay is on its way (a daemon with NATS
	// servers set connects in the background): a send to a nats: peer
	// while none is set says the node is not connected yet
	// (OfflineRelayNotConnected), not that it has no NATS connection.
	RelayExpected bool
	// RelayUnsealed sends envelopes through the Relay as they are, not
	// sealed: only for measuring what sealing costs (meerkatd bench).
	// Receivers accept both.
	RelayUnsealed bool
	// SingleAcks stops this node from asking its peers for acks kinds
	// (one signed ack for many envelopes): each envelope it sends is then
	// acknowledged alone, as the Rust reference does it. Only for
	// measuring what acks kinds save (BenchmarkAcksKinds); it still
	// sends acks kinds to peers that ask for them.
	SingleAcks bool
	// Dial connects to peers; nil means transport.Dial. Tests replace it.
	Dial func(ctx context.Context, a transport.Addr) (net.Conn, error)
}

// Reject reasons, the keys of [Stats.Rejected].
const (
	RejectFrame        = "frame"            // bad length prefix, truncated or timed-out frame
	RejectMalformed    = "malformed"        // envelope does not decode
	RejectNotForUs     = "not_for_us"       // "to" is another node
	RejectUntrusted    = "untrusted"        // sender not in the trust list
	RejectBadSignature = "bad_signature"    // signature does not verify
	RejectInboxFull    = "inbox_full"       // admission refused: the inbox holds its maximum
	RejectStore        = "store"            // admission failed: the inbox could not be written (a full disk, an I/O error)
	RejectPeerShare    = "peer_share"       // the sender holds its share of the inbox (inbox.ErrShare)
	RejectPeerConns    = "peer_connections" // the sender holds PeerMaxConnections authenticated connections
	RejectOverload     = "overload"         // over MaxConnections, or over the payload memory strangers share (strangerFrames)
	RejectInFlight     = "in_flight"        // a copy of the envelope is being admitted right now
	RejectUnsolicited  = "unsolicited"      // a response to no request this node sent that peer
	RejectTLS          = "tls"              // TLS handshake failed: no trusted client key, bad handshake, timeout
	RejectTLSPeer      = "tls_peer"         // an envelope on a TLS connection from another key than the certificate's
	RejectPlaintext    = "plaintext"        // plaintext TCP while Options.RefusePlaintext is set
	RejectSealed       = "sealed"           // a sealed envelope that does not open, or whose inner envelope does not match the outer one
	RejectNotServing   = "not_serving"      // the inbox takes no envelope now (ErrNotServing): no daemon serves it, a command listens for responses
)

// RejectReasons are the Reject… reasons, for a report that lists each,
// also those never seen (the metrics' series start at 0).
var RejectReasons = []string{RejectFrame, RejectMalformed, RejectNotForUs, RejectUntrusted, RejectBadSignature,
	RejectInboxFull, RejectStore, RejectPeerShare, RejectPeerConns, RejectOverload, RejectInFlight, RejectUnsolicited,
	RejectTLS, RejectTLSPeer, RejectPlaintext, RejectSealed, RejectNotServing}

// Stats are counters since the Router started.
type Stats struct {
	Accepted    uint64 // envelopes admitted to the inbox
	Duplicates  uint64 // repeats acked again but not delivered
	AcksSent    uint64 // acks written to peers
	Connections int    // inbound connections open now
	// Authenticated counts the Connections on which a trusted peer's
	// valid new envelope arrived.
	Authenticated int
	Rejected      map[string]uint64 // by reason
}

// Router is a node: listeners, inbound connections, outbound links, the
// request table and the inbox. Create it with [New]; it is safe for
// concurrent use.
type Router struct {
	kp    *identity.Keypair
	self  identity.PeerID
	opts  Options
	log   *slog.Logger
	trust atomic.Pointer[trust.List]
	inbox Admitter
	queue *inbox.Queue[Item] // the default inbox, nil if Options.Inbox was given

	ctx    context.Context // cancelled by Close
	cancel context.CancelFunc
	wg     sync.WaitGroup // every goroutine the Router starts

	// Lock order: outConn.mu → link.mu → Router.mu → Router.rejectMu;
	// dedup.mu, requests.mu and the inbox's lock are leaves.
	mu        sync.Mutex // guards the fields below
	closed    bool
	listeners map[net.Listener]struct{}
	conns     map[net.Conn]*inConn // inbound
	links     map[identity.PeerID]*link

	dedup dedup
	// connSerial numbers the inbound connections (inConn.serial).
	connSerial atomic.Uint64
	reqs       requests
	reqKey     [sha256.Size]byte // keys the tags of request ids (requestid.go)
	lastSeen   sync.Map          // identity.PeerID → *atomic.Int64, Unix nanoseconds of its last valid envelope

	accepted, duplicates, acksSent atomic.Uint64
	batchVerified                  atomic.Uint64 // envelopes whose signatures were checked in batches
	// keys verifies single signatures of trusted peers (and the acks of
	// the peers this node sends to), keeping their keys expanded.
	keys          identity.Verifier
	tlsCert       tls.Certificate // this node's, made from kp
	rejectMu      sync.Mutex
	rejected      map[string]uint64
	untrustedSeen lineLimit[identity.PeerID] // guarded by rejectMu: logUntrusted's rate limit
	refusedLogged lineLimit[refusedKey]      // guarded by rejectMu: logRefused's rate limit
	// untrustedLog is logUntrusted's limit over all keys, guarded by
	// rejectMu: lines logged since start, and those left out.
	untrustedLog struct {
		start          time.Time
		logged, hidden int
	}

	rs relayState // nats: peers (relay.go)

	// strangers is the payload memory the inbound connections not yet
	// authenticated share beyond their first 64 KiB each (see
	// strangerFrames).
	strangers *transport.Budget
}

// strangerFrames is how many frames of the largest size the inbound
// connections not yet authenticated may hold between them, beyond the
// first 64 KiB of each: a stranger who declares large frames on many
// connections, sends most of each and stalls holds at most this much
// (32 MiB with 1 MiB frames), and a frame that would need more closes
// its connection (RejectOverload). Only a connection not authenticated
// yet is charged: a TLS one never (its handshake proved the key), a
// plaintext one until it delivers a new valid envelope, so a trusted
// peer's large envelopes that open a plaintext connection can be refused
// while strangers hold the budget.
const strangerFrames = 32

// New returns a Router for keypair kp that trusts the peers in list.
func New(kp *identity.Keypair, list *trust.List, opts Options) (*Router, error) {
	if kp == nil {
		return nil, errors.New("comms: nil keypair")
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	setDefault(&opts.AckTimeout, DefaultAckTimeout)
	setDefault(&opts.FrameTimeout, DefaultFrameTimeout)
	setDefault(&opts.IdleTimeout, DefaultIdleTimeout)
	setDefault(&opts.MaxConnections, DefaultMaxConnections)
	setDefault(&opts.PeerMaxConnections, DefaultPeerMaxConnections)
	setDefault(&opts.InboxMax, DefaultInboxMax)
	if opts.MaxMessageBytes <= 0 || opts.MaxMessageBytes > transport.MaxFrameSize {
		opts.MaxMessageBytes = transport.MaxFrameSize
	}
	opts.MaxMessageBytes = max(opts.MaxMessageBytes, transport.MinFrameLimit)
	if opts.Dial == nil {
		opts.Dial = transport.Dial
	}
	r := &Router{
		kp:        kp,
		self:      kp.ID(),
		opts:      opts,
		log:       opts.Logger,
		listeners: map[net.Listener]struct{}{},
		conns:     map[net.Conn]*inConn{},
		links:     map[identity.PeerID]*link{},
		rejected:  map[string]uint64{},
		strangers: transport.NewBudget(strangerFrames * int64(opts.MaxMessageBytes)),
	}
	cert, err := transport.NodeCert(kp.Signer())
	if err != nil {
		return nil, err
	}
	r.tlsCert = cert
	r.inbox = opts.Inbox
	if r.inbox == nil {
		r.queue = inbox.New[Item](opts.InboxMax)
		r.inbox = r.queue
	}
	r.trust.Store(list)
	r.dedup.init(dedupWindow)
	r.reqs.init()
	r.reqKey = requestIDKey(kp)
	r.ctx, r.cancel = context.WithCancel(context.Background())
	return r, nil
}

func setDefault[T comparable](p *T, def T) {
	var zero T
	if *p == zero {
		*p = def
	}
}

// ID returns this node's public key.
func (r *Router) ID() identity.PeerID { return r.self }

// Inbox returns the default memory inbox, or nil if Options.Inbox was set.
func (r *Router) Inbox() *inbox.Queue[Item] { return r.queue }

// Trust returns the current trust list.
func (r *Router) Trust() *trust.List { return r.trust.Load() }

// sameRoute reports whether a and b, one peer's entries, are reached the
// same way: the address, and whether NATS is tried when it cannot be
// connected to. A link keeps the entry it was made for.
func sameRoute(a, b trust.Peer) bool { return a.Addr == b.Addr && a.NATS == b.NATS }

// SetTrust replaces the trust list. Connections of peers that stay trusted
// are kept; envelopes from a removed peer are refused from now on, and its
// outbound link is closed.
func (r *Router) SetTrust(l *trust.List) {
	r.trust.Store(l)
	r.mu.Lock()
	var drop []*link
	for id, lk := range r.links {
		if p, ok := l.Lookup(id); !ok || !sameRoute(p, lk.peer) {
			drop = append(drop, lk)
			delete(r.links, id)
		}
	}
	r.mu.Unlock()
	for _, lk := range drop {
		lk.close()
	}
}

// Serve accepts connections on ln until ln fails or the Router closes. It
// owns ln and closes it. It returns nil once the Router is closed (also when
// called after Close).
func (r *Router) Serve(ln net.Listener) error {
	r.mu.Lock()
	if r.closed {
		r.mu.Unlock()
		ln.Close()
		return nil
	}
	r.listeners[ln] = struct{}{}
	r.wg.Add(1)
	r.mu.Unlock()
	defer r.wg.Done()
	defer func() {
		r.mu.Lock()
		delete(r.listeners, ln)
		r.mu.Unlock()
		ln.Close()
	}()
	var delay time.Duration
	for {
		c, err := ln.Accept()
		if err != nil {
			if r.ctx.Err() != nil {
				return nil
			}
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() || errors.Is(err, errTooManyFiles) {
				// Out of file descriptors and the like: back off, stay up.
				delay = min(max(2*delay, 5*time.Millisecond), time.Second)
				r.log.Warn("accept failed; backing off", "err", err, "delay", delay)
				select {
				case <-time.After(delay):
					continue
				case <-r.ctx.Done():
					return nil
				}
			}
			return err
		}
		delay = 0
		st, ok := r.track(c)
		if !ok {
			c.Close()
			continue
		}
		go r.serveConn(c, st)
	}
}

// inConn is the Router's record of an inbound connection.
type inConn struct {
	since  time.Time
	authed atomic.Bool // has delivered a valid envelope from a trusted peer
	// active is when (Unix nanoseconds) the connection last delivered a
	// valid envelope that is not an ack: the idle timeout counts from
	// it. Acks alone do not keep a connection.
	active atomic.Int64
	peer   identity.PeerID // whose new envelope authenticated or claimed it; guarded by Router.mu
	claims int             // new envelopes of peer being admitted while not authenticated; guarded by Router.mu
	// tlsPeer is the key of a TLS connection's client certificate
	// (zero: not TLS); set before the first frame is read.
	tlsPeer identity.PeerID
	// relay marks the stand-in for one envelope that came through the
	// Relay rather than a connection: it is not tracked, counts toward no
	// connection limit and authenticates nothing. sealed says the
	// envelope came sealed.
	relay, sealed bool
	// acksOK says the peer takes acks kinds on this connection: one of
	// its envelopes carried wire.Envelope.AcksHint.
	acksOK atomic.Bool
	// serial numbers the connection (from 1; 0 for a relay stand-in), so
	// that the duplicate filter knows a copy its own connection admits.
	serial uint64
}

// ownerOf is st's serial, 0 for none.
func ownerOf(st *inConn) uint64 {
	if st == nil {
		return 0
	}
	return st.serial
}

// authenticate marks st authenticated by a new envelope from peer, the
// peer whose connections it then counts toward.
func (r *Router) authenticate(st *inConn, peer identity.PeerID) {
	if st == nil || st.relay || st.authed.Load() {
		return
	}
	r.mu.Lock()
	first := !st.authed.Load()
	if first {
		st.peer = peer
		st.authed.Store(true)
	}
	r.mu.Unlock()
	if first && st.tlsPeer.IsZero() && r.opts.PeerConnected != nil {
		r.opts.PeerConnected(peer) // over TLS it was told at the handshake
	}
}

// claimPeerRoom reports whether connection st may carry a new envelope
// (never seen before) from peer: it is authenticated already, or peer
// holds fewer than PeerMaxConnections connections that are authenticated
// or about to be. In the latter case st is counted as peer's from now on
// (claimed true) while the envelope is admitted: connections whose first
// envelopes arrive at the same moment cannot all pass. A claim ends when
// the envelope authenticates st, when st closes (an admission refused
// closes it), or with unclaim when the envelope turns out to be stored
// before.
func (r *Router) claimPeerRoom(st *inConn, peer identity.PeerID) (claimed, ok bool) {
	if st == nil || st.relay || st.authed.Load() {
		return false, true
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if st.claims > 0 && st.peer != peer {
		// Another peer's first envelope is being admitted on st: st
		// counts as that peer's. (Only a peer that can sign as both
		// could send this.)
		return false, true
	}
	n := 0
	for _, o := range r.conns {
		if o != st && o.peer == peer && (o.authed.Load() || o.claims > 0) {
			n++
		}
	}
	if n >= r.opts.PeerMaxConnections {
		return false, false
	}
	st.peer = peer
	st.claims++
	return true, true
}

// unclaim ends one claim of claimPeerRoom on st.
func (r *Router) unclaim(st *inConn) {
	r.mu.Lock()
	if st.claims > 0 {
		st.claims--
	}
	r.mu.Unlock()
}

// track registers an inbound connection, refusing it when the Router is
// closed. At MaxConnections it makes room by evicting the oldest connection
// that has not yet delivered a valid envelope, so strangers holding
// connections open cannot lock trusted peers out; if every connection is
// authenticated, the new one is refused. On success the caller must run
// serveConn, which untracks it.
func (r *Router) track(c net.Conn) (*inConn, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed {
		return nil, false
	}
	if len(r.conns) >= r.opts.MaxConnections {
		r.reject(RejectOverload)
		var victim net.Conn
		var oldest time.Time
		for vc, st := range r.conns {
			if !st.authed.Load() && (victim == nil || st.since.Before(oldest)) {
				victim, oldest = vc, st.since
			}
		}
		if victim == nil {
			return nil, false
		}
		// Closing (not just a deadline, which serveConn could reset before
		// it first reads) ends the victim's goroutine at once; it then
		// finds itself already untracked.
		delete(r.conns, victim)
		victim.Close()
	}
	st := &inConn{since: time.Now(), serial: r.connSerial.Add(1)}
	st.active.Store(st.since.UnixNano())
	r.conns[c] = st
	r.wg.Add(1)
	return st, true
}

func (r *Router) untrack(c net.Conn) {
	r.mu.Lock()
	delete(r.conns, c)
	r.mu.Unlock()
	r.wg.Done()
}

func (r *Router) reject(reason string) {
	r.rejectMu.Lock()
	r.rejected[reason]++
	r.rejectMu.Unlock()
}

// seen records that a valid envelope from id arrived now; after a peer's
// first envelope it allocates nothing.
func (r *Router) seen(id identity.PeerID) {
	now := time.Now().UnixNano()
	if t, ok := r.lastSeen.Load(id); ok {
		t.(*atomic.Int64).Store(now)
		return
	}
	t := new(atomic.Int64)
	t.Store(now)
	if prev, loaded := r.lastSeen.LoadOrStore(id, t); loaded {
		prev.(*atomic.Int64).Store(now)
	}
}

// LastSeen returns when the last valid envelope from id arrived (zero if
// none since the Router started).
func (r *Router) LastSeen(id identity.PeerID) time.Time {
	if t, ok := r.lastSeen.Load(id); ok {
		return time.Unix(0, t.(*atomic.Int64).Load())
	}
	return time.Time{}
}

// Stats returns a snapshot of the counters.
func (r *Router) Stats() Stats {
	s := Stats{
		Accepted:   r.accepted.Load(),
		Duplicates: r.duplicates.Load(),
		AcksSent:   r.acksSent.Load(),
		Rejected:   map[string]uint64{},
	}
	r.rejectMu.Lock()
	for k, v := range r.rejected {
		s.Rejected[k] = v
	}
	r.rejectMu.Unlock()
	r.mu.Lock()
	s.Connections = len(r.conns)
	for _, st := range r.conns {
		if st.authed.Load() {
			s.Authenticated++
		}
	}
	r.mu.Unlock()
	return s
}

// Close stops accepting, closes every connection and link, fails pending
// sends with ErrClosed and waits for every goroutine to end. Acks already
// being written are finished first. Close is idempotent.
func (r *Router) Close() error {
	r.mu.Lock()
	if r.closed {
		r.mu.Unlock()
		r.wg.Wait()
		return nil
	}
	r.closed = true
	r.cancel() // before closing listeners, so Serve sees a clean shutdown
	for ln := range r.listeners {
		ln.Close()
	}
	for c := range r.conns {
		// Wake blocked reads and bound blocked writes; the connection
		// goroutine flushes its acks (briefly) and closes.
		c.SetReadDeadline(time.Now())
		c.SetWriteDeadline(time.Now().Add(shutdownFlush))
	}
	links := r.links
	r.links = map[identity.PeerID]*link{}
	r.mu.Unlock()
	for _, lk := range links {
		lk.close()
	}
	r.wg.Wait()
	r.reqs.closeAll()
	if r.queue != nil {
		r.queue.Close()
	}
	return nil
}

// go starts f as a goroutine owned by the Router, unless it is closed.
func (r *Router) goOwned(f func()) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed {
		return false
	}
	r.wg.Add(1)
	go func() {
		defer r.wg.Done()
		f()
	}()
	return true
}

// dedup remembers the most recent (sender, id) pairs in a ring. An entry
// is pending while its admission runs and committed once stored.
type dedup struct {
	mu   sync.Mutex
	seen map[dedupKey]dedupEntry
	ring []dedupKey // grows to max as keys arrive, then is reused in turn
	max  int
	next int
}

type dedupKey struct {
	from identity.PeerID
	id   identity.UUID
}

type dedupEntry struct {
	slot      int // ring position, so a reused slot only evicts its own key
	committed bool
	owner     uint64 // the serial of the connection admitting it (0: none)
}

// Outcomes of dedup.reserve.
const (
	dedupNew       = iota // reserved now: admit it, then commit or release
	dedupPending          // another copy is being admitted
	dedupCommitted        // already stored
)

// init sets the window to n keys. Nothing is allocated up front: an idle
// node stays small, and the structures grow with what arrives.
func (d *dedup) init(n int) {
	d.seen = map[dedupKey]dedupEntry{}
	d.max = n
}

// reserve records k as pending if it is new, admitted by the connection
// whose serial is owner (0: none). For a key pending, same says whether
// owner admits it.
func (d *dedup) reserve(k dedupKey, owner uint64) (outcome int, same bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if e, ok := d.seen[k]; ok {
		if e.committed {
			return dedupCommitted, false
		}
		return dedupPending, owner != 0 && e.owner == owner
	}
	if len(d.ring) < d.max {
		d.seen[k] = dedupEntry{slot: len(d.ring), owner: owner}
		d.ring = append(d.ring, k)
		return dedupNew, false
	}
	old := d.ring[d.next]
	if e, ok := d.seen[old]; ok && e.slot == d.next {
		delete(d.seen, old)
	}
	d.ring[d.next] = k
	d.seen[k] = dedupEntry{slot: d.next, owner: owner}
	d.next = (d.next + 1) % len(d.ring)
	return dedupNew, false
}

// commit marks k stored.
func (d *dedup) commit(k dedupKey) {
	d.mu.Lock()
	if e, ok := d.seen[k]; ok {
		e.committed = true
		d.seen[k] = e
	}
	d.mu.Unlock()
}

// release forgets k after an admission that failed, so a retry is admitted.
func (d *dedup) release(k dedupKey) {
	d.mu.Lock()
	delete(d.seen, k)
	d.mu.Unlock()
}
