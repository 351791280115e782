package bench

// The scenarios of a run: the anchors, the throughput and latency loads
// against a node, the floods, startup and memory. Each repetition runs
// every scenario once, interleaved.

import (
	"bufio"
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"os"
	"os/exec"
	"runtime"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/meerkatd/meerkatd/comms"
	"github.com/meerkatd/meerkatd/comms/wire"
	"github.com/meerkatd/meerkatd/config"
	"github.com/meerkatd/meerkatd/identity"
	"github.com/meerkatd/meerkatd/transport"
)

// Scenario names (the JSON "scenario" field; the NATS bench uses the same).
const (
	scAnchorSign      = "anchor_sign"
	scAnchorBatchSign = "anchor_batch_sign"
	scAnchorVerify    = "anchor_verify"
	scAnchorExch      = "anchor_exchange"
	scAnchorBatch     = "anchor_batch_verify"
	scAnchorPing      = "anchor_pingpong"
	scAnchorRawSeq    = "anchor_raw_sequential"
	scAnchorRawPipe   = "anchor_raw_pipelined"
	scAnchorRawBatch  = "anchor_raw_batched"
	scAnchorRawLoop   = "anchor_raw_closed_loop_16"
	scSequential      = "sequential"
	scPipelined       = "pipelined"
	scClosedLoop      = "closed_loop_16"
	scConnPerMsg      = "conn_per_msg"
	scFloodBadSig     = "flood_bad_signature"
	scFloodUntrust    = "flood_untrusted"
	scDurable         = "durable"
	scIdleRSS         = "idle_rss"
	scIdleRSS1000     = "idle_rss_1000"
	scStartup         = "startup"
	implMeerkatd      = "meerkatd"
	implNATS          = "nats"
	inboxNone         = "none"
	transportNone     = "none"
	closedLoopPeers   = 16
)

// Metric names.
const (
	mP50      = "p50_us"
	mP99      = "p99_us"
	mRate     = "exchanges_per_s"
	mCPU      = "cpu_us_per_exchange"
	mWallUS   = "wall_us"
	mRatio    = "ratio"
	mRSS      = "rss_mb"
	mMS       = "ms"
	mUS       = "us"
	mRefused  = "refused_per_s"
	mVsRaw    = "vs_raw"     // meerkatd's figure / the raw crypto anchor's (p50: lower is better; rate: higher)
	mCPUVsRaw = "cpu_vs_raw" // meerkatd's CPU per exchange / the raw crypto anchor's (lower is better)
	// pipelined against anchor_raw_batched, the raw crypto of the protocol two nodes speak
	mVsBatched    = "vs_raw_batched"
	mCPUVsBatched = "cpu_vs_raw_batched"
	mVsTCP        = "vs_tcp"      // over TLS and NATS: the figure / plaintext TCP's in the same repetition (p50: lower is better; rate: higher)
	mVsUnseal     = "vs_unsealed" // over nats: the figure / nats-unsealed's in the same repetition
	// Not printed: what the flood checks need per repetition.
	mRefusedOK = "_refused_as_reason" // node's count for the reason / attempts
	mWrong     = "_wrong_outcome"     // acked or refused for another reason
)

// run runs the warm-up and the measured repetitions.
func (b *runner) run(ctx context.Context) (*results, error) {
	res := newResults()
	total := b.opts.reps
	if b.opts.warmup {
		total++
	}
	if slices.ContainsFunc(b.opts.transports, isNATS) {
		if err := b.checkNATS(ctx); err != nil {
			return nil, err
		}
	}
	echoes := map[string]*child{}
	echoAddrs := map[string]transport.Addr{}
	for _, tr := range b.opts.transports {
		if followsTCP(tr) {
			continue // compared with plaintext TCP, not with an echo
		}
		c, a, err := b.startEcho(tr)
		if err != nil {
			return nil, fmt.Errorf("ping-pong echo server: %w", err)
		}
		defer c.finish()
		echoes[tr], echoAddrs[tr] = c, a
	}
	for rep := range total {
		rec := res
		label := fmt.Sprintf("repetition %d/%d", rep+1-btoi(b.opts.warmup), b.opts.reps)
		if b.opts.warmup && rep == 0 {
			rec, label = newResults(), "warm-up"
		}
		fmt.Fprintf(b.log, "bench: %s\n", label)
		if err := b.repetition(ctx, rec, echoes, echoAddrs); err != nil {
			return nil, err
		}
	}
	res.reps = b.opts.reps
	res.cores = runtime.NumCPU()
	res.computeChecks(b.opts)
	return res, nil
}

// followsTCP reports whether tr runs only sequential and pipelined, each
// right after the same scenario over plaintext TCP, which its vs_tcp
// compares with: TLS and the NATS transports.
func followsTCP(tr string) bool { return tr == transport.SchemeTLS || isNATS(tr) }

