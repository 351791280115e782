package node

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/meerkatd/meerkatd/comms/natsrelay"
	"github.com/meerkatd/meerkatd/config"
	"github.com/meerkatd/meerkatd/identity"
	"github.com/meerkatd/meerkatd/transport"
	"github.com/meerkatd/meerkatd/trust"
	"github.com/meerkatd/meerkatd/trust/pair"
)

func toPaired(p trust.Peer) Paired {
	return Paired{Name: p.Name, PubKey: p.ID.String(), Addr: p.Addr.String(), NATS: p.NATS}
}

// pairing is a node's side of pairing: its responder and open offers.
type pairing struct {
	n     *Node
	resp  *pair.Responder
	fails *pairFailures // logged once per summaryInterval

	mu     sync.Mutex
	offers map[string]*pair.Offer // by handle
}

func newPairing(n *Node) *pairing {
	p := &pairing{n: n, offers: map[string]*pair.Offer{}, fails: newPairFailures(n.log)}
	p.resp = pair.NewResponder(n.h.Key, n.h.Config.Name, n.trustPeer)
	return p
}

// serve is the Router's Pairing hook.
func (p *pairing) serve(c net.Conn, r io.Reader) {
	source := pair.LocalSource
	if ta, ok := c.RemoteAddr().(*net.TCPAddr); ok {
		source = ta.IP.String()
	} else if uid, err := transport.PeerUID(c); err == nil {
		source = pair.LocalSource + ":" + strconv.FormatUint(uint64(uid), 10) // local users are limited separately
	}
	if err := p.resp.Serve(c, r, source); err != nil {
		// Anyone who can connect can fail as often as the limiter lets
		// them: summed, one line per interval. What an offer's owner must
		// know reaches them through the offer.
		p.fails.note(source, err)
	}
}

// offerAddr is where the other node reaches this one: the TCP listener if
// there is one (it works across hosts; as advertised, over TLS), else the
// Unix socket.
func (n *Node) offerAddr() (transport.Addr, error) {
	var uds *transport.Addr
	for _, a := range n.addrs {
		if a.Scheme == transport.SchemeTCP {
			adv, err := n.advertised(a)
			return adv.WithScheme(transport.SchemeTLS), err
		}
		uds = &a
	}
	if uds == nil {
		return transport.Addr{}, &Error{Code: CodeBadArgument, Msg: "this node does not listen anywhere: set comms.listen_uds or comms.listen_tcp"}
	}
	return *uds, n.reachable(*uds)
}

// open creates an offer and returns its handle. viaNATS offers it
// through the node's NATS connection.
func (p *pairing) open(ttl time.Duration, nameForPeer string, viaNATS bool) (PairOffer, *pair.Offer, error) {
	var addr transport.Addr
	var rl *natsrelay.Relay
	var err error
	if viaNATS {
		if rl, err = p.n.natsRelay(); err != nil {
			return PairOffer{}, nil, err
		}
		addr = transport.Addr{Scheme: transport.SchemeNATS}
	} else if addr, err = p.n.offerAddr(); err != nil {
		return PairOffer{}, nil, err
	}
	o, err := p.resp.Open(addr, ttl, nameForPeer)
	if errors.Is(err, pair.ErrTooManyOffers) {
		return PairOffer{}, nil, &Error{Code: CodeUnavailable, Msg: UserText(err)}
	}
	if err != nil {
		return PairOffer{}, nil, &Error{Code: CodeBadArgument, Msg: UserText(err)}
	}
	if rl != nil {
		if err := p.serveNATS(rl, o); err != nil {
			p.resp.Close(o)
			// Not the command line's fault: the NATS connection is down
			// (as when it never came up: natsRelay), or it did not answer.
			code := CodeUnavailable
			if errors.Is(err, natsrelay.ErrNotConnected) {
				code = CodePeerOffline
			}
			return PairOffer{}, nil, &Error{Code: code, Msg: "cannot offer through NATS: " + UserText(err), Err: err}
		}
	}
	var h [8]byte
	rand.Read(h[:])
	id := hex.EncodeToString(h[:])
	p.mu.Lock()
	for k, old := range p.offers { // forget handles of offers that are over
		select {
		case <-old.Done():
			delete(p.offers, k)
		default:
			if time.Now().After(old.Expires.Add(pair.ExchangeTimeout)) {
				delete(p.offers, k)
			}
		}
	}
	p.offers[id] = o
	p.mu.Unlock()
	return PairOffer{ID: id, Line: o.Line.String(), Expires: o.Expires.UTC()}, o, nil
}

