package natsrelay

import (
	"context"
	"errors"
	"fmt"

	"github.com/nats-io/nats.go/jetstream"
)

// startJetStream makes sure the stream on the node subjects exists (or
// finds the one an operator made) and reads this node's subject through
// its durable consumer.
func (rl *Relay) startJetStream(ctx context.Context) error {
	js, err := jetstream.New(rl.nc)
	if err != nil {
		return fmt.Errorf("natsrelay: JetStream: %w", err)
	}
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
		stream, err = js.CreateStream(ctx, cfg)
	}
	if err != nil {
		return fmt.Errorf("natsrelay: stream %s: %w", o.Stream, err)
	}
	durable := "node-" + rl.r.ID().UUID().String()
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
		return fmt.Errorf("natsrelay: consumer %s on stream %s: %w", durable, o.Stream, err)
	}
	cc, err := cons.Consume(func(m jetstream.Msg) {
		rl.arrived(m.Data(), "", m)
	}, jetstream.PullMaxBytes(maxPendingBytes), jetstream.ConsumeErrHandler(func(_ jetstream.ConsumeContext, err error) {
		rl.log.Debug("NATS: consumer", "err", err)
	}))
	if err != nil {
		return fmt.Errorf("natsrelay: read consumer %s: %w", durable, err)
	}
	rl.js, rl.cc = js, cc
	return nil
}
