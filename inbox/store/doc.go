// Package store is a durable inbox: an embedded SQLite database (pure Go,
// modernc.org/sqlite, WAL mode) holding admitted records until the consumer
// acknowledges them, then as history for a while.
//
// It has the shape of [inbox.Mailbox] — sequence numbers, listing after a
// cursor, a [Store.Changed] signal, acknowledgement — plus what durability
// needs: admission is acknowledged only once committed, duplicates are
// recognised across restarts, old rows expire. Sequence numbers are never
// reused in a database, which [Store.ID] names.
//
// # Admission and group commit
//
// [Store.Admit] hands its record to a single committer goroutine, which owns
// every write. The committer takes every request queued (up to
// [Options.MaxBatch]; with an [Options.FlushInterval] it also waits that
// long after the first), runs them in one transaction, commits (one disk
// sync for the whole group) and only then answers every waiter. Requests
// arriving meanwhile form the next group, so groups grow with the load
// (and with the time a sync takes). So when Admit returns nil, the record
// is on disk; the caller may acknowledge the envelope. A failed
// transaction fails every request in it; none of them was stored. A run
// of admissions in a group is decided in order, one by one, and its rows
// written 32 to a statement.
//
// # Duplicates
//
// (Sender, ID) is unique within [Options.DedupWindow]: a repeat — stored
// earlier, acknowledged or not, in this batch or before a restart — is
// reported as a duplicate and stored no second time; the caller acks it
// without delivering. Dedup rows live in their own table, so they outlive
// the item's history. [Store.Expire] removes dedup rows older than the
// window, but never one whose item is still unacknowledged. The keys
// admitted lately are held in memory and written to that table in bulk,
// in key order (thousands at a time, when the store is idle, and before
// any item is deleted), because ids are random and one row written per
// admission cost a page of the table each; after a crash, the next Open
// writes the rows of the items admitted since the last bulk write.
//
// # Overflow
//
// At most [Options.MaxItems] unacknowledged items are stored; admission
// beyond that fails with [ErrFull] and stores nothing, so the receiver
// refuses the envelope and the sender retries later. Nothing is dropped
// after it was admitted. Once an admission was refused, the store stays
// full until acknowledgements bring it under 90% of MaxItems and make room
// for the largest refused record within MaxBytes: a smaller envelope
// pipelined behind a refused one is refused too, so the sender's retries
// arrive in its order. The request channel to the committer is bounded:
// Admit blocks (honouring its ctx) when the committer falls behind.
//
// # Disk
//
// Acknowledged items (history) are bounded by age
// ([Options.HistoryRetention]) and by payload bytes
// ([Options.HistoryMaxBytes]: the oldest acknowledged go first); only
// history is ever deleted for room. The database uses auto_vacuum =
// INCREMENTAL (Open converts an older file once, with a VACUUM), so the
// pages deletions free are handed back to the file system, and the WAL is
// truncated to [Options.WALMaxBytes] after checkpoints. [Store.DiskSize]
// reports the file and WAL size.
//
// # Outbox
//
// [Store.Outbox] is the node's outbox in the same file: an [outbox.Store]
// keeping envelopes sealed for sending until they are acknowledged, the
// dead letters, and peers' circuit-breaker states (schema version 2). Its
// writes are committer requests like admissions and group-commit with
// them: [Outbox.Add] returns once its entry is on disk. [Outbox.Delivered]
// only queues its removal (one request for any number of ids) and returns;
// the removal commits with the next group, before anything queued after
// it, and Close commits it if it is still queued. A removal lost in a
// crash means one more delivery, which the receiver recognises as a
// duplicate. [Outbox.Entries] waits for queued writes first, so it sees
// every earlier call. Seqs come from the outbox table's own AUTOINCREMENT:
// never reused, unrelated to inbox Seqs.
//
// # Spaces
//
// [Store.Spaces] is the MEUP space engine's [space.Store] in the same file:
// the MEUP ids already seen per (space, sender key, id), the grants and
// the proposals (schema version 5). Its writes are committer requests
// too and return once on disk; its reads run beside the committer. It
// bounds nothing: the engine bounds what a space may hold. Capabilities
// and proposal payloads are JSON text, checked when written and again
// when read.
//
// # Search
//
// [Store.Search] finds items, unacknowledged or in history, by their
// text, which [Options.SearchText] derives from the stored item (at most
// [MaxSearchText] bytes indexed), newest first, paged by Seq. The index
// is an SQLite FTS5 table of lumps: a row holds the words of up to 64
// items in a row (no copy of their text), under the Seq of the first;
// search_lumps gives each lump's range and how many of its items are
// still stored, and a lump goes with its last item (triggers count the
// deletions). Search reads the items of the lumps whose words match,
// and of the items above the index's mark, and checks each item's text
// in an FTS5 table in memory with the same tokenizer: the same hits and
// snippets as an index of each item, for a fraction of its cost per
// admission.
// Admission does not index, which would put FTS5 work into every group
// commit: the committer indexes the items above a durable high-water
// mark (meta search_indexed) in pages of up to 512, each page and the
// mark in one transaction (a crash neither loses nor repeats a row), in
// the background between groups (yielding to queued requests), at Close,
// and before every Search, which catches the index up to the last
// admitted item first, so it never misses one whose Admit returned.
// The text is computed by the goroutine that admits the item and waits
// in memory (a few thousand texts at most) until its page is indexed, so
// the committer need not read items back; after a restart, a batch that
// deleted items, or past that bound, the items are read back instead.
// Items deleted before they were indexed are skipped. Queries come only
// from [ParseSearch]:
// words, "phrases" and prefix* words, turned into an FTS5 expression in
// which every word is quoted, so no user text is ever FTS5 syntax.
// [SearchTerms.Matches] applies the same terms to a text in memory.
//
// # What it is not
//
// store knows nothing about envelopes, signatures or peers: it keeps opaque
// payload bytes plus the few fields it indexes. Callers encode and decode.
// One process uses a database file at a time.
//
// # Concurrency
//
// A [Store] is safe for concurrent use. Reads ([Store.List], [Store.Len])
// run beside the committer (WAL readers do not block on the writer).
package store