// wait waits for offer id to be used.
func (p *pairing) wait(ctx context.Context, id string) (Paired, error) {
	p.mu.Lock()
	o := p.offers[id]
	p.mu.Unlock()
	if o == nil {
		return Paired{}, &Error{Code: CodePairFailed, Msg: "no such offer: it expired, was used or was withdrawn"}
	}
	peer, err := o.Wait(ctx)
	if ctx.Err() != nil {
		return Paired{}, &Error{Code: CodePairPending, Msg: "the offer is still open"}
	}
	p.mu.Lock()
	delete(p.offers, id)
	p.mu.Unlock()
	if err != nil {
		return Paired{}, Coded(err)
	}
	return toPaired(peer), nil
}

// isOfferHandle reports whether s has the form of an offer's handle
// (PairOffer.ID): 16 hex digits.
func isOfferHandle(s string) bool {
	_, err := hex.DecodeString(s)
	return len(s) == 16 && err == nil
}

// cancel withdraws the offers which names that are still open: the one
// whose handle or line it is, or every one if which is "". It returns
// how many it withdrew.
func (p *pairing) cancel(which string) int {
	var open []*pair.Offer
	p.mu.Lock()
	for id, o := range p.offers {
		if which != "" && which != id && which != o.Line.String() {
			continue
		}
		delete(p.offers, id)
		select {
		case <-o.Done(): // used, closed or failed
		default:
			if time.Now().Before(o.Expires) {
				open = append(open, o)
			}
		}
	}
	p.mu.Unlock()
	for _, o := range open {
		p.resp.Close(o)
	}
	return len(open)
}

// accept pairs with the node of line from this node.
func (n *Node) accept(ctx context.Context, lineText, nameForPeer string) (Paired, error) {
	line, err := pair.ParseLine(lineText)
	if err != nil {
		return Paired{}, &Error{Code: CodeBadArgument, Msg: UserText(err)}
	}
	if nameForPeer != "" {
		// Before anything is dialled: a bad name would fail the exchange
		// halfway, and use up one of the offer's attempts.
		if err := trust.CheckName(nameForPeer); err != nil {
			return Paired{}, errorf(CodeBadArgument, "the name for the peer: %s", UserText(err))
		}
	}
	self, err := n.selfAddrFor(line.Addr)
	if err != nil {
		return Paired{}, err
	}
	var peer trust.Peer
	if line.Addr.Scheme == transport.SchemeNATS {
		rl, rerr := n.natsRelay()
		if rerr != nil {
			return Paired{}, rerr
		}
		c, derr := rl.DialPairing(ctx, line.OfferID())
		if derr != nil {
			return Paired{}, &Error{Code: CodePeerOffline, Msg: "pair: cannot reach the offer through NATS: " + UserText(derr)}
		}
		peer, err = pair.AcceptConn(ctx, c, n.h.Key, n.h.Config.Name, self, line, nameForPeer, n.planPeer, n.trustPeer)
	} else {
		peer, err = pair.Accept(ctx, n.h.Key, n.h.Config.Name, self, line, nameForPeer, n.planPeer, n.trustPeer)
	}
	if errors.Is(err, pair.ErrUnreachable) {
		return Paired{}, &Error{Code: CodePeerOffline, Err: err, Msg: UserText(err)}
	}
	if err != nil {
		return Paired{}, Coded(err)
	}
	return toPaired(peer), nil
}

