// Package natsrelay carries a node's envelopes through a NATS deployment:
// a [comms.Relay] for the peers whose address is nats:.
//
// Each node reads its own subject, <prefix>.node.<peer UUID of its key>,
// and publishes to its peers' subjects. Every message is one envelope's
// wire bytes (a NATS message needs no length prefix), sealed by the Router
// to the recipient's key, so the servers see subjects, sizes and timing
// only. What arrives goes through [comms.Router.ReceiveRelayed], the same
// checks as a socket's, and the signed ack goes back on the message's reply
// subject.
//
// With JetStream, envelopes are stored in a stream on the node subjects
// (deduplicated by envelope id) and each node reads its subject through a
// durable consumer, acking the broker only once the envelope is admitted;
// the recipient's signed ack is then published to the sender's own
// subject, so it is stored too and reaches a sender that was away. The
// broker's publish ack only says the stream has the envelope
// (stored_in_broker): a send completes on the recipient's ack.
//
// This is the only package that imports the NATS client.
package natsrelay