// followSequential runs the sequential scenario over each transport that
// follows TCP and records it with its ratio to tcpP50, plaintext TCP's
// p50 measured just before (0: not measured, no ratio), and nats's ratio
// to nats-unsealed's.
func (b *runner) followSequential(ctx context.Context, rec *results, tcpP50 float64) error {
	mem := config.StoreMemory
	got := map[string]float64{}
	for _, tr := range b.opts.transports {
		if !followsTCP(tr) {
			continue
		}
		lat, err := b.sequential(ctx, tr)
		if err != nil {
			return fmt.Errorf("%s %s: %w", scSequential, tr, err)
		}
		p50 := rec.addLatencies(implMeerkatd, scSequential, tr, mem, lat)
		if tcpP50 > 0 {
			rec.add(implMeerkatd, scSequential, tr, mem, mVsTCP, p50/tcpP50)
		}
		got[tr] = p50
		if err := ctx.Err(); err != nil {
			return err
		}
	}
	if got[trNATS] > 0 && got[trNATSUnsealed] > 0 {
		rec.add(implMeerkatd, scSequential, trNATS, mem, mVsUnseal, got[trNATS]/got[trNATSUnsealed])
	}
	return nil
}

// followPipelined is followSequential for the pipelined scenario.
func (b *runner) followPipelined(ctx context.Context, rec *results, tcp loadResult) error {
	mem := config.StoreMemory
	got := map[string]float64{}
	for _, tr := range b.opts.transports {
		if !followsTCP(tr) {
			continue
		}
		pipe, err := b.load(ctx, tr, mem, 1, b.opts.inFlight, nil)
		if err != nil {
			return fmt.Errorf("%s %s: %w", scPipelined, tr, err)
		}
		rec.add(implMeerkatd, scPipelined, tr, mem, mRate, pipe.perS)
		rec.add(implMeerkatd, scPipelined, tr, mem, mCPU, pipe.cpuPerEx)
		if tcp.perS > 0 {
			rec.add(implMeerkatd, scPipelined, tr, mem, mVsTCP, pipe.perS/tcp.perS)
		}
		got[tr] = pipe.perS
		if err := ctx.Err(); err != nil {
			return err
		}
	}
	if got[trNATS] > 0 && got[trNATSUnsealed] > 0 {
		rec.add(implMeerkatd, scPipelined, trNATS, mem, mVsUnseal, got[trNATS]/got[trNATSUnsealed])
	}
	return nil
}

func btoi(v bool) int {
	if v {
		return 1
	}
	return 0
}

