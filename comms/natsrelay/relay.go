package natsrelay

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/meerkatd/meerkatd/comms"
	"github.com/meerkatd/meerkatd/identity"
)

// Options configure a [Relay]; they mirror the [nats] table of
// meerkat.toml (docs/nats.md).
type Options struct {
	Servers []string // nats://host:port or tls://host:port; at least one

	// At most one way to authenticate: a .creds file (user JWT and nkey
	// seed), an nkey seed file, or a user and password.
	CredsFile    string
	NKeySeedFile string
	User         string
	Password     string

	TLSCA   string // PEM file of the CA that signs the servers' certificates
	TLSCert string // client certificate and key (both or neither)
	TLSKey  string

	SubjectPrefix string // default "meerkat"

	// JetStream stores frames in a stream on the node subjects so peers
	// that are offline read them when they return.
	JetStream      bool
	Stream         string        // default "MEERKAT"
	StreamMaxAge   time.Duration // default 7 days
	StreamMaxBytes int64         // -1: unlimited; default 1 GiB
	StreamMaxMsgs  int64         // -1: unlimited; default 1,000,000
	StreamReplicas int           // default 1
	DedupWindow    time.Duration // the broker's duplicate window by envelope id; default 2 min

	ReconnectWait  time.Duration // default 2 s
	ConnectTimeout time.Duration // default 5 s

	Name   string       // client name the servers show (the node's name)
	Logger *slog.Logger // nil: discard
}

// Defaults for Options fields left zero.
const (
	DefaultSubjectPrefix  = "meerkat"
	DefaultStream         = "MEERKAT"
	DefaultStreamMaxAge   = 7 * 24 * time.Hour
	DefaultStreamMaxBytes = 1 << 30
	DefaultStreamMaxMsgs  = 1_000_000
	DefaultDedupWindow    = 2 * time.Minute
	DefaultReconnectWait  = 2 * time.Second
	DefaultConnectTimeout = 5 * time.Second
)

// Bounds on what a Relay holds in memory.
const (
	// maxPendingMsgs and maxPendingBytes bound the messages the client
	// library queues for this node's subscription; past them it drops
	// messages (counted as slow-consumer drops) and their senders retry,
	// since no ack went back. maxPendingBytes also bounds what the
	// JetStream consumer pulls ahead.
	maxPendingMsgs  = 8192
	maxPendingBytes = 64 << 20
	// replyQueue bounds the envelopes admitted and waiting for their
	// acks to be sent back.
	replyQueue = 512
	// maxAckPending bounds the stored envelopes the broker hands this
	// node before it has acked them.
	maxAckPending = 1024
)

// Relay is a node's NATS connection: it publishes envelopes to peers'
// subjects and hands what arrives on its own subject to the Router. Create
// it with [Start]; it is safe for concurrent use.
type Relay struct {
	r       *comms.Router
	opts    Options
	log     *slog.Logger
	nc      *nats.Conn
	js      jetstream.JetStream
	subject string // this node's own subject
	sub     *nats.Subscription

	// JetStream: the consumer being read, and whether Close stopped it
	// (guarded by jsMu: repairJetStream replaces it); repair wakes
	// repairLoop (nil without JetStream).
	jsMu     sync.Mutex
	cc       jetstream.ConsumeContext
	jsClosed bool
	// made is what the last setup of the consumer found (guarded by
	// jsMu): a repair that finds other times was made anew (madeAnew).
	made       setup
	repair     chan struct{}
	consumeErr atomic.Bool // the consumer reported an error: read anew

	replies chan reply
	// ackWaits holds the acks published into the stream whose storing
	// the server has yet to confirm, oldest first (ackWatchLoop).
	ackWaits chan ackWait
	done     chan struct{}
	wg       sync.WaitGroup

	// gate lets Close wait for the message handlers running now and turn
	// away later ones, so nothing reaches the Router after Close.
	gate     sync.RWMutex
	closing  bool
	handlers sync.WaitGroup

	// published remembers the envelopes this relay stored in the stream
	// lately, and pending how many messages the stream held for a
	// subject when last asked (see storedStill).
	published recentIDs
	pendMu    sync.Mutex
	pending   map[string]subjectCount

	closeOnce  sync.Once
	stored     atomic.Uint64 // envelopes the broker stored (publish acks)
	received   atomic.Uint64
	refused    atomic.Uint64
	asyncErrMu sync.Mutex
	asyncErr   string            // the last error the server reported (a permission violation…)
	onDenied   func(deny string) // see untilDenied; under asyncErrMu
	mixedOnce  sync.Once         // logs once that a stream answered a request (isStreamAck)
	ackWarned  atomic.Int64      // when ackNotStored last logged (Unix nanoseconds)
}

