package store

import (
	"context"
	"database/sql"
	"fmt"
)

// migrations are the schema changes in order: migrations[i] takes the
// database from version i to version i+1. Append only; never edit a
// migration that has shipped. Each runs in the same transaction as the
// schema_version update that records it.
var migrations = []string{
	// Version 1.
	//
	// items holds every admitted record. seq is the rowid; AUTOINCREMENT
	// makes SQLite remember the largest seq ever used (sqlite_sequence), so
	// sequences are never reused even after the newest rows were expired.
	// Times are Unix nanoseconds. acked_at is NULL while the item is
	// unacknowledged.
	//
	// dedup holds one row per (sender, id) ever admitted, independent of
	// items, so a repeat is recognised after its item left history.
	`
CREATE TABLE items (
	seq      INTEGER PRIMARY KEY AUTOINCREMENT,
	sender   BLOB    NOT NULL CHECK (length(sender) = 32),
	id       BLOB    NOT NULL CHECK (length(id) = 16),
	kind     TEXT    NOT NULL,
	peer     TEXT    NOT NULL,
	received INTEGER NOT NULL,
	payload  BLOB    NOT NULL,
	acked_at INTEGER
);
CREATE INDEX items_unacked ON items (seq) WHERE acked_at IS NULL;
CREATE INDEX items_acked ON items (acked_at) WHERE acked_at IS NOT NULL;
CREATE INDEX items_key ON items (sender, id);
CREATE TABLE dedup (
	sender     BLOB    NOT NULL,
	id         BLOB    NOT NULL,
	first_seen INTEGER NOT NULL,
	PRIMARY KEY (sender, id)
) WITHOUT ROWID;
CREATE INDEX dedup_first_seen ON dedup (first_seen);
`,

	// Version 2: the outbox (outbox.go).
	//
	// outbox holds envelopes sealed for sending until they are delivered
	// or killed. seq is the rowid with AUTOINCREMENT, so a seq is never
	// reused, not even after the newest entries were delivered. id is
	// unique: one row per envelope. Times are Unix nanoseconds; NULL means
	// none (the zero time.Time).
	//
	// dead_letters holds killed entries with the same columns, in kill
	// order (rowid dl). seq is the outbox seq the entry had, kept for
	// display only: Revive inserts it into outbox again under a new seq.
	//
	// breakers holds one row per peer whose circuit breaker is not closed.
	`
CREATE TABLE outbox (
	seq          INTEGER PRIMARY KEY AUTOINCREMENT,
	id           BLOB    NOT NULL UNIQUE CHECK (length(id) = 16),
	recipient    BLOB    NOT NULL CHECK (length(recipient) = 32),
	peer         TEXT    NOT NULL,
	kind         TEXT    NOT NULL,
	corr_id      BLOB    NOT NULL CHECK (length(corr_id) = 16),
	payload      BLOB    NOT NULL,
	created      INTEGER,
	expires      INTEGER,
	attempts     INTEGER NOT NULL DEFAULT 0,
	next_attempt INTEGER,
	last_error   TEXT    NOT NULL DEFAULT ''
);
CREATE TABLE dead_letters (
	dl           INTEGER PRIMARY KEY,
	seq          INTEGER NOT NULL,
	id           BLOB    NOT NULL UNIQUE CHECK (length(id) = 16),
	recipient    BLOB    NOT NULL CHECK (length(recipient) = 32),
	peer         TEXT    NOT NULL,
	kind         TEXT    NOT NULL,
	corr_id      BLOB    NOT NULL CHECK (length(corr_id) = 16),
	payload      BLOB    NOT NULL,
	created      INTEGER,
	expires      INTEGER,
	attempts     INTEGER NOT NULL DEFAULT 0,
	next_attempt INTEGER,
	last_error   TEXT    NOT NULL DEFAULT '',
	reason       TEXT    NOT NULL,
	died_at      INTEGER
);
CREATE TABLE breakers (
	peer       BLOB    PRIMARY KEY CHECK (length(peer) = 32),
	failures   INTEGER NOT NULL,
	open_until INTEGER
) WITHOUT ROWID;
`,

	// Version 3.
	//
	// dedup.seq is the item last admitted under the key (NULL when it is
	// not known, e.g. its item expired before this migration). The dedup
	// checks ("is that item still unacknowledged?") find the item by seq,
	// its rowid, so items_key goes: it cost every admission an insert at a
	// random place in one more B-tree, one more page written per commit.
	// The UPDATE uses items_key, so it runs before the DROP.
	`
ALTER TABLE dedup ADD COLUMN seq INTEGER;
UPDATE dedup SET seq = (SELECT max(i.seq) FROM items i WHERE i.sender = dedup.sender AND i.id = dedup.id);
DROP INDEX items_key;
`,

	// Version 4: meta holds facts about the database itself. "id" is a
	// random id made once, when the database is created (or upgraded to
	// this version): a reader that finds another id is reading another
	// database, whose sequence numbers are not those it knew ([Store.ID]).
	`
CREATE TABLE meta (
	key   TEXT PRIMARY KEY,
	value TEXT NOT NULL
) WITHOUT ROWID;
INSERT INTO meta (key, value) VALUES ('id', lower(hex(randomblob(16))));
`,

	// Version 5: the MEUP space engine's state (space.go).
	//
	// space_seen holds one row per MEUP id remembered, keyed by the
	// (space, sender key, id) triple; copy is the id of the Meerkat
	// envelope it came in, at when it was seen (the expiry time).
	//
	// space_grants holds the grants accepted or sent, keyed by (space,
	// grant envelope id); capabilities is their JSON array, kept as text
	// with every kind and payload byte for byte as given.
	//
	// space_proposals holds the proposals seen, keyed by (space, proposal
	// envelope id); payload is the proposed call's JSON text (NULL: none).
	// space_proposals_closed and space_proposals_lapsed serve Expire,
	// which deletes proposals closed long enough ago, and pending ones
	// whose own expiry passed long enough ago.
	//
	// Times are Unix nanoseconds; NULL means none (the zero time.Time).
	`
CREATE TABLE space_seen (
	space  TEXT    NOT NULL,
	sender BLOB    NOT NULL CHECK (length(sender) = 32),
	id     TEXT    NOT NULL,
	copy   TEXT    NOT NULL,
	at     INTEGER,
	PRIMARY KEY (space, sender, id)
) WITHOUT ROWID;
CREATE INDEX space_seen_at ON space_seen (at);
CREATE TABLE space_grants (
	space        TEXT    NOT NULL,
	id           TEXT    NOT NULL,
	granter      BLOB    NOT NULL CHECK (length(granter) = 32),
	grantee      BLOB    NOT NULL CHECK (length(grantee) = 32),
	capabilities TEXT    NOT NULL,
	created      INTEGER,
	PRIMARY KEY (space, id)
) WITHOUT ROWID;
CREATE TABLE space_proposals (
	space        TEXT    NOT NULL,
	id           TEXT    NOT NULL,
	proposer     TEXT    NOT NULL,
	proposer_key BLOB    NOT NULL CHECK (length(proposer_key) = 32),
	addressed    TEXT    NOT NULL, -- JSON array of participant ids
	payload      TEXT,
	state        TEXT    NOT NULL,
	created      INTEGER,
	expires      INTEGER,
	updated      INTEGER,
	closed_by    TEXT    NOT NULL,
	reason       TEXT    NOT NULL,
	request_id   TEXT    NOT NULL,
	response_id  TEXT    NOT NULL,
	PRIMARY KEY (space, id)
) WITHOUT ROWID;
CREATE INDEX space_proposals_closed ON space_proposals (updated) WHERE state <> 'pending';
CREATE INDEX space_proposals_lapsed ON space_proposals (expires) WHERE state = 'pending';
`,

	// Slice A (item classes): items.class is the item's priority class
	// (system, user, interrupt, broadcast, normal), set by the caller at
	// admission; rows from before it are "normal". items_unacked_class
	// serves reads of one class in seq order and counts by class, over
	// the unacknowledged items only.
	`
ALTER TABLE items ADD COLUMN class TEXT NOT NULL DEFAULT 'normal';
CREATE INDEX items_unacked_class ON items (class, seq) WHERE acked_at IS NULL;
`,

	// Slice B: the record of sends and the idempotency keys (sent.go).
	//
	// sent holds one row per envelope this node sealed (never its body):
	// its recipient, kind, state (queued, in_flight, acked, written, dead,
	// failed, answered) and what happened to it. Ids are 16-byte blobs,
	// NULL when absent; times are Unix nanoseconds, NULL when they have
	// not happened.
	//
	// idempotency holds one row per key: the operation, a hash of its
	// arguments, the first call's result as JSON (NULL while that call
	// runs, owned by owner), and when it was made.
	`
CREATE TABLE sent (
	id              BLOB    PRIMARY KEY CHECK (length(id) = 16),
	recipient       BLOB    NOT NULL CHECK (length(recipient) = 32),
	peer            TEXT    NOT NULL,
	kind            TEXT    NOT NULL,
	intent          TEXT    NOT NULL,
	corr_id         BLOB,
	reliable        INTEGER NOT NULL,
	state           TEXT    NOT NULL,
	created         INTEGER,
	updated         INTEGER,
	acked_at        INTEGER,
	attempts        INTEGER NOT NULL,
	last_error      TEXT    NOT NULL,
	reason          TEXT    NOT NULL,
	died_at         INTEGER,
	response_id     BLOB,
	response_status TEXT    NOT NULL,
	answered_at     INTEGER,
	progress        INTEGER NOT NULL,
	progress_id     BLOB,
	progress_at     INTEGER
);
CREATE INDEX sent_created ON sent (created);
CREATE INDEX sent_recipient ON sent (recipient, created);
CREATE TABLE idempotency (
	key       TEXT    PRIMARY KEY,
	op        TEXT    NOT NULL,
	args_hash BLOB    NOT NULL,
	result    BLOB,
	owner     TEXT    NOT NULL,
	created   INTEGER NOT NULL
) WITHOUT ROWID;
CREATE INDEX idempotency_created ON idempotency (created);
`,

	// Slice C (search): the full-text index of items (search.go).
	//
	// items_fts holds the text of each searchable item under its seq (the
	// FTS5 rowid). It is an FTS5 table with its own content: items keeps
	// wire bytes the store does not decode, so the text exists nowhere
	// else, and snippets need it (a contentless table has none; an
	// external-content one would need the text in items and the exact
	// old text to delete it). The trigger deletes an item's row whenever
	// the item goes (expiry, history trimming), so the index never
	// outgrows what it covers. Items admitted before this version have
	// no row: meta's search_backfill names the highest seq still to
	// index, and a writing Open indexes them, newest first
	// (backfillSearch), then deletes the key.
	`
CREATE VIRTUAL TABLE items_fts USING fts5(text, tokenize = 'unicode61 remove_diacritics 2');
CREATE TRIGGER items_fts_delete AFTER DELETE ON items BEGIN
	DELETE FROM items_fts WHERE rowid = old.seq;
END;
INSERT INTO meta (key, value) SELECT 'search_backfill', CAST(max(seq) AS TEXT) FROM items HAVING max(seq) IS NOT NULL;
`,

	// The search index off the admission path (search.go): admission no
	// longer indexes; the committer indexes the items above meta's
	// search_indexed (the highest seq up to which every item is indexed,
	// or had no text, or is gone) in the background and before a search.
	// Every item stored so far was indexed at admission (or waits for
	// the backfill below search_backfill).
	`
INSERT INTO meta (key, value) SELECT 'search_indexed', CAST(coalesce(max(seq), 0) AS TEXT) FROM items;
`,

	// Broadcast and tasks slice: the task table (tasks.go).
	//
	// tasks holds one row per task id this node sent or received under;
	// state is 'open' or 'completed'; local is 1 once this node sent under
	// it (tasks only peers brought are evicted first); result is the completion's JSON
	// text (NULL: none); completed_by the completing key (this node's own
	// for a local completion). task_participants holds the peers of each
	// task, joined = when they joined (their order). Times are Unix
	// nanoseconds.
	`
CREATE TABLE tasks (
	id           TEXT    PRIMARY KEY,
	state        TEXT    NOT NULL CHECK (state IN ('open', 'completed')),
	local        INTEGER NOT NULL DEFAULT 0, -- 1: this node sent under it
	created      INTEGER,
	updated      INTEGER,
	result       TEXT,
	completed_by BLOB    CHECK (completed_by IS NULL OR length(completed_by) = 32),
	completed_at INTEGER
) WITHOUT ROWID;
CREATE INDEX tasks_updated ON tasks (updated);
CREATE TABLE task_participants (
	task   TEXT    NOT NULL,
	peer   BLOB    NOT NULL CHECK (length(peer) = 32),
	joined INTEGER,
	PRIMARY KEY (task, peer)
) WITHOUT ROWID;
`,

	// Slice F (request lifecycle, requests.go): the requests this node
	// sent and their states, and the cancellations received for requests
	// it holds.
	//
	// sent_requests holds one row per request sent (id is the request
	// id, text); recipient the peer's key; deadline NULL when none;
	// state open, answered, timed_out or cancelled; updated when the
	// state last changed; response_id and final_status the final response
	// that arrived (also after a timeout or cancel).
	//
	// held_cancels holds one row per request received from sender that
	// sender cancelled: at, reason (cancelled or deadline) and its note.
	//
	// Times are Unix nanoseconds; NULL means none.
	`
CREATE TABLE sent_requests (
	id           TEXT    NOT NULL PRIMARY KEY,
	recipient    BLOB    NOT NULL CHECK (length(recipient) = 32),
	peer         TEXT    NOT NULL,
	intent       TEXT    NOT NULL,
	created      INTEGER NOT NULL,
	deadline     INTEGER,
	state        TEXT    NOT NULL,
	updated      INTEGER NOT NULL,
	note         TEXT    NOT NULL,
	response_id  TEXT    NOT NULL,
	final_status TEXT    NOT NULL
) WITHOUT ROWID;
CREATE INDEX sent_requests_created ON sent_requests (created);
CREATE INDEX sent_requests_open ON sent_requests (deadline) WHERE state = 'open';
CREATE TABLE held_cancels (
	sender BLOB    NOT NULL CHECK (length(sender) = 32),
	id     TEXT    NOT NULL,
	at     INTEGER NOT NULL,
	reason TEXT    NOT NULL,
	note   TEXT    NOT NULL,
	PRIMARY KEY (sender, id)
) WITHOUT ROWID;
CREATE INDEX held_cancels_at ON held_cancels (at);
`,

	// The duplicate filter's rows written in bulk (dedup.go): meta's
	// dedup_merged is the highest seq up to which every item has its
	// dedup row; the keys of the items above it are held in memory and
	// merged later, or by the next writing Open after a crash. Every item
	// stored so far has its row.
	`
INSERT INTO meta (key, value) SELECT 'dedup_merged', CAST(coalesce(max(seq), 0) AS TEXT) FROM items;
`,

	// The time a call was first claimed under its idempotency key
	// (sent.go): call_at names the call (its envelope ids derive from
	// it), while created, the time of its latest claim, starts the
	// key's window. A key released after a failed call is kept, without
	// an owner, and its retry keeps call_at. NULL: created (keys claimed
	// before this version).
	`
ALTER TABLE idempotency ADD COLUMN call_at INTEGER;
`,

	// The participants the request that fulfilled a proposal addressed
	// (space.go): its response is recorded only from one of them. A JSON
	// array of participant ids; NULL: not known (proposals fulfilled
	// before this version), any member's response is recorded.
	`
ALTER TABLE space_proposals ADD COLUMN request_to TEXT;
`,

	// Final answers found by the request they answer (sent.go, Answered):
	// a sent response's response_status is its own status, and this
	// index finds the responses to one request.
	`
CREATE INDEX sent_answers ON sent (corr_id) WHERE kind = 'response';
`,

	// The search index by lumps of items (search.go): each row of
	// items_fts holds the words of up to lumpItems consecutive items, the
	// lump, under the seq of its first; search_lumps gives its last seq
	// and how many items of its range are still stored (live). Search
	// reads the items of the lumps whose words match and keeps the items
	// that match. items_fts keeps no copy of the text (the items'
	// payloads hold it); with the words' positions it finds phrases, and
	// the lumps are several times cheaper to write than a row per item.
	// The triggers count an item's deletion against its lump and delete
	// the lump with its last item. Everything is indexed again from the
	// first item, in the background (meta's search_indexed back to 0),
	// which also covers what the backfill had left.
	`
DROP TRIGGER items_fts_delete;
DROP TABLE items_fts;
CREATE VIRTUAL TABLE items_fts USING fts5(text, tokenize = 'unicode61 remove_diacritics 2', content = '', contentless_delete = 1);
CREATE TABLE search_lumps (
	first INTEGER PRIMARY KEY,
	last  INTEGER NOT NULL,
	live  INTEGER NOT NULL
);
CREATE TRIGGER items_search_delete AFTER DELETE ON items BEGIN
	UPDATE search_lumps SET live = live - 1
		WHERE first = (SELECT max(first) FROM search_lumps WHERE first <= old.seq) AND last >= old.seq;
END;
CREATE TRIGGER search_lumps_empty AFTER UPDATE OF live ON search_lumps WHEN new.live <= 0 BEGIN
	DELETE FROM items_fts WHERE rowid = new.first;
	DELETE FROM search_lumps WHERE first = new.first;
END;
UPDATE meta SET value = '0' WHERE key = 'search_indexed';
DELETE FROM meta WHERE key = 'search_backfill';
`,
}