// repetition runs every scenario once.
func (b *runner) repetition(ctx context.Context, rec *results, echoes map[string]*child, echoAddrs map[string]transport.Addr) error {
	an, err := b.anchors()
	if err != nil {
		return fmt.Errorf("anchors: %w", err)
	}
	rec.add(implMeerkatd, scAnchorSign, transportNone, inboxNone, mUS, an.sign)
	rec.add(implMeerkatd, scAnchorBatchSign, transportNone, inboxNone, mUS, an.batchSign)
	rec.add(implMeerkatd, scAnchorVerify, transportNone, inboxNone, mUS, an.verify)
	rec.add(implMeerkatd, scAnchorExch, transportNone, inboxNone, mUS, an.exch)
	rec.add(implMeerkatd, scAnchorExch, transportNone, inboxNone, mWallUS, an.exchWall)
	rec.add(implMeerkatd, scAnchorBatch, transportNone, inboxNone, mUS, an.batch)
	step := func(tr, what string, err error) error {
		if err != nil {
			return fmt.Errorf("%s %s: %w", what, tr, err)
		}
		return ctx.Err()
	}
	// addLoad records a throughput result and, against its raw anchor,
	// the ratios to it.
	addLoad := func(sc, tr, inbox string, r loadResult, raw *loadResult) {
		rec.add(implMeerkatd, sc, tr, inbox, mRate, r.perS)
		rec.add(implMeerkatd, sc, tr, inbox, mCPU, r.cpuPerEx)
		if raw != nil {
			rec.add(implMeerkatd, sc, tr, inbox, mVsRaw, r.perS/raw.perS)
			rec.add(implMeerkatd, sc, tr, inbox, mCPUVsRaw, r.cpuPerEx/raw.cpuPerEx)
		}
	}
	// TLS and NATS run right after the same scenario over plaintext TCP,
	// so that the two figures of a ratio are measured under the same load
	// on the machine; alone (first) when TCP is not run.
	if !slices.Contains(b.opts.transports, transport.SchemeTCP) {
		if b.opts.want("sequential") {
			if err := b.followSequential(ctx, rec, 0); err != nil {
				return err
			}
		}
		if b.opts.want("pipelined") {
			if err := b.followPipelined(ctx, rec, loadResult{}); err != nil {
				return err
			}
		}
	}
	for _, tr := range b.opts.transports {
		mem := config.StoreMemory
		if followsTCP(tr) {
			continue // done with TCP, or above
		}
		pp, err := b.pingPong(ctx, echoAddrs[tr])
		if err := step(tr, scAnchorPing, err); err != nil {
			return err
		}
		rec.add(implMeerkatd, scAnchorPing, tr, inboxNone, mP50, pp)
		o := b.opts
		if o.want("sequential") {
			raw, lat, err := b.sequentialPair(ctx, tr, echoAddrs[tr])
			if err := step(tr, scSequential, err); err != nil {
				return err
			}
			rawSeq := rec.addLatencies(implMeerkatd, scAnchorRawSeq, tr, inboxNone, raw)
			p50 := rec.addLatencies(implMeerkatd, scSequential, tr, mem, lat)
			rec.add(implMeerkatd, scSequential, tr, mem, mVsRaw, p50/rawSeq)
			if tr == transport.SchemeTCP {
				if err := b.followSequential(ctx, rec, p50); err != nil {
					return err
				}
			}
		}
		var rawPipe, rawBatch loadResult
		if o.want("pipelined") {
			rawPipe, err = b.rawPipelined(ctx, echoAddrs[tr], echoes[tr].pid())
			if err := step(tr, scAnchorRawPipe, err); err != nil {
				return err
			}
			addLoad(scAnchorRawPipe, tr, inboxNone, rawPipe, nil)
			rawBatch, err = b.rawBatched(ctx, echoAddrs[tr], echoes[tr].pid())
			if err := step(tr, scAnchorRawBatch, err); err != nil {
				return err
			}
			addLoad(scAnchorRawBatch, tr, inboxNone, rawBatch, nil)
		}

		var pipe loadResult
		if o.want("pipelined") {
			pipe, err = b.load(ctx, tr, mem, 1, o.inFlight, nil)
			if err := step(tr, scPipelined, err); err != nil {
				return err
			}
			addLoad(scPipelined, tr, mem, pipe, &rawPipe)
			rec.add(implMeerkatd, scPipelined, tr, mem, mVsBatched, pipe.perS/rawBatch.perS)
			rec.add(implMeerkatd, scPipelined, tr, mem, mCPUVsBatched, pipe.cpuPerEx/rawBatch.cpuPerEx)
			if tr == transport.SchemeTCP {
				if err := b.followPipelined(ctx, rec, pipe); err != nil {
					return err
				}
			}
		}

		if o.want("closed_loop_16") {
			raw, err := b.rawClosedLoop(ctx, echoAddrs[tr], echoes[tr].pid())
			if err := step(tr, scAnchorRawLoop, err); err != nil {
				return err
			}
			addLoad(scAnchorRawLoop, tr, inboxNone, raw, nil)
			loop, err := b.load(ctx, tr, mem, closedLoopPeers, 1, nil)
			if err := step(tr, scClosedLoop, err); err != nil {
				return err
			}
			addLoad(scClosedLoop, tr, mem, loop, &raw)
		}

		if o.want("conn_per_msg") {
			cp50, err := b.connPerMsg(ctx, tr)
			if err := step(tr, scConnPerMsg, err); err != nil {
				return err
			}
			rec.add(implMeerkatd, scConnPerMsg, tr, mem, mP50, cp50)
		}

		for _, f := range []struct {
			scenario string
			untrust  bool
		}{{scFloodBadSig, false}, {scFloodUntrust, true}} {
			if !o.want("flood") {
				break
			}
			fl := &flood{untrusted: f.untrust}
			r, err := b.load(ctx, tr, mem, 1, o.inFlight, fl)
			if err := step(tr, f.scenario, err); err != nil {
				return err
			}
			rec.add(implMeerkatd, f.scenario, tr, mem, mRate, r.perS)
			rec.add(implMeerkatd, f.scenario, tr, mem, mRatio, r.perS/pipe.perS)
			rec.add(implMeerkatd, f.scenario, tr, mem, mRefused, fl.refusedPerS)
			rec.add(implMeerkatd, f.scenario, tr, mem, mRefusedOK, fl.refusedAsReason)
			rec.add(implMeerkatd, f.scenario, tr, mem, mWrong, fl.wrong)
		}

		if o.want("durable") {
			dur, err := b.load(ctx, tr, config.StoreSQLite, 1, o.inFlight, nil)
			if err := step(tr, scDurable, err); err != nil {
				return err
			}
			addLoad(scDurable, tr, config.StoreSQLite, dur, nil)
			rec.add(implMeerkatd, scDurable, tr, config.StoreSQLite, mRatio, dur.perS/pipe.perS)
		}

		if o.want("space") {
			sp, err := b.spaceBroadcast(ctx, tr)
			if err := step(tr, scSpace, err); err != nil {
				return err
			}
			rec.add(implMeerkatd, scSpace, tr, mem, mEnvRate, sp.envPerS)
			rec.add(implMeerkatd, scSpace, tr, mem, mCopyRate, sp.copiesPerS)
			rec.add(implMeerkatd, scSpace, tr, mem, mCPUCopy, sp.cpuPerCopy)
			rec.add(implMeerkatd, scSpace, tr, mem, mRatio, sp.copiesPerS/pipe.perS)
			rec.add(implMeerkatd, scSpace, tr, mem, mCPURatio, sp.cpuPerCopy/pipe.cpuPerEx)
			rec.add(implMeerkatd, scSpace, tr, mem, mReceived, float64(sp.received))
			rec.add(implMeerkatd, scSpace, tr, mem, mDelivered, float64(sp.received)/float64(sp.sent))
			rec.add(implMeerkatd, scSpace, tr, mem, mWrongCopies, float64(sp.wrong))
			if sp.problem != "" {
				rec.notes = append(rec.notes, fmt.Sprintf("%s/%s: %s", scSpace, tr, sp.problem))
			}
		}

		if o.want("resources") {
			start, idle, busy, err := b.resources(ctx, tr)
			if err := step(tr, "startup and memory", err); err != nil {
				return err
			}
			st := config.DefaultStoreMode
			rec.add(implMeerkatd, scStartup, tr, st, mMS, start)
			rec.add(implMeerkatd, scIdleRSS, tr, st, mRSS, idle)
			rec.add(implMeerkatd, scIdleRSS1000, tr, st, mRSS, busy)
		}
	}
	if b.opts.nats != "" && slices.Contains(b.opts.transports, transport.SchemeTCP) && (b.opts.want("sequential") || b.opts.want("pipelined")) {
		if err := b.natsOnce(ctx, rec); err != nil {
			return fmt.Errorf("nats bench: %w", err)
		}
	}
	return nil
}