// setLastError notes msg as the last error, which Status reports.
func (rl *Relay) setLastError(msg string) {
	rl.asyncErrMu.Lock()
	rl.asyncErr = msg
	rl.asyncErrMu.Unlock()
}

// errDenied is a request the server refused for want of permission.
var errDenied = errors.New("the server refused it: this node's NATS user lacks the permission")

// untilDenied returns ctx, cancelled with errDenied once the server
// reports a permission violation naming subject: the server does not
// answer such a request, which would otherwise wait for ctx's end. Call
// stop when the request is over.
func (rl *Relay) untilDenied(ctx context.Context, subject string) (_ context.Context, stop func()) {
	dctx, cancel := context.WithCancelCause(ctx)
	rl.asyncErrMu.Lock()
	rl.onDenied = func(deny string) {
		if strings.Contains(deny, subject) {
			cancel(errDenied)
		}
	}
	rl.asyncErrMu.Unlock()
	return dctx, func() {
		rl.asyncErrMu.Lock()
		rl.onDenied = nil
		rl.asyncErrMu.Unlock()
		cancel(nil)
	}
}

// denied passes a permission violation the server reported to the
// request waiting for it (untilDenied), if any.
func (rl *Relay) denied(deny string) {
	rl.asyncErrMu.Lock()
	f := rl.onDenied
	rl.asyncErrMu.Unlock()
	if f != nil {
		f(deny)
	}
}

// reply is an admitted (or refused) envelope whose answer is still to go.
type reply struct {
	wait  func() comms.RelayReply
	to    string        // reply subject for the ack ("" none)
	jsMsg jetstream.Msg // set for envelopes read from the stream
	// published says a sender with JetStream published it (it carries a
	// message id), read here straight from the subject: the reply subject
	// is its publish's, which the stream answers.
	published bool
}

// Subject returns the subject of the node with key id under prefix:
// prefix.node.<the key's peer UUID>.
func Subject(prefix string, id identity.PeerID) string {
	return prefix + ".node." + id.UUID().String()
}

// inboxPrefix starts every reply subject a node's requests name: it is
// followed by the node's peer UUID, then ".", then the client's tokens.
const inboxPrefix = "_INBOX_"

// replyInbox returns the peer UUID whose reply inbox subj is in
// (_INBOX_<peer UUID>.<more>), and false for any other subject. A node
// answers only there: the reply subject of a message is whatever its
// publisher wrote, and an answer goes out with this node's permissions
// (allow_responses), so answering anywhere else would let any member of
// the deployment publish in this node's name (to the JetStream API, say).
func replyInbox(subj string) (identity.UUID, bool) {
	rest, ok := strings.CutPrefix(subj, inboxPrefix)
	if !ok {
		return identity.UUID{}, false
	}
	id, more, ok := strings.Cut(rest, ".")
	if !ok || more == "" || strings.ContainsAny(more, " \t\r\n*>") {
		return identity.UUID{}, false
	}
	u, err := identity.ParseUUID(id)
	if err != nil || u.String() != id {
		return identity.UUID{}, false
	}
	return u, true
}

