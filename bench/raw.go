package bench

// The raw crypto anchors of `meerkatd bench`: the crypto of an exchange
// (sign, verify, sign, verify) between the bench and its echo process with
// as little code as possible between, no envelopes, no inbox, no
// bookkeeping. They sign and verify with the node's own primitives
// (identity.Keypair, identity.Verifier), as every other anchor does.
// They show what two processes on this machine reach at all, in the same
// run: on a shared VM the crypto runs slower when the two processes wake
// each other than in the one-goroutine exchange anchor.

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/meerkatd/meerkatd/comms/wire"
	"github.com/meerkatd/meerkatd/config"
	"github.com/meerkatd/meerkatd/identity"
	"github.com/meerkatd/meerkatd/transport"
)

// rawHello starts a crypto connection to the echo process: the frame is
// rawHello followed by the client's 32-byte public key; the echo process
// answers with its own. rawBatchHello starts one that the echo process
// serves as a node serves a meerkatd peer (serveRawBatched).
var (
	rawHello      = []byte("meerkatd-bench-raw/1 ")
	rawBatchHello = []byte("meerkatd-bench-rawbatch/1 ")
)

// sigSize is the size of the node's signatures (identity.Keypair.SignInto).
const sigSize = len(wire.Envelope{}.Sig)

// rawSigned is a raw crypto frame: its payload is the signature of msg
// by kp, with the node's signing primitive (identity.Keypair.SignInto),
// followed by msg.
func rawSigned(dst []byte, kp *identity.Keypair, msg []byte) ([]byte, error) {
	dst, start := transport.StartFrame(dst)
	var sig [sigSize]byte
	kp.SignInto(&sig, msg)
	dst = append(dst, sig[:]...)
	dst = append(dst, msg...)
	return dst, transport.FinishFrame(dst, start)
}

// anchorKeys verifies the anchors' signatures as a node verifies its
// peers' (a comms.Router keeps their keys expanded in an
// identity.Verifier).
var anchorKeys identity.Verifier

// rawOpen checks a raw crypto payload's signature under pub, with the
// node's verifying primitive (identity.Verifier), and returns the signed
// bytes.
func rawOpen(pub identity.PeerID, payload []byte) ([]byte, error) {
	if len(payload) < sigSize {
		return nil, errors.New("raw frame too short")
	}
	msg := payload[sigSize:]
	if !anchorKeys.Verify(pub, msg, payload[:sigSize]) {
		return nil, errors.New("raw frame: bad signature")
	}
	return msg, nil
}

// serveRawCrypto is the echo process's side of a crypto connection whose
// hello (the client's key) was read: it answers each frame, in order, with
// its own signature of the same bytes once the client's verifies, writing
// when nothing more is buffered.
func serveRawCrypto(c net.Conn, r *bufio.Reader, clientKey []byte) error {
	client, kp, err := answerRawHello(c, clientKey)
	if err != nil {
		return err
	}
	w := bufio.NewWriterSize(c, 64<<10)
	var out []byte
	for {
		payload, err := transport.ReadFrame(r, 0)
		if err != nil {
			return nil
		}
		msg, err := rawOpen(client, payload)
		if err != nil {
			return err
		}
		if out, err = rawSigned(out[:0], kp, msg); err != nil {
			return err
		}
		w.Write(out)
		if r.Buffered() == 0 {
			if err := w.Flush(); err != nil {
				return err
			}
		}
	}
}

// answerRawHello answers a crypto connection's hello with the key of a
// keypair made for it, and returns the client's key and that keypair.
func answerRawHello(c net.Conn, clientKey []byte) (identity.PeerID, *identity.Keypair, error) {
	client, err := identity.PeerIDFromBytes(clientKey)
	if err != nil {
		return identity.PeerID{}, nil, fmt.Errorf("raw hello: bad key: %w", err)
	}
	kp, err := identity.GenerateKeypair()
	if err != nil {
		return identity.PeerID{}, nil, err
	}
	id := kp.ID()
	hello, err := transport.AppendFrame(nil, id[:])
	if err == nil {
		_, err = c.Write(hello)
	}
	return client, kp, err
}