// anchorFigures are the crypto anchors of a repetition, in µs.
type anchorFigures struct {
	sign, batchSign, verify, exch, batch float64
	exchWall                             float64 // anchor_exchange on the clock, for comparison
}

// anchors measures the node's signing and verifying primitives
// (identity.Keypair.SignInto, alone and by batchSigners goroutines at
// once; identity.Verifier, which keeps the key expanded as a Router
// does) on the real signing inputs of 100-byte messages (rawMsgs of
// them in turn, as a node never sees one twice), and one exchange with
// the project's code, in µs.
func (b *runner) anchors() (an anchorFigures, err error) {
	a, n := b.peers[0], b.peers[1]
	signables, err := rawSignables(a, n.ID(), rawMsgs)
	if err != nil {
		return an, err
	}
	sigs := make([][sigSize]byte, len(signables))
	for i, m := range signables {
		a.SignInto(&sigs[i], m)
	}
	pub := a.ID()
	var sig [sigSize]byte
	i := 0
	an.sign, _ = timeOp(b.opts.anchorTime, func() { a.SignInto(&sig, signables[i%rawMsgs]); i++ })
	an.batchSign = batchSignCPU(b.opts.anchorTime, a, signables[0])
	an.verify, _ = timeOp(b.opts.anchorTime, func() {
		if !anchorKeys.Verify(pub, signables[i%rawMsgs], sigs[i%rawMsgs][:]) {
			err = errors.New("anchor signature does not verify")
		}
		i++
	})
	msg := wire.Message(body)
	buf := make([]byte, 0, 1024)
	an.exch, an.exchWall = timeOp(b.opts.anchorTime, func() {
		if err == nil {
			buf, err = exchangeOnce(a, n, msg, buf)
		}
	})
	// A receive loop's batch: the envelopes of one peer, verified as one.
	envs := make([]*wire.Envelope, batchAnchorSize)
	for i := range envs {
		e, serr := wire.Seal(a, identity.NewUUID(), n.ID(), msg)
		if serr != nil {
			return an, serr
		}
		envs[i] = &e
	}
	var vb identity.Batch
	an.batch, _ = timeOp(b.opts.anchorTime, func() {
		if wire.VerifyBatchPrefix(&vb, envs) != len(envs) {
			err = errors.New("anchor batch does not verify")
		}
	})
	an.batch /= batchAnchorSize
	return an, err
}

// batchSigners is how many goroutines sign at once for anchor_batch_sign:
// as many as closed_loop_16 has connections, whose acks a node signs.
const batchSigners = 16

// batchSignCPU is anchor_batch_sign: the CPU time (this process, µs) per
// signature while batchSigners goroutines sign msg with kp at once for
// about d, which SignInto makes in batches.
func batchSignCPU(d time.Duration, kp *identity.Keypair, msg []byte) float64 {
	var (
		n  atomic.Int64
		wg sync.WaitGroup
	)
	cpu0, t0 := selfCPU(), time.Now()
	for range batchSigners {
		wg.Go(func() {
			var sig [sigSize]byte
			for i := 0; i < 16 || time.Since(t0) < d; i++ {
				kp.SignInto(&sig, msg)
				n.Add(1)
			}
		})
	}
	wg.Wait()
	return float64((selfCPU() - cpu0).Nanoseconds()) / 1e3 / float64(n.Load())
}