// Start connects to the servers, subscribes to this node's subject (or,
// with JetStream, makes sure the stream and this node's durable consumer
// exist and reads from it) and installs itself as r's relay. The
// connection reconnects on its own for as long as the Relay runs.
func Start(ctx context.Context, r *comms.Router, opts Options) (*Relay, error) {
	if len(opts.Servers) == 0 {
		return nil, errors.New("natsrelay: no servers")
	}
	setDefaults(&opts)
	rl := &Relay{
		r:       r,
		opts:    opts,
		log:     opts.Logger,
		subject: Subject(opts.SubjectPrefix, r.ID()),
		replies: make(chan reply, replyQueue),
		done:    make(chan struct{}),
	}
	if opts.JetStream {
		rl.repair = make(chan struct{}, 1) // before any handler may ask
		rl.ackWaits = make(chan ackWait, replyQueue)
	}
	nopts, err := rl.natsOptions()
	if err != nil {
		return nil, err
	}
	nc, err := nats.Connect(strings.Join(opts.Servers, ","), nopts...)
	if err != nil {
		return nil, fmt.Errorf("natsrelay: connect to %s: %w", strings.Join(opts.Servers, ", "), err)
	}
	rl.nc = nc
	rl.wg.Add(1)
	go rl.replyLoop()
	if opts.JetStream {
		rl.wg.Add(1)
		go rl.ackWatchLoop()
		err = rl.startJetStream(ctx)
	} else {
		err = rl.subscribe()
	}
	if err == nil {
		// The subscription reaches the server before anyone is told it
		// is up: a peer's request right after Start finds a responder.
		err = nc.FlushWithContext(ctx)
	}
	if err == nil {
		err = r.SetRelay(rl)
	}
	if err != nil {
		rl.Close()
		return nil, err
	}
	rl.log.Info("NATS connected", "server", nc.ConnectedUrlRedacted(), "subject", rl.subject, "jetstream", opts.JetStream)
	return rl, nil
}

func setDefaults(o *Options) {
	if o.Logger == nil {
		o.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	def := func(p *time.Duration, d time.Duration) {
		if *p <= 0 {
			*p = d
		}
	}
	def(&o.StreamMaxAge, DefaultStreamMaxAge)
	def(&o.DedupWindow, DefaultDedupWindow)
	def(&o.ReconnectWait, DefaultReconnectWait)
	def(&o.ConnectTimeout, DefaultConnectTimeout)
	if o.SubjectPrefix == "" {
		o.SubjectPrefix = DefaultSubjectPrefix
	}
	if o.Stream == "" {
		o.Stream = DefaultStream
	}
	if o.StreamMaxBytes == 0 {
		o.StreamMaxBytes = DefaultStreamMaxBytes
	}
	if o.StreamMaxMsgs == 0 {
		o.StreamMaxMsgs = DefaultStreamMaxMsgs
	}
	if o.StreamReplicas <= 0 {
		o.StreamReplicas = 1
	}
}

// natsOptions turns Options into the client library's options.
func (rl *Relay) natsOptions() ([]nats.Option, error) {
	o := rl.opts
	n := 0
	for _, set := range []bool{o.CredsFile != "", o.NKeySeedFile != "", o.User != "" || o.Password != ""} {
		if set {
			n++
		}
	}
	if n > 1 {
		return nil, errors.New("natsrelay: give one of a creds file, an nkey seed file or a user and password")
	}
	opts := []nats.Option{
		nats.Name(o.Name),
		nats.MaxReconnects(-1),
		nats.ReconnectWait(o.ReconnectWait),
		nats.Timeout(o.ConnectTimeout),
		nats.RetryOnFailedConnect(false),
		nats.CustomInboxPrefix(inboxPrefix + rl.r.ID().UUID().String()),
		nats.DisconnectErrHandler(func(nc *nats.Conn, err error) {
			if err == nil || nc.IsClosed() || nc.IsDraining() {
				return // closed on purpose (Close): nothing to reconnect
			}
			rl.log.Warn("NATS disconnected; reconnecting", "err", err)
		}),
		nats.ReconnectHandler(func(nc *nats.Conn) {
			rl.log.Info("NATS reconnected", "server", nc.ConnectedUrlRedacted())
			rl.checkJetStream() // another server, or one that lost its data
		}),
		nats.ClosedHandler(func(*nats.Conn) { rl.log.Info("NATS connection closed") }),
		nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) {
			rl.setLastError(err.Error())
			if errors.Is(err, nats.ErrPermissionViolation) {
				rl.denied(err.Error())
			}
			rl.log.Warn("NATS error", "err", err)
		}),
	}
	switch {
	case o.CredsFile != "":
		opts = append(opts, nats.UserCredentials(o.CredsFile))
	case o.NKeySeedFile != "":
		opt, err := nats.NkeyOptionFromSeed(o.NKeySeedFile)
		if err != nil {
			return nil, fmt.Errorf("natsrelay: nkey seed file %s: %w", o.NKeySeedFile, err)
		}
		opts = append(opts, opt)
	case o.User != "" || o.Password != "":
		opts = append(opts, nats.UserInfo(o.User, o.Password))
	}
	if o.TLSCA != "" {
		opts = append(opts, nats.RootCAs(o.TLSCA))
	}
	if (o.TLSCert == "") != (o.TLSKey == "") {
		return nil, errors.New("natsrelay: a client certificate needs both its certificate and its key")
	}
	if o.TLSCert != "" {
		opts = append(opts, nats.ClientCert(o.TLSCert, o.TLSKey))
	}
	return opts, nil
}

