package store

import (
	"bytes"
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/meerkatd/meerkatd/comms/meup"
	"github.com/meerkatd/meerkatd/comms/outbox"
	"github.com/meerkatd/meerkatd/comms/space"
	"github.com/meerkatd/meerkatd/comms/space/storetest"
	"github.com/meerkatd/meerkatd/identity"
	"github.com/meerkatd/meerkatd/internal/testutil"
)

func TestSpacesConformance(t *testing.T) {
	storetest.Run(t, func(t *testing.T) space.Store {
		testutil.CheckGoroutines(t)
		s, _ := openStore(t, Options{})
		return s.Spaces()
	})
}

func TestSpacesDurable(t *testing.T) {
	storetest.RunDurable(t, func(t *testing.T, dir string) (space.Store, func() error) {
		s := reopen(t, filepath.Join(dir, "meerkat.db"), Options{})
		return s.Spaces(), s.Close
	})
}

func spPeer(n byte) identity.PeerID {
	var p identity.PeerID
	p[0], p[31] = n, 0x77
	return p
}

func spGrant(id string) space.Grant {
	return space.Grant{
		Space: "lab", ID: id, Granter: spPeer(1), Grantee: spPeer(2),
		Capabilities: []meup.Capability{{ID: "c", Kind: json.RawMessage(`"mcp/request"`), Payload: json.RawMessage(`{"method" : "tools/list"}`)}},
		Created:      time.Date(2026, 1, 2, 3, 4, 5, 6, time.UTC),
	}
}

func spProposal(id string) space.Proposal {
	at := time.Date(2026, 1, 2, 3, 4, 5, 7, time.UTC)
	return space.Proposal{
		Space: "lab", ID: id, Proposer: "agent", Key: spPeer(3), Payload: json.RawMessage(`{"method":"tools/call"}`),
		State: space.ProposalPending, Created: at, Expires: at.Add(time.Hour), Updated: at,
	}
}

// makeV4 writes a version-4 database at path, as the build before the
// space tables left it: one unacknowledged inbox item, one outbox entry
// and the database id.
func makeV4(t *testing.T, path string) (Record, outbox.Entry, string) {
	t.Helper()
	db, err := sql.Open("sqlite", path)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	qs := []string{`CREATE TABLE schema_version (version INTEGER NOT NULL)`, `INSERT INTO schema_version (version) VALUES (4)`}
	if err := func() error {
		for _, q := range append(migrations[:4:4], qs...) {
			if _, err := db.Exec(q); err != nil {
				return fmt.Errorf("%s: %w", q, err)
			}
		}
		return nil
	}(); err != nil {
		t.Fatal(err)
	}
	r := rec(4, 4)
	r.Received = time.Date(2025, 6, 1, 0, 0, 0, 3, time.UTC)
	if _, err := db.Exec(`INSERT INTO items (sender, id, kind, peer, received, payload) VALUES (?, ?, ?, ?, ?, ?)`,
		r.Sender[:], r.ID[:], r.Kind, r.Peer, r.Received.UnixNano(), r.Payload); err != nil {
		t.Fatal(err)
	}
	if _, err := db.Exec(`INSERT INTO dedup (sender, id, first_seen, seq) VALUES (?, ?, ?, 1)`,
		r.Sender[:], r.ID[:], time.Now().UnixNano()); err != nil {
		t.Fatal(err)
	}
	e := obEntry(4)
	if _, err := db.Exec(`INSERT INTO outbox (id, recipient, peer, kind, corr_id, payload, created, expires, attempts, next_attempt, last_error)
		VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`, e.ID[:], e.To[:], e.Peer, e.Kind, e.CorrID[:], e.Payload,
		e.Created.UnixNano(), e.Expires.UnixNano(), e.Attempts, e.NextAttempt.UnixNano(), e.LastError); err != nil {
		t.Fatal(err)
	}
	e.Seq = 1
	var id string
	if err := db.QueryRow(`SELECT value FROM meta WHERE key = 'id'`).Scan(&id); err != nil {
		t.Fatal(err)
	}
	return r, e, id
}

