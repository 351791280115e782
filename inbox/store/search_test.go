package store

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
	"unsafe"

	"github.com/meerkatd/meerkatd/internal/testutil"
)

func TestParseSearch(t *testing.T) {
	for _, c := range []struct {
		in, match, str string
		err            error
	}{
		{in: "hello", match: `"hello"`, str: "hello"},
		{in: "Hello World", match: `"hello" "world"`, str: "hello world"},
		{in: `"the quick fox"`, match: `"the quick fox"`, str: `"the quick fox"`},
		{in: `deploy*`, match: `"deploy"*`, str: "deploy*"},
		{in: `"ship it"*`, match: `"ship it"*`, str: `"ship it"*`},
		{in: `foo-bar`, match: `"foo bar"`, str: `"foo bar"`},
		{in: `  spaced   out  `, match: `"spaced" "out"`, str: "spaced out"},
		{in: `"unterminated phrase`, match: `"unterminated phrase"`, str: `"unterminated phrase"`},
		{in: `a"b c"d`, match: `"a" "b c" "d"`, str: `a "b c" d`},
		// Looks like FTS5 syntax, but is only words.
		{in: `NOT secret OR x`, match: `"not" "secret" "or" "x"`, str: "not secret or x"},
		{in: `col:value`, match: `"col value"`, str: `"col value"`},
		{in: `NEAR(a b)`, match: `"near a" "b"`, str: `"near a" b`},
		{in: `^start`, match: `"start"`, str: "start"},
		{in: `x ""`, match: `"x"`, str: "x"},
		{in: `"a""b"`, match: `"a" "b"`, str: "a b"},
		{in: `Ünïcödé 漢字`, match: `"ünïcödé" "漢字"`, str: "ünïcödé 漢字"},
		{in: "hello \u0301", match: `"hello"`, str: "hello"}, // a combining mark alone is no word
		{in: "e\u0301t\u00e9", match: "\"e\u0301t\u00e9\"", str: "e\u0301t\u00e9"},
		{in: `fo*o`, match: `"fo o"`, str: `"fo o"`},
		{in: `**`, err: ErrEmptyQuery},
		{in: ``, err: ErrEmptyQuery},
		{in: `"" - ; :`, err: ErrEmptyQuery},
		{in: "\xff", err: ErrBadQuery},
		{in: strings.Repeat("a ", 17), match: `"a"`, str: "a"}, // a repeat is dropped
		{in: `w* w* "x y" "X Y" w`, match: `"w"* "x y" "w"`, str: `w* "x y" w`},
		{in: `a* b* c* d*`, match: `"a"* "b"* "c"* "d"*`, str: "a* b* c* d*"},
		{in: `a* b* c* d* e*`, err: ErrBadQuery},
		{in: "a b c d e f g h i j k l m n o p q", err: ErrBadQuery},
		{in: strings.Repeat("a", MaxQueryBytes+1), err: ErrBadQuery},
	} {
		st, err := ParseSearch(c.in)
		if c.err != nil {
			if !errors.Is(err, c.err) || !errors.Is(err, ErrBadQuery) {
				t.Errorf("ParseSearch(%q) = %v, want %v", c.in, err, c.err)
			}
			continue
		}
		if err != nil {
			t.Errorf("ParseSearch(%q): %v", c.in, err)
			continue
		}
		if got := st.Match(); got != c.match {
			t.Errorf("ParseSearch(%q).Match() = %s, want %s", c.in, got, c.match)
		}
		if got := st.String(); got != c.str {
			t.Errorf("ParseSearch(%q).String() = %s, want %s", c.in, got, c.str)
		}
	}
}

func TestSearchTermsMatches(t *testing.T) {
	text := "alice: Please REVIEW pull-request 42, the deploy script is ready"
	for _, c := range []struct {
		q    string
		want bool
	}{
		{"review", true},
		{"Review PLEASE", true},
		{"review missing", false},
		{`"pull request 42"`, true},
		{`"request pull"`, false},
		{"deplo*", true},
		{"deplo", false},
		{`"the dep"*`, true},
		{`"the dep"`, false},
		{"42", true},
		{"4", false},
		{"4*", true},
	} {
		st, err := ParseSearch(c.q)
		if err != nil {
			t.Fatal(err)
		}
		if got := st.Matches(text); got != c.want {
			t.Errorf("%q matches = %v, want %v", c.q, got, c.want)
		}
		snip := st.Snippet(text)
		if (snip != "") != c.want {
			t.Errorf("%q snippet %q, want one: %v", c.q, snip, c.want)
		}
	}
	if (SearchTerms{}).Matches(text) {
		t.Error("the zero SearchTerms matches")
	}
	st, _ := ParseSearch("deploy")
	long := strings.Repeat("filler ", 40) + "the Deploy went fine " + strings.Repeat("more ", 40)
	snip := st.Snippet(long)
	if !strings.Contains(snip, "«Deploy»") || !strings.HasPrefix(snip, SnippetCut) || !strings.HasSuffix(snip, SnippetCut) || len(snip) > 200 {
		t.Errorf("snippet %q", snip)
	}
}

// ftsDB is an in-memory FTS5 table like items_fts of the first search
// index (a row per item), with a few rows.
func ftsDB(tb testing.TB) *sql.DB {
	return memFTS(tb, searchMigration(tb), "hello world", "Ünïcödé 漢字 text", "the quick brown fox", `quote " and star * and col:on`)
}

// lumpDB is an in-memory table like items_fts of the index by lumps,
// with a few rows.
func lumpDB(tb testing.TB) *sql.DB {
	i := slices.IndexFunc(migrations, func(m string) bool { return strings.Contains(m, "CREATE TABLE search_lumps") })
	if i < 0 {
		tb.Fatal("no migration creates search_lumps")
	}
	return memFTS(tb, i, "hello world", "Ünïcödé 漢字 text")
}