// batchAnchorSize is the batch of anchor_batch_verify: the most frames a
// connection verifies as one.
const batchAnchorSize = 64

// openAnchor decodes an envelope and verifies it as a node does.
func openAnchor(payload []byte) (wire.Envelope, error) {
	e, err := wire.Decode(payload)
	if err != nil {
		return e, err
	}
	return e, e.VerifyWith(&anchorKeys)
}

// exchangeOnce is one exchange from a to n on one goroutine: seal the
// message, encode its frame, decode and verify it, seal the ack, encode,
// decode and verify the ack.
func exchangeOnce(a, n *identity.Keypair, msg wire.Kind, buf []byte) ([]byte, error) {
	e, err := wire.Seal(a, identity.NewUUID(), n.ID(), msg)
	if err != nil {
		return buf, err
	}
	frame, start := transport.StartFrame(buf[:0])
	if frame, err = e.AppendBinary(frame); err == nil {
		err = transport.FinishFrame(frame, start)
	}
	if err != nil {
		return buf, err
	}
	got, err := openAnchor(frame[transport.HeaderSize:])
	if err != nil {
		return frame, err
	}
	ack, err := wire.Seal(n, identity.NewUUID(), got.From, wire.Ack(got.ID))
	if err != nil {
		return frame, err
	}
	frame, start = transport.StartFrame(frame[:0])
	if frame, err = ack.AppendBinary(frame); err == nil {
		err = transport.FinishFrame(frame, start)
	}
	if err != nil {
		return frame, err
	}
	_, err = openAnchor(frame[transport.HeaderSize:])
	return frame, err
}

// timeOp runs f in blocks for about d and returns the CPU time (this
// process, µs) per call, and the time on the clock: CPU time, as the
// node's cost per exchange is measured, so that a busy machine, which
// stretches the clock, does not change what an anchor stands for.
func timeOp(d time.Duration, f func()) (cpuUS, wallUS float64) {
	const block = 16
	f() // warm
	n := 0
	cpu0, t0 := selfCPU(), time.Now()
	for time.Since(t0) < d || n == 0 {
		for range block {
			f()
		}
		n += block
	}
	cpu, wall := selfCPU()-cpu0, time.Since(t0)
	return float64(cpu.Nanoseconds()) / 1e3 / float64(n), float64(wall.Nanoseconds()) / 1e3 / float64(n)
}

// pingPong echoes 200-byte frames off the echo process and returns the
// p50 round trip in µs.
func (b *runner) pingPong(ctx context.Context, a transport.Addr) (float64, error) {
	c, err := transport.Dial(ctx, a)
	if err != nil {
		return 0, err
	}
	defer c.Close()
	out, err := transport.AppendFrame(nil, make([]byte, 200))
	if err != nil {
		return 0, err
	}
	in := make([]byte, len(out))
	c.SetDeadline(time.Now().Add(time.Minute))
	lat := make([]time.Duration, 0, b.opts.msgs)
	for i := range b.opts.msgs + b.opts.msgs/10 {
		t0 := time.Now()
		if _, err := c.Write(out); err != nil {
			return 0, err
		}
		if _, err := io.ReadFull(c, in); err != nil {
			return 0, err
		}
		if i >= b.opts.msgs/10 { // the first tenth warms up
			lat = append(lat, time.Since(t0))
		}
		if ctx.Err() != nil {
			return 0, ctx.Err()
		}
	}
	return percentileUS(lat, 0.50), nil
}

// sequential sends one message at a time through a Router and returns
// the round trips (send to ack), the first tenth (the warm-up) left out.
func (b *runner) sequential(ctx context.Context, tr string) ([]time.Duration, error) {
	n, err := b.newNode(tr, config.StoreMemory)
	if err != nil {
		return nil, err
	}
	if _, err := n.start(ctx); err != nil {
		return nil, err
	}
	defer n.stop()
	r, err := n.router(ctx, b.peers[0])
	if err != nil {
		return nil, err
	}
	defer r.Close()
	lat := make([]time.Duration, 0, b.opts.msgs)
	for i := range b.opts.msgs + b.opts.msgs/10 {
		t0 := time.Now()
		if _, err := r.SendMessage(ctx, "node", body); err != nil {
			return nil, err
		}
		if i >= b.opts.msgs/10 {
			lat = append(lat, time.Since(t0))
		}
	}
	return lat, nil
}