// serveNATS answers offer o on its NATS subject until it is used, closed
// or expired, or the node stops.
func (p *pairing) serveNATS(rl *natsrelay.Relay, o *pair.Offer) error {
	stop, err := rl.ServePairing(o.Line.OfferID(), func(c net.Conn) {
		if err := p.resp.Serve(c, c, natsPairSource); err != nil {
			p.fails.note(natsPairSource, err)
		}
	})
	if err != nil {
		return err
	}
	n := p.n
	n.wg.Add(1)
	go func() {
		defer n.wg.Done()
		defer stop()
		t := time.NewTimer(time.Until(o.Expires) + pair.ExchangeTimeout)
		defer t.Stop()
		select {
		case <-o.Done():
		case <-t.C:
		case <-n.ctx.Done():
		}
	}()
	return nil
}

// natsPairSource is the rate-limit source of pairing attempts through
// NATS: they share one budget.
const natsPairSource = pair.NATSSource

// selfAddrFor is where the node of addr should reach this one: over TCP
// if it is reached over TCP and this node listens on TCP, else over the
// Unix socket. Over TCP it answers in kind: tls:// to a node that offers
// tls:// (both speak TLS), tcp:// to one that offers only tcp://, which
// a node refusing plaintext cannot pair with.
func (n *Node) selfAddrFor(other transport.Addr) (transport.Addr, error) {
	if other.Scheme == transport.SchemeNATS {
		// Through NATS both ways: this node is reached as nats: too.
		if _, err := n.natsRelay(); err != nil {
			return transport.Addr{}, err
		}
		return other, nil
	}
	if other.Scheme == transport.SchemeTCP && n.h.Config.Comms.RefusePlaintext() {
		return transport.Addr{}, &Error{Code: CodeBadArgument, Msg: errPlaintextPeer(other).Error()}
	}
	ls, err := n.h.Config.Resolve(n.h.Dir)
	if err != nil {
		return transport.Addr{}, err
	}
	all := ls.All()
	if len(n.addrs) > 0 {
		all = n.addrs // a running node knows its actual ports
	}
	var pick *transport.Addr
	for i, a := range all {
		if a.Scheme == other.Scheme || a.OverTCP() && other.OverTCP() {
			adv, err := n.advertised(a)
			if err == nil {
				err = n.reachable(adv)
			}
			return adv.WithScheme(other.Scheme), err
		}
		pick = &all[i]
	}
	switch {
	case other.OverTCP():
		return transport.Addr{}, &Error{Code: CodeBadArgument, Msg: "the other node is reached over TCP, but this node has no TCP listener it could reach back: set comms.listen_tcp"}
	case pick == nil:
		return transport.Addr{}, &Error{Code: CodeBadArgument, Msg: "this node does not listen anywhere, so the other node could not reach it: set comms.listen_uds or comms.listen_tcp"}
	}
	if pick.Scheme == transport.SchemeTCP {
		// Only a TCP listener to give a node that came over a Unix
		// socket: as an offer gives it, advertised and over TLS.
		adv, err := n.advertised(*pick)
		return adv.WithScheme(transport.SchemeTLS), err
	}
	return *pick, n.reachable(*pick)
}

// advertised is the address other nodes are given for listener a: for
// TCP, comms.advertise_tcp if set, else a itself unless it is a wildcard
// (0.0.0.0, ::), which would lead the other node to itself: that is
// refused with the fix.
func (n *Node) advertised(a transport.Addr) (transport.Addr, error) {
	if a.Scheme != transport.SchemeTCP {
		return a, nil
	}
	adv, err := n.h.Config.AdvertiseTCPAddr()
	switch {
	case err != nil:
		return transport.Addr{}, &Error{Code: CodeBadArgument, Msg: "comms.advertise_tcp: " + err.Error()}
	case adv.Scheme != "":
		return adv, nil
	case config.IsWildcard(a):
		return transport.Addr{}, &Error{Code: CodeBadArgument, Msg: fmt.Sprintf(
			"this node listens on %s, all interfaces, which is no address another node can dial: set comms.advertise_tcp in meerkat.toml (or MEERKAT_COMMS_ADVERTISE_TCP) to the host:port other nodes reach it at, like 192.0.2.10:%d",
			a, a.Port)}
	}
	return a, nil
}

