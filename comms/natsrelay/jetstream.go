package natsrelay

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// startJetStream makes sure the stream on the node subjects exists (or
// finds the one an operator made) and reads this node's subject through
// its durable consumer; repairLoop keeps them there.
func (rl *Relay) startJetStream(ctx context.Context) error {
	js, err := jetstream.New(rl.nc)
	if err != nil {
		return fmt.Errorf("natsrelay: JetStream: %w", err)
	}
	rl.js = js
	cc, err := rl.consume(ctx)
	if err != nil {
		return err
	}
	rl.jsMu.Lock()
	rl.cc = cc
	rl.jsMu.Unlock()
	rl.wg.Add(1)
	go rl.repairLoop()
	return nil
}

// repairEvery bounds how often repairLoop looks at the stream and the
// consumer.
const repairEvery = time.Second

// checkJetStream asks repairLoop to look at the stream and this node's
// consumer soon: after a reconnect, a publish the stream did not answer,
// or an error of the consumer. A server that lost its JetStream data
// (another store, a wiped disk) has neither, and nothing would otherwise
// make them again: sends would fail and nothing would arrive until the
// node restarted.
func (rl *Relay) checkJetStream() {
	if rl.repair == nil {
		return
	}
	select {
	case rl.repair <- struct{}{}:
	default: // asked already
	}
}

// repairLoop makes the stream and this node's consumer again when they
// are gone, at most once per repairEvery, until the relay closes. A
// repair that fails (the server busy, or a user that may not create the
// stream, until an operator does) is tried again, every repairEvery
// doubled up to maxRepairWait, until it succeeds: the consumer of a
// deleted stream reports once and stops, so nothing else would ask.
func (rl *Relay) repairLoop() {
	defer rl.wg.Done()
	wait := repairEvery
	for {
		select {
		case <-rl.done:
			return
		case <-rl.repair:
		}
		ok := rl.repairJetStream()
		if ok {
			wait = repairEvery
		} else {
			rl.checkJetStream() // again, after the wait below
			wait = min(2*wait, maxRepairWait)
		}
		select {
		case <-rl.done:
			return
		case <-time.After(wait):
		}
	}
}

// maxRepairWait bounds the wait between failed repairs.
const maxRepairWait = 30 * time.Second

// repairJetStream sets up the stream and the consumer again, if either
// is gone, and reads through the new consumer. It reports false when it
// could not tell or could not repair, to be tried again.
func (rl *Relay) repairJetStream() bool {
	ctx, cancel := context.WithTimeout(context.Background(), rl.opts.ConnectTimeout+5*time.Second)
	defer cancel()
	go func() { // Close does not wait out the calls below
		select {
		case <-rl.done:
			cancel()
		case <-ctx.Done():
		}
	}()
	// Only what a least-privilege user may ask (docs/nats.md): the
	// stream's info, not the consumer's. A consumer gone (with its
	// stream, or deleted) ends the reading for good: the consume context
	// closes.
	_, err := rl.js.Stream(ctx, rl.opts.Stream)
	streamGone := errors.Is(err, jetstream.ErrStreamNotFound)
	switch {
	case streamGone:
	case err != nil:
		rl.log.Debug("NATS: cannot look at the stream", "err", err)
		return false
	default:
		rl.jsMu.Lock()
		cur := rl.cc
		rl.jsMu.Unlock()
		select {
		case <-cur.Closed():
		default:
			// Read, unless the consumer reported an error since: it
			// may be gone (deleted with the stream), and its reading
			// may not have stopped yet when the report came.
			if !rl.consumeErr.Swap(false) {
				return true
			}
		}
	}
	rl.jsMu.Lock()
	madeBefore := rl.made
	rl.jsMu.Unlock()
	cc, err := rl.consume(ctx)
	if err != nil {
		rl.consumeErr.Store(true) // read anew at the next try
		select {
		case <-rl.done: // closing: the calls were cut short
		default:
			rl.log.Warn("NATS: the stream or this node's consumer is gone from the server, and cannot be made again now; trying again", "stream", rl.opts.Stream, "err", err)
		}
		return false
	}
	rl.consumeErr.Store(false) // the reports were the old reading's
	rl.jsMu.Lock()
	old := rl.cc
	if rl.jsClosed {
		old = cc // closed meanwhile: the new one goes too
	} else {
		rl.cc = cc
	}
	madeNow := madeBefore.madeAnew(rl.made)
	rl.jsMu.Unlock()
	old.Stop()
	if streamGone || madeNow {
		rl.published.forget() // what it held is gone: sent again as it comes
	}
	switch {
	case streamGone:
		rl.log.Warn("NATS: the stream was gone from the server (its JetStream data lost?): made again, with this node's consumer", "stream", rl.opts.Stream)
	case madeNow:
		// Another node made the stream again first, or the consumer
		// was deleted: what it held for this node is gone.
		rl.log.Warn("NATS: this node's consumer was gone from the server (the stream made again, or the consumer deleted; envelopes stored for this node lost?): made again", "stream", rl.opts.Stream)
	default:
		// The stream and the consumer are there, as they were: the
		// reading stopped or reported an error, which a server's
		// restart also causes.
		rl.log.Info("NATS: the reading of this node's consumer stopped or failed (a server restart?): set up again", "stream", rl.opts.Stream)
	}
	return true
}