// connPerMsg dials, writes one envelope, reads its ack and closes, msgs/2
// times, and returns the p50 in µs.
func (b *runner) connPerMsg(ctx context.Context, tr string) (float64, error) {
	n, err := b.newNode(tr, config.StoreMemory)
	if err != nil {
		return 0, err
	}
	if _, err := n.start(ctx); err != nil {
		return 0, err
	}
	defer n.stop()
	count := max(b.opts.msgs/2, 10)
	lat := make([]time.Duration, 0, count)
	for i := range count + count/10 {
		t0 := time.Now()
		c, err := transport.Dial(ctx, n.addr)
		if err != nil {
			return 0, err
		}
		err = rawExchange(c, b.peers[0], n.id)
		c.Close()
		if err != nil {
			return 0, err
		}
		if i >= count/10 {
			lat = append(lat, time.Since(t0))
		}
	}
	return percentileUS(lat, 0.50), nil
}

// loadResult is a throughput scenario's outcome.
type loadResult struct {
	perS     float64 // acknowledged exchanges per second
	cpuPerEx float64 // CPU µs per exchange, both processes
}

// loadSample is where a throughput scenario stands at one instant: the
// exchanges done and the CPU time of this process and of the other ones.
type loadSample struct {
	at          time.Time
	done        int64
	self, other time.Duration // other: the other processes' CPU, summed
	err         error         // reading the other processes' CPU
}

func sampleLoad(done int64, otherPIDs ...int) loadSample {
	s := loadSample{at: time.Now(), done: done, self: selfCPU()}
	for _, pid := range otherPIDs {
		c, err := procCPU(pid)
		s.other += c
		s.err = errors.Join(s.err, err)
	}
	return s
}

// resultSince is the outcome of the window from s0 to s.
func (s loadSample) resultSince(s0 loadSample) (loadResult, error) {
	if err := errors.Join(s0.err, s.err); err != nil {
		return loadResult{}, fmt.Errorf("CPU of the other processes: %w", err)
	}
	ex := s.done - s0.done
	if ex <= 0 {
		return loadResult{}, errors.New("no exchange completed in the measured window")
	}
	return loadResult{
		perS:     float64(ex) / s.at.Sub(s0.at).Seconds(),
		cpuPerEx: float64((s.self-s0.self)+(s.other-s0.other)) / 1e3 / float64(ex),
	}, nil
}

// warmIn waits out a throughput scenario's warm-in: a quarter of the
// window (at most half a second), and at least until progressed holds
// (a slow machine, or -race, must not start the window empty).
func (b *runner) warmIn(ctx context.Context, progressed func() bool) {
	sleepCtx(ctx, min(b.opts.duration/4, 500*time.Millisecond))
	waitMore(ctx, progressed)
}

// load starts a node with the given store and, for routers peers with
// perRouter goroutines each, sends messages in a closed loop: a warm-in,
// then the measured window. With fl, flooders attack the node from before
// the warm-in to the end of the window.
func (b *runner) load(ctx context.Context, tr, store string, routers, perRouter int, fl *flood) (loadResult, error) {
	n, err := b.newNode(tr, store)
	if err != nil {
		return loadResult{}, err
	}
	if _, err := n.start(ctx); err != nil {
		return loadResult{}, err
	}
	defer n.stop()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var (
		done     atomic.Int64
		stop     atomic.Bool
		wg       sync.WaitGroup
		errOnce  sync.Once
		firstErr error
	)
	fail := func(err error) {
		errOnce.Do(func() { firstErr = err })
		stop.Store(true)
	}
	var before nodeStatus
	if fl != nil {
		if before, err = n.status(ctx); err != nil {
			return loadResult{}, err
		}
		if err := fl.start(b, n); err != nil {
			return loadResult{}, fmt.Errorf("flooder: %w", err)
		}
		defer func() { // if still running
			fl.child.kill()
			fl.outFile.Close()
		}()
	}
	for i := range routers {
		r, err := n.router(ctx, b.peers[i%len(b.peers)])
		if err != nil {
			stop.Store(true)
			wg.Wait()
			return loadResult{}, err
		}
		defer r.Close()
		for range perRouter {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for !stop.Load() {
					if _, err := r.SendMessage(ctx, "node", body); err != nil {
						if !stop.Load() {
							fail(err)
						}
						return
					}
					done.Add(1)
				}
			}()
		}
	}
	b.warmIn(ctx, func() bool { return done.Load() > 0 || stop.Load() })
	s0 := sampleLoad(done.Load(), n.child.pid())
	var f0, f1 int64
	var flErr error
	if fl != nil {
		f0, _, flErr = fl.count()
	}
	sleepCtx(ctx, b.opts.duration)
	waitMore(ctx, func() bool { return done.Load() > s0.done || stop.Load() })
	s1 := sampleLoad(done.Load(), n.child.pid())
	var total, acked int64
	if fl != nil && flErr == nil {
		f1, _, flErr = fl.count()
		if flErr == nil {
			total, acked, flErr = fl.stop()
		}
	}
	stop.Store(true)
	wg.Wait()
	if flErr != nil {
		return loadResult{}, flErr
	}
	if firstErr != nil {
		return loadResult{}, firstErr
	}
	if err := ctx.Err(); err != nil {
		return loadResult{}, err
	}
	res, err := s1.resultSince(s0)
	if err != nil {
		return loadResult{}, err
	}
	if fl != nil {
		after, err := n.status(ctx)
		if err != nil {
			return loadResult{}, err
		}
		if err := fl.settle(before, after, total, acked, f1-f0, s1.at.Sub(s0.at)); err != nil {
			return loadResult{}, err
		}
	}
	return res, nil
}

