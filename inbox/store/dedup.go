package store

import (
	"bytes"
	"context"
	"database/sql"
	"fmt"
	"slices"
	"strconv"
	"time"
)

// The duplicate filter's rows are written in bulk.
//
// The dedup table is keyed by (sender, id), and envelope ids are random,
// so each admission that wrote its dedup row at once landed on its own
// page of that B-tree: one more page written to the WAL per admission
// (and again at the checkpoint), about half of what an admission cost.
// Instead, the keys admitted since the last merge are kept in memory
// (Store.pending), where admission looks them up first, and merged into
// the table in key order, many to a page:
//
//   - once mergeAt keys wait, in slices: those pending then are sorted,
//     and each batch after is followed by a transaction writing the
//     next mergeSlice of them, a range of keys, until all are written;
//     the mark moves with the last slice. One transaction for them all
//     would hold every admission queued behind it up for as long as it
//     takes (tens of milliseconds); a slice, about as long as an index
//     page. A key admitted again meanwhile (past its window) is left to
//     the next merge, with its newer entry;
//   - when the committer has had nothing to do for mergeIdle;
//   - before anything deletes items (Expire, the history cap), so the
//     recovery below always finds them;
//   - when the store closes.
//
// Nothing is lost at a crash: each pending key's item is in items, with
// a seq above the merge mark (meta's dedup_merged, written by every
// merge: every item at or below it has its dedup row). A writing Open
// merges the items above the mark (recoverDedup) before it admits
// anything, with the time of that Open as when they were first seen:
// never earlier than their admission, so a crash may lengthen their
// window (by the time the node was down), never shorten it.
const (
	mergeAt    = 8192
	mergeIdle  = 200 * time.Millisecond
	mergeSlice = 512
)

// mergeRows is how many keys one statement of a merge writes: with
// time-ordered ids most keys land at the end of the B-tree, and a
// statement per key cost about as much as the key's own B-tree work.
const mergeRows = 64

// sqlRememberRows writes n keys into the dedup table (a sender, an id,
// when it was first seen and its item's seq each), or, for a key it
// holds, their time and seq.
func sqlRememberRows(n int) string {
	return `INSERT INTO dedup (sender, id, first_seen, seq) VALUES ` + placeholders(n, 4) + `
		ON CONFLICT (sender, id) DO UPDATE SET first_seen = excluded.first_seen, seq = excluded.seq`
}

// sqlSetMergeMark writes the merge mark.
const sqlSetMergeMark = `UPDATE meta SET value = ? WHERE key = 'dedup_merged'`

// dedupKey is a (sender, id) pair: the sender's key, then the id.
type dedupKey [48]byte

func makeDedupKey(r *Record) (k dedupKey) {
	copy(k[:32], r.Sender[:])
	copy(k[32:], r.ID[:])
	return k
}

// dedupEntry is what a dedup row holds besides its key: when the key was
// admitted (Unix nanoseconds) and the seq of its item.
type dedupEntry struct {
	firstSeen, seq int64
}

// dedupAdd is a key a batch admitted, pending until that batch commits.
type dedupAdd struct {
	key dedupKey
	dedupEntry
}

// dedupBatch is runBatch's view of the filter: the keys the batch
// admitted, on top of the committed Store.pending, and whether (and up
// to which of them) it merged.
type dedupBatch struct {
	s      *Store
	adds   []dedupAdd
	index  map[dedupKey]int // into adds
	merged bool
	upTo   int   // adds[:upTo] were merged with the pending keys
	mark   int64 // the merge mark written, once merged
	sliced int   // mergeSlice wrote Store.merging[:sliced] (all: the mark too)
}

func (d *dedupBatch) reset(s *Store) {
	d.s = s
	d.adds = d.adds[:0]
	if d.index == nil {
		d.index = map[dedupKey]int{}
	}
	clear(d.index)
	d.merged, d.upTo, d.sliced = false, 0, 0
}

// lookup returns the entry a key admitted since the last merge has: in
// this batch, or committed before it.
func (d *dedupBatch) lookup(k dedupKey) (dedupEntry, bool) {
	if i, ok := d.index[k]; ok {
		return d.adds[i].dedupEntry, true
	}
	e, ok := d.s.pending[k]
	return e, ok
}