// subscribe reads this node's subject directly (no JetStream).
func (rl *Relay) subscribe() error {
	sub, err := rl.nc.Subscribe(rl.subject, func(m *nats.Msg) {
		rl.arrived(m.Data, m.Reply, nil, m.Header.Get(jetstream.MsgIDHeader) != "")
	})
	if err != nil {
		return fmt.Errorf("natsrelay: subscribe to %s: %w", rl.subject, err)
	}
	if err := sub.SetPendingLimits(maxPendingMsgs, maxPendingBytes); err != nil {
		sub.Unsubscribe()
		return err
	}
	rl.sub = sub
	return nil
}

// arrived runs one message through the Router's checks and queues its
// answer, in arrival order.
func (rl *Relay) arrived(data []byte, replyTo string, jm jetstream.Msg, published bool) {
	rl.gate.RLock()
	if rl.closing {
		rl.gate.RUnlock()
		return // not answered: the sender tries again (or the broker redelivers)
	}
	rl.handlers.Add(1)
	rl.gate.RUnlock()
	defer rl.handlers.Done()
	rl.received.Add(1)
	w := rl.r.ReceiveRelayed(data)
	select {
	case rl.replies <- reply{wait: w, to: replyTo, jsMsg: jm, published: published}:
	case <-rl.done:
	}
}

// replyLoop waits for each admission in order and sends its ack back;
// with JetStream it then acks the broker (only after admission).
func (rl *Relay) replyLoop() {
	defer rl.wg.Done()
	for {
		var rp reply
		select {
		case rp = <-rl.replies:
		case <-rl.done:
			// Settle what is queued so no admission is left pending.
			for {
				select {
				case rp = <-rl.replies:
					rp.wait()
				default:
					return
				}
			}
		}
		res := rp.wait()
		if res.Reason != "" {
			rl.refused.Add(1)
		}
		settle := rp.jsMsg != nil
		switch {
		case rp.jsMsg != nil && res.Ack != nil:
			// Through the stream: the ack goes to the sender's own
			// subject (from the verified envelope, never from anything
			// the message says), stored for a sender that is away. The
			// envelope is settled once the stream has stored the ack
			// (ackWatchLoop); an ack the stream refuses (full) would
			// otherwise be lost, and the sender would wait for it.
			settle = false
			fut, err := rl.js.PublishAsync(Subject(rl.opts.SubjectPrefix, res.To), res.Ack)
			if err != nil {
				rl.ackNotStored(rp.jsMsg, err)
				break
			}
			select {
			case rl.ackWaits <- ackWait{fut: fut, m: rp.jsMsg, res: res}:
			case <-rl.done: // unsettled: the broker hands the envelope back
			}
		case rp.published && res.Ack != nil:
			// From a sender with JetStream, to this node without: the
			// ack goes to the sender's own subject (from the verified
			// envelope), where the stream stores it for the sender's
			// consumer. Into the reply subject it would race the
			// stream's acknowledgement of the publish, and be lost.
			if err := rl.nc.Publish(Subject(rl.opts.SubjectPrefix, res.To), res.Ack); err != nil {
				rl.log.Debug("NATS: cannot send an ack", "err", err)
			}
		case rp.to == "":
		case res.Ack != nil:
			// Only into the verified sender's own reply inbox.
			if u, ok := replyInbox(rp.to); !ok || u != res.To.UUID() {
				rl.log.Debug("NATS: not answering outside the sender's reply inbox")
				break
			}
			if err := rl.nc.Publish(rp.to, res.Ack); err != nil {
				rl.log.Debug("NATS: cannot send an ack", "err", err)
			}
		case res.Reason != "" && rp.jsMsg == nil:
			// Refused: an empty answer tells the requester at once, as a
			// socket closed without an ack does. It says nothing of why,
			// and goes only into a node's reply inbox (the sender is not
			// verified: it may be anyone's).
			if _, ok := replyInbox(rp.to); !ok {
				rl.log.Debug("NATS: not answering outside a reply inbox")
				break
			}
			if err := rl.nc.Publish(rp.to, nil); err != nil {
				rl.log.Debug("NATS: cannot send a refusal", "err", err)
			}
		}
		if settle {
			rl.settleStored(rp.jsMsg, res)
		}
	}
}