// waitMore polls cond for up to ackTimeout.
func waitMore(ctx context.Context, cond func() bool) {
	deadline := time.Now().Add(ackTimeout)
	for !cond() && time.Now().Before(deadline) && ctx.Err() == nil {
		time.Sleep(5 * time.Millisecond)
	}
}

func sleepCtx(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
	}
}

// flood attacks a node with envelopes it must refuse: from a trusted
// key with a corrupted signature, or from an unknown key (whose signature
// is corrupted too, so that counting it "untrusted" rather than
// "bad_signature" shows which check came first). The node closes the
// connection after a refusal, so each envelope comes on its own connection.
type flood struct {
	untrusted bool

	child   *child
	ctl     io.WriteCloser // the flooder's stdin
	out     *bufio.Reader  // its stdout
	outFile *os.File       // under out

	// Results, set by settle.
	refusedPerS     float64
	refusedAsReason float64 // node's count for the expected reason / attempts
	wrong           float64 // acked, or refused for another reason
}

func (fl *flood) reason() (want, other string) {
	if fl.untrusted {
		return comms.RejectUntrusted, comms.RejectBadSignature
	}
	return comms.RejectBadSignature, comms.RejectUntrusted
}

// start runs the flooders in their own process (`meerkatd bench flood`),
// as an attacker would be, so that they compete with the node and the
// trusted sender for the machine, not for this process's scheduler.
func (fl *flood) start(b *runner, n *node) error {
	kp := b.flooder
	if fl.untrusted {
		kp = b.stranger
	}
	_, frame, err := sealFrame(kp, n.id, wire.Message(body), true)
	if err != nil {
		return err
	}
	cmd := exec.Command(b.exe, "bench", "flood", n.addr.String(), hex.EncodeToString(frame), strconv.Itoa(b.opts.flooders))
	cmd.Env = b.env
	if fl.ctl, err = cmd.StdinPipe(); err != nil {
		return err
	}
	out, w, err := childStdout(cmd)
	if err != nil {
		return err
	}
	if fl.child, err = b.startChild(cmd, w); err != nil {
		out.Close()
		return err
	}
	fl.outFile, fl.out = out, bufio.NewReader(out)
	return nil
}

// count asks the flooder process for its counts so far.
func (fl *flood) count() (attempts, acked int64, err error) {
	if _, err := io.WriteString(fl.ctl, "\n"); err != nil {
		return 0, 0, err
	}
	line, err := fl.out.ReadString('\n')
	if err != nil {
		return 0, 0, fmt.Errorf("flooder: %w", err)
	}
	if _, err := fmt.Sscan(line, &attempts, &acked); err != nil {
		return 0, 0, fmt.Errorf("flooder said %q: %w", line, err)
	}
	return attempts, acked, nil
}

// stop ends the flooder process and returns its final counts.
func (fl *flood) stop() (attempts, acked int64, err error) {
	fl.ctl.Close()
	line, err := fl.out.ReadString('\n')
	if err == nil {
		_, err = fmt.Sscan(line, &attempts, &acked)
	}
	select {
	case <-fl.child.done:
		fl.child.forget()
	case <-time.After(stopTimeout):
		fl.child.kill()
	}
	fl.outFile.Close()
	return attempts, acked, err
}

// RunFlood is the body of `meerkatd bench flood ADDR FRAME_HEX CONNS`, a
// child process of [Run]; args are the three after "flood". CONNS
// goroutines each dial ADDR, write the frame and read until the node
// closes, over and over. Each line on stdin asks for the counts so far,
// printed to stdout ("attempts acked": connections closed without a
// reply, and with one); at the end of stdin it stops, prints the final
// counts and returns.
func RunFlood(args []string, stdin io.Reader, stdout io.Writer) error {
	if len(args) != 3 {
		return usagef("bench flood ADDR FRAME_HEX CONNS")
	}
	a, err := transport.ParseAddr(args[0])
	if err != nil {
		return err
	}
	frame, err := hex.DecodeString(args[1])
	if err != nil {
		return err
	}
	conns, err := strconv.Atoi(args[2])
	if err != nil || conns < 1 {
		return usagef("CONNS %q", args[2])
	}
	var attempts, acked atomic.Int64
	var stop atomic.Bool
	var wg sync.WaitGroup
	for range conns {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for !stop.Load() {
				c, err := net.DialTimeout(a.Network(), a.Address(), time.Second)
				if err != nil {
					time.Sleep(time.Millisecond) // backlog full or out of ports: again
					continue
				}
				c.SetDeadline(time.Now().Add(5 * time.Second))
				if _, err := c.Write(frame); err == nil {
					if got, _ := io.Copy(io.Discard, c); got > 0 {
						acked.Add(1)
					} else {
						attempts.Add(1)
					}
				}
				c.Close()
			}
		}()
	}
	in := bufio.NewReader(stdin)
	for {
		_, err := in.ReadString('\n')
		if err != nil {
			break
		}
		fmt.Fprintln(stdout, attempts.Load(), acked.Load())
	}
	stop.Store(true)
	wg.Wait()
	fmt.Fprintln(stdout, attempts.Load(), acked.Load())
	return nil
}