func (d *dedupBatch) add(k dedupKey, e dedupEntry) {
	if i, ok := d.index[k]; ok && i >= d.upTo {
		d.adds[i].dedupEntry = e
		return
	}
	d.index[k] = len(d.adds)
	d.adds = append(d.adds, dedupAdd{k, e})
}

// pendingDup reports whether k, admitted since the last merge, is a
// duplicate: admitted within the window (firstSeen at or after cutoff),
// or its item is still unacknowledged. A key not pending is not one
// here: the dedup table decides (older rows, never newer than these).
func (d *dedupBatch) pendingDup(ctx context.Context, tx *sql.Tx, k dedupKey, cutoff int64) (bool, error) {
	e, ok := d.lookup(k)
	if !ok {
		return false, nil
	}
	if e.firstSeen >= cutoff {
		return true, nil
	}
	var one int
	switch err := tx.QueryRowContext(ctx, `SELECT 1 FROM items WHERE seq = ? AND acked_at IS NULL`, e.seq).Scan(&one); err {
	case nil:
		return true, nil
	case sql.ErrNoRows:
		return false, nil
	default:
		return false, err
	}
}

// merge writes every pending key into the dedup table, in key order, and
// moves the merge mark to lastSeq (unless it is already past it: the
// newest items may have been deleted since): every item admitted so
// far, in this batch too, now has its row. It runs in the batch's
// transaction; commit keeps the mark once that commits.
func (d *dedupBatch) merge(ctx context.Context, tx *sql.Tx, lastSeq int64) error {
	if d.merged && d.upTo == len(d.adds) {
		return nil // nothing admitted since this batch's merge
	}
	var all []dedupAdd
	if !d.merged {
		all = make([]dedupAdd, 0, len(d.s.pending)+len(d.adds))
		for k, e := range d.s.pending {
			if _, ok := d.index[k]; !ok { // the batch's entry is newer
				all = append(all, dedupAdd{k, e})
			}
		}
		all = append(all, d.adds...)
	} else {
		all = slices.Clone(d.adds[d.upTo:])
	}
	if err := d.write(ctx, tx, all); err != nil {
		return err
	}
	d.mark = max(d.s.merged, lastSeq)
	if _, err := tx.ExecContext(ctx, sqlSetMergeMark, strconv.FormatInt(d.mark, 10)); err != nil {
		return err
	}
	d.merged, d.upTo = true, len(d.adds)
	return nil
}

// write writes keys into the dedup table, in key order (which it sorts
// them into), mergeRows to a statement.
func (d *dedupBatch) write(ctx context.Context, tx *sql.Tx, keys []dedupAdd) error {
	slices.SortFunc(keys, byKey)
	args := make([]any, 0, 4*min(len(keys), mergeRows))
	for len(keys) > 0 {
		// Pad to a power of two with the chunk's last key again (the
		// same row written twice), so that few statements are prepared.
		n := min(len(keys), mergeRows)
		size := padTo(n)
		args = args[:0]
		for j := range size {
			a := &keys[min(j, n-1)]
			args = append(args, a.key[:32], a.key[32:], a.firstSeen, a.seq)
		}
		if err := d.s.txExec(ctx, tx, sqlRememberRows(size), args...); err != nil {
			return err
		}
		keys = keys[n:]
	}
	return nil
}

// mergeSlice writes the next mergeSlice keys of the merge in slices
// (Store.merging), skipping any admitted again since it started (their
// entries changed, under a seq above the mark to be), and after the last
// one moves the merge mark to Store.mergingTo: every item at or below it
// now has its row, or its key was admitted again since and is still
// pending. It runs in a transaction of its own (commitLoop's
// opMergeSlice); commit then moves the merge along.
func (d *dedupBatch) mergeSlice(ctx context.Context, tx *sql.Tx) error {
	s := d.s
	n := min(len(s.merging), s.opts.mergeSlice)
	keys := make([]dedupAdd, 0, n)
	for _, a := range s.merging[:n] {
		if e, ok := s.pending[a.key]; ok && e == a.dedupEntry {
			keys = append(keys, a)
		}
	}
	if err := d.write(ctx, tx, keys); err != nil {
		return err
	}
	d.sliced = n
	if n == len(s.merging) { // the last slice
		d.mark = max(s.merged, s.mergingTo)
		if _, err := tx.ExecContext(ctx, sqlSetMergeMark, strconv.FormatInt(d.mark, 10)); err != nil {
			return err
		}
	}
	return nil
}

