package store

import (
	"bytes"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/meerkatd/meerkatd/comms/outbox"
	"github.com/meerkatd/meerkatd/comms/outbox/storetest"
	"github.com/meerkatd/meerkatd/identity"
	"github.com/meerkatd/meerkatd/internal/testutil"
)

func TestOutboxConformance(t *testing.T) {
	storetest.Run(t, func(t *testing.T) outbox.Store {
		testutil.CheckGoroutines(t)
		s, _ := openStore(t, Options{})
		return s.Outbox()
	})
}

func obID(n uint64) identity.UUID {
	var u identity.UUID
	u[0] = 0x0b
	u[15] = byte(n)
	u[14] = byte(n >> 8)
	return u
}

func obEntry(n uint64) outbox.Entry {
	at := time.Date(2026, 1, 2, 3, 4, 5, int(n), time.UTC)
	var to identity.PeerID
	to[0] = byte(n)
	return outbox.Entry{
		ID: obID(n), To: to, Peer: "bob", Kind: "request", CorrID: obID(n + 1000),
		Payload: []byte(fmt.Sprint("payload ", n)), Created: at, Expires: at.Add(time.Hour),
		Attempts: 1, NextAttempt: at.Add(time.Second), LastError: "refused",
	}
}

func mustOBAdd(t *testing.T, o *Outbox, e outbox.Entry) outbox.Entry {
	t.Helper()
	got, err := o.Add(e)
	if err != nil {
		t.Fatalf("Add(%s): %v", e.ID, err)
	}
	return got
}

func mustOBEntries(t *testing.T, o *Outbox) []outbox.Entry {
	t.Helper()
	es, err := o.Entries()
	if err != nil {
		t.Fatalf("Entries: %v", err)
	}
	return es
}

func seqsOfEntries(es []outbox.Entry) []uint64 {
	var out []uint64
	for _, e := range es {
		out = append(out, e.Seq)
	}
	return out
}

// sameEntry compares every field, times with Equal.
func sameEntry(a, b outbox.Entry) bool {
	return a.Seq == b.Seq && a.ID == b.ID && a.To == b.To && a.Peer == b.Peer && a.Kind == b.Kind &&
		a.CorrID == b.CorrID && bytes.Equal(a.Payload, b.Payload) && a.Created.Equal(b.Created) &&
		a.Expires.Equal(b.Expires) && a.Attempts == b.Attempts && a.NextAttempt.Equal(b.NextAttempt) &&
		a.LastError == b.LastError
}