// ackWait is an ack published into the stream for the envelope m, which
// is settled (as res says) once the stream stored the ack.
type ackWait struct {
	fut jetstream.PubAckFuture
	m   jetstream.Msg
	res comms.RelayReply
}

// ackWatchLoop settles each envelope whose ack went into the stream once
// the server says the stream stored the ack, in the order published;
// an envelope whose ack it refused comes back later (ackNotStored).
func (rl *Relay) ackWatchLoop() {
	defer rl.wg.Done()
	for {
		var w ackWait
		select {
		case w = <-rl.ackWaits:
		case <-rl.done:
			return // what waits is unsettled: the broker hands it back
		}
		select {
		case <-w.fut.Ok():
			rl.settleStored(w.m, w.res)
		case err := <-w.fut.Err():
			rl.ackNotStored(w.m, err)
		case <-rl.done:
			return
		}
	}
}

// ackNotStored hands back an envelope whose ack the stream did not store
// (full, or gone): the broker delivers it again after a while, this node
// finds it a repeat and sends its ack again. The sender, meanwhile,
// waits for the ack; status says why.
func (rl *Relay) ackNotStored(m jetstream.Msg, err error) {
	why := err.Error()
	var api *jetstream.APIError
	if errors.As(err, &api) {
		why = api.Description // the server's words, without the client's prefixes
	}
	msg := "the NATS stream did not store this node's ack of an envelope (" + why + "): the envelope will be read and acknowledged again"
	rl.setLastError(msg)
	if now := time.Now().UnixNano(); now-rl.ackWarned.Load() >= int64(time.Minute) {
		rl.ackWarned.Store(now) // a full stream refuses every ack: one line a minute
		rl.log.Warn("NATS: " + msg)
	}
	if err := nakLater(m); err != nil {
		rl.log.Debug("NATS: cannot settle a stored message", "err", err)
	}
}

// takenLater reports whether an envelope refused for reason may be taken
// later: the node could not take it now (its inbox full or unwritable,
// the sender's share used, a copy being admitted, no daemon serving).
func takenLater(reason string) bool {
	switch reason {
	case comms.RejectInboxFull, comms.RejectStore, comms.RejectPeerShare, comms.RejectInFlight, comms.RejectNotServing:
		return true
	}
	return false
}

// settleStored tells the broker the outcome of an envelope read from the
// stream: acked once admitted (or stored before), asked again later when
// the node could not take it now, and terminated when it can never be
// taken (malformed, untrusted, bad signature…).
func (rl *Relay) settleStored(m jetstream.Msg, res comms.RelayReply) {
	var err error
	switch {
	case res.Reason == "":
		err = m.Ack()
	case takenLater(res.Reason):
		err = nakLater(m)
	default:
		err = m.Term()
	}
	if err != nil {
		rl.log.Debug("NATS: cannot settle a stored message", "err", err)
	}
}

// nakLater hands m back to the broker, to be delivered again after
// redeliverDelay of its deliveries so far.
func nakLater(m jetstream.Msg) error {
	var n uint64
	if md, err := m.Metadata(); err == nil {
		n = md.NumDelivered
	}
	return m.NakWithDelay(redeliverDelay(n))
}