// A database of the previous schema version opens, gains the space
// tables and keeps its data and id; opening it again migrates nothing.
func TestSpacesUpgradeFromV4(t *testing.T) {
	testutil.CheckGoroutines(t)
	path := filepath.Join(t.TempDir(), "meerkat.db")
	r, e, id := makeV4(t, path)

	// A read-only open does not upgrade it.
	if _, err := Open(path, Options{ReadOnly: true}); !errors.Is(err, ErrOlderSchema) {
		t.Fatalf("read-only open of a version-4 database: %v, want ErrOlderSchema", err)
	}

	s := reopen(t, path, Options{})
	var v int
	if err := s.db.QueryRow(`SELECT version FROM schema_version`).Scan(&v); err != nil || v != schemaVersion || v < 5 {
		t.Fatalf("schema_version after upgrade = %d, %v; want at least 5 (now %d)", v, err, schemaVersion)
	}
	for _, table := range []string{"space_seen", "space_grants", "space_proposals"} {
		var n int
		if err := s.db.QueryRow(`SELECT count(*) FROM sqlite_schema WHERE type = 'table' AND name = ?`, table).Scan(&n); err != nil || n != 1 {
			t.Fatalf("table %s after upgrade: %d, %v", table, n, err)
		}
	}
	if s.ID() != id {
		t.Fatalf("database id changed in the upgrade: %q, was %q", s.ID(), id)
	}
	rs := mustList(t, s, 0, 0)
	if len(rs) != 1 || rs[0].Seq != 1 || rs[0].ID != r.ID || !bytes.Equal(rs[0].Payload, r.Payload) || !rs[0].Received.Equal(r.Received) {
		t.Fatalf("inbox after upgrade: %+v", rs)
	}
	mustDup(t, s, r)
	es := mustOBEntries(t, s.Outbox())
	if len(es) != 1 || !sameEntry(es[0], e) {
		t.Fatalf("outbox after upgrade: %+v, want %+v", es, e)
	}

	sp := s.Spaces()
	if fresh, err := sp.Remember("lab", spPeer(1), "m1", "c1", time.Now()); err != nil || fresh != space.RememberNew {
		t.Fatalf("Remember after upgrade = %v, %v", fresh, err)
	}
	if err := sp.PutGrant(spGrant("g1")); err != nil {
		t.Fatal(err)
	}
	if err := sp.PutProposal(spProposal("p1")); err != nil {
		t.Fatal(err)
	}
	mustAdmit(t, s, rec(4, 5))
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}

	s = reopen(t, path, Options{})
	if got := fmt.Sprint(seqsOf(mustList(t, s, 0, 0))); got != "[1 2]" {
		t.Fatalf("inbox after second open: %s", got)
	}
	sp = s.Spaces()
	if fresh, err := sp.Remember("lab", spPeer(1), "m1", "c2", time.Now()); err != nil || fresh != space.RememberRepeat {
		t.Fatalf("Remember after second open = %v, %v; want a repeat", fresh, err)
	}
	if gs, err := sp.Grants(""); err != nil || len(gs) != 1 || gs[0].ID != "g1" {
		t.Fatalf("grants after second open: %+v, %v", gs, err)
	}
	if ps, err := sp.Proposals("lab"); err != nil || len(ps) != 1 || ps[0].ID != "p1" {
		t.Fatalf("proposals after second open: %+v, %v", ps, err)
	}
}

// A database upgraded from version 1 gets the space tables too.
func TestSpacesUpgradeFromV1(t *testing.T) {
	testutil.CheckGoroutines(t)
	path := filepath.Join(t.TempDir(), "meerkat.db")
	makeV1(t, path)
	sp := reopen(t, path, Options{}).Spaces()
	if err := sp.PutGrant(spGrant("g1")); err != nil {
		t.Fatalf("PutGrant after upgrading from version 1: %v", err)
	}
	if gs, err := sp.Grants("lab"); err != nil || len(gs) != 1 {
		t.Fatalf("grants: %+v, %v", gs, err)
	}
}