// planTrust resolves how p would be added to list: a key already trusted
// keeps its entry and takes the new address; a name already used (in any
// case) by another key gets a numeric suffix, shortened to fit.
func planTrust(l *trust.List, p trust.Peer) (trust.Peer, *trust.List, error) {
	p.Meta = markMeerkatd(p.Meta) // paired nodes run meerkatd (broadcast and tasks slice)
	if cur, ok := l.Lookup(p.ID); ok {
		cur.Addr = p.Addr
		// A nats: address is reached only through NATS: the mark of a
		// direct address also reachable there goes with the address.
		cur.NATS = cur.NATS && p.Addr.Scheme != transport.SchemeNATS
		cur.Meta = markMeerkatd(cur.Meta)
		without, err := l.Without(cur.Name)
		if err != nil {
			return trust.Peer{}, nil, err
		}
		next, err := without.With(cur)
		return cur, next, err
	}
	base := p.Name
	for i := 1; ; i++ {
		if i > 1 {
			suffix := "-" + strconv.Itoa(i)
			p.Name = base[:min(len(base), trust.MaxNameLen-len(suffix))] + suffix
		}
		next, err := l.With(p)
		if err == nil {
			return p, next, nil
		}
		if i >= 1000 || !isNameClash(l, p.Name) {
			return trust.Peer{}, nil, err
		}
	}
}

// isNameClash reports whether name is taken in l, ignoring case.
func isNameClash(l *trust.List, name string) bool {
	for _, q := range l.Peers() {
		if strings.EqualFold(q.Name, name) {
			return true
		}
	}
	return false
}

// errPlaintextPeer is why a node that refuses plaintext TCP does not
// pair with a node reached at a tcp:// address.
func errPlaintextPeer(a transport.Addr) error {
	return fmt.Errorf("the other node gives the plaintext address %s and this node refuses plaintext TCP (comms.tcp_plaintext = \"refuse\"): update the other node to a version that speaks TLS, or set comms.tcp_plaintext = \"allow\"", a)
}

// planPeer is the initiator's check before it proves itself: how p would
// be trusted here, or why it cannot be.
func (n *Node) planPeer(p trust.Peer) (trust.Peer, error) {
	if p.Addr.Scheme == transport.SchemeTCP && n.h.Config.Comms.RefusePlaintext() {
		return trust.Peer{}, errPlaintextPeer(p.Addr)
	}
	l, err := trust.LoadOrEmpty(n.h.TrustPath())
	if err != nil {
		return trust.Peer{}, err
	}
	planned, _, err := planTrust(l, p)
	return planned, err
}

// trustPeer adds p to the trust file (a pairing's commit) and applies it
// at once.
func (n *Node) trustPeer(p trust.Peer) (trust.Peer, error) {
	if p.Addr.Scheme == transport.SchemeTCP && n.h.Config.Comms.RefusePlaintext() {
		return trust.Peer{}, errPlaintextPeer(p.Addr)
	}
	var added trust.Peer
	_, err := trust.Update(n.h.TrustPath(), func(l *trust.List) (*trust.List, error) {
		var next *trust.List
		var err error
		added, next, err = planTrust(l, p)
		return next, err
	})
	if err != nil {
		return trust.Peer{}, err
	}
	if n.r != nil {
		n.applyTrust(false) // a failure is logged; the watcher tries again
	}
	n.noticePaired(added)
	return added, nil
}

// PairOffer implements [API].
func (n *Node) PairOffer(ctx context.Context, opts PairOptions) (PairOffer, error) {
	if n.closing() {
		return PairOffer{}, Coded(ErrClosed) // it no longer listens: the line would lead nowhere
	}
	if n.pairing == nil {
		return PairOffer{}, errorf(CodeNoDaemon, "this node does not listen, so no other node could use an offer")
	}
	if opts.TTL < 0 {
		return PairOffer{}, errorf(CodeBadArgument, "the offer's time-to-live must not be negative")
	}
	info, _, err := n.pairing.open(opts.TTL, opts.NameForPeer, opts.NATS)
	return info, err
}