// memFTS is an in-memory database with the FTS5 table that migration i
// creates, holding texts under rowids 1, 2, ….
func memFTS(tb testing.TB, i int, texts ...string) *sql.DB {
	tb.Helper()
	db, err := sql.Open("sqlite", ":memory:")
	if err != nil {
		tb.Fatal(err)
	}
	db.SetMaxOpenConns(1)
	tb.Cleanup(func() { db.Close() })
	var create string
	for _, stmt := range strings.Split(migrations[i], ";") {
		if strings.Contains(stmt, "CREATE VIRTUAL TABLE") {
			create = stmt
		}
	}
	if _, err := db.Exec(create); err != nil {
		tb.Fatal(err)
	}
	for i, text := range texts {
		if _, err := db.Exec(`INSERT INTO items_fts (rowid, text) VALUES (?, ?)`, i+1, text); err != nil {
			tb.Fatal(err)
		}
	}
	return db
}

// searchMigration is the index in migrations of the one that adds the
// search index.
func searchMigration(tb testing.TB) int {
	i := slices.IndexFunc(migrations, func(m string) bool { return strings.Contains(m, "CREATE VIRTUAL TABLE items_fts") })
	if i < 0 {
		tb.Fatal("no migration creates items_fts")
	}
	return i
}

// Every query ParseSearch accepts is a valid FTS5 expression (the real
// FTS5 table runs it), and it never panics; the memory match agrees with
// FTS5 on plain lower-case ASCII text.
func FuzzParseSearch(f *testing.F) {
	for _, s := range []string{"hello", `"quick fox"*`, `NOT a OR b`, `col:x`, `NEAR(a b, 3)`, `"`, `*`, `a"b`, "\x00", `{a b}`, `-x`, `^a`, `+`, `"a""b"`, "ü*"} {
		f.Add(s)
	}
	db, lumps := ftsDB(f), lumpDB(f)
	var mu sync.Mutex // one connection each: keep the fuzz workers' queries apart
	f.Fuzz(func(t *testing.T, q string) {
		st, err := ParseSearch(q)
		if err != nil {
			if !errors.Is(err, ErrBadQuery) {
				t.Fatalf("ParseSearch(%q): %v does not wrap ErrBadQuery", q, err)
			}
			return
		}
		m := st.Match()
		if err := runMatch(db, &mu, m); err != nil {
			t.Fatalf("ParseSearch(%q).Match() = %s: FTS5 refuses it: %v", q, m, err)
		}
		// The index of lumps takes it too.
		mu.Lock()
		var n int
		err = lumps.QueryRow(`SELECT count(*) FROM items_fts WHERE items_fts MATCH ?`, m).Scan(&n)
		mu.Unlock()
		if err != nil {
			t.Fatalf("ParseSearch(%q).Match() = %s: the index of lumps refuses it: %v", q, m, err)
		}
		again, err := ParseSearch(st.String())
		if err != nil || again.Match() != m {
			t.Fatalf("ParseSearch(String()) of %q: %v, %s; want %s", q, err, again.Match(), m)
		}
		st.Matches("hello world the quick brown fox")
		st.Snippet(q)
	})
}

// runMatch runs an FTS5 MATCH expression against the table of ftsDB and
// reads every row.
func runMatch(db *sql.DB, mu *sync.Mutex, m string) error {
	mu.Lock()
	defer mu.Unlock()
	rows, err := db.Query(`SELECT rowid, text FROM items_fts WHERE items_fts MATCH ?`, m)
	if err != nil {
		return err
	}
	defer rows.Close()
	for rows.Next() {
		var id int
		var text string
		if err := rows.Scan(&id, &text); err != nil {
			return err
		}
	}
	return rows.Err()
}

// searchRec is rec with a text (its payload, which payloadText indexes)
// and a receipt time.
func searchRec(sender byte, n uint64, kind, peer, text string, at time.Time) Record {
	r := rec(sender, n)
	r.Kind, r.Peer, r.Payload, r.Received = kind, peer, []byte(text), at
	return r
}

// payloadText is the tests' Options.SearchText: the payload as text
// (spaces around it do not count).
func payloadText(r Record) string { return strings.TrimSpace(string(r.Payload)) }