// redeliverDelay is how long the broker waits before it hands back an
// envelope this node could not take now, after its nth delivery: a
// second, doubling with each delivery up to maxRedeliverDelay, so that an
// inbox that stays full does not verify and open the same envelopes
// every second.
func redeliverDelay(n uint64) time.Duration {
	d := time.Second
	for i := uint64(1); i < n && d < maxRedeliverDelay; i++ {
		d *= 2
	}
	return min(d, maxRedeliverDelay)
}

// maxRedeliverDelay bounds redeliverDelay.
const maxRedeliverDelay = 30 * time.Second

// ErrNotConnected is the error of a send, or of a pairing served or
// dialled, while the connection to the NATS server is down
// (reconnecting): it is refused at once, so that it
// neither waits for its timeout nor goes out later behind the caller's
// back (a reliable send is retried by its outbox).
var ErrNotConnected = errors.New("natsrelay: not connected to a NATS server now (reconnecting)")

// headerRoom is what this relay adds to an envelope in a NATS message
// with JetStream, which the server's max_payload counts too: the message
// id header (about 60 bytes), with room to spare. Without JetStream a
// message has no headers.
const headerRoom = 256

var _ comms.RelayLimit = (*Relay)(nil)

// MaxEnvelope implements [comms.RelayLimit]: the server's max_payload
// (as it announced it at the last connection), less headerRoom with
// JetStream; 0 before the first connection.
func (rl *Relay) MaxEnvelope() int {
	room := int64(0)
	if rl.opts.JetStream {
		room = headerRoom
	}
	if m := rl.nc.MaxPayload(); m > room {
		return int(m - room)
	}
	return 0
}

// Send implements [comms.Relay].
func (rl *Relay) Send(ctx context.Context, to identity.PeerID, id identity.UUID, payload []byte, wantAck bool, queued func()) ([]byte, bool, error) {
	if !rl.nc.IsConnected() {
		// Not into the client's reconnect buffer: the send would fail
		// at its timeout and go out after the reconnect all the same.
		// (Acks and replies still wait there for the reconnect.)
		return nil, false, ErrNotConnected
	}
	subj := Subject(rl.opts.SubjectPrefix, to)
	if rl.js != nil {
		if rl.published.has(id) && rl.storedStill(ctx, subj) {
			// Stored before and, as far as the stream shows, waiting
			// there still (its outbox looks again every 30 seconds):
			// published again past the duplicate window, it would be
			// stored once more, a copy per window for as long as the
			// recipient is away.
			queued()
			return nil, true, nil
		}
		ack, err := rl.js.Publish(ctx, subj, payload, jetstream.WithMsgID(id.String()))
		if errors.Is(err, jetstream.ErrNoStreamResponse) || errors.Is(err, nats.ErrNoResponders) {
			rl.checkJetStream() // no stream on the node subjects: gone?
		}
		if err != nil {
			return nil, false, streamFull(err)
		}
		if !ack.Duplicate {
			rl.stored.Add(1)
		}
		rl.published.add(id)
		queued() // stored, in order: the next may go
		return nil, true, nil
	}
	if !wantAck {
		err := rl.nc.Publish(subj, payload)
		if err == nil {
			queued()
		}
		return nil, false, err
	}
	// The client writes a request before it waits for the reply; one
	// connection's messages reach a subscriber in the order written.
	queued()
	m, err := rl.nc.RequestWithContext(ctx, subj, payload)
	if err != nil {
		return nil, false, err
	}
	if isStreamAck(m.Data) {
		// A stream of the deployment captures the node subjects
		// (nats.jetstream = true on other nodes, false here): it stored
		// the request and answered first. The peer may get the envelope
		// from the stream, or took it directly and its ack was dropped
		// (a request takes the first reply): neither acked nor known to
		// be stored. Said for what it is, in status too, rather than as
		// an invalid ack.
		rl.mixedOnce.Do(func() {
			rl.log.Warn("NATS: " + errStreamAck.Error())
		})
		rl.setLastError(errStreamAck.Error())
		return nil, false, errStreamAck
	}
	return m.Data, false, nil
}

// ErrStreamFull is the error of a publish the stream refused because it
// is full: it stores nothing more (discard policy new) until what it
// holds is read or ages out.
var ErrStreamFull = errors.New("natsrelay: the NATS stream is full (its stream_max_msgs or stream_max_bytes): it stores nothing more until what it holds is read; the outbox tries again later")

