// Package audit is a node's append-only audit log: one JSON object per line
// in a file in the node's home (conventionally [FileName]), one [Record]
// per envelope event — sent, received, acknowledged, refused (with the
// reason), retried, expired, dead-lettered, consumed — with time,
// direction, peer, kind, id, correlation id, size and outcome. A summary
// row stands for [Record.Count] events (the node sums what strangers can
// cause at will); a sender that was not verified is written as
// [Record.Claimed], never as Peer or Key. It backs
// `meerkatd audit [--since] [--peer] [--json]` through [Read] and
// [Format].
//
// # Recording
//
// [Log.Record] never waits for the disk and never fails: it stamps the
// time, strips the body unless [Options.Bodies], and puts the record on a
// bounded queue ([Options.QueueLen]) drained by one writer goroutine, which
// encodes rows into a buffer (a hand-rolled encoder, byte-identical to
// encoding/json and about four times faster) and writes it out whenever
// the queue runs empty and at least every [Options.FlushInterval]. So a
// row reaches the operating system within about one FlushInterval;
// [Log.Close] drains the queue, writes, and syncs the file to disk. A crash
// may lose what was not yet written. A nil *Log records nothing, so callers
// need no checks.
//
// # Overflow
//
// When the queue is full the record is dropped and counted, never waited
// for: the receive path must not stall on a slow disk. No loss is silent.
// The writer follows drops with a row of event [EventDropped] whose Reason
// is the number of records lost since the previous such row — written
// after the row it is writing when it notices, and at the latest within
// one FlushInterval. Records that could not be written because of an I/O
// error are counted and reported the same way once the file can be
// written again (the writer reopens it). [Log.Stats] has the totals; only
// drops after Close (or of a final failed write) appear in Stats alone.
//
// # Files
//
// The log is created with mode 0600 and appended to across restarts; a
// path that is a symbolic link or not a regular file is refused
// ([ErrNotRegular]). When the file would grow past [Options.MaxBytes] it is
// renamed to path+".1" (replacing the previous one) and a new file is
// started, so at most about 2×MaxBytes are kept. [Read] reads path+".1",
// then path; [Follow] does too, then reads rows as they are written,
// following path across rotations (`meerkatd audit --follow`).
//
// Lines are bounded ([MaxLineSize]): string fields longer than
// [MaxFieldSize] are truncated and a body that would make the line too long
// is left out (Size still tells the envelope's size). [Read] treats the
// file as untrusted input — someone may have edited it — and skips
// malformed or overlong lines, counting them in [ReadStats]; [Format]
// escapes control characters so a record cannot drive the terminal.
//
// # What it is not
//
// audit does not know envelopes, keys or the trust list: callers fill in
// the fields (the peer's trust-list name and key text, the envelope's kind
// and ids). It is not tamper-evident — rows are not chained or signed — and
// not a metrics system; it answers "what happened to envelope X" and "what
// did peer Y send". One process writes a log file at a time.
//
// # Concurrency
//
// A [Log] is safe for concurrent use; Record may be called from any number
// of goroutines, also concurrently with Close. [Read] may run (in another
// process) while the log is written; it sees whole flushed lines, but a
// rotation during the read can make it miss or repeat rows near the switch.
// [Follow] keeps the file it reads open and tells files apart by identity,
// so one rotation between two of its looks loses and repeats nothing.
package audit
