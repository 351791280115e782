package main

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/meerkatd/meerkatd/comms/wire"
	"github.com/meerkatd/meerkatd/identity"
)

// subject is where the responder listens.
const subject = "meerkat.bench"

// requestTimeout bounds one request; a missing reply (a refused envelope)
// fails the run after it.
const requestTimeout = 10 * time.Second

// requester is this process's side of the exchanges. It is safe for
// concurrent use.
type requester struct {
	nc    *nats.Conn
	kp    *identity.Keypair
	peer  identity.PeerID
	msg   wire.Kind
	child *responderProc
}

func newRequester(nc *nats.Conn, kp *identity.Keypair, peer identity.PeerID, child *responderProc) *requester {
	// The 100-byte message of comms/wire's BenchmarkExchange.
	return &requester{nc: nc, kp: kp, peer: peer, msg: wire.Message(strings.Repeat("m", 100)), child: child}
}

// exchange seals a fresh message to the peer, sends it as a request, opens
// the reply and checks that it is the peer's ack of that message. buf is
// scratch space for the encoded envelope; exchange returns it, maybe grown.
func (b *requester) exchange(buf []byte) ([]byte, error) {
	id := identity.NewUUID()
	e, err := wire.Seal(b.kp, id, b.peer, b.msg)
	if err != nil {
		return buf, err
	}
	if buf, err = e.AppendBinary(buf[:0]); err != nil {
		return buf, err
	}
	reply, err := b.nc.Request(subject, buf, requestTimeout)
	if err != nil {
		return buf, err
	}
	ack, err := wire.Open(reply.Data)
	if err != nil {
		return buf, fmt.Errorf("reply: %w", err)
	}
	switch got, ok := ack.Kind.InReplyTo(); {
	case ack.From != b.peer:
		return buf, errors.New("reply from an unexpected key")
	case ack.To != b.kp.ID():
		return buf, errors.New("reply addressed to another key")
	case ack.Kind.Type() != wire.TypeAck:
		return buf, fmt.Errorf("reply is a %q, not an ack", ack.Kind.Type())
	case !ok || got != id:
		return buf, errors.New("ack for another message")
	}
	return buf, nil
}

// sequential runs n exchanges one after the other and returns their round
// trip times.
func (b *requester) sequential(ctx context.Context, n int) ([]time.Duration, error) {
	lat := make([]time.Duration, n)
	buf := make([]byte, 0, 512)
	var err error
	for i := range lat {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		t0 := time.Now()
		if buf, err = b.exchange(buf); err != nil {
			return nil, err
		}
		lat[i] = time.Since(t0)
	}
	return lat, nil
}

// pipelinedRun is one pipelined measurement.
type pipelinedRun struct {
	exchanges int
	elapsed   time.Duration
	cpu       time.Duration // user+system, both processes
}

// pipelined runs n exchanges with inFlight requests outstanding on the one
// connection: inFlight goroutines, each doing exchanges back to back. It
// stops at the first error and waits for all its goroutines.
func (b *requester) pipelined(ctx context.Context, n, inFlight int) (pipelinedRun, error) {
	child0, err := b.child.cpu()
	if err != nil {
		return pipelinedRun{}, err
	}
	self0, err := selfCPU()
	if err != nil {
		return pipelinedRun{}, err
	}
	var (
		next     atomic.Int64
		stopped  atomic.Bool
		errOnce  sync.Once
		firstErr error
		wg       sync.WaitGroup
	)
	fail := func(err error) {
		errOnce.Do(func() { firstErr = err })
		stopped.Store(true)
	}
	t0 := time.Now()
	for range min(inFlight, n) {
		wg.Go(func() {
			buf := make([]byte, 0, 512)
			var err error
			for !stopped.Load() && next.Add(1) <= int64(n) {
				if err := ctx.Err(); err != nil {
					fail(err)
					return
				}
				if buf, err = b.exchange(buf); err != nil {
					fail(err)
					return
				}
			}
		})
	}
	wg.Wait()
	elapsed := time.Since(t0)
	if firstErr != nil {
		return pipelinedRun{}, firstErr
	}
	self1, err := selfCPU()
	if err != nil {
		return pipelinedRun{}, err
	}
	child1, err := b.child.cpu()
	if err != nil {
		return pipelinedRun{}, err
	}
	return pipelinedRun{exchanges: n, elapsed: elapsed, cpu: self1 - self0 + child1 - child0}, nil
}

// selfCPU returns this process's user+system CPU time.
func selfCPU() (time.Duration, error) {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0, fmt.Errorf("getrusage: %w", err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano()), nil
}

// percentile returns the nearest-rank p-th percentile of d, which it sorts.
func percentile(d []time.Duration, p int) time.Duration {
	if len(d) == 0 {
		return 0
	}
	slices.Sort(d)
	i := (len(d)*p + 99) / 100 // ceil(n·p/100)
	return d[max(i-1, 0)]
}

func micros(d time.Duration) float64 { return float64(d) / float64(time.Microsecond) }