// A read-only store reads the space tables a writer filled and refuses
// every write with ErrReadOnly.
func TestSpacesReadOnly(t *testing.T) {
	testutil.CheckGoroutines(t)
	path := filepath.Join(t.TempDir(), "meerkat.db")
	w, err := Open(path, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	if err := w.Spaces().PutGrant(spGrant("g1")); err != nil {
		t.Fatal(err)
	}
	if err := w.Spaces().PutProposal(spProposal("p1")); err != nil {
		t.Fatal(err)
	}
	r, err := Open(path, Options{ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	sp := r.Spaces()
	if gs, err := sp.Grants(""); err != nil || len(gs) != 1 || gs[0].ID != "g1" {
		t.Fatalf("read-only Grants: %+v, %v", gs, err)
	}
	if ps, err := sp.Proposals(""); err != nil || len(ps) != 1 || ps[0].ID != "p1" {
		t.Fatalf("read-only Proposals: %+v, %v", ps, err)
	}
	check := func(name string, err error) {
		t.Helper()
		if !errors.Is(err, ErrReadOnly) {
			t.Errorf("%s on a read-only store: %v, want ErrReadOnly", name, err)
		}
	}
	_, err = sp.Remember("lab", spPeer(1), "m", "c", time.Now())
	check("Remember", err)
	check("Forget", sp.Forget("lab", spPeer(1), "m"))
	check("PutGrant", sp.PutGrant(spGrant("g2")))
	_, err = sp.DeleteGrants("lab", "g1")
	check("DeleteGrants", err)
	check("PutProposal", sp.PutProposal(spProposal("p2")))
	_, _, err = sp.Expire(time.Now(), time.Now())
	check("Expire", err)
	if gs, err := w.Spaces().Grants(""); err != nil || len(gs) != 1 {
		t.Fatalf("grants after refused writes: %+v, %v", gs, err)
	}
}

func TestSpacesAfterClose(t *testing.T) {
	testutil.CheckGoroutines(t)
	s, _ := openStore(t, Options{})
	sp := s.Spaces()
	if err := sp.PutGrant(spGrant("g1")); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	check := func(name string, err error) {
		t.Helper()
		if !errors.Is(err, ErrClosed) {
			t.Errorf("%s after Close: %v, want ErrClosed", name, err)
		}
	}
	_, err := sp.Remember("lab", spPeer(1), "m", "c", time.Now())
	check("Remember", err)
	check("Forget", sp.Forget("lab", spPeer(1), "m"))
	check("PutGrant", sp.PutGrant(spGrant("g2")))
	_, err = sp.DeleteGrants("lab", "g1")
	check("DeleteGrants", err)
	_, err = sp.DeleteGrants("lab")
	check("DeleteGrants()", err)
	_, err = sp.Grants("")
	check("Grants", err)
	check("PutProposal", sp.PutProposal(spProposal("p2")))
	_, err = sp.Proposals("")
	check("Proposals", err)
	_, _, err = sp.Expire(time.Now(), time.Now())
	check("Expire", err)
}

func TestSpacesTimeRange(t *testing.T) {
	testutil.CheckGoroutines(t)
	s, _ := openStore(t, Options{})
	sp := s.Spaces()
	far := time.Date(3000, 1, 1, 0, 0, 0, 0, time.UTC)
	early := time.Date(1500, 1, 1, 0, 0, 0, 0, time.UTC)
	if _, err := sp.Remember("lab", spPeer(1), "m", "c", far); err == nil || !strings.Contains(err.Error(), "out of range") {
		t.Errorf("Remember at year 3000: %v", err)
	}
	g := spGrant("g")
	g.Created = early
	if err := sp.PutGrant(g); err == nil {
		t.Error("PutGrant created in year 1500 succeeded")
	}
	for i := range 3 {
		p := spProposal("p")
		*[]*time.Time{&p.Created, &p.Expires, &p.Updated}[i] = far
		if err := sp.PutProposal(p); err == nil {
			t.Errorf("PutProposal with time %d in year 3000 succeeded", i)
		}
	}
	if _, _, err := sp.Expire(far, time.Time{}); err == nil {
		t.Error("Expire with a year-3000 cutoff succeeded")
	}
	if _, _, err := sp.Expire(time.Time{}, early); err == nil {
		t.Error("Expire with a year-1500 cutoff succeeded")
	}
	if gs, _ := sp.Grants(""); len(gs) != 0 {
		t.Fatalf("refused writes stored %+v", gs)
	}
	if fresh, err := sp.Remember("lab", spPeer(1), "m", "c", time.Now()); err != nil || fresh != space.RememberNew {
		t.Fatalf("the refused Remember was stored: %v, %v", fresh, err)
	}
	// The Unix epoch itself is a time, not "none".
	g = spGrant("epoch")
	g.Created = time.Unix(0, 0)
	if err := sp.PutGrant(g); err != nil {
		t.Fatal(err)
	}
	if gs, err := sp.Grants(""); err != nil || len(gs) != 1 || gs[0].Created.IsZero() || !gs[0].Created.Equal(time.Unix(0, 0)) {
		t.Fatalf("epoch Created read back as %+v, %v", gs, err)
	}
}

// Capabilities are stored as readable JSON text holding the given bytes,
// and proposal payloads as JSON text (NULL when empty).
func TestSpacesJSONText(t *testing.T) {
	testutil.CheckGoroutines(t)
	s, _ := openStore(t, Options{})
	sp := s.Spaces()
	g := spGrant("g")
	g.Capabilities = append(g.Capabilities, meup.Capability{Kind: json.RawMessage(`["chat", "a<b"]`), Payload: json.RawMessage(`null`)})
	if err := sp.PutGrant(g); err != nil {
		t.Fatal(err)
	}
	var typ, text string
	if err := s.db.QueryRow(`SELECT typeof(capabilities), capabilities FROM space_grants`).Scan(&typ, &text); err != nil {
		t.Fatal(err)
	}
	want := `[{"id":"c","kind":"mcp/request","payload":{"method" : "tools/list"}},{"kind":["chat", "a<b"],"payload":null}]`
	if typ != "text" || text != want {
		t.Fatalf("capabilities stored as %s %s, want text %s", typ, text, want)
	}
	if !json.Valid([]byte(text)) {
		t.Fatalf("stored capabilities are not JSON: %s", text)
	}
	gs, err := sp.Grants("lab")
	if err != nil {
		t.Fatal(err)
	}
	if got := string(gs[0].Capabilities[1].Payload); got != "null" {
		t.Fatalf("a null payload read back as %q", got)
	}
	p := spProposal("with")
	q := spProposal("without")
	q.Payload = nil
	for _, x := range []space.Proposal{p, q} {
		if err := sp.PutProposal(x); err != nil {
			t.Fatal(err)
		}
	}
	rows, err := s.db.Query(`SELECT id, typeof(payload), coalesce(payload, '') FROM space_proposals ORDER BY id`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var got []string
	for rows.Next() {
		var id, typ, payload string
		if err := rows.Scan(&id, &typ, &payload); err != nil {
			t.Fatal(err)
		}
		got = append(got, id+" "+typ+" "+payload)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	if w := `[with text {"method":"tools/call"} without null ]`; fmt.Sprint(got) != w {
		t.Fatalf("proposal payloads stored as %s, want %s", got, w)
	}
}

// Space writes share the committer and its transactions with the inbox.
func TestSpacesSharesCommits(t *testing.T) {
	testutil.CheckGoroutines(t)
	s, _ := openStore(t, Options{FlushInterval: 50 * time.Millisecond, MaxBatch: 1000})
	sp := s.Spaces()
	var wg sync.WaitGroup
	for i := range 20 {
		wg.Go(func() {
			if fresh, err := sp.Remember("lab", spPeer(1), fmt.Sprint("m", i), "c", time.Now()); err != nil || fresh != space.RememberNew {
				t.Errorf("Remember: %v, %v", fresh, err)
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
}

// Rows a person or another program wrote that do not decode fail the
// read with an error naming the table, never a panic; the store keeps
// working. CHECK constraints stop some of them, so the test turns them
// off on its own connection.
func TestSpacesMalformedRows(t *testing.T) {
	testutil.CheckGoroutines(t)
	grants := func(sp space.Store) error { _, err := sp.Grants("lab"); return err }
	proposals := func(sp space.Store) error { _, err := sp.Proposals(""); return err }
	const key = `zeroblob(32)`
	cases := []struct {
		name, insert, want string
		read               func(space.Store) error
	}{
		{
			"grant capabilities not JSON",
			`INSERT INTO space_grants VALUES ('lab', 'g', ` + key + `, ` + key + `, '[{"kind":', NULL)`,
			"capabilities do not decode",
			grants,
		},
		{
			"grant capabilities not an array",
			`INSERT INTO space_grants VALUES ('lab', 'g', ` + key + `, ` + key + `, '{"kind":"chat"}', NULL)`,
			"capabilities do not decode",
			grants,
		},
		{
			"grant capability without kind",
			`INSERT INTO space_grants VALUES ('lab', 'g', ` + key + `, ` + key + `, '[{"id":"x"}]', NULL)`,
			"no kind",
			grants,
		},
		{
			"grant granter",
			`INSERT INTO space_grants VALUES ('lab', 'g', x'01', ` + key + `, '[]', NULL)`,
			"malformed granter",
			grants,
		},
		{
			"grant grantee",
			`INSERT INTO space_grants VALUES ('lab', 'g', ` + key + `, zeroblob(33), '[]', NULL)`,
			"malformed grantee",
			grants,
		},
		{
			"grant created",
			`INSERT INTO space_grants VALUES ('lab', 'g', ` + key + `, ` + key + `, '[]', 'yesterday')`,
			"space_grants",
			grants,
		},
		{
			"proposal payload",
			`INSERT INTO space_proposals VALUES ('lab', 'p', 'a', ` + key + `, '[]', '{"method"', 'pending', NULL, NULL, NULL, '', '', '', '', NULL)`,
			"payload is not valid JSON",
			proposals,
		},
		{
			"proposal key",
			`INSERT INTO space_proposals VALUES ('lab', 'p', 'a', x'0102', '[]', NULL, 'pending', NULL, NULL, NULL, '', '', '', '', NULL)`,
			"malformed proposer key",
			proposals,
		},
		{
			"proposal addressed",
			`INSERT INTO space_proposals VALUES ('lab', 'p', 'a', ` + key + `, '{"x":1}', NULL, 'pending', NULL, NULL, NULL, '', '', '', '', NULL)`,
			"addressed participants",
			proposals,
		},
		{
			"proposal request_to",
			`INSERT INTO space_proposals VALUES ('lab', 'p', 'a', ` + key + `, '[]', NULL, 'fulfilled', NULL, NULL, NULL, 'b', '', 'r', '', '{"x":1}')`,
			"participants its request addressed",
			proposals,
		},
		{
			"proposal expires",
			`INSERT INTO space_proposals VALUES ('lab', 'p', 'a', ` + key + `, '[]', NULL, 'pending', NULL, 'soon', NULL, '', '', '', '', NULL)`,
			"space_proposals",
			proposals,
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			sp := withRawRow(t, tc.insert).Spaces()
			err := tc.read(sp)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("read = %v, want an error mentioning %q", err, tc.want)
			}
			if table := strings.Fields(tc.insert)[2]; !strings.Contains(err.Error(), table) {
				t.Fatalf("read = %v, want an error naming table %s", err, table)
			}
			t.Log(err)
			// The store still works.
			if err := sp.PutGrant(spGrant("other")); err != nil {
				t.Fatalf("PutGrant after the failed read: %v", err)
			}
			if fresh, err := sp.Remember("lab", spPeer(1), "m", "c", time.Now()); err != nil || fresh != space.RememberNew {
				t.Fatalf("Remember after the failed read: %v, %v", fresh, err)
			}
		})
	}
}