// schemaVersion is the schema version this build writes.
var schemaVersion = len(migrations)

// migrate brings db to schemaVersion. It refuses (with ErrNewerSchema) a
// database written by a newer build, because that build may rely on
// invariants this one does not keep.
func migrate(ctx context.Context, db *sql.DB) error {
	tx, err := db.BeginTx(ctx, nil) // BEGIN IMMEDIATE (see dsn)
	if err != nil {
		return fmt.Errorf("begin migration: %w", err)
	}
	defer tx.Rollback()
	if _, err := tx.ExecContext(ctx, `CREATE TABLE IF NOT EXISTS schema_version (version INTEGER NOT NULL)`); err != nil {
		return fmt.Errorf("create schema_version: %w", err)
	}
	var version int
	switch err := tx.QueryRowContext(ctx, `SELECT version FROM schema_version`).Scan(&version); err {
	case nil:
	case sql.ErrNoRows:
		if _, err := tx.ExecContext(ctx, `INSERT INTO schema_version (version) VALUES (0)`); err != nil {
			return fmt.Errorf("init schema_version: %w", err)
		}
	default:
		return fmt.Errorf("read schema version: %w", err)
	}
	if version > schemaVersion {
		return fmt.Errorf("%w: version %d, this build supports up to %d (upgrade meerkatd or use another file)",
			ErrNewerSchema, version, schemaVersion)
	}
	if version < 0 {
		return fmt.Errorf("store: invalid schema version %d", version)
	}
	for v := version; v < schemaVersion; v++ {
		if _, err := tx.ExecContext(ctx, migrations[v]); err != nil {
			return fmt.Errorf("migrate to schema version %d: %w", v+1, err)
		}
	}
	if version == schemaVersion {
		return nil
	}
	if _, err := tx.ExecContext(ctx, `UPDATE schema_version SET version = ?`, schemaVersion); err != nil {
		return fmt.Errorf("record schema version: %w", err)
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("commit migration: %w", err)
	}
	return nil
}