// indexedRows catches the index up, as Search does, and counts the items
// with a text (payloadText) that a lump of the index covers.
func indexedRows(t *testing.T, s *Store) int {
	t.Helper()
	if err := s.catchUp(context.Background()); err != nil {
		t.Fatal(err)
	}
	var n int
	if err := s.db.QueryRow(`SELECT count(*) FROM items i WHERE length(trim(CAST(payload AS TEXT))) > 0
		AND EXISTS (SELECT 1 FROM search_lumps l WHERE l.first <= i.seq AND l.last >= i.seq)`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

func mustSearch(t *testing.T, s *Store, q Search, query string) []Hit {
	t.Helper()
	st, err := ParseSearch(query)
	if err != nil {
		t.Fatal(err)
	}
	q.Terms = st
	hits, err := s.Search(context.Background(), q)
	if err != nil {
		t.Fatalf("Search %q: %v", query, err)
	}
	return hits
}

func hitSeqs(hits []Hit) []uint64 {
	var out []uint64
	for _, h := range hits {
		out = append(out, h.Seq)
	}
	return out
}

// Search finds items by their text, acknowledged ones too, newest first,
// with their acknowledgement time and a snippet; filters and paging work.
func TestSearch(t *testing.T) {
	testutil.CheckGoroutines(t)
	clock := newFakeClock()
	s, _ := openStore(t, Options{Now: clock.Now, SearchText: payloadText})
	ctx := context.Background()
	t0 := clock.Now()
	for i, r := range []Record{
		searchRec(1, 1, "message", "alice", "alice the deploy is done", t0),
		searchRec(2, 2, "request", "bob", "bob review {\"pr\": 42} deploy", t0.Add(time.Minute)),
		searchRec(1, 3, "message", "alice", "alice nothing to see at the Café", t0.Add(2*time.Minute)),
		searchRec(1, 4, "response", "alice", "alice completed Deployment finished", t0.Add(3*time.Minute)),
		searchRec(2, 5, "message", "bob", "", t0.Add(4*time.Minute)), // not searchable
		searchRec(2, 6, "message", "bob", "bob deploy again", t0.Add(5*time.Minute)),
	} {
		if dup, err := s.Admit(ctx, r); err != nil || dup {
			t.Fatalf("admit %d: %v %v", i, dup, err)
		}
	}
	clock.Advance(time.Hour)
	if n, err := s.Ack(1, 2); err != nil || n != 2 {
		t.Fatalf("ack: %d %v", n, err)
	}
	hits := mustSearch(t, s, Search{}, "deploy")
	if got := hitSeqs(hits); !slices.Equal(got, []uint64{6, 2, 1}) {
		t.Fatalf("deploy: seqs %v, want [6 2 1]", got)
	}
	if !hits[2].AckedAt.Equal(clock.Now()) || !hits[0].AckedAt.IsZero() {
		t.Fatalf("acked at %v / %v", hits[2].AckedAt, hits[0].AckedAt)
	}
	if h := hits[1]; h.Kind != "request" || h.Peer != "bob" || h.Sender[0] != 2 || string(h.Payload) != "bob review {\"pr\": 42} deploy" ||
		!h.Received.Equal(t0.Add(time.Minute)) || !strings.Contains(h.Snippet, "«deploy»") {
		t.Fatalf("hit %+v", h)
	}
	for _, c := range []struct {
		q     Search
		query string
		want  []uint64
	}{
		{Search{}, "deploy*", []uint64{6, 4, 2, 1}},
		{Search{}, `"deployment finished"`, []uint64{4}},
		{Search{}, "DEPLOY alice", []uint64{1}},
		{Search{}, "42", []uint64{2}},
		{Search{}, "cafe", []uint64{3}}, // accents folded
		{Search{}, "CAFÉ", []uint64{3}},
		{Search{}, "absent", nil},
		{Search{Sender: &[32]byte{1}}, "deploy*", []uint64{4, 1}},
		{Search{Peer: "bob"}, "deploy*", []uint64{6, 2}},
		{Search{Kinds: []string{"request", "response"}}, "deploy*", []uint64{4, 2}},
		{Search{Since: t0.Add(time.Minute), Until: t0.Add(3 * time.Minute)}, "deploy*", []uint64{4, 2}},
		{Search{Before: 4}, "deploy*", []uint64{2, 1}},
		{Search{Limit: 2}, "deploy*", []uint64{6, 4}},
		{Search{Limit: 2, Before: 4}, "deploy*", []uint64{2, 1}},
	} {
		if got := hitSeqs(mustSearch(t, s, c.q, c.query)); !slices.Equal(got, c.want) {
			t.Errorf("%q %+v: %v, want %v", c.query, c.q, got, c.want)
		}
	}
	if _, err := s.Search(ctx, Search{}); !errors.Is(err, ErrEmptyQuery) {
		t.Fatalf("search without terms: %v", err)
	}
	s.Close()
	if _, err := s.Search(ctx, Search{Terms: SearchTerms{terms: []searchTerm{{tokens: []string{"x"}}}}}); !errors.Is(err, ErrClosed) {
		t.Fatalf("search after close: %v", err)
	}
}

// ftsRows counts the rows of the search index (its lumps), and fails
// unless items_fts and search_lumps have the same.
func ftsRows(t *testing.T, s *Store) int {
	t.Helper()
	var n, lumps int
	if err := s.db.QueryRow(`SELECT (SELECT count(*) FROM items_fts), (SELECT count(*) FROM search_lumps)`).Scan(&n, &lumps); err != nil {
		t.Fatal(err)
	}
	if n != lumps {
		t.Fatalf("%d rows in items_fts, %d in search_lumps", n, lumps)
	}
	return n
}

// Expiry and history trimming count the items they delete against their
// lumps, and a lump goes with its last item: the index does not grow
// without bound.
func TestSearchIndexFollowsDeletions(t *testing.T) {
	clock := newFakeClock()
	s, _ := openStore(t, Options{Now: clock.Now, HistoryRetention: time.Hour, HistoryMaxBytes: 100, SearchText: payloadText})
	ctx := context.Background()
	const n = lumpItems + 20
	for i := range uint64(n) {
		r := searchRec(1, i+1, "message", "alice", fmt.Sprintf("%-20s", fmt.Sprintf("word%d common", i)), time.Time{}) // 20 bytes
		if _, err := s.Admit(ctx, r); err != nil {
			t.Fatal(err)
		}
	}
	if got := indexedRows(t, s); got != n {
		t.Fatalf("%d items indexed, want %d", got, n)
	}
	lumps := ftsRows(t, s)
	if lumps < 2 {
		t.Fatalf("%d lumps for %d items", lumps, n)
	}
	checkIndex(t, s.db, "indexed")
	// Acknowledging 10 items of 20 bytes puts history over 100 bytes:
	// the oldest go, counted against their lump.
	if _, err := s.Ack(1, 2, 3, 4, 5, 6, 7, 8, 9, 10); err != nil {
		t.Fatal(err)
	}
	var items int
	if err := s.db.QueryRow(`SELECT count(*) FROM items`).Scan(&items); err != nil {
		t.Fatal(err)
	}
	if items >= n || ftsRows(t, s) != lumps {
		t.Fatalf("after trimming: %d items, %d lumps", items, ftsRows(t, s))
	}
	checkIndex(t, s.db, "after trimming")
	if hits := mustSearch(t, s, Search{}, "word0"); len(hits) != 0 {
		t.Fatalf("a trimmed item is found: %v", hitSeqs(hits))
	}
	// Every item of the first lump acknowledged and expired: the lump
	// goes.
	var first, last int64
	if err := s.db.QueryRow(`SELECT first, last FROM search_lumps ORDER BY first LIMIT 1`).Scan(&first, &last); err != nil {
		t.Fatal(err)
	}
	var seqs []uint64
	for seq := first; seq <= last; seq++ {
		seqs = append(seqs, uint64(seq))
	}
	if _, err := s.Ack(seqs...); err != nil {
		t.Fatal(err)
	}
	clock.Advance(2 * time.Hour)
	if _, _, err := s.Expire(); err != nil {
		t.Fatal(err)
	}
	if got := ftsRows(t, s); got != lumps-1 {
		t.Fatalf("after expiry: %d lumps, want %d", got, lumps-1)
	}
	checkIndex(t, s.db, "after expiry")
	if got := mustSearch(t, s, Search{}, "common"); len(got) != n-int(last) {
		t.Fatalf("%d hits after expiry, want %d", len(got), n-int(last))
	}
}

// A long text is indexed up to MaxSearchText bytes.
func TestSearchTextClipped(t *testing.T) {
	s, _ := openStore(t, Options{SearchText: payloadText})
	r := searchRec(1, 1, "message", "alice", "early "+strings.Repeat("é", MaxSearchText)+" late", time.Time{})
	if _, err := s.Admit(context.Background(), r); err != nil {
		t.Fatal(err)
	}
	if len(mustSearch(t, s, Search{}, "early")) != 1 || len(mustSearch(t, s, Search{}, "late")) != 0 {
		t.Fatal("the text was not clipped at MaxSearchText")
	}
	if got := ClipText(strings.Repeat("é", MaxSearchText)); len(got) > MaxSearchText || !strings.HasSuffix(got, "é") {
		t.Fatalf("clipText cut a character: %d bytes", len(got))
	}
	// What is cut is a copy: the texts waiting in memory for the index
	// hold no more than MaxSearchText bytes each.
	long := strings.Repeat("a", 2*MaxSearchText)
	if got := ClipText(long); len(got) != MaxSearchText || unsafe.StringData(got) == unsafe.StringData(long) {
		t.Fatalf("clipText: %d bytes, sharing the long text's memory: %v", len(got), unsafe.StringData(got) == unsafe.StringData(long))
	}
}

// Items stored before the search index existed, or under an index of
// an earlier version, are indexed again from the first: in the
// background, or by the first Search. An Open without SearchText
// indexes nothing.
func TestSearchIndexAfterUpgrade(t *testing.T) {
	testutil.CheckGoroutines(t)
	path := filepath.Join(t.TempDir(), "meerkat.db")
	idx := searchMigration(t)
	db, err := sql.Open("sqlite", path)
	if err != nil {
		t.Fatal(err)
	}
	stmts := append(slices.Clone(migrations[:idx]), `CREATE TABLE schema_version (version INTEGER NOT NULL)`,
		fmt.Sprintf(`INSERT INTO schema_version (version) VALUES (%d)`, idx))
	for _, q := range stmts {
		if _, err := db.Exec(q); err != nil {
			t.Fatal(err)
		}
	}
	const items = indexPage*2 + 7
	for i := range uint64(items) {
		r := rec(1, i)
		if _, err := db.Exec(`INSERT INTO items (sender, id, kind, peer, received, payload) VALUES (?, ?, ?, ?, ?, ?)`,
			r.Sender[:], r.ID[:], "message", "alice", int64(i), fmt.Appendf(nil, "payload %d", i)); err != nil {
			t.Fatal(err)
		}
	}
	db.Close()

	// Without SearchText the items stay unindexed.
	s, err := Open(path, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if n := ftsRows(t, s); n != 0 {
		t.Fatalf("%d rows indexed without SearchText", n)
	}
	var point string
	if err := s.db.QueryRow(`SELECT value FROM meta WHERE key = 'search_backfill'`).Scan(&point); err != sql.ErrNoRows {
		t.Fatalf("backfill point after the upgrade: %q, %v", point, err)
	}
	s.Close()

	s = reopen(t, path, Options{SearchText: func(r Record) string {
		if r.Seq%100 == 0 {
			return "" // not searchable
		}
		return string(r.Payload) + " " + r.Peer
	}})
	want := items - (items / 100) // seqs 100, 200, … have no text
	hits := mustSearch(t, s, Search{}, `"payload 7"`)
	if len(hits) != 1 || hits[0].Seq != 8 {
		t.Fatalf("payload 7: %v", hitSeqs(hits))
	}
	// Its SearchText gives no text for some items the payload does:
	// those may be left out of the lumps.
	mark, texts, covered, above, overlaps, miscounted, rows, lumps := indexState(t, s.db)
	if mark != items || covered < texts-items/100 || above != 0 || overlaps != 0 || miscounted != 0 || rows != lumps {
		t.Fatalf("after a search: mark %d, %d of %d items in a lump; %d lumps above it, %d overlapping, %d miscounted; %d rows for %d lumps",
			mark, covered, texts, above, overlaps, miscounted, rows, lumps)
	}
	if got := len(mustSearch(t, s, Search{}, "alice")); got != min(want, MaxSearchHits) {
		t.Fatalf("alice: %d hits, want %d", got, want)
	}
	if hits := mustSearch(t, s, Search{}, `"payload 99"`); len(hits) != 0 {
		t.Fatalf("an item without text is found: %v", hitSeqs(hits))
	}
}

// An item is found by a search right after its admission returned,
// whatever the background indexing did meanwhile.
func TestSearchRightAfterAdmit(t *testing.T) {
	testutil.CheckGoroutines(t)
	s, _ := openStore(t, Options{SearchText: payloadText})
	ctx := context.Background()
	for i := range uint64(50) {
		r := searchRec(1, i+1, "message", "alice", fmt.Sprintf("fresh%d arrival", i), time.Time{})
		if dup, err := s.Admit(ctx, r); err != nil || dup {
			t.Fatalf("admit %d: %v %v", i, dup, err)
		}
		hits := mustSearch(t, s, Search{}, fmt.Sprintf("fresh%d", i))
		if len(hits) != 1 || hits[0].Seq != i+1 {
			t.Fatalf("item %d right after admission: %v", i+1, hitSeqs(hits))
		}
		if got := len(mustSearch(t, s, Search{}, "arrival")); got != int(i+1) {
			t.Fatalf("arrival: %d hits, want %d", got, i+1)
		}
	}
}

// indexState reads, in one snapshot, the high-water mark, the items with
// a text (payloadText) up to the mark, those of them a lump covers, the
// lumps reaching above the mark, the pairs of lumps that overlap, the
// lumps whose live count is not the items of their range, and the rows
// of items_fts and of search_lumps.
func indexState(t *testing.T, db *sql.DB) (mark int64, texts, covered, above, overlaps, miscounted, rows, lumps int) {
	t.Helper()
	err := db.QueryRow(`WITH m(mark) AS (SELECT CAST(value AS INTEGER) FROM meta WHERE key = 'search_indexed') SELECT
		(SELECT mark FROM m),
		(SELECT count(*) FROM items WHERE seq <= (SELECT mark FROM m) AND length(trim(CAST(payload AS TEXT))) > 0),
		(SELECT count(*) FROM items i WHERE seq <= (SELECT mark FROM m) AND length(trim(CAST(payload AS TEXT))) > 0
			AND EXISTS (SELECT 1 FROM search_lumps l WHERE l.first <= i.seq AND l.last >= i.seq)),
		(SELECT count(*) FROM search_lumps WHERE last > (SELECT mark FROM m)),
		(SELECT count(*) FROM search_lumps a JOIN search_lumps b ON a.first < b.first AND a.last >= b.first),
		(SELECT count(*) FROM search_lumps l WHERE l.live <> (SELECT count(*) FROM items i WHERE i.seq >= l.first AND i.seq <= l.last)),
		(SELECT count(*) FROM items_fts),
		(SELECT count(*) FROM search_lumps)`).
		Scan(&mark, &texts, &covered, &above, &overlaps, &miscounted, &rows, &lumps)
	if err != nil {
		t.Fatal(err)
	}
	return
}

// checkIndex checks the index's invariants: every item with a text up to
// the high-water mark is in a lump, no lump reaches above the mark, the
// lumps do not overlap, each counts the items of its range, and each has
// its row in items_fts.
func checkIndex(t *testing.T, db *sql.DB, when string) int64 {
	t.Helper()
	mark, texts, covered, above, overlaps, miscounted, rows, lumps := indexState(t, db)
	if texts != covered || above != 0 || overlaps != 0 || miscounted != 0 || rows != lumps {
		t.Fatalf("%s: mark %d, %d items with a text up to it, %d of them in a lump; %d lumps above it, %d overlapping, %d miscounted; %d rows for %d lumps",
			when, mark, texts, covered, above, overlaps, miscounted, rows, lumps)
	}
	return mark
}

// Many admissions, pipelined, then one search: every one is found, each
// indexed exactly once, over several pages.
func TestSearchManyAdmissions(t *testing.T) {
	testutil.CheckGoroutines(t)
	s, _ := openStore(t, Options{SearchText: payloadText, MaxItems: 10000})
	const items = 2*indexPage + 300
	pending := make([]*Pending, 0, items)
	want := 0
	for i := range uint64(items) {
		text := fmt.Sprintf("bulk item%d", i)
		if i%10 == 3 {
			text = "" // not searchable
		} else {
			want++
		}
		pending = append(pending, s.AdmitAsync(searchRec(1, i+1, "message", "alice", text, time.Time{}), queueWait))
	}
	for _, p := range pending {
		if dup, err := p.Wait(); err != nil || dup {
			t.Fatalf("admit: %v %v", dup, err)
		}
	}
	if got := len(mustSearch(t, s, Search{}, "bulk")); got != min(want, MaxSearchHits) {
		t.Fatalf("bulk: %d hits, want %d", got, min(want, MaxSearchHits))
	}
	if mark := checkIndex(t, s.db, "after the search"); mark != items {
		t.Fatalf("mark %d after the search, want %d", mark, items)
	}
	if n := indexedRows(t, s); n != want {
		t.Fatalf("%d items indexed, want %d", n, want)
	}
	for _, i := range []uint64{0, 1, indexPage - 1, indexPage, indexPage + 1, 2 * indexPage, items - 1} {
		hits := mustSearch(t, s, Search{}, fmt.Sprintf("item%d", i))
		if wantHit := i%10 != 3; (len(hits) == 1 && hits[0].Seq == i+1) != wantHit {
			t.Fatalf("item%d: %v", i, hitSeqs(hits))
		}
	}
}

// A store closed while items wait to be indexed, and some of them were
// deleted before, keeps the high-water mark consistent with the index
// across reopening: no item is missed, none indexed twice, the deleted
// ones skipped.
func TestSearchIndexRestart(t *testing.T) {
	testutil.CheckGoroutines(t)
	ctx := context.Background()
	clock := newFakeClock()
	opts := Options{Now: clock.Now, MaxItems: 10000, HistoryMaxBytes: -1, HistoryRetention: time.Hour}
	path := filepath.Join(t.TempDir(), "inbox.db")
	admit := func(s *Store, from, to uint64) {
		t.Helper()
		var pending []*Pending
		for i := from; i < to; i++ {
			text := fmt.Sprintf("restart doc%d", i)
			if i%7 == 0 {
				text = ""
			}
			pending = append(pending, s.AdmitAsync(searchRec(1, i+1, "message", "alice", text, time.Time{}), queueWait))
		}
		for _, p := range pending {
			if _, err := p.Wait(); err != nil {
				t.Fatal(err)
			}
		}
	}

	// Without SearchText nothing is indexed: the mark stays at 0. Items
	// 1..100 are acknowledged and expire before they are indexed.
	s, err := Open(path, opts)
	if err != nil {
		t.Fatal(err)
	}
	admit(s, 0, 1500)
	seqs := make([]uint64, 100)
	for i := range seqs {
		seqs[i] = uint64(i + 1)
	}
	if _, err := s.Ack(seqs...); err != nil {
		t.Fatal(err)
	}
	clock.Advance(2 * time.Hour)
	if _, h, err := s.Expire(); err != nil || h != 100 {
		t.Fatalf("expire: %d, %v", h, err)
	}
	if mark := checkIndex(t, s.db, "without SearchText"); mark != 0 || ftsRows(t, s) != 0 {
		t.Fatalf("without SearchText: mark %d, %d rows", mark, ftsRows(t, s))
	}
	s.Close()

	// With it, one page is indexed (no background indexing, none at
	// Close: as if the process stopped there): items 101..612, the
	// first 512 that are left.
	opts.SearchText, opts.indexOnSearch = payloadText, true
	s, err = Open(path, opts)
	if err != nil {
		t.Fatal(err)
	}
	if res := s.do(ctx, &request{op: opIndex, upTo: 700}); res.err != nil {
		t.Fatal(res.err)
	}
	if mark := checkIndex(t, s.db, "after one page"); mark != 100+indexPage {
		t.Fatalf("mark %d after a page, want %d", mark, 100+indexPage)
	}
	admit(s, 1500, 1600)
	s.Close()

	// Reopened (with background indexing), nothing is lost or doubled.
	opts.indexOnSearch = false
	s = reopen(t, path, opts)
	checkIndex(t, s.db, "reopened")
	admit(s, 1600, 1700)
	hits := mustSearch(t, s, Search{Limit: MaxSearchHits}, "restart")
	checkIndex(t, s.db, "after a search")
	s.Close()
	s = reopen(t, path, opts)
	mark := checkIndex(t, s.db, "closed and reopened")
	if mark != 1700 {
		t.Fatalf("mark %d after a search, want 1700", mark)
	}
	want := 0
	for i := uint64(100); i < 1700; i++ {
		if i%7 != 0 {
			want++
		}
	}
	if n := indexedRows(t, s); n != want {
		t.Fatalf("%d items indexed, want %d", n, want)
	}
	if len(hits) != min(want, MaxSearchHits) || hits[0].Seq != 1700 {
		t.Fatalf("%d hits (first %v), want %d", len(hits), hitSeqs(hits[:1]), min(want, MaxSearchHits))
	}
	for _, i := range []uint64{99, 100, 101, 699, 700, 1499, 1500, 1599, 1600, 1699} {
		hits := mustSearch(t, s, Search{}, fmt.Sprintf("doc%d", i))
		if wantHit := i >= 100 && i%7 != 0; (len(hits) == 1 && hits[0].Seq == i+1) != wantHit {
			t.Fatalf("doc%d: %v", i, hitSeqs(hits))
		}
	}
}

// The texts of admitted items wait in memory for the index, so that the
// committer need not read the items back: SearchText runs once per item.
// Items deleted before they are indexed, or too many bytes of text
// waiting, make the store drop those texts and read the items from the
// database instead: each item indexed exactly once, no deleted one.
func TestSearchTextsKeptInMemory(t *testing.T) {
	testutil.CheckGoroutines(t)
	var calls atomic.Int64
	var searching atomic.Bool // Search checking the items it found: not counted
	counted := func(r Record) string {
		if !searching.Load() {
			calls.Add(1)
		}
		return payloadText(r)
	}
	s, _ := openStore(t, Options{SearchText: counted, indexOnSearch: true, MaxItems: 10000, HistoryMaxBytes: 1000})
	// search runs after check, which caught the index up: the calls
	// during it are Search's own.
	search := func(query string) []Hit {
		t.Helper()
		searching.Store(true)
		defer searching.Store(false)
		return mustSearch(t, s, Search{}, query)
	}
	ctx := context.Background()
	next := uint64(0)
	admit := func(n int, text func(i uint64) string) {
		t.Helper()
		for range n {
			next++
			if dup, err := s.Admit(ctx, searchRec(1, next, "message", "alice", text(next), time.Time{})); err != nil || dup {
				t.Fatalf("admit %d: %v %v", next, dup, err)
			}
		}
	}
	check := func(when string, wantRows int, wantCalls int64) {
		t.Helper()
		if n := indexedRows(t, s); n != wantRows {
			t.Fatalf("%s: %d index rows, want %d", when, n, wantRows)
		}
		if mark := checkIndex(t, s.db, when); mark != int64(next) {
			t.Fatalf("%s: mark %d, want %d", when, mark, next)
		}
		if got := calls.Load(); got != wantCalls {
			t.Fatalf("%s: SearchText ran %d times, want %d", when, got, wantCalls)
		}
	}

	// Kept in memory: one call per item.
	admit(100, func(i uint64) string { return fmt.Sprintf("kept doc%d", i) })
	check("in memory", 100, 100)

	// Items 101..120 of 100 bytes each, all acknowledged: history over
	// 1,000 bytes is trimmed to 900, which deletes the oldest eleven
	// before they are indexed. The nine left are read back.
	admit(20, func(i uint64) string { return fmt.Sprintf("%-100s", fmt.Sprintf("trimmed doc%d", i)) })
	acks := make([]uint64, 20)
	for i := range acks {
		acks[i] = uint64(101 + i)
	}
	if n, err := s.Ack(acks...); err != nil || n != 20 {
		t.Fatalf("ack: %d, %v", n, err)
	}
	check("after deletions", 109, 100+20+9)
	if hits := search("doc111"); len(hits) != 0 {
		t.Fatalf("a deleted item is found: %v", hitSeqs(hits))
	}
	if hits := search("doc112"); len(hits) != 1 || hits[0].Seq != 112 {
		t.Fatalf("doc112: %v", hitSeqs(hits))
	}

	// Texts of MaxSearchText bytes: the 65th takes them past the bound
	// of what waits in memory, and the 65 are read back; the five after
	// it wait in memory again.
	big := strings.Repeat("x", MaxSearchText-10)
	admit(70, func(i uint64) string { return fmt.Sprintf("big%d %s", i, big) })
	if recentMaxBytes/MaxSearchText != 64 {
		t.Fatalf("the test expects room for 64 texts of MaxSearchText, not %d", recentMaxBytes/MaxSearchText)
	}
	check("past the bound", 179, 129+70+65)
	if hits := search("big185"); len(hits) != 1 || hits[0].Seq != 185 {
		t.Fatalf("big185: %v", hitSeqs(hits))
	}

	// And kept in memory again.
	admit(10, func(i uint64) string { return fmt.Sprintf("again doc%d", i) })
	check("in memory again", 189, 264+10)
}

// A snippet's words and the runs between them are cut at maxSnippetRun
// characters (a hex dump is one word to the index); the match markers
// stay, and a snippet with nothing that long is left as it is.
func TestClipSnippet(t *testing.T) {
	a48, a60 := strings.Repeat("a", 48), strings.Repeat("a", 60)
	for _, tc := range []struct{ in, want string }{
		{"", ""},
		{"the «deploy» went fine", "the «deploy» went fine"},
		{a48 + " «" + a48 + "»", a48 + " «" + a48 + "»"},
		{"«" + a60 + "» and more", "«" + a48 + SnippetCut + "» and more"},
		{"dump " + a60 + a60 + " tail", "dump " + a48 + SnippetCut + " tail"},
		{"x" + strings.Repeat("=", 60) + "y", "x" + strings.Repeat("=", 48) + SnippetCut + "y"},
		{strings.Repeat("é", 50), strings.Repeat("é", 48) + SnippetCut},
		{strings.Repeat("日本語", 20), strings.Repeat("日本語", 16) + SnippetCut},
		{"bad \xff byte " + a60, "bad \xff byte " + a48 + SnippetCut},
		{SnippetCut + "middle " + a60 + SnippetCut, SnippetCut + "middle " + a48 + SnippetCut + SnippetCut},
	} {
		if got := clipSnippet(tc.in); got != tc.want {
			t.Errorf("clipSnippet(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}

func FuzzClipSnippet(f *testing.F) {
	f.Add("the «deploy» went fine")
	f.Add("«" + strings.Repeat("ab", 40) + "»")
	f.Add(strings.Repeat("=", 100) + "\xff")
	f.Add(strings.Repeat("a", 49) + strings.Repeat(" ", 48))
	f.Fuzz(func(t *testing.T, s string) {
		got := clipSnippet(s)
		if strings.Count(got, SnippetOpen) != strings.Count(s, SnippetOpen) || strings.Count(got, SnippetClose) != strings.Count(s, SnippetClose) {
			t.Fatalf("markers changed: %q → %q", s, got)
		}
		if len(got) > len(s)+strings.Count(got, SnippetCut)*len(SnippetCut) {
			t.Fatalf("longer than its input and its cuts: %q → %q", s, got)
		}
		// No run longer than the bound is left: a run of separators may
		// hold, besides its maxSnippetRun, the cut mark of the word before
		// it and its own.
		run, word := 0, false
		for _, r := range got {
			if w := isTokenRune(r); w != word || string(r) == SnippetOpen || string(r) == SnippetClose {
				run, word = 0, w
			}
			if run++; run > maxSnippetRun+2 {
				t.Fatalf("a run of %d characters left in %q", run, got)
			}
		}
	})
}

// Search's snippet of an item whose match sits next to one very long
// word (a hex dump) stays short.
func TestSearchSnippetOfALongWord(t *testing.T) {
	s, _ := openStore(t, Options{SearchText: payloadText})
	hex := strings.Repeat("0123456789abcdef", 1250)
	mustAdmit(t, s, searchRec(1, 1, "message", "alice", "firmware dump follows "+hex, time.Now()))
	for _, q := range []string{"firmware", "0123456789abcdef*"} {
		hits := mustSearch(t, s, Search{}, q)
		if len(hits) != 1 || len(hits[0].Snippet) > 400 || !strings.Contains(hits[0].Snippet, SnippetOpen) {
			t.Fatalf("search %q: %d hits, snippet of %d bytes: %.200q", q, len(hits), len(hits[0].Snippet), hits[0].Snippet)
		}
	}
	st, _ := ParseSearch("firmware")
	if snip := st.Snippet("firmware dump follows " + hex); len(snip) > 400 {
		t.Fatalf("SearchTerms.Snippet: %d bytes", len(snip))
	}
}

// A record that carries its text is indexed by it, without a call to
// Options.SearchText; one without is indexed by what SearchText finds.
// (Search checks the items it finds with SearchText, so the text carried
// must be the same; here it is not, to tell them apart in the index.)
func TestAdmitCarriedText(t *testing.T) {
	testutil.CheckGoroutines(t)
	var calls atomic.Int32
	s, _ := openStore(t, Options{SearchText: func(r Record) string {
		calls.Add(1)
		return payloadText(r)
	}})
	ctx := context.Background()
	carried := searchRec(1, 1, "message", "alice", "payload words", time.Now())
	carried.Text = "carried words"
	if dup, err := s.Admit(ctx, carried); err != nil || dup {
		t.Fatalf("admit: %v %v", dup, err)
	}
	if n := calls.Load(); n != 0 {
		t.Fatalf("SearchText called %d times for a record with its text", n)
	}
	p := s.AdmitAsync(searchRec(1, 2, "message", "alice", "payload again", time.Now()), queueWait)
	if _, err := p.Wait(); err != nil {
		t.Fatal(err)
	}
	if n := calls.Load(); n != 1 {
		t.Fatalf("SearchText called %d times, want 1", n)
	}
	if err := s.catchUp(ctx); err != nil {
		t.Fatal(err)
	}
	if n := calls.Load(); n != 1 {
		t.Fatalf("SearchText called %d times by the index, want none", n-1)
	}
	for _, c := range []struct {
		word string
		want int
	}{{"carried", 1}, {"again", 1}, {"words", 1}, {"absent", 0}} {
		var n int
		if err := s.db.QueryRow(`SELECT count(*) FROM items_fts WHERE items_fts MATCH ?`, `"`+c.word+`"`).Scan(&n); err != nil || n != c.want {
			t.Errorf("%q: %d rows of the index, %v; want %d", c.word, n, err, c.want)
		}
	}
	if got := hitSeqs(mustSearch(t, s, Search{}, "again")); !slices.Equal(got, []uint64{2}) {
		t.Errorf("again: seqs %v, want [2]", got)
	}
}

// Items above the index's high-water mark (admitted by a writer
// without SearchText, or not yet indexed by the daemon when a read-only
// store searches) are found all the same: Search reads them.
func TestSearchAboveTheMark(t *testing.T) {
	testutil.CheckGoroutines(t)
	s, path := openStore(t, Options{})
	ctx := context.Background()
	const n = lumpSpan + 40
	for i := range uint64(n) {
		text := fmt.Sprintf("unindexed doc%d", i+1)
		if i%9 == 4 {
			text = ""
		}
		if _, err := s.Admit(ctx, searchRec(1, i+1, "message", "alice", text, time.Time{})); err != nil {
			t.Fatal(err)
		}
	}
	s.Close()
	ro, err := Open(path, Options{ReadOnly: true, SearchText: payloadText})
	if err != nil {
		t.Fatal(err)
	}
	defer ro.Close()
	if m := checkIndexMark(t, ro); m != 0 {
		t.Fatalf("mark %d, want 0: nothing indexed", m)
	}
	want := 0
	for i := range n {
		if i%9 != 4 {
			want++
		}
	}
	hits := mustSearch(t, ro, Search{}, "unindexed")
	if len(hits) != want || hits[0].Seq != n {
		t.Fatalf("%d hits (newest %v), want %d from seq %d", len(hits), hitSeqs(hits[:1]), want, n)
	}
	for i, h := range hits[1:] {
		if h.Seq >= hits[i].Seq {
			t.Fatalf("hits out of order: %v", hitSeqs(hits))
		}
	}
	if hits := mustSearch(t, ro, Search{Before: 100, Limit: 3}, "unindexed"); !slices.Equal(hitSeqs(hits), []uint64{99, 98, 97}) {
		t.Fatalf("page before 100: %v", hitSeqs(hits))
	}
	if hits := mustSearch(t, ro, Search{}, "doc5"); len(hits) != 0 {
		t.Fatalf("an item without text is found: %v", hitSeqs(hits))
	}
}

// checkIndexMark reads the index's high-water mark.
func checkIndexMark(t *testing.T, s *Store) int64 {
	t.Helper()
	var mark int64
	if err := s.db.QueryRow(`SELECT CAST(value AS INTEGER) FROM meta WHERE key = 'search_indexed'`).Scan(&mark); err != nil {
		t.Fatal(err)
	}
	return mark
}

// A lump's range spans at most lumpSpan seqs, however many items without
// text lie between those with one: Search reads every item of a range.
func TestSearchLumpSpan(t *testing.T) {
	testutil.CheckGoroutines(t)
	s, _ := openStore(t, Options{SearchText: payloadText, MaxItems: 10000})
	var pending []*Pending
	for i := range uint64(3 * lumpSpan) {
		text := ""
		if i%100 == 0 {
			text = fmt.Sprintf("sparse doc%d", i+1)
		}
		pending = append(pending, s.AdmitAsync(searchRec(1, i+1, "message", "alice", text, time.Time{}), queueWait))
	}
	for _, p := range pending {
		if _, err := p.Wait(); err != nil {
			t.Fatal(err)
		}
	}
	hits := mustSearch(t, s, Search{}, "sparse")
	if len(hits) != 8 {
		t.Fatalf("%d hits, want 8", len(hits))
	}
	checkIndex(t, s.db, "sparse")
	var widest int64
	if err := s.db.QueryRow(`SELECT max(last - first + 1) FROM search_lumps`).Scan(&widest); err != nil {
		t.Fatal(err)
	}
	if widest > lumpSpan {
		t.Fatalf("a lump spans %d seqs, more than %d", widest, lumpSpan)
	}
}

// A search whose context ends while it runs fails with the context's
// error, whatever the database calls cut short said.
func TestSearchCancelled(t *testing.T) {
	testutil.CheckGoroutines(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	calls := 0
	s, _ := openStore(t, Options{SearchText: func(r Record) string {
		if calls++; calls == 2*lumpItems+10 { // while checking the items
			cancel()
			// database/sql rolls the verifier's transaction back on a
			// goroutine of its own: let it, so that what comes next
			// fails with its own words (a closed statement).
			time.Sleep(50 * time.Millisecond)
		}
		return payloadText(r)
	}, MaxItems: 10000})
	for i := range uint64(2 * lumpItems) {
		if _, err := s.Admit(context.Background(), searchRec(1, i+1, "message", "alice", "cancel me", time.Time{})); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.catchUp(context.Background()); err != nil {
		t.Fatal(err)
	}
	st, _ := ParseSearch("cancel")
	if _, err := s.Search(ctx, Search{Terms: st}); !errors.Is(err, context.Canceled) {
		t.Fatalf("Search cancelled midway: %v, want context.Canceled", err)
	}
	if _, err := s.Search(ctx, Search{Terms: st}); !errors.Is(err, context.Canceled) {
		t.Fatalf("Search with a cancelled context: %v, want context.Canceled", err)
	}
	if hits, err := s.Search(context.Background(), Search{Terms: st}); err != nil || len(hits) != 2*lumpItems {
		t.Fatalf("Search after: %d hits, %v", len(hits), err)
	}
}

// A verifier connection database/sql replaced (one it found broken) is a
// new, empty in-memory database: Search makes its table again.
func TestSearchVerifierConnectionReplaced(t *testing.T) {
	testutil.CheckGoroutines(t)
	s, _ := openStore(t, Options{SearchText: payloadText})
	ctx := context.Background()
	if _, err := s.Admit(ctx, searchRec(1, 1, "message", "alice", "still found", time.Time{})); err != nil {
		t.Fatal(err)
	}
	if hits := mustSearch(t, s, Search{}, "found"); len(hits) != 1 {
		t.Fatalf("%d hits", len(hits))
	}
	c, err := s.verify.db.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	c.Raw(func(any) error { return driver.ErrBadConn }) // database/sql drops it
	c.Close()
	if hits := mustSearch(t, s, Search{}, "found"); len(hits) != 1 {
		t.Fatalf("%d hits after the verifier's connection was replaced", len(hits))
	}
}