// Batched raw connections (anchor_raw_batched) carry the crypto of the
// protocol two meerkatd nodes speak, under a node's rules: the client
// signs every message; the echo process reads the frames that have
// arrived together (through a transport.Reader, at most rawBatchMax),
// verifies them as one batch (two halves at once from rawSplit; a lone
// frame alone), and answers the batch with one signed frame naming its
// messages (as a node's acks envelope does): a 2-byte count, then the
// first rawIDSize bytes of each message. The client verifies that
// answer.
const (
	rawBatchMax  = 64   // comms' maxBatch
	rawSplit     = 16   // comms' splitBatch
	rawAnswerMax = 1024 // comms' maxAcksPerEnvelope: what a client takes
	rawIDSize    = 16
)

// serveRawBatched is the echo process's side of a batched crypto
// connection whose hello (the client's key) was read.
func serveRawBatched(c net.Conn, r io.Reader, clientKey []byte) error {
	client, kp, err := answerRawHello(c, clientKey)
	if err != nil {
		return err
	}
	fr := transport.NewReader(r, 0)
	var (
		arena  []byte
		ends   []int // the batch's frames are arena[ends[i-1]:ends[i]]
		halves [2]identity.Batch
		ok     [rawBatchMax]bool
		answer []byte
		out    []byte
	)
	frame := func(i int) []byte {
		start := 0
		if i > 0 {
			start = ends[i-1]
		}
		return arena[start:ends[i]]
	}
	verify := func(b *identity.Batch, from, to int, ok []bool) {
		b.Reset()
		for i := from; i < to; i++ {
			p := frame(i)
			b.Add(client, p[sigSize:], p[:sigSize])
		}
		b.Verify(ok)
	}
	for {
		arena, ends = arena[:0], ends[:0]
		for {
			payload, err := fr.ReadFrame()
			if err != nil {
				return nil
			}
			if len(payload) < sigSize+rawIDSize {
				return errors.New("raw frame too short")
			}
			arena = append(arena, payload...)
			ends = append(ends, len(arena))
			if len(ends) == rawBatchMax || !fr.FrameBuffered() {
				break
			}
		}
		n := len(ends)
		switch { // each case sets ok[:n]
		case n == 1:
			p := frame(0)
			ok[0] = anchorKeys.Verify(client, p[sigSize:], p[:sigSize])
		case n >= rawSplit:
			var wg sync.WaitGroup
			wg.Go(func() { verify(&halves[1], 0, n/2, ok[:n/2]) })
			verify(&halves[0], n/2, n, ok[n/2:n])
			wg.Wait()
		default:
			verify(&halves[0], 0, n, ok[:n])
		}
		answer = binary.BigEndian.AppendUint16(answer[:0], uint16(n))
		for i := range n {
			if !ok[i] {
				return errors.New("raw frame: bad signature")
			}
			answer = append(answer, frame(i)[sigSize:sigSize+rawIDSize]...)
		}
		if out, err = rawSigned(out[:0], kp, answer); err != nil {
			return err
		}
		if _, err := c.Write(out); err != nil {
			return err
		}
	}
}

// rawConn is the bench's side of a crypto connection to the echo process.
type rawConn struct {
	c         net.Conn
	kp        *identity.Keypair
	serverKey identity.PeerID
	msgs      [][]byte      // signing inputs of real message envelopes (rawMsgs), each its own id
	next      atomic.Uint64 // how many of msgs were taken (nextMsg)
}

// rawMsgs is how many distinct signing inputs a raw connection signs in
// turn. Verification runs in variable time (its path follows the
// signature's scalars), so one input signed and verified over and over
// would let the processor learn its one path; a node never sees the same
// envelope twice, and neither does the anchor within 256 exchanges.
const rawMsgs = 256

// nextMsg returns the signing input of the connection's next message.
// Goroutines may call it at once.
func (rc *rawConn) nextMsg() []byte {
	return rc.msgs[(rc.next.Add(1)-1)%uint64(len(rc.msgs))]
}

// rawSignables returns n signing inputs of message envelopes from kp to
// to, each with its own id, as a node's messages have.
func rawSignables(kp *identity.Keypair, to identity.PeerID, n int) ([][]byte, error) {
	e, err := wire.Seal(kp, identity.NewUUID(), to, wire.Message(body))
	if err != nil {
		return nil, err
	}
	msgs := make([][]byte, n)
	for i := range msgs {
		e.ID = identity.NewUUID()
		if msgs[i], err = e.AppendSignable(nil); err != nil {
			return nil, err
		}
	}
	return msgs, nil
}

