// Package inbox is the queue between a node's receivers and its agent loop:
// producers push items, the agent loop drains everything queued at a turn
// boundary and waits when there is nothing to do.
//
// # Overflow
//
// A [Queue] has a maximum length. A push to a full queue fails with
// [ErrFull] and the item is not stored: the caller (a receiver) must then
// refuse the envelope — not acknowledge it — so the sender sees a busy peer
// and retries. Nothing is ever dropped after it was accepted.
//
// # What it is not
//
// inbox knows nothing about envelopes or peers; it holds values of any type.
// It keeps items in memory only; a durable store can stand in for it behind
// the admission interface package comms declares.
//
// # Concurrency
//
// A Queue is safe for concurrent use by many producers and consumers. Items
// from one producer come out in the order that producer pushed them.
package inbox