// PairWait implements [API].
func (n *Node) PairWait(ctx context.Context, id string) (Paired, error) {
	if n.closing() {
		return Paired{}, Coded(ErrClosed)
	}
	if n.pairing == nil {
		return Paired{}, errorf(CodeBadArgument, "no such offer")
	}
	return n.pairing.wait(ctx, id)
}

// PairCancel implements [API].
func (n *Node) PairCancel(ctx context.Context, which string) (int, error) {
	if which = strings.TrimSpace(which); which != "" && !isOfferHandle(which) {
		// A line, in any form pair accept takes (the code in other
		// letter case, without its dashes).
		l, err := pair.ParseLine(which)
		if err != nil {
			return 0, errorf(CodeBadArgument, "%q is neither an offer's line nor its id (%s)", which, UserText(err))
		}
		which = l.String()
	}
	withdrawn := 0
	if n.pairing != nil {
		withdrawn = n.pairing.cancel(which)
	}
	switch {
	case withdrawn > 0:
		return withdrawn, nil
	case which == "":
		return 0, errorf(CodePairFailed, "no open offer: none was made, or each expired, was used or was withdrawn")
	}
	return 0, errorf(CodePairFailed, "no such offer: it expired, was used or was withdrawn")
}

// PairAccept implements [API].
func (n *Node) PairAccept(ctx context.Context, line, name string) (Paired, error) {
	if n.closing() {
		return Paired{}, Coded(ErrClosed)
	}
	return n.accept(ctx, line, name)
}

// AddPeer trusts a peer in the home's trusted peers file: name, key
// ("ed25519:…"), address (uds://, tls://, tcp:// or nats:), whether a
// peer with a direct address is also reachable through NATS, and meta (a
// JSON object, or ""). A running node takes the file in when its watcher
// notices the change; control.AddPeer has it do so at once.
func AddPeer(h *Home, name, key, addr string, alsoNATS bool, meta string) (Paired, error) {
	p, err := peerArgs(h, name, key, addr, alsoNATS, meta)
	if err != nil {
		return Paired{}, err
	}
	if _, err := trust.Update(h.TrustPath(), func(l *trust.List) (*trust.List, error) {
		next, err := l.With(p)
		if err != nil {
			msg := UserText(err)
			if q, ok := l.Lookup(p.ID); ok && strings.EqualFold(q.Name, p.Name) {
				msg += fmt.Sprintf(" (%s is trusted with this key already: to change how it is reached, add it again with --replace)", q.Name)
			}
			return nil, &Error{Code: CodeBadArgument, Msg: msg}
		}
		return next, nil
	}); err != nil {
		return Paired{}, err
	}
	return toPaired(p), nil
}

// ReplacePeer changes how a trusted peer is reached: the peer called
// name (in any letter case) must be trusted with key; its address and
// whether it is also reachable through NATS become addr and alsoNATS, in
// one edit of the trusted peers file, and its meta becomes meta unless
// that is "" (then it is kept). Its name and key stay: a peer whose key
// changed is another identity, removed and added on purpose.
func ReplacePeer(h *Home, name, key, addr string, alsoNATS bool, meta string) (Paired, error) {
	p, err := peerArgs(h, name, key, addr, alsoNATS, meta)
	if err != nil {
		return Paired{}, err
	}
	if _, err := trust.Update(h.TrustPath(), func(l *trust.List) (*trust.List, error) {
		old, ok := l.Lookup(p.ID)
		switch {
		case ok && !strings.EqualFold(old.Name, p.Name):
			return nil, errorf(CodeBadArgument, "%s is trusted as %q, not %q: a peer keeps its name (remove it and add it again to rename it)", p.ID, old.Name, p.Name)
		case !ok:
			if q, named := l.Resolve(p.Name); named {
				return nil, errorf(CodeBadArgument, "%s is trusted with another key (%s): a peer whose key changed is another identity; remove it and add the new key if that is what you mean", q.Name, q.ID)
			}
			return nil, errorf(CodeUnknownPeer, "no trusted peer called %q to change (a new peer is added, not replaced)", p.Name)
		}
		p.Name = old.Name
		if p.Meta == nil {
			p.Meta = old.Meta
		}
		next, err := l.Without(old.Name)
		if err == nil {
			next, err = next.With(p)
		}
		if err != nil {
			return nil, &Error{Code: CodeBadArgument, Msg: UserText(err)}
		}
		return next, nil
	}); err != nil {
		return Paired{}, err
	}
	return toPaired(p), nil
}