// exchange does one raw exchange: sign and write (reusing frame's
// storage), then read and verify the answer from r.
func (rc *rawConn) exchange(r *bufio.Reader, frame []byte) ([]byte, error) {
	frame, err := rawSigned(frame[:0], rc.kp, rc.nextMsg())
	if err == nil {
		_, err = rc.c.Write(frame)
	}
	if err == nil {
		err = rc.readAnswer(r)
	}
	return frame, err
}

// readAnswer reads an answer from r and checks its signature.
func (rc *rawConn) readAnswer(r *bufio.Reader) error {
	payload, err := transport.ReadFrame(r, 0)
	if err == nil {
		_, err = rawOpen(rc.serverKey, payload)
	}
	return err
}

func (b *runner) dialRaw(ctx context.Context, a transport.Addr) (*rawConn, error) {
	return b.dialRawWith(ctx, a, rawHello)
}

// dialRawWith starts a crypto connection with the hello given (rawHello or
// rawBatchHello).
func (b *runner) dialRawWith(ctx context.Context, a transport.Addr, helloPrefix []byte) (*rawConn, error) {
	kp := b.peers[0]
	msgs, err := rawSignables(kp, b.peers[1].ID(), rawMsgs)
	if err != nil {
		return nil, err
	}
	c, err := transport.Dial(ctx, a)
	if err != nil {
		return nil, err
	}
	rc := &rawConn{c: c, kp: kp, msgs: msgs}
	id := kp.ID()
	hello, err := transport.AppendFrame(nil, append(bytes.Clone(helloPrefix), id[:]...))
	if err == nil {
		c.SetDeadline(time.Now().Add(ackTimeout))
		_, err = c.Write(hello)
	}
	var key []byte
	if err == nil {
		key, err = transport.ReadFrame(c, 0)
	}
	if err == nil {
		if rc.serverKey, err = identity.PeerIDFromBytes(key); err != nil {
			err = fmt.Errorf("raw hello: bad key from the echo process: %w", err)
		}
	}
	if err != nil {
		c.Close()
		return nil, err
	}
	return rc, nil
}

// seqBlock is how many round trips the raw connection and the node's link
// take in a row when sequentialPair alternates them.
const seqBlock = 20

// sequentialPair runs anchor_raw_sequential and the sequential scenario
// over tr together, one message at a time each: the raw connection to the
// echo process (sign, write, read the answer, verify it) and a Router's
// link to a new node, both open at once, take turns in blocks of seqBlock
// round trips, the first of each pair of blocks alternating between them.
// So whatever else loads the machine at a moment weighs on both alike, and
// their ratio is the node's own cost, not the drift of the machine between
// two runs seconds apart. It returns each one's round trips, the first
// tenth of each (the warm-up) left out.
func (b *runner) sequentialPair(ctx context.Context, tr string, echo transport.Addr) (raw, node []time.Duration, err error) {
	n, err := b.newNode(tr, config.StoreMemory)
	if err != nil {
		return nil, nil, err
	}
	if _, err := n.start(ctx); err != nil {
		return nil, nil, err
	}
	defer n.stop()
	r, err := n.router(ctx, b.peers[0])
	if err != nil {
		return nil, nil, err
	}
	defer r.Close()
	rc, err := b.dialRaw(ctx, echo)
	if err != nil {
		return nil, nil, err
	}
	defer rc.c.Close()
	total := b.opts.msgs + b.opts.msgs/10
	rc.c.SetDeadline(time.Now().Add(time.Minute + time.Duration(total)*time.Millisecond))
	br := bufio.NewReader(rc.c)
	var frame []byte
	type side struct {
		once func() error
		lat  *[]time.Duration
	}
	raw = make([]time.Duration, 0, b.opts.msgs)
	node = make([]time.Duration, 0, b.opts.msgs)
	sides := [2]side{
		{func() (err error) { frame, err = rc.exchange(br, frame); return err }, &raw},
		{func() error { _, err := r.SendMessage(ctx, "node", body); return err }, &node},
	}
	for done, block := 0, 0; done < total; block++ {
		k := min(seqBlock, total-done)
		for j := range sides {
			s := sides[(block+j)%2]
			for i := range k {
				t0 := time.Now()
				if err := s.once(); err != nil {
					return nil, nil, err
				}
				if done+i >= b.opts.msgs/10 { // the first tenth warms up
					*s.lat = append(*s.lat, time.Since(t0))
				}
			}
		}
		done += k
		if err := ctx.Err(); err != nil {
			return nil, nil, err
		}
	}
	return raw, node, nil
}