// streamFull returns ErrStreamFull, with the server's words, for the
// error of a publish the stream refused for room; err otherwise.
func streamFull(err error) error {
	var api *jetstream.APIError
	if errors.As(err, &api) && (strings.Contains(api.Description, "maximum messages") || strings.Contains(api.Description, "maximum bytes")) {
		return fmt.Errorf("%w (the server said: %s)", ErrStreamFull, api.Description)
	}
	return err
}

// errStreamAck is the error of a request a stream answered (isStreamAck).
var errStreamAck = errors.New("natsrelay: a JetStream stream of the NATS deployment answered this node's request (its nats.jetstream is false, and a stream captures the node subjects): the envelope may have been stored or delivered, but no peer acknowledged it; set nats.jetstream alike on every node (check message_status before sending it again)")

// isStreamAck reports whether a reply is a JetStream stream's
// acknowledgement of a publish ({"stream": …, "seq": …}, JSON) rather than
// a node's: an envelope is a CBOR map, never a JSON object.
func isStreamAck(data []byte) bool {
	if len(data) == 0 || data[0] != '{' {
		return false
	}
	var ack struct {
		Stream string `json:"stream"`
		Seq    uint64 `json:"seq"`
	}
	return json.Unmarshal(data, &ack) == nil && ack.Stream != "" && ack.Seq > 0
}

// Status is what [Relay.Status] reports.
type Status struct {
	State      string `json:"state"`            // connected, connecting, reconnecting, closed…
	Server     string `json:"server,omitempty"` // the server connected to, credentials removed
	Subject    string `json:"subject"`          // this node's subject
	JetStream  bool   `json:"jetstream"`
	Reconnects uint64 `json:"reconnects"`
	Received   uint64 `json:"received"`             // messages that arrived on the node's subject
	Refused    uint64 `json:"refused"`              // of those, refused by the checks
	Stored     uint64 `json:"stored_in_broker"`     // envelopes the broker confirmed storing
	Dropped    int    `json:"dropped,omitempty"`    // messages the client dropped as a slow consumer
	LastError  string `json:"last_error,omitempty"` // the last error the server reported
}

// Status reports the connection's state and counters.
func (rl *Relay) Status() Status {
	st := Status{
		State:      strings.ToLower(rl.nc.Status().String()),
		Subject:    rl.subject,
		JetStream:  rl.opts.JetStream,
		Reconnects: rl.nc.Stats().Reconnects,
		Received:   rl.received.Load(),
		Refused:    rl.refused.Load(),
		Stored:     rl.stored.Load(),
	}
	if rl.nc.IsConnected() {
		st.Server = rl.nc.ConnectedUrlRedacted()
	}
	if rl.sub != nil {
		if n, err := rl.sub.Dropped(); err == nil {
			st.Dropped = n
		}
	}
	rl.asyncErrMu.Lock()
	st.LastError = rl.asyncErr
	rl.asyncErrMu.Unlock()
	return st
}

// Close detaches the relay from the Router, stops reading, settles what
// was admitted and closes the connection (flushing what was published).
func (rl *Relay) Close() error {
	rl.closeOnce.Do(func() {
		rl.r.SetRelay(nil)
		rl.jsMu.Lock()
		cc := rl.cc
		rl.jsClosed = true
		rl.jsMu.Unlock()
		if cc != nil {
			cc.Stop()
		}
		if rl.sub != nil {
			rl.sub.Unsubscribe()
		}
		rl.gate.Lock()
		rl.closing = true
		rl.gate.Unlock()
		rl.handlers.Wait() // the replies they queue are settled below
		close(rl.done)
		rl.wg.Wait()
		if rl.nc != nil {
			rl.nc.Drain()
			// Drain closes the connection on its own; wait for that,
			// boundedly, so no client goroutine outlives Close.
			deadline := time.Now().Add(5 * time.Second)
			for !rl.nc.IsClosed() && time.Now().Before(deadline) {
				time.Sleep(10 * time.Millisecond)
			}
			rl.nc.Close()
		}
	})
	return nil
}