// peerArgs checks the arguments of AddPeer and ReplacePeer and makes the
// peer they describe.
func peerArgs(h *Home, name, key, addr string, alsoNATS bool, meta string) (trust.Peer, error) {
	id, err := identity.ParsePeerID(key)
	if err != nil {
		return trust.Peer{}, errorf(CodeBadArgument, "key %q: %s", key, UserText(err))
	}
	a, err := transport.ParseAddr(addr)
	if err != nil {
		return trust.Peer{}, &Error{Code: CodeBadArgument, Msg: UserText(err)}
	}
	if id == h.Key.ID() {
		return trust.Peer{}, errorf(CodeBadArgument, "%s is this node's own key", id)
	}
	if a.Scheme == transport.SchemeTCP && h.Config.Comms.RefusePlaintext() {
		// Every send to it would be refused: say so now.
		return trust.Peer{}, errorf(CodeBadArgument, "%s is a plaintext address and this node refuses plaintext TCP (comms.tcp_plaintext = \"refuse\"): give the peer's tls:// address, or set comms.tcp_plaintext = \"allow\"", a)
	}
	p := trust.Peer{Name: name, ID: id, Addr: a, NATS: alsoNATS}
	if meta != "" {
		p.Meta = json.RawMessage(meta)
	}
	return p, nil
}

// RemovePeer removes the peer that name names (its name in any letter
// case, its key or its peer UUID) from the home's trusted peers file and
// returns its entry. Like [AddPeer], it leaves telling a running node to
// control.RemovePeer.
func RemovePeer(h *Home, name string) (Paired, error) {
	var removed trust.Peer
	_, err := trust.Update(h.TrustPath(), func(l *trust.List) (*trust.List, error) {
		removed, _ = l.Resolve(name)
		target := cmp.Or(removed.Name, name)
		next, err := l.Without(target)
		if err != nil {
			return nil, &Error{Code: CodeUnknownPeer, Msg: err.Error()}
		}
		return next, nil
	})
	if err != nil {
		return Paired{}, err
	}
	return toPaired(removed), nil
}

// AwaitPairing waits, through api, for the other node to use offer: in
// waits of at most a few minutes (the node answers each), until the
// offer expires or ctx ends. Unless the offer was used, it is withdrawn
// before AwaitPairing returns; an interrupt (ctx cancelled) says so.
func AwaitPairing(ctx context.Context, api API, offer PairOffer) (Paired, error) {
	ctx, cancel := context.WithTimeout(ctx, time.Until(offer.Expires)+pair.ExchangeTimeout+5*time.Second)
	defer cancel()
	for {
		chunk := min(time.Until(offer.Expires)+pair.ExchangeTimeout, 5*time.Minute)
		wctx, wcancel := context.WithTimeout(ctx, max(chunk, time.Second))
		p, err := api.PairWait(wctx, offer.ID)
		wcancel()
		if err == nil {
			return p, nil
		}
		if ctx.Err() == nil && (CodeOf(err) == CodePairPending || errors.Is(err, context.DeadlineExceeded)) {
			continue
		}
		wctx, wcancel = context.WithTimeout(context.Background(), 5*time.Second)
		api.PairCancel(wctx, offer.ID)
		wcancel()
		switch {
		case errors.Is(context.Cause(ctx), context.Canceled):
			return Paired{}, fmt.Errorf("%w: the offer is withdrawn", ErrInterrupted)
		case ctx.Err() != nil, !time.Now().Before(offer.Expires) && CodeOf(err) == CodePairFailed:
			return Paired{}, &Error{Code: CodePairFailed, Msg: "the offer expired unused"}
		}
		return Paired{}, err
	}
}
