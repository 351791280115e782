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
// the table in key order, many to a page, in one transaction:
//
//   - once mergeAt keys wait, after the batch that made them so;
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
	mergeAt   = 8192
	mergeIdle = 200 * time.Millisecond
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
}

func (d *dedupBatch) reset(s *Store) {
	d.s = s
	d.adds = d.adds[:0]
	if d.index == nil {
		d.index = map[dedupKey]int{}
	}
	clear(d.index)
	d.merged, d.upTo = false, 0
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
	slices.SortFunc(all, func(a, b dedupAdd) int { return bytes.Compare(a.key[:], b.key[:]) })
	args := make([]any, 0, 4*min(len(all), mergeRows))
	for len(all) > 0 {
		// Pad to a power of two with the chunk's last key again (the
		// same row written twice), so that few statements are prepared.
		n := min(len(all), mergeRows)
		size := padTo(n)
		args = args[:0]
		for j := range size {
			a := &all[min(j, n-1)]
			args = append(args, a.key[:32], a.key[32:], a.firstSeen, a.seq)
		}
		st, err := d.s.prepared(ctx, sqlRememberRows(size))
		if err != nil {
			return err
		}
		if _, err := tx.StmtContext(ctx, st).ExecContext(ctx, args...); err != nil {
			return err
		}
		all = all[n:]
	}
	d.mark = max(d.s.merged, lastSeq)
	if _, err := tx.ExecContext(ctx, sqlSetMergeMark, strconv.FormatInt(d.mark, 10)); err != nil {
		return err
	}
	d.merged, d.upTo = true, len(d.adds)
	return nil
}

// commit makes the batch's view the store's, once its transaction
// committed: the keys it merged leave memory, the others stay pending.
func (d *dedupBatch) commit() {
	s := d.s
	if d.merged {
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

// mergePending merges the pending keys in a transaction of their own.
// Only commitLoop calls it. A failure leaves them pending (the next
// merge, or Open, writes them).
func (s *Store) mergePending() {
	if len(s.pending) == 0 {
		return
	}
	s.commit([]*request{{op: opMerge, done: make(chan result, 1)}})
}
