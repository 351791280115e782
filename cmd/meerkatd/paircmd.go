package main

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/meerkatd/meerkatd/transport"
	"github.com/meerkatd/meerkatd/trust"
	"github.com/meerkatd/meerkatd/trust/pair"
)

// pairedInfo is what a pairing added, as the CLI, control socket and MCP
// tools report it.
type pairedInfo struct {
	Name string `json:"name"`
	Key  string `json:"key"`
	Addr string `json:"addr"`
}

func toPaired(p trust.Peer) pairedInfo {
	return pairedInfo{Name: p.Name, Key: p.ID.String(), Addr: p.Addr.String()}
}

// offerInfo is an open offer.
type offerInfo struct {
	ID      string    `json:"id"`   // handle for pair_wait
	Line    string    `json:"line"` // what to pass to the other node
	Expires time.Time `json:"expires"`
}

// pairing is a node's side of pairing: its responder and open offers.
type pairing struct {
	n    *node
	resp *pair.Responder

	mu     sync.Mutex
	offers map[string]*pair.Offer // by handle
}

func newPairing(n *node) *pairing {
	p := &pairing{n: n, offers: map[string]*pair.Offer{}}
	p.resp = pair.NewResponder(n.h.kp, n.h.cfg.Name, n.trustPeer)
	return p
}

// serve is the Router's Pairing hook.
func (p *pairing) serve(c net.Conn, r io.Reader) {
	source := pair.LocalSource
	if ta, ok := c.RemoteAddr().(*net.TCPAddr); ok {
		source = ta.IP.String()
	} else if uid, ok := peerUID(c); ok {
		source = pair.LocalSource + ":" + uid // local users are limited separately
	}
	if err := p.resp.Serve(c, r, source); err != nil {
		p.n.log.Info("pairing attempt failed", "source", source, "err", err)
	}
}

// offerAddr is where the other node reaches this one: the TCP listener if
// there is one (it works across hosts), else the Unix socket.
func (n *node) offerAddr() (transport.Addr, error) {
	var uds *transport.Addr
	for _, a := range n.addrs {
		if a.Scheme == transport.SchemeTCP {
			return a, nil
		}
		uds = &a
	}
	if uds == nil {
		return transport.Addr{}, &codedError{codeBadArgs, "this node does not listen anywhere: set comms.listen_uds or comms.listen_tcp"}
	}
	return *uds, nil
}