// settle compares the node's reject counters with what the flooders sent.
func (fl *flood) settle(before, after nodeStatus, attempts, acked, window int64, el time.Duration) error {
	want, other := fl.reason()
	if attempts == 0 {
		return errors.New("no flood envelope got through to the node")
	}
	fl.refusedPerS = float64(window) / el.Seconds()
	fl.refusedAsReason = float64(after.Rejected[want]-before.Rejected[want]) / float64(attempts)
	fl.wrong = float64(acked + int64(after.Rejected[other]-before.Rejected[other]))
	return nil
}

// resources starts a node with the default store several times (the
// startup figure is their median), then measures its idle memory and its
// memory with idleConns authenticated idle connections.
func (b *runner) resources(ctx context.Context, tr string) (startMS, idleMB, busyMB float64, err error) {
	n, err := b.newNode(tr, config.DefaultStoreMode)
	if err != nil {
		return 0, 0, 0, err
	}
	defer n.stop()
	var starts []time.Duration
	for i := range b.opts.starts {
		d, err := n.start(ctx)
		if err != nil {
			return 0, 0, 0, err
		}
		starts = append(starts, d)
		if i < b.opts.starts-1 {
			n.stop()
		}
	}
	settle := 500 * time.Millisecond
	if b.opts.quick {
		settle = 50 * time.Millisecond
	}
	sleepCtx(ctx, settle)
	if idleMB, err = n.rssMB(); err != nil {
		return 0, 0, 0, err
	}
	conns := make([]net.Conn, b.opts.idleConns)
	defer func() {
		for _, c := range conns {
			if c != nil {
				c.Close()
			}
		}
	}()
	var wg sync.WaitGroup
	errs := make(chan error, 1)
	sem := make(chan struct{}, 32)
	for i := range conns {
		sem <- struct{}{}
		wg.Add(1)
		go func() {
			defer func() { <-sem; wg.Done() }()
			c, err := transport.Dial(ctx, n.addr)
			if err == nil {
				conns[i] = c
				err = rawExchange(c, b.peers[i%len(b.peers)], n.id)
			}
			if err != nil {
				select {
				case errs <- err:
				default:
				}
			}
		}()
	}
	wg.Wait()
	select {
	case err := <-errs:
		return 0, 0, 0, fmt.Errorf("idle connections: %w", err)
	default:
	}
	sleepCtx(ctx, settle)
	st, err := n.status(ctx)
	if err != nil {
		return 0, 0, 0, err
	}
	if st.Conns < len(conns) {
		return 0, 0, 0, fmt.Errorf("node holds %d connections, want at least %d", st.Conns, len(conns))
	}
	if busyMB, err = n.rssMB(); err != nil {
		return 0, 0, 0, err
	}
	return float64(median(starts)) / 1e6, idleMB, busyMB, ctx.Err()
}

// percentileUS returns the nearest-rank p-th percentile of lat in µs.
func percentileUS(lat []time.Duration, p float64) float64 {
	if len(lat) == 0 {
		return 0
	}
	return sortedQuantile(sortedUS(lat), p)
}

// sortedUS is lat in µs, sorted.
func sortedUS(lat []time.Duration) []float64 {
	us := make([]float64, len(lat))
	for i, d := range lat {
		us[i] = float64(d.Nanoseconds()) / 1e3
	}
	slices.Sort(us)
	return us
}

// sortedQuantile is the q-quantile (0 to 1) of sorted v: the value at rank
// ⌈q·n⌉, with a tolerance for q·n's rounding (0.99 × 2000 is rank 1980,
// not 1981); NaN for none.
func sortedQuantile(v []float64, q float64) float64 {
	if len(v) == 0 {
		return math.NaN()
	}
	i := int(float64(len(v))*q+0.999999) - 1
	return v[min(max(i, 0), len(v)-1)]
}

func median(d []time.Duration) time.Duration {
	s := slices.Clone(d)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}
