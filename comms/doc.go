// Package comms is the core of a meerkatd node: a [Router] that accepts
// connections, checks and acknowledges signed envelopes, admits them to the
// inbox, and sends envelopes to trusted peers over pooled, pipelined links.
//
// # Receiving
//
// One goroutine per accepted connection reads frames until the peer closes,
// so both one-envelope-per-connection senders (the Rust reference) and
// persistent pipelining senders work. Each envelope goes through, in order:
// frame size, bounded decode, "to" is this node, sender is trusted,
// signature, duplicate check, admission, ack. The trust check comes before
// the signature so that floods from strangers cost no public-key work. Acks
// are written by a second goroutine per connection as soon as the envelope
// is admitted, so the reader goes on checking pipelined envelopes while a
// durable inbox commits earlier ones; the agent loop is never waited on. Acks and responses are never
// acknowledged. Anything invalid closes the connection without an ack and is
// counted by reason ([Router.Stats]).
//
// # Sending
//
// [Router.SendMessage] and [Router.SendRequest] resolve the peer by name or
// key, sign, write on the peer's link and wait for a valid ack (from, to
// and in_reply_to must all match) up to the ack timeout; failures are a
// [*PeerOfflineError]. A link keeps one connection per peer and pipelines
// envelopes on it, matching acks by id; if the peer closes after every
// exchange the link falls back to one connection per envelope.
//
// # Concurrency
//
// A Router is safe for concurrent use. Every goroutine it starts is owned
// and waited for by [Router.Close].
package comms