// commit makes the batch's view the store's, once its transaction
// committed: the keys it merged leave memory, the others stay pending.
func (d *dedupBatch) commit() {
	s := d.s
	if d.merged {
		s.merging = nil // every pending key is written: the slices' too
		s.merged = d.mark
		if len(s.pending) > 1024 {
			s.pending = map[dedupKey]dedupEntry{} // give a large map's memory back
		} else {
			clear(s.pending)
		}
		for _, a := range d.adds[d.upTo:] {
			s.pending[a.key] = a.dedupEntry
		}
		return
	}
	if d.sliced > 0 {
		if s.merging = s.merging[d.sliced:]; len(s.merging) == 0 { // the last slice
			s.merging = nil
			s.merged = d.mark
			// The keys pending when the merge started, but for those
			// admitted again since (with a seq above the mark).
			for k, e := range s.pending {
				if e.seq <= d.mark {
					delete(s.pending, k)
				}
			}
		}
	}
	for _, a := range d.adds {
		s.pending[a.key] = a.dedupEntry
	}
}

// recoverDedup writes the dedup rows of the items admitted after the last
// merge, which a process that stopped before merging them left only in
// items (see above), first seen now, and moves the mark past them. A
// writing Open runs it before the committer starts; it sets Store.merged.
func (s *Store) recoverDedup(ctx context.Context) error {
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("recover the duplicate filter: %w", err)
	}
	defer tx.Rollback()
	var mark int64
	if err := tx.QueryRowContext(ctx, `SELECT CAST(value AS INTEGER) FROM meta WHERE key = 'dedup_merged'`).Scan(&mark); err != nil {
		return fmt.Errorf("recover the duplicate filter: read the merge mark: %w", err)
	}
	var last int64
	if err := tx.QueryRowContext(ctx, `SELECT coalesce(max(seq), 0) FROM items`).Scan(&last); err != nil {
		return fmt.Errorf("recover the duplicate filter: %w", err)
	}
	s.merged = mark
	if last <= mark {
		return nil
	}
	// ORDER BY seq: a key admitted twice keeps its later item.
	if _, err := tx.ExecContext(ctx, `INSERT INTO dedup (sender, id, first_seen, seq)
		SELECT sender, id, ?2, seq FROM items WHERE seq > ?1 ORDER BY seq
		ON CONFLICT (sender, id) DO UPDATE SET first_seen = excluded.first_seen, seq = excluded.seq`, mark, s.opts.Now().UnixNano()); err != nil {
		return fmt.Errorf("recover the duplicate filter: %w", err)
	}
	if _, err := tx.ExecContext(ctx, sqlSetMergeMark, strconv.FormatInt(last, 10)); err != nil {
		return fmt.Errorf("recover the duplicate filter: %w", err)
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("recover the duplicate filter: %w", err)
	}
	s.merged = last
	return nil
}

// byKey orders keys as the dedup table's B-tree does.
func byKey(a, b dedupAdd) int { return bytes.Compare(a.key[:], b.key[:]) }

// mergeSlice starts a merge in slices, of every key pending, unless one
// is under way, and writes its next slice in a transaction of its own.
// Only commitLoop calls it. A slice that fails is written again after
// the next batch; a crash before the last leaves the mark where it was,
// and Open writes the keys again.
func (s *Store) mergeSlice() {
	if len(s.merging) == 0 {
		s.merging = make([]dedupAdd, 0, len(s.pending))
		for k, e := range s.pending {
			s.merging = append(s.merging, dedupAdd{k, e})
		}
		slices.SortFunc(s.merging, byKey)
		s.mergingTo = s.lastSeq.Load()
	}
	s.commit([]*request{{op: opMergeSlice, done: make(chan result, 1)}})
}

// mergePending merges the pending keys in a transaction of their own.
// Only commitLoop calls it. A failure leaves them pending (the next
// merge, or Open, writes them).
func (s *Store) mergePending() {
	if len(s.pending) == 0 {
		return
	}
	s.commit([]*request{{op: opMerge, done: make(chan result, 1)}})
}