// open creates an offer and returns its handle.
func (p *pairing) open(ttl time.Duration, nameForPeer string) (offerInfo, *pair.Offer, error) {
	addr, err := p.n.offerAddr()
	if err != nil {
		return offerInfo{}, nil, err
	}
	o, err := p.resp.Open(addr, ttl, nameForPeer)
	if err != nil {
		return offerInfo{}, nil, &codedError{codeBadArgs, err.Error()}
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
	return offerInfo{ID: id, Line: o.Line.String(), Expires: o.Expires.UTC()}, o, nil
}

// wait waits for offer id to be used.
func (p *pairing) wait(ctx context.Context, id string) (pairedInfo, error) {
	p.mu.Lock()
	o := p.offers[id]
	p.mu.Unlock()
	if o == nil {
		return pairedInfo{}, &codedError{codeBadArgs, "no such offer"}
	}
	peer, err := o.Wait(ctx)
	if ctx.Err() != nil {
		return pairedInfo{}, &codedError{codePairPending, "the offer is still open"}
	}
	p.mu.Lock()
	delete(p.offers, id)
	p.mu.Unlock()
	if err != nil {
		return pairedInfo{}, pairError(err)
	}
	return toPaired(peer), nil
}

// codePairPending answers a pair_wait that ended before the offer did;
// the caller waits again.
const codePairPending = "pair_pending"

// cancel withdraws offer id if it was not used.
func (p *pairing) cancel(id string) {
	p.mu.Lock()
	o := p.offers[id]
	delete(p.offers, id)
	p.mu.Unlock()
	if o != nil {
		p.resp.Close(o)
	}
}

// accept pairs with the node of line from this node.
func (n *node) accept(ctx context.Context, lineText, nameForPeer string) (pairedInfo, error) {
	line, err := pair.ParseLine(lineText)
	if err != nil {
		return pairedInfo{}, &codedError{codeBadArgs, err.Error()}
	}
	self, err := n.selfAddrFor(line.Addr)
	if err != nil {
		return pairedInfo{}, err
	}
	peer, err := pair.Accept(ctx, n.h.kp, n.h.cfg.Name, self, line, nameForPeer, n.planPeer, n.trustPeer)
	if err != nil {
		return pairedInfo{}, pairError(err)
	}
	return toPaired(peer), nil
}

// selfAddrFor is where the node of addr should reach this one: over TCP
// if it is reached over TCP and this node listens on TCP, else over the
// Unix socket.
func (n *node) selfAddrFor(other transport.Addr) (transport.Addr, error) {
	ls, err := n.h.cfg.Resolve(n.h.dir)
	if err != nil {
		return transport.Addr{}, err
	}
	all := ls.All()
	if len(n.addrs) > 0 {
		all = n.addrs // a running node knows its actual ports
	}
	var pick *transport.Addr
	for i, a := range all {
		if a.Scheme == other.Scheme {
			return a, nil
		}
		pick = &all[i]
	}
	switch {
	case other.Scheme == transport.SchemeTCP:
		return transport.Addr{}, &codedError{codeBadArgs, "the other node is reached over TCP, but this node has no TCP listener it could reach back: set comms.listen_tcp"}
	case pick == nil:
		return transport.Addr{}, &codedError{codeBadArgs, "this node does not listen anywhere, so the other node could not reach it: set comms.listen_uds or comms.listen_tcp"}
	}
	return *pick, nil
}

// planTrust resolves how p would be added to list: a key already trusted
// keeps its entry and takes the new address; a name already used (in any
// case) by another key gets a numeric suffix, shortened to fit.
func planTrust(l *trust.List, p trust.Peer) (trust.Peer, *trust.List, error) {
	if cur, ok := l.Lookup(p.ID); ok {
		cur.Addr = p.Addr
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

// planPeer is the initiator's check before it proves itself: how p would
// be trusted here, or why it cannot be.
func (n *node) planPeer(p trust.Peer) (trust.Peer, error) {
	l, err := trust.LoadOrEmpty(n.h.trustPath())
	if err != nil {
		return trust.Peer{}, err
	}
	planned, _, err := planTrust(l, p)
	return planned, err
}

// trustPeer adds p to the trust file (a pairing's commit) and applies it
// at once.
func (n *node) trustPeer(p trust.Peer) (trust.Peer, error) {
	var added trust.Peer
	_, err := trust.Update(n.h.trustPath(), func(l *trust.List) (*trust.List, error) {
		var next *trust.List
		var err error
		added, next, err = planTrust(l, p)
		return next, err
	})
	if err != nil {
		return trust.Peer{}, err
	}
	if n.r != nil {
		if l, err := trust.LoadOrEmpty(n.h.trustPath()); err == nil {
			n.r.SetTrust(l)
		}
	}
	return added, nil
}

// pairError gives pairing failures their codes.
func pairError(err error) error {
	switch {
	case errors.Is(err, pair.ErrNoOffer), errors.Is(err, pair.ErrExpired), errors.Is(err, pair.ErrBadProof),
		errors.Is(err, pair.ErrRateLimited), errors.Is(err, pair.ErrRefused), errors.Is(err, pair.ErrProtocol):
		return &codedError{codePairFailed, err.Error()}
	}
	return err
}

func runPair(e *env, args []string) error {
	if len(args) == 0 {
		return fmt.Errorf("%w: want pair offer or pair accept", errUsage)
	}
	sub, args := args[0], args[1:]
	flags := e.newFlags("pair " + sub)
	homeFlag := flags.String("home", "", "node home `directory`")
	asJSON := flags.Bool("json", false, "print JSON")
	var ttl *time.Duration
	var nameForPeer, name *string
	var noWait *bool
	local := flags.Bool("local", false, "offer: leave the code for this user's other local nodes; accept NAME: pair with the local node NAME, no code needed")
	switch sub {
	case "offer":
		ttl = flags.Duration("ttl", pair.DefaultTTL, "how `long` the code stays valid")
		nameForPeer = flags.String("name-for-peer", "", "the `name` to give the other node here (default: its own name)")
		noWait = flags.Bool("no-wait", false, "with a daemon: print the line and return; the daemon completes the pairing")
	case "accept":
		name = flags.String("name", "", "the `name` to give the other node here (default: its own name)")
	default:
		return fmt.Errorf("%w: unknown pair subcommand %q (want offer or accept)", errUsage, sub)
	}
	pos, err := parseArgs(flags, args)
	if err != nil {
		return err
	}
	if sub == "offer" && len(pos) > 0 {
		return fmt.Errorf("%w: pair offer takes no arguments", errUsage)
	}
	if sub == "accept" && (len(pos) == 0 || len(pos) == 1 && pos[0] == "-") && !*local {
		// From stdin: the line then shows in no process list or shell
		// history.
		l, err := bufio.NewReader(io.LimitReader(os.Stdin, 4096)).ReadString('\n')
		if err != nil && err != io.EOF {
			return err
		}
		if strings.TrimSpace(l) == "" {
			return fmt.Errorf("%w: pair accept wants the line pair offer printed (as arguments, or on stdin)", errUsage)
		}
		pos = strings.Fields(l)
	}
	h, err := e.openHome(*homeFlag, nil)
	if err != nil {
		return err
	}
	report := func(p pairedInfo) error {
		if *asJSON {
			return printJSON(e.stdout, p)
		}
		fmt.Fprintf(e.stdout, "paired: trusting %s (%s) at %s\n", p.Name, p.Key, p.Addr)
		return nil
	}
	if sub == "accept" {
		line := strings.Join(pos, " ")
		if *local {
			if len(pos) != 1 {
				return fmt.Errorf("%w: pair accept --local wants the other node's name", errUsage)
			}
			a, err := e.findLocal(h, pos[0])
			if err != nil {
				return err
			}
			if line, err = e.localOffer(a); err != nil {
				return err
			}
			if *name == "" {
				*name = a.Name
			}
		}
		if _, err := pair.ParseLine(line); err != nil {
			return fmt.Errorf("%w: %v", errUsage, err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), pair.ExchangeTimeout+5*time.Second)
		defer cancel()
		var p pairedInfo
		if rb := dialControl(h); rb != nil {
			defer rb.close()
			err = rb.call(ctx, ctlRequest{Op: "pair_accept", Body: line, Peer: *name}, &p)
		} else {
			n, serr := startNode(h, e.warnLog(), nodeSendOnly)
			if serr != nil {
				return serr
			}
			defer n.stop()
			p, err = n.accept(ctx, line, *name)
		}
		if err != nil {
			return err
		}
		return report(p)
	}

	// offer
	if *local && !flagSet(flags, "ttl") {
		*ttl = offerLocalTTL // the other node picks it up at once
	}
	var info offerInfo
	var wait func(ctx context.Context) (pairedInfo, error)
	if rb := dialControl(h); rb != nil {
		defer rb.close()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		err = rb.call(ctx, ctlRequest{Op: "pair_offer", Peer: *nameForPeer, TTLMS: ttl.Milliseconds()}, &info)
		cancel()
		if err == nil && !*noWait {
			used := false
			defer func() {
				if !used { // interrupted or failed: withdraw the offer
					ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
					rb2 := dialControl(h)
					if rb2 != nil {
						rb2.call(ctx, ctlRequest{Op: "pair_cancel", RequestID: info.ID}, nil)
						rb2.close()
					}
					cancel()
				}
			}()
			wait = func(ctx context.Context) (p pairedInfo, err error) {
				for { // the daemon answers a wait at least every few minutes
					chunk := min(time.Until(info.Expires)+pair.ExchangeTimeout, 5*time.Minute)
					err = rb.call(ctx, ctlRequest{Op: "pair_wait", RequestID: info.ID, WaitMS: max(chunk, time.Second).Milliseconds()}, &p)
					if errorCode(err) != codePairPending || ctx.Err() != nil {
						used = err == nil
						return p, err
					}
				}
			}
		}
	} else {
		if *noWait {
			return fmt.Errorf("%w: --no-wait needs a running daemon to complete the pairing", errUsage)
		}
		n, serr := startNode(h, e.warnLog(), nodeReplies)
		if serr != nil {
			return serr
		}
		defer n.stop()
		var o *pair.Offer
		info, o, err = n.pairing.open(*ttl, *nameForPeer)
		wait = func(ctx context.Context) (pairedInfo, error) {
			p, err := o.Wait(ctx)
			if err != nil {
				n.pairing.cancel(info.ID)
				return pairedInfo{}, pairError(err)
			}
			return toPaired(p), nil
		}
	}
	if err != nil {
		return err
	}
	if *local {
		if *noWait {
			return fmt.Errorf("%w: --local waits for the other node; drop --no-wait", errUsage)
		}
		dir, err := e.runtimeDir()
		if err != nil {
			return err
		}
		path := offerPath(dir, h)
		if err := writePrivate(path, []byte(info.Line+"\n")); err != nil {
			return err
		}
		defer os.Remove(path)
	}
	if *asJSON && *noWait {
		return printJSON(e.stdout, info)
	}
	ctx, cancel := context.WithTimeout(context.Background(), *ttl+pair.ExchangeTimeout+5*time.Second)
	defer cancel()
	ctx, stop := signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM) // Ctrl-C withdraws the offer
	defer stop()
	if *asJSON {
		// The offer first, then (once used) what was added: two JSON
		// documents, each complete.
		if err := printJSON(e.stdout, info); err != nil {
			return err
		}
	} else {
		fmt.Fprintln(e.stdout, info.Line)
	}
	if *noWait {
		fmt.Fprintf(e.stderr, "pass this line to the other node (meerkatd pair accept LINE); it works once, until %s\n", info.Expires.Local().Format(time.TimeOnly))
		return nil
	}
	fmt.Fprintf(e.stderr, "pass this line to the other node (meerkatd pair accept LINE); waiting until %s\n", info.Expires.Local().Format(time.TimeOnly))
	p, err := wait(ctx)
	if err != nil {
		if ctx.Err() != nil && errors.Is(context.Cause(ctx), context.Canceled) {
			return errors.New("interrupted: the offer is withdrawn")
		}
		return err
	}
	return report(p)
}

// flagSet reports whether flag name was given on the command line.
func flagSet(fs *flag.FlagSet, name string) bool {
	set := false
	fs.Visit(func(f *flag.Flag) { set = set || f.Name == name })
	return set
}