// rawRun is the shared state of a raw throughput anchor's goroutines.
type rawRun struct {
	done    atomic.Int64
	wg      sync.WaitGroup
	errOnce sync.Once
	failure error
	quit    chan struct{} // closed by fail
}

func newRawRun() *rawRun { return &rawRun{quit: make(chan struct{})} }

// fail stops every goroutine of the run; the first error is kept.
func (rr *rawRun) fail(err error) {
	rr.errOnce.Do(func() {
		rr.failure = err
		close(rr.quit)
	})
}

func (rr *rawRun) failed() bool {
	select {
	case <-rr.quit:
		return true
	default:
		return false
	}
}

// measure waits out the warm-in and the window of a throughput scenario
// while the run's goroutines count exchanges, then stops them (closing
// conns) and returns exchanges/s and CPU µs per exchange of this process
// and echoPID.
func (b *runner) measure(ctx context.Context, rr *rawRun, echoPID int, conns []*rawConn) (loadResult, error) {
	stop := func() error {
		rr.fail(errStopped)
		for _, rc := range conns {
			rc.c.Close()
		}
		rr.wg.Wait()
		if errors.Is(rr.failure, errStopped) {
			return ctx.Err()
		}
		return rr.failure
	}
	b.warmIn(ctx, func() bool { return rr.done.Load() > 0 || rr.failed() })
	s0 := sampleLoad(rr.done.Load(), echoPID)
	sleepCtx(ctx, b.opts.duration)
	waitMore(ctx, func() bool { return rr.done.Load() > s0.done || rr.failed() })
	s1 := sampleLoad(rr.done.Load(), echoPID)
	if err := stop(); err != nil {
		return loadResult{}, err
	}
	return s1.resultSince(s0)
}

// rawPipelined is anchor_raw_pipelined: inFlight goroutines sign and
// write, one reader verifies the answers; exchanges/s and CPU µs per
// exchange of both processes, over the same warm-in and window as the
// pipelined scenario.
func (b *runner) rawPipelined(ctx context.Context, a transport.Addr, echoPID int) (loadResult, error) {
	rc, err := b.dialRaw(ctx, a)
	if err != nil {
		return loadResult{}, err
	}
	rc.c.SetDeadline(time.Time{})
	rr := newRawRun()
	var wmu sync.Mutex
	slots := make(chan struct{}, b.opts.inFlight)
	rr.wg.Go(func() {
		r := bufio.NewReaderSize(rc.c, 64<<10)
		for {
			if err := rc.readAnswer(r); err != nil {
				rr.fail(err)
				return
			}
			rr.done.Add(1)
			<-slots
		}
	})
	b.startSigners(rr, rc, slots, func(frame []byte) error {
		wmu.Lock()
		defer wmu.Unlock()
		_, err := rc.c.Write(frame)
		return err
	})
	res, err := b.measure(ctx, rr, echoPID, []*rawConn{rc})
	if err != nil {
		return res, fmt.Errorf("raw pipelined: %w", err)
	}
	return res, nil
}

// rawBatched is anchor_raw_batched: inFlight goroutines sign and write,
// the echo process verifies what arrives together as a batch and answers
// it with one signature, one reader verifies the answers; exchanges/s and
// CPU µs per exchange of both processes, over the same warm-in and window
// as the pipelined scenario.
func (b *runner) rawBatched(ctx context.Context, a transport.Addr, echoPID int) (loadResult, error) {
	rc, err := b.dialRawWith(ctx, a, rawBatchHello)
	if err != nil {
		return loadResult{}, err
	}
	rc.c.SetDeadline(time.Time{})
	rr := newRawRun()
	w := &groupWriter{c: rc.c}
	slots := make(chan struct{}, b.opts.inFlight)
	rr.wg.Go(func() {
		fr := transport.NewReader(rc.c, 0)
		for {
			payload, err := fr.ReadFrame()
			var n int
			if err == nil {
				n, err = rawBatchAnswer(rc.serverKey, payload)
			}
			if err != nil {
				rr.fail(err)
				return
			}
			rr.done.Add(int64(n))
			for range n {
				<-slots
			}
		}
	})
	b.startSigners(rr, rc, slots, w.write)
	res, err := b.measure(ctx, rr, echoPID, []*rawConn{rc})
	if err != nil {
		return res, fmt.Errorf("raw batched: %w", err)
	}
	return res, nil
}