// Entries, dead letters and breakers survive Close and reopen, and Seqs
// continue above every Seq assigned before, even a delivered newest one.
func TestOutboxReopen(t *testing.T) {
	testutil.CheckGoroutines(t)
	s, path := openStore(t, Options{})
	o := s.Outbox()
	var es []outbox.Entry
	for n := range uint64(5) {
		es = append(es, mustOBAdd(t, o, obEntry(n)))
	}
	next := time.Date(2026, 2, 3, 4, 5, 6, 7, time.UTC)
	if err := o.Attempted(es[0].ID, 3, next, "timeout"); err != nil {
		t.Fatal(err)
	}
	died := time.Date(2026, 2, 3, 4, 5, 6, 8, time.UTC)
	if err := o.Kill(es[1].ID, outbox.ReasonExpired, died); err != nil {
		t.Fatal(err)
	}
	if err := o.Delivered(es[4].ID); err != nil { // the newest Seq
		t.Fatal(err)
	}
	var peer identity.PeerID
	peer[5] = 5
	open := time.Date(2026, 2, 3, 4, 5, 6, 9, time.UTC)
	if err := o.SaveBreaker(outbox.Breaker{Peer: peer, Failures: 2, OpenUntil: open}); err != nil {
		t.Fatal(err)
	}
	wantEntries := mustOBEntries(t, o)
	wantDead, err := o.DeadLetters()
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}

	o = reopen(t, path, Options{}).Outbox()
	got := mustOBEntries(t, o)
	if fmt.Sprint(seqsOfEntries(got)) != "[1 3 4]" || len(got) != len(wantEntries) {
		t.Fatalf("Entries after reopen: %v", seqsOfEntries(got))
	}
	for i := range got {
		if !sameEntry(got[i], wantEntries[i]) {
			t.Errorf("entry %d after reopen = %+v, want %+v", i, got[i], wantEntries[i])
		}
	}
	if got[0].Attempts != 3 || !got[0].NextAttempt.Equal(next) || got[0].LastError != "timeout" {
		t.Errorf("attempt lost: %+v", got[0])
	}
	dead, err := o.DeadLetters()
	if err != nil {
		t.Fatal(err)
	}
	if len(dead) != 1 || !sameEntry(dead[0].Entry, wantDead[0].Entry) || dead[0].Seq != 2 ||
		dead[0].Reason != outbox.ReasonExpired || !dead[0].DiedAt.Equal(died) {
		t.Fatalf("dead letters after reopen: %+v", dead)
	}
	bs, err := o.Breakers()
	if err != nil {
		t.Fatal(err)
	}
	if len(bs) != 1 || bs[0].Peer != peer || bs[0].Failures != 2 || !bs[0].OpenUntil.Equal(open) {
		t.Fatalf("breakers after reopen: %+v", bs)
	}
	if e := mustOBAdd(t, o, obEntry(9)); e.Seq != 6 {
		t.Fatalf("Seq after reopen = %d, want 6 (5 was used)", e.Seq)
	}
	revived, err := o.Revive()
	if err != nil || len(revived) != 1 || revived[0].Seq != 7 {
		t.Fatalf("Revive after reopen = %+v, %v; want Seq 7", revived, err)
	}
}

// Times stored five years ahead (the clock was wrong) survive Close and
// reopen as they are, and an outbox loading them from the reopened file
// bounds them: the entry is attempted within the policy's longest wait,
// not in five years.
func TestOutboxFarAheadAfterReopen(t *testing.T) {
	testutil.CheckGoroutines(t)
	s, path := openStore(t, Options{})
	storetest.FarAhead(t, s.Outbox(), func() outbox.Store {
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
		return reopen(t, path, Options{}).Outbox()
	})
}

