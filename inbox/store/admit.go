package store

import (
	"context"
	"database/sql"
	"fmt"
	"math/bits"
	"strings"
)

// Admissions are written many rows to a statement: a statement of its
// own per admission would cost more than the row it writes (database/sql,
// the driver and SQLite's VDBE set-up, each time). runBatch decides a run
// of consecutive admissions in order (room, the peer's share, the
// duplicate filter) and writes the rows it admits with one INSERT per
// insertRows of them, before any other request of the batch runs.
//
// The dedup table's verdict for the run's keys is read first, with one
// query per lookupRows keys: it cannot change during the run (only a
// merge or Expire writes it, and neither runs inside one), and the keys
// admitted during the run are in memory (dedupBatch), where admission
// looks first, as it always did.
const (
	insertRows = 32
	lookupRows = 64
)

// admitRun is runBatch's state for a run of admissions.
type admitRun struct {
	s     *Store
	known map[dedupKey]struct{} // the run's keys the dedup table counts as duplicates
	rows  []runRow              // decided, not yet written
	args  []any
}

// runRow is an admission decided and accounted for, waiting for its row.
type runRow struct {
	i       int // its request in the batch
	key     dedupKey
	add     int // its entry in dedupBatch.adds, whose seq the insert sets
	rec     *Record
	payload []byte
	class   string
}

// reset readies a for a batch: no row queued (a failed batch may have
// left some).
func (a *admitRun) reset(s *Store) {
	a.s = s
	clear(a.rows)
	a.rows = a.rows[:0]
}

// lookup reads the dedup table's verdict for the keys of reqs (a run of
// admissions): known holds those that are duplicates, remembered within
// the window or with their item still unacknowledged.
func (a *admitRun) lookup(ctx context.Context, tx *sql.Tx, reqs []*request, cutoff int64) error {
	if a.known == nil {
		a.known = map[dedupKey]struct{}{}
	}
	clear(a.known)
	for len(reqs) > 0 {
		// Pad to a power of two with the chunk's last key again, so
		// that few statements are prepared.
		n := min(len(reqs), lookupRows)
		size := padTo(n)
		a.args = a.args[:0]
		for j := range size {
			r := &reqs[min(j, n-1)].rec
			a.args = append(a.args, r.Sender[:], r.ID[:])
		}
		a.args = append(a.args, cutoff)
		st, err := a.s.txStmt(ctx, tx, sqlLookupRows(size))
		if err != nil {
			return err
		}
		rows, err := st.QueryContext(ctx, a.args...)
		if err != nil {
			return err
		}
		for rows.Next() {
			var sender, id sql.RawBytes
			if err := rows.Scan(&sender, &id); err != nil {
				rows.Close()
				return err
			}
			var k dedupKey
			if len(sender) != 32 || len(id) != 16 {
				rows.Close()
				return fmt.Errorf("dedup row with a %d-byte sender and a %d-byte id", len(sender), len(id))
			}
			copy(k[:32], sender)
			copy(k[32:], id)
			a.known[k] = struct{}{}
		}
		if err := rows.Close(); err != nil {
			return err
		}
		reqs = reqs[n:]
	}
	clear(a.args)
	return nil
}

// dup reports whether the dedup table counts k, a key of the run, as a
// duplicate.
func (a *admitRun) dup(k dedupKey) bool {
	_, ok := a.known[k]
	return ok
}

// add queues the row of an admission decided.
func (a *admitRun) add(row runRow) { a.rows = append(a.rows, row) }

// flush writes the rows queued, insertRows to a statement, each under
// the seq after *lastSeq (the highest used so far), and gives each its
// seq: in res, in the duplicate filter's entry, and in *lastSeq. The
// store numbers the rows itself (the committer is the database's one
// writer) rather than read back the seqs SQLite would pick: that cost as
// much as the insert.
func (a *admitRun) flush(ctx context.Context, tx *sql.Tx, d *dedupBatch, res []result, lastSeq *int64) error {
	defer func() {
		clear(a.rows) // the records and payloads
		a.rows = a.rows[:0]
		clear(a.args)
	}()
	for start := 0; start < len(a.rows); start += insertRows {
		rows := a.rows[start:min(len(a.rows), start+insertRows)]
		first := *lastSeq + 1
		a.args = a.args[:0]
		for j, r := range rows {
			a.args = append(a.args, first+int64(j), r.rec.Sender[:], r.rec.ID[:], r.rec.Kind, r.rec.Peer, r.rec.Received.UnixNano(), r.payload, r.class)
		}
		if err := a.s.txExec(ctx, tx, sqlInsertRows(len(rows)), a.args...); err != nil {
			return err
		}
		for j, r := range rows {
			res[r.i].seq = uint64(first) + uint64(j)
			d.adds[r.add].seq = first + int64(j)
		}
		*lastSeq = first + int64(len(rows)) - 1
	}
	return nil
}

// sqlLookupRows looks n keys up in the dedup table (a sender and an id
// each, then the window's cutoff) and returns those that are duplicates:
// remembered within the window, or with their item still unacknowledged.
func sqlLookupRows(n int) string {
	return `SELECT d.sender, d.id FROM (VALUES ` + placeholders(n, 2) + `) v
		JOIN dedup d ON d.sender = v.column1 AND d.id = v.column2
		WHERE d.first_seen >= ?` + fmt.Sprint(2*n+1) + ` OR EXISTS (SELECT 1 FROM items i
			WHERE i.seq = d.seq AND i.acked_at IS NULL)`
}

// sqlInsertRows inserts n items, each under the seq given first.
func sqlInsertRows(n int) string {
	return `INSERT INTO items (seq, sender, id, kind, peer, received, payload, class) VALUES ` + placeholders(n, 8)
}

// padTo is the power of two a statement of n rows is padded to (its
// last row written again), so that few statements are prepared: at most
// one per power of two.
func padTo(n int) int { return 1 << bits.Len(uint(n-1)) }

// placeholders is n rows of k "?" each: "(?, ?), (?, ?)".
func placeholders(n, k int) string {
	row := "(" + strings.Repeat("?, ", k-1) + "?)"
	return strings.Repeat(row+", ", n-1) + row
}
