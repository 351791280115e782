// Package transport moves length-prefixed frames: a 4-byte big-endian
// payload length, then the payload (docs/protocol.md, "Framing").
//
// # What it is not
//
// transport knows nothing about keys, envelopes or peers. It reads and
// writes frames, bounded by a maximum size that is checked before anything
// is allocated for the payload.
//
// # Concurrency
//
// A [Reader] belongs to one goroutine at a time. The framing functions are
// safe for concurrent use on distinct buffers.
package transport