// makeV1 writes a version-1 database at path, as a build before the
// outbox left it, with one unacknowledged inbox item.
func makeV1(t *testing.T, path string) Record {
	t.Helper()
	db, err := sql.Open("sqlite", path)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	r := rec(7, 7)
	r.Received = time.Date(2025, 1, 1, 0, 0, 0, 1, time.UTC)
	for _, q := range []string{
		migrations[0],
		`CREATE TABLE schema_version (version INTEGER NOT NULL)`,
		`INSERT INTO schema_version (version) VALUES (1)`,
	} {
		if _, err := db.Exec(q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	if _, err := db.Exec(`INSERT INTO items (sender, id, kind, peer, received, payload) VALUES (?, ?, ?, ?, ?, ?)`,
		r.Sender[:], r.ID[:], r.Kind, r.Peer, r.Received.UnixNano(), r.Payload); err != nil {
		t.Fatal(err)
	}
	if _, err := db.Exec(`INSERT INTO dedup (sender, id, first_seen) VALUES (?, ?, ?)`,
		r.Sender[:], r.ID[:], time.Now().UnixNano()); err != nil {
		t.Fatal(err)
	}
	return r
}

func TestOutboxUpgradeFromV1(t *testing.T) {
	testutil.CheckGoroutines(t)
	path := filepath.Join(t.TempDir(), "meerkat.db")
	r := makeV1(t, path)
	s := reopen(t, path, Options{})
	var v int
	if err := s.db.QueryRow(`SELECT version FROM schema_version`).Scan(&v); err != nil || v != schemaVersion || v < 2 {
		t.Fatalf("schema_version after upgrade = %d, %v; want %d", v, err, schemaVersion)
	}
	rs := mustList(t, s, 0, 0)
	if len(rs) != 1 || rs[0].Seq != 1 || rs[0].ID != r.ID || !bytes.Equal(rs[0].Payload, r.Payload) || !rs[0].Received.Equal(r.Received) {
		t.Fatalf("inbox after upgrade: %+v", rs)
	}
	mustDup(t, s, r)
	o := s.Outbox()
	e := mustOBAdd(t, o, obEntry(1))
	if e.Seq != 1 { // the outbox has its own sequence
		t.Fatalf("first outbox Seq = %d", e.Seq)
	}
	if n := len(mustOBEntries(t, o)); n != 1 {
		t.Fatalf("%d entries", n)
	}
	mustAdmit(t, s, rec(7, 8))
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	// Opening the upgraded file again migrates nothing.
	s = reopen(t, path, Options{})
	if got := fmt.Sprint(seqsOf(mustList(t, s, 0, 0))); got != "[1 2]" {
		t.Fatalf("inbox after second open: %s", got)
	}
	if n := len(mustOBEntries(t, s.Outbox())); n != 1 {
		t.Fatalf("%d entries after second open", n)
	}
}

// A Delivered still queued (not committed) when Close starts is committed
// by Close.
func TestOutboxDeliveredBeforeClose(t *testing.T) {
	testutil.CheckGoroutines(t)
	s, path := openStore(t, Options{})
	o := s.Outbox()
	a := mustOBAdd(t, o, obEntry(1))
	b := mustOBAdd(t, o, obEntry(2))
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	// With an hour's flush interval nothing commits before Close.
	s = reopen(t, path, Options{FlushInterval: time.Hour})
	before := s.txns.Load()
	if err := s.Outbox().Delivered(a.ID); err != nil {
		t.Fatal(err)
	}
	if s.txns.Load() != before {
		t.Fatal("Delivered waited for a commit")
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	es := mustOBEntries(t, reopen(t, path, Options{}).Outbox())
	if len(es) != 1 || es[0].ID != b.ID {
		t.Fatalf("after reopen: %v", seqsOfEntries(es))
	}
}

// Delivered of thousands of ids is one request; Entries sees it at once.
func TestOutboxDeliveredBatch(t *testing.T) {
	testutil.CheckGoroutines(t)
	const n = 3000
	s, _ := openStore(t, Options{})
	o := s.Outbox()
	var wg sync.WaitGroup
	errs := make(chan error, n)
	ids := make([]identity.UUID, n)
	for i := range n {
		ids[i] = obID(uint64(i))
		wg.Go(func() {
			if _, err := o.Add(obEntry(uint64(i))); err != nil {
				errs <- err
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	txns := s.txns.Load()
	t.Logf("%d outbox adds in %d transactions", n, txns)
	if txns > n/10 {
		t.Fatalf("%d transactions for %d adds: not grouped", txns, n)
	}
	before := s.txns.Load()
	if err := o.Delivered(ids[:n-1]...); err != nil {
		t.Fatal(err)
	}
	es := mustOBEntries(t, o)
	if len(es) != 1 || es[0].ID != ids[n-1] {
		t.Fatalf("after Delivered: %d entries", len(es))
	}
	if d := s.txns.Load() - before; d > 2 {
		t.Fatalf("Delivered + Entries took %d transactions", d)
	}
}

// Outbox and inbox writes share the committer and its transactions.
func TestOutboxSharesCommits(t *testing.T) {
	testutil.CheckGoroutines(t)
	s, _ := openStore(t, Options{FlushInterval: 50 * time.Millisecond, MaxBatch: 1000})
	var wg sync.WaitGroup
	for i := range 20 {
		wg.Go(func() {
			if _, err := s.Outbox().Add(obEntry(uint64(i))); err != nil {
				t.Error(err)
			}
		})
		wg.Go(func() {
			if dup, err := s.Admit(context.Background(), rec(1, uint64(i))); err != nil || dup {
				t.Errorf("Admit: dup=%v err=%v", dup, err)
			}
		})
	}
	wg.Wait()
	if n := s.txns.Load(); n > 5 {
		t.Fatalf("40 writes took %d transactions", n)
	}
	if n := mustLen(t, s); n != 20 {
		t.Fatalf("inbox Len = %d", n)
	}
}

func TestOutboxAfterClose(t *testing.T) {
	testutil.CheckGoroutines(t)
	s, _ := openStore(t, Options{})
	o := s.Outbox()
	e := mustOBAdd(t, o, obEntry(1))
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	var id identity.UUID
	check := func(name string, err error) {
		t.Helper()
		if !errors.Is(err, ErrClosed) {
			t.Errorf("%s after Close: %v", name, err)
		}
	}
	_, err := o.Add(obEntry(2))
	check("Add", err)
	_, err = o.Entries()
	check("Entries", err)
	check("Delivered", o.Delivered(e.ID))
	check("Delivered()", o.Delivered())
	check("Attempted", o.Attempted(e.ID, 1, time.Time{}, ""))
	check("Kill", o.Kill(e.ID, "x", time.Time{}))
	_, err = o.DeadLetters()
	check("DeadLetters", err)
	_, err = o.Revive()
	check("Revive", err)
	_, err = o.Revive(id)
	check("Revive(id)", err)
	_, err = o.Drop(id)
	check("Drop", err)
	_, err = o.Drop()
	check("Drop()", err)
	_, err = o.Breakers()
	check("Breakers", err)
	check("SaveBreaker", o.SaveBreaker(outbox.Breaker{Failures: 1}))
}

// Adding an id again after it was killed, then killing it again, replaces
// the dead letter; reviving a dead letter whose id is queued again only
// removes it.
func TestOutboxDeadLetterSameID(t *testing.T) {
	testutil.CheckGoroutines(t)
	s, _ := openStore(t, Options{})
	o := s.Outbox()
	at := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	a := mustOBAdd(t, o, obEntry(1))
	other := mustOBAdd(t, o, obEntry(2))
	if err := o.Kill(a.ID, "first", at); err != nil {
		t.Fatal(err)
	}
	if err := o.Kill(other.ID, "other", at); err != nil {
		t.Fatal(err)
	}
	a2 := mustOBAdd(t, o, obEntry(1))
	if err := o.Kill(a2.ID, "second", at); err != nil {
		t.Fatal(err)
	}
	dead, err := o.DeadLetters()
	if err != nil {
		t.Fatal(err)
	}
	if len(dead) != 2 || dead[0].ID != other.ID || dead[1].Reason != "second" || dead[1].Seq != a2.Seq {
		t.Fatalf("dead letters: %+v", dead)
	}
	a3 := mustOBAdd(t, o, obEntry(1))
	revived, err := o.Revive()
	if err != nil {
		t.Fatal(err)
	}
	if len(revived) != 1 || revived[0].ID != other.ID {
		t.Fatalf("revived %+v, want only %s", revived, other.ID)
	}
	if dead, _ := o.DeadLetters(); len(dead) != 0 {
		t.Fatalf("dead letters left: %+v", dead)
	}
	es := mustOBEntries(t, o)
	if len(es) != 2 || es[0].Seq != a3.Seq || es[1].ID != other.ID {
		t.Fatalf("entries: %+v", es)
	}
}

func TestOutboxTimeRange(t *testing.T) {
	testutil.CheckGoroutines(t)
	s, _ := openStore(t, Options{})
	o := s.Outbox()
	far := time.Date(3000, 1, 1, 0, 0, 0, 0, time.UTC)
	e := obEntry(1)
	e.Expires = far
	if _, err := o.Add(e); err == nil || !strings.Contains(err.Error(), "out of range") {
		t.Fatalf("Add with a year-3000 expiry: %v", err)
	}
	e = mustOBAdd(t, o, obEntry(1))
	if err := o.Attempted(e.ID, 1, far, ""); err == nil {
		t.Fatal("Attempted with a year-3000 retry time succeeded")
	}
	if err := o.Kill(e.ID, "x", time.Date(1500, 1, 1, 0, 0, 0, 0, time.UTC)); err == nil {
		t.Fatal("Kill at year 1500 succeeded")
	}
	if err := o.SaveBreaker(outbox.Breaker{Failures: 1, OpenUntil: far}); err == nil {
		t.Fatal("SaveBreaker until year 3000 succeeded")
	}
	// The Unix epoch itself is a time, not "none".
	e2 := obEntry(2)
	e2.Created = time.Unix(0, 0)
	mustOBAdd(t, o, e2)
	es := mustOBEntries(t, o)
	if es[1].Created.IsZero() || !es[1].Created.Equal(time.Unix(0, 0)) {
		t.Fatalf("epoch Created read back as %v", es[1].Created)
	}
}

// Rows a person or another program wrote with wrong blob lengths fail the
// read with an error, never a panic. CHECK constraints stop such writes
// through SQL, so the test turns them off on its own connection.
func TestOutboxMalformedRows(t *testing.T) {
	testutil.CheckGoroutines(t)
	cases := []struct {
		name, insert, want string
		read               func(*Outbox) error
	}{
		{
			"entry id",
			`INSERT INTO outbox (id, recipient, peer, kind, corr_id, payload) VALUES (x'01', zeroblob(32), 'p', 'k', zeroblob(16), x'')`,
			"malformed id",
			func(o *Outbox) error { _, err := o.Entries(); return err },
		},
		{
			"entry recipient",
			`INSERT INTO outbox (id, recipient, peer, kind, corr_id, payload) VALUES (zeroblob(16), zeroblob(31), 'p', 'k', zeroblob(16), x'')`,
			"malformed recipient",
			func(o *Outbox) error { _, err := o.Entries(); return err },
		},
		{
			"entry corr_id",
			`INSERT INTO outbox (id, recipient, peer, kind, corr_id, payload) VALUES (zeroblob(16), zeroblob(32), 'p', 'k', zeroblob(17), x'')`,
			"malformed corr_id",
			func(o *Outbox) error { _, err := o.Entries(); return err },
		},
		{
			"entry attempts",
			`INSERT INTO outbox (id, recipient, peer, kind, corr_id, payload, attempts) VALUES (zeroblob(16), zeroblob(32), 'p', 'k', zeroblob(16), x'', 'many')`,
			"read entries",
			func(o *Outbox) error { _, err := o.Entries(); return err },
		},
		{
			"entry negative attempts",
			`INSERT INTO outbox (id, recipient, peer, kind, corr_id, payload, attempts) VALUES (zeroblob(16), zeroblob(32), 'p', 'k', zeroblob(16), x'', -5)`,
			"negative attempt count",
			func(o *Outbox) error { _, err := o.Entries(); return err },
		},
		{
			"dead letter seq",
			`INSERT INTO dead_letters (seq, id, recipient, peer, kind, corr_id, payload, reason) VALUES (-1, zeroblob(16), zeroblob(32), 'p', 'k', zeroblob(16), x'', 'r')`,
			"invalid seq",
			func(o *Outbox) error { _, err := o.DeadLetters(); return err },
		},
		{
			"dead letter revive",
			`INSERT INTO dead_letters (seq, id, recipient, peer, kind, corr_id, payload, reason) VALUES (1, zeroblob(15), zeroblob(32), 'p', 'k', zeroblob(16), x'', 'r')`,
			"malformed id",
			func(o *Outbox) error { _, err := o.Revive(); return err },
		},
		{
			"breaker peer",
			`INSERT INTO breakers (peer, failures) VALUES (x'0102', 1)`,
			"malformed peer",
			func(o *Outbox) error { _, err := o.Breakers(); return err },
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			o := withRawRow(t, tc.insert).Outbox()
			err := tc.read(o)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("read = %v, want an error mentioning %q", err, tc.want)
			}
			t.Log(err)
			// The store still works.
			if _, err := o.Add(obEntry(50)); err != nil {
				t.Fatalf("Add after the failed read: %v", err)
			}
		})
	}
}
