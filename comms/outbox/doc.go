// Package outbox sends envelopes reliably: each is stored before its first
// attempt and sent again, with backoff, until the peer acknowledges it, its
// time-to-live passes or its attempts run out — then it becomes a dead
// letter a person can inspect, revive or drop. Nothing in between is lost.
//
// # Order and pipelining
//
// Each peer with queued envelopes has one worker goroutine. It keeps up to
// [Options.Window] envelopes in flight on the peer's link, starting each
// only after the previous one is queued on the connection, so envelopes
// leave in the order they were queued. When an attempt fails the worker
// starts nothing new, lets the round in flight finish, and later resends
// from the oldest unacknowledged envelope: per peer, envelopes are
// delivered in queue order. A resend carries the same envelope id (it is
// the same sealed bytes), so a receiver that already stored it acks it
// again without delivering it twice.
//
// An attempt that ends with [ErrStored] (a broker on the way, NATS
// JetStream, stored the envelope; its recipient has not acknowledged it)
// is not a failure: the entry stays queued and is attempted again after
// [Options.StoredRecheck], and the envelopes behind it go on meanwhile,
// since the broker keeps them in order.
//
// # Backoff and the circuit breaker
//
// After an envelope's n-th failed attempt its next attempt waits
// [Options.Backoff][n-1] (the last delay repeats). Separately, each peer has
// a circuit breaker: after [Options.BreakerFailures] consecutive failed
// rounds it opens for [Options.BreakerOpen]; while open, envelopes queue
// without any dialling. Then one probe (a window of one) is sent; an ack
// closes the breaker, a failure opens it again. Breaker states are stored,
// so a restart does not forget that a peer was failing.
//
// # A wrong clock
//
// Next attempts, expiries and open breakers are wall-clock times, stored
// as such. One written while the clock was wrong (set years ahead, then
// corrected) must not hold a peer's queue until then: the outbox never
// lets a stored time hold an entry or a breaker longer than its policy
// can from now ([Bounds]: the longest backoff step, [Options.BreakerOpen],
// [Options.MaxTTL]). It brings every such time within that bound when it
// loads it and again whenever it compares it with the clock. A time it
// bounded or set itself is taken from [Options.Now], so with time.Now it
// carries the process's monotonic clock reading and a step of the wall
// clock while the process runs moves nothing either. Created, and a dead
// letter's DiedAt, are records and are left as stored.
//
// # Durability
//
// [Outbox.Enqueue] returns once the [Store] has the envelope. Removal after
// an ack is not waited for: if it is lost in a crash the envelope is sent
// once more and the receiver recognises the repeat.
package outbox