// setup is what a setup of the consumer found: when the server made the
// stream and the consumer, and which server it was connected to.
type setup struct {
	stream, consumer time.Time
	server           string
}

// madeAnew reports whether the consumer set up as now was made anew since
// the setup s (its state, and what the stream held for this node, may be
// gone): the stream was made again (by another node, after its loss), or
// the consumer's creation time changed on the same server (deleted and
// made again). A server restarted with its store keeps the stream's time
// but gives the consumers it recovers a new one: that is no loss. (The
// first setup has nothing to compare with.)
func (s setup) madeAnew(now setup) bool {
	if s.stream.IsZero() {
		return false
	}
	return !now.stream.Equal(s.stream) || now.server == s.server && !now.consumer.Equal(s.consumer)
}

// durable is the name of this node's durable consumer.
func (rl *Relay) durable() string { return "node-" + rl.r.ID().UUID().String() }

// consume makes sure the stream and this node's consumer exist and reads
// through the consumer.
func (rl *Relay) consume(ctx context.Context) (jetstream.ConsumeContext, error) {
	js := rl.js
	o := rl.opts
	cfg := jetstream.StreamConfig{
		Name:        o.Stream,
		Description: "meerkatd envelopes, sealed, on the node subjects",
		Subjects:    []string{o.SubjectPrefix + ".node.>"},
		Retention:   jetstream.WorkQueuePolicy, // a message goes once its node acked it
		MaxAge:      o.StreamMaxAge,
		MaxBytes:    o.StreamMaxBytes,
		MaxMsgs:     o.StreamMaxMsgs,
		Replicas:    o.StreamReplicas,
		Duplicates:  o.DedupWindow,
		Storage:     jetstream.FileStorage,
		// A full stream refuses what comes next (its sender keeps it in
		// the outbox and tries again) rather than dropping what it
		// stores: any member of the deployment may publish on the node
		// subjects, so with DiscardOld anyone could push out the
		// envelopes stored for a peer that is away.
		Discard: jetstream.DiscardNew,
	}
	// An existing stream is used as it is (the operator owns its limits);
	// a missing one is created, if this node's user may.
	stream, err := js.Stream(ctx, o.Stream)
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		cctx, stop := rl.untilDenied(ctx, "STREAM.CREATE."+o.Stream)
		stream, err = js.CreateStream(cctx, cfg)
		if context.Cause(cctx) == errDenied {
			err = fmt.Errorf("it does not exist, and creating it failed: %w (an operator creates it)", errDenied)
		}
		stop()
	}
	if err != nil {
		return nil, fmt.Errorf("natsrelay: stream %s: %w%s", o.Stream, err, rl.serverSaid())
	}
	durable := rl.durable()
	cons, err := stream.CreateOrUpdateConsumer(ctx, jetstream.ConsumerConfig{
		Durable:       durable,
		Description:   "the envelopes for one meerkatd node",
		FilterSubject: rl.subject,
		DeliverPolicy: jetstream.DeliverAllPolicy,
		AckPolicy:     jetstream.AckExplicitPolicy,
		AckWait:       rl.r.AckTimeout(),
		MaxAckPending: maxAckPending,
	})
	if err != nil {
		return nil, fmt.Errorf("natsrelay: consumer %s on stream %s: %w%s", durable, o.Stream, err, rl.serverSaid())
	}
	made := setup{server: rl.nc.ConnectedServerId()}
	if info := stream.CachedInfo(); info != nil {
		made.stream = info.Created
	}
	if info := cons.CachedInfo(); info != nil {
		made.consumer = info.Created
	}
	rl.jsMu.Lock()
	rl.made = made
	rl.jsMu.Unlock()
	cc, err := cons.Consume(func(m jetstream.Msg) {
		rl.arrived(m.Data(), "", m, false)
	}, jetstream.PullMaxBytes(maxPendingBytes), jetstream.ConsumeErrHandler(func(_ jetstream.ConsumeContext, err error) {
		rl.log.Debug("NATS: consumer", "err", err)
		rl.consumeErr.Store(true)
		rl.checkJetStream() // gone with the stream, or deleted?
	}))
	if err != nil {
		return nil, fmt.Errorf("natsrelay: read consumer %s: %w", durable, err)
	}
	return cc, nil
}

// serverSaid is, for a JetStream call that failed, what the server last
// reported on its own (a permission violation answers nothing: the call
// only times out), as "; the server reported: …", or "".
func (rl *Relay) serverSaid() string {
	rl.asyncErrMu.Lock()
	defer rl.asyncErrMu.Unlock()
	if rl.asyncErr == "" {
		return ""
	}
	return "; the server reported: " + rl.asyncErr
}