// startSigners starts the inFlight goroutines of a raw throughput anchor:
// each, once slots has room, signs the connection's next message and writes the frame with
// write, until the run stops or fails; the anchor's reader frees a slot
// per message answered.
func (b *runner) startSigners(rr *rawRun, rc *rawConn, slots chan struct{}, write func([]byte) error) {
	for range b.opts.inFlight {
		rr.wg.Go(func() {
			var frame []byte
			for {
				select {
				case slots <- struct{}{}:
				case <-rr.quit:
					return
				}
				var err error
				if frame, err = rawSigned(frame[:0], rc.kp, rc.nextMsg()); err == nil {
					err = write(frame)
				}
				if err != nil {
					rr.fail(err)
					return
				}
			}
		})
	}
}

// groupWriter writes the frames of many goroutines with as few writes as
// possible, as a node's connection does: a frame that comes while a write
// is under way waits in a buffer, and the goroutine writing takes it with
// it; nobody waits for a write but the one doing it.
type groupWriter struct {
	c              net.Conn
	mu             sync.Mutex
	pending, spare []byte
	writing        bool
}

func (w *groupWriter) write(frame []byte) error {
	w.mu.Lock()
	w.pending = append(w.pending, frame...)
	if w.writing {
		w.mu.Unlock()
		return nil
	}
	w.writing = true
	for len(w.pending) > 0 {
		buf := w.pending
		w.pending = w.spare[:0]
		w.mu.Unlock()
		_, err := w.c.Write(buf)
		w.mu.Lock()
		w.spare = buf
		if err != nil {
			w.writing = false
			w.mu.Unlock()
			return err
		}
	}
	w.writing = false
	w.mu.Unlock()
	return nil
}

// rawBatchAnswer checks a batched connection's answer and returns how many
// messages it answers.
func rawBatchAnswer(pub identity.PeerID, payload []byte) (int, error) {
	msg, err := rawOpen(pub, payload)
	if err != nil {
		return 0, err
	}
	if len(msg) < 2 {
		return 0, errors.New("raw batch answer too short")
	}
	n := int(binary.BigEndian.Uint16(msg))
	if n == 0 || n > rawAnswerMax || len(msg) != 2+n*rawIDSize {
		return 0, fmt.Errorf("raw batch answer: %d bytes for %d messages", len(msg), n)
	}
	return n, nil
}

// rawClosedLoop is anchor_raw_closed_loop_16: closedLoopPeers
// connections, each with one exchange at a time (sign, write, read,
// verify) on its own goroutine.
func (b *runner) rawClosedLoop(ctx context.Context, a transport.Addr, echoPID int) (loadResult, error) {
	rr := newRawRun()
	var conns []*rawConn
	defer func() {
		for _, rc := range conns {
			rc.c.Close()
		}
	}()
	for range closedLoopPeers {
		rc, err := b.dialRaw(ctx, a)
		if err != nil {
			return loadResult{}, err
		}
		rc.c.SetDeadline(time.Time{})
		conns = append(conns, rc)
	}
	for _, rc := range conns {
		rr.wg.Go(func() {
			r := bufio.NewReader(rc.c)
			var frame []byte
			for !rr.failed() {
				var err error
				if frame, err = rc.exchange(r, frame); err != nil {
					rr.fail(err)
					return
				}
				rr.done.Add(1)
			}
		})
	}
	res, err := b.measure(ctx, rr, echoPID, conns)
	if err != nil {
		return res, fmt.Errorf("raw closed loop: %w", err)
	}
	return res, nil
}

// errStopped ends the raw pipelined run's goroutines.
var errStopped = errors.New("stopped")

// isRawHello reports whether a connection's first frame starts a crypto
// connection, and returns the client's key.
func isRawHello(payload []byte) ([]byte, bool) {
	key, ok := bytes.CutPrefix(payload, rawHello)
	return key, ok
}

// isRawBatchHello is isRawHello for a batched crypto connection.
func isRawBatchHello(payload []byte) ([]byte, bool) {
	key, ok := bytes.CutPrefix(payload, rawBatchHello)
	return key, ok
}
