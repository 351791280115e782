package natsrelay

import (
	"context"
	"errors"
	"net"
	"os"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
)

// Pairing over NATS. An offer made through NATS is answered on the
// subject <prefix>.pair.<offer id> (the id is derived from the one-time
// code, which never travels). The exchange is the one pairing runs on a
// socket, carried turn by turn: each side sends what it wrote as one
// message when it starts to wait for the other's answer, as a response to
// the message it last received, naming its own reply inbox. A least
// privileged user may do exactly that: answer what it received.

// Bounds of a pairing exchange through NATS.
const (
	maxPairMsg      = 16 << 10 // one turn of the exchange
	maxPairSessions = 4        // exchanges one offer runs at once
	pairQueue       = 4        // messages queued for one exchange
	pairIdle        = 30 * time.Second
)

// PairSubject is the subject an offer with the given id is answered on.
func PairSubject(prefix, offerID string) string { return prefix + ".pair." + offerID }

// ServePairing answers exchanges for the offer offerID until the returned
// stop is called: serve runs one exchange on a connection and returns when
// it is over (the connection is closed after it).
func (rl *Relay) ServePairing(offerID string, serve func(net.Conn)) (stop func(), err error) {
	if !rl.nc.IsConnected() {
		return nil, ErrNotConnected // not a wait for a flush that cannot come
	}
	var (
		wg      sync.WaitGroup
		mu      sync.Mutex
		stopped bool // set by stop: a message handled after it starts nothing
	)
	sem := make(chan struct{}, maxPairSessions)
	sub, err := rl.nc.Subscribe(PairSubject(rl.opts.SubjectPrefix, offerID), func(m *nats.Msg) {
		if _, ok := replyInbox(m.Reply); !ok || len(m.Data) == 0 || len(m.Data) > maxPairMsg {
			return // answered only into a node's reply inbox (see replyInbox)
		}
		select {
		case sem <- struct{}{}:
		default:
			return // this offer runs its maximum of exchanges
		}
		mu.Lock()
		if stopped {
			mu.Unlock()
			<-sem
			return
		}
		wg.Add(1) // before stop's Wait, under mu
		mu.Unlock()
		c, err := rl.newMsgConn(m.Reply)
		if err != nil {
			wg.Done()
			<-sem
			return
		}
		c.rbuf = m.Data
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			serve(c)
			c.Close()
		}()
	})
	if err != nil {
		return nil, err
	}
	if err := rl.nc.Flush(); err != nil {
		sub.Unsubscribe()
		return nil, err
	}
	return func() {
		sub.Unsubscribe()
		mu.Lock()
		stopped = true
		mu.Unlock()
		wg.Wait()
	}, nil
}

// DialPairing starts an exchange with the offer offerID.
func (rl *Relay) DialPairing(ctx context.Context, offerID string) (net.Conn, error) {
	if !rl.nc.IsConnected() {
		return nil, ErrNotConnected
	}
	return rl.newMsgConn(PairSubject(rl.opts.SubjectPrefix, offerID))
}

// msgConn is one side of an exchange as a net.Conn: writes are held until
// the side reads (or closes), then sent as one message.
type msgConn struct {
	nc     *nats.Conn
	sub    *nats.Subscription
	ch     chan *nats.Msg
	inbox  string
	target string // where the next message goes: the other side's last reply subject

	mu       sync.Mutex
	rbuf     []byte
	wbuf     []byte
	deadline time.Time
	kick     chan struct{} // a new deadline
	closed   bool
}

func (rl *Relay) newMsgConn(target string) (*msgConn, error) {
	c := &msgConn{nc: rl.nc, ch: make(chan *nats.Msg, pairQueue), inbox: rl.nc.NewInbox(), target: target, kick: make(chan struct{}, 1)}
	sub, err := rl.nc.ChanSubscribe(c.inbox, c.ch)
	if err != nil {
		return nil, err
	}
	c.sub = sub
	return c, nil
}

var errPairTooLong = errors.New("natsrelay: pairing message too long")

// ErrNoPairOffer means no node answers the offer through NATS: the code
// is wrong, or the offer was used, withdrawn or has expired.
var ErrNoPairOffer = errors.New("natsrelay: no node answers that offer through NATS (wrong code, or the offer was used, withdrawn or has expired)")

// noRespondersStatus is the status the server sends to a reply subject
// when nobody subscribes to where the message went.
const noRespondersStatus = "503"

func (c *msgConn) Read(p []byte) (int, error) {
	c.mu.Lock()
	if len(c.rbuf) > 0 {
		n := copy(p, c.rbuf)
		c.rbuf = c.rbuf[n:]
		c.mu.Unlock()
		return n, nil
	}
	if c.closed {
		c.mu.Unlock()
		return 0, net.ErrClosed
	}
	err := c.flushLocked()
	c.mu.Unlock()
	if err != nil {
		return 0, err
	}
	for {
		c.mu.Lock()
		dl := c.deadline
		c.mu.Unlock()
		wait := pairIdle
		if !dl.IsZero() {
			wait = time.Until(dl)
		}
		if wait <= 0 {
			return 0, os.ErrDeadlineExceeded
		}
		t := time.NewTimer(wait)
		select {
		case m := <-c.ch:
			t.Stop()
			if len(m.Data) == 0 && m.Header.Get("Status") == noRespondersStatus {
				return 0, ErrNoPairOffer // the server says nobody answers there
			}
			if len(m.Data) > maxPairMsg {
				return 0, errPairTooLong
			}
			if _, ok := replyInbox(m.Reply); !ok && m.Reply != "" {
				continue // not a node's reply inbox: never answered (see replyInbox)
			}
			c.mu.Lock()
			if m.Reply != "" {
				c.target = m.Reply
			}
			n := copy(p, m.Data)
			c.rbuf = m.Data[n:]
			c.mu.Unlock()
			return n, nil
		case <-c.kick:
			t.Stop() // the deadline moved: wait again
		case <-t.C:
			if dl.IsZero() {
				return 0, os.ErrDeadlineExceeded // idle too long
			}
		}
	}
}

func (c *msgConn) Write(p []byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return 0, net.ErrClosed
	}
	if len(c.wbuf)+len(p) > maxPairMsg {
		return 0, errPairTooLong
	}
	c.wbuf = append(c.wbuf, p...)
	return len(p), nil
}

// flushLocked sends what was written as one message.
func (c *msgConn) flushLocked() error {
	if len(c.wbuf) == 0 {
		return nil
	}
	m := &nats.Msg{Subject: c.target, Reply: c.inbox, Data: c.wbuf}
	c.wbuf = nil
	if err := c.nc.PublishMsg(m); err != nil {
		return err
	}
	return c.nc.Flush()
}

func (c *msgConn) Close() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return nil
	}
	c.closed = true
	err := c.flushLocked()
	c.sub.Unsubscribe()
	return err
}

func (c *msgConn) SetDeadline(t time.Time) error {
	c.mu.Lock()
	c.deadline = t
	c.mu.Unlock()
	select {
	case c.kick <- struct{}{}:
	default:
	}
	return nil
}

func (c *msgConn) SetReadDeadline(t time.Time) error { return c.SetDeadline(t) }
func (c *msgConn) SetWriteDeadline(time.Time) error  { return nil } // writes do not block

func (c *msgConn) LocalAddr() net.Addr  { return natsAddr(c.inbox) }
func (c *msgConn) RemoteAddr() net.Addr { return natsAddr("nats") }

// natsAddr names an end of an exchange through NATS.
type natsAddr string

func (a natsAddr) Network() string { return "nats" }
func (a natsAddr) String() string  { return string(a) }
