package store

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/meerkatd/meerkatd/comms/outbox"
	"github.com/meerkatd/meerkatd/inbox"
	"github.com/meerkatd/meerkatd/internal/filemode"

	"modernc.org/sqlite" // also registers the "sqlite" database/sql driver
)

// Errors returned by a Store. ErrFull and ErrClosed wrap their [inbox]
// counterparts, so errors.Is(err, inbox.ErrFull) holds for either backend.
var (
	// ErrFull means Options.MaxItems unacknowledged items are stored; the
	// record was not stored.
	ErrFull = fmt.Errorf("store: full: %w", inbox.ErrFull)
	// ErrShare means the sender holds its share (Options.PeerShare) of a
	// store over half full; other senders are still admitted. It wraps
	// inbox.ErrShare (and so inbox.ErrFull), not ErrFull.
	ErrShare = fmt.Errorf("store: %w", inbox.ErrShare)
	// ErrClosed means the store was closed.
	ErrClosed = fmt.Errorf("store: closed: %w", inbox.ErrClosed)
	// ErrNewerSchema means the database was written by a newer build with a
	// schema version this build does not know; Open refuses it unchanged.
	ErrNewerSchema = errors.New("store: database schema is newer than this build")
	// ErrReadOnly is returned by the writing methods of a store opened
	// with Options.ReadOnly.
	ErrReadOnly = errors.New("store: opened read only")
	// ErrOlderSchema means a read-only open found a database of an older
	// schema version, which only a writing open upgrades.
	ErrOlderSchema = errors.New("store: database schema is older than this build")
	// ErrEmptyFile means the database file exists but is empty: never a
	// database Open made (it creates one whole, see create), but what a
	// copy or restore cut short leaves. Open refuses it rather than start
	// over with nothing, the duplicate filter included.
	ErrEmptyFile = errors.New("store: the database file is empty")
	// ErrDamaged means SQLite found the database file damaged (or not a
	// database at all).
	ErrDamaged = errors.New("store: the database is damaged")
	// ErrOrphanWAL means the database file is missing but its -wal file
	// is there: a new database would take the log's pages in.
	ErrOrphanWAL = errors.New("store: the database file is missing but its -wal file is there")
)

// emptyFix, damagedFix and orphanFix say what to do about ErrEmptyFile,
// ErrDamaged and ErrOrphanWAL.
const (
	emptyFix   = "was a copy or a restore cut short? Restore it from a backup, or remove it (with its -wal and -shm files) to start with an empty store: the inbox, the outbox and the memory of the envelopes already received then start empty"
	damagedFix = "restore it and its -wal file from a backup, or move them aside to start with an empty store: the inbox, the outbox and the memory of the envelopes already received then start empty"
	orphanFix  = "restore the database (the -wal file holds only its latest changes), or move the -wal and -shm files aside to start with an empty store"
)

// Defaults for zero Options fields.
const (
	DefaultFlushInterval    = 0 // commit what is queued, do not wait for more
	DefaultMaxBatch         = 256
	DefaultMaxItems         = inbox.DefaultMax
	DefaultDedupWindow      = 7 * 24 * time.Hour
	DefaultHistoryRetention = 7 * 24 * time.Hour
	DefaultHistoryMaxBytes  = 256 << 20
	DefaultWALMaxBytes      = 64 << 20
)

const (
	// busyTimeout bounds how long a connection waits for a lock held by
	// another connection (a checkpoint, a reader starting while the WAL
	// is reset) before failing with SQLITE_BUSY.
	busyTimeout = 5 * time.Second
	// maxConns is the connection pool size: the committer plus readers.
	maxConns = 4
)

// Record is one stored item. The store interprets only Sender and ID (the
// dedup key) and Seq; the other fields are kept for the caller.
type Record struct {
	Seq      uint64    // assigned by the store: increasing, never reused, also across restarts
	Sender   [32]byte  // sender public key
	ID       [16]byte  // envelope id
	Kind     string    // e.g. "message", "request", "response"
	Peer     string    // sender's trust-list name at receipt
	Received time.Time // zero: set by Admit from Options.Now
	Payload  []byte    // the envelope's wire bytes
	// Class is the caller's ordering class for the item ("": "normal");
	// ListClass and CountClasses select and count by it.
	Class string
	// Text is the item's search text when the caller has it at hand
	// (Admit and AdmitAsync then do not call Options.SearchText, which
	// would decode the payload again); it must be what
	// Options.SearchText returns for the record. Reads leave it "".
	Text string
}

// Options are a Store's knobs; the zero value of each field means its
// default.
type Options struct {
	// FlushInterval is the group-commit window: how long the committer
	// keeps collecting after the first request of a batch. Zero (the
	// default) means it does not wait: it commits what is queued, and what
	// arrives while that commit runs forms the next batch. Under load
	// batches grow by themselves; a lone admission pays no added latency.
	FlushInterval time.Duration
	// MaxBatch flushes a batch early once this many requests wait; it also
	// bounds the queue of requests not yet collected.
	MaxBatch int
	// MaxItems is the number of unacknowledged items at which admission
	// fails with ErrFull.
	MaxItems int
	// MaxBytes bounds the total payload size of unacknowledged items:
	// an admission past it fails with ErrFull (one item is always admitted
	// into an empty store). Zero means no byte limit.
	MaxBytes int64
	// PeerShare, if positive, gives each sender a fair share of the
	// store ([inbox.FairShare] with this percentage): once it is over
	// half full, an admission from a sender holding more than its share
	// fails with ErrShare while other senders are still admitted. Items
	// with a zero Sender (local ones) have no share. Zero: no share.
	PeerShare int
	// DedupWindow is how long (Sender, ID) stays known after admission.
	DedupWindow time.Duration
	// HistoryRetention is how long acknowledged items are kept.
	HistoryRetention time.Duration
	// HistoryMaxBytes bounds the payload bytes of acknowledged items
	// (history): once an acknowledgement or Expire finds more, the
	// oldest acknowledged items are deleted until at most 9/10 of it
	// remain. Unacknowledged items are never deleted for room (MaxItems
	// and MaxBytes refuse admissions instead). Zero means
	// DefaultHistoryMaxBytes; negative means no cap.
	HistoryMaxBytes int64
	// WALMaxBytes is the size the write-ahead log is truncated to after a
	// checkpoint (PRAGMA journal_size_limit). Zero means
	// DefaultWALMaxBytes.
	WALMaxBytes int64
	// Now is the clock for timestamps and expiry; nil means time.Now.
	Now func() time.Time
	// ReadOnly opens an existing database for reading only (a command
	// looking at a home no daemon serves): nothing is created, migrated
	// or written, and the writing methods return ErrReadOnly. A missing
	// file is an error wrapping fs.ErrNotExist.
	ReadOnly bool
	// SearchText, if set, gives the text Search finds a stored item by
	// ("": the item is not searchable; at most MaxSearchText bytes are
	// indexed), from the item (Sender, ID, Kind, Peer, Received,
	// Payload; Seq is not always known). It must depend on nothing else:
	// Admit and AdmitAsync call it, on the caller's goroutine and so
	// concurrently, and the committer calls it again for items it reads
	// back. Admission does not index: the committer indexes admitted
	// items in the background, in batches, and Search first catches the
	// index up (search.go); Search calls it again to check the items it
	// finds. Nil indexes nothing (the items wait for a later Open that
	// has it), and Search then fails.
	SearchText func(Record) string
	// pragmas are added to every connection's DSN (tests: a page limit
	// that fills the "disk").
	pragmas string
	// indexOnSearch (tests) leaves indexing to Search: no background
	// pages, none at Close, as if the process stopped before them.
	indexOnSearch bool
	// mergeAt, mergeIdle and mergeSlice (tests) replace the duplicate
	// filter's constants of the same names (dedup.go) when positive.
	mergeAt    int
	mergeIdle  time.Duration
	mergeSlice int
}

func (o Options) withDefaults() Options {
	if o.FlushInterval < 0 {
		o.FlushInterval = DefaultFlushInterval
	}
	if o.MaxBatch <= 0 {
		o.MaxBatch = DefaultMaxBatch
	}
	if o.MaxItems <= 0 {
		o.MaxItems = DefaultMaxItems
	}
	if o.DedupWindow <= 0 {
		o.DedupWindow = DefaultDedupWindow
	}
	if o.HistoryRetention <= 0 {
		o.HistoryRetention = DefaultHistoryRetention
	}
	if o.HistoryMaxBytes == 0 {
		o.HistoryMaxBytes = DefaultHistoryMaxBytes
	}
	if o.WALMaxBytes <= 0 {
		o.WALMaxBytes = DefaultWALMaxBytes
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.mergeAt <= 0 {
		o.mergeAt = mergeAt
	}
	if o.mergeIdle <= 0 {
		o.mergeIdle = mergeIdle
	}
	if o.mergeSlice <= 0 {
		o.mergeSlice = mergeSlice
	}
	return o
}

// Store is a durable inbox in one SQLite file. It is safe for concurrent
// use; the zero value is not usable, call [Open].
//
// Lock order: mu before sigMu.
type Store struct {
	db   *sql.DB
	opts Options
	path string // the database file, for DiskSize

	// reqs carries write requests to commitLoop, the only writer. It is
	// closed by Close once no sender can be inside send.
	reqs chan *request
	wg   sync.WaitGroup // commitLoop

	// mu guards closed. send and the readers hold it for reading while
	// they use reqs or db; Close takes it for writing, so after it sets
	// closed no one sends on reqs and no reader touches db.
	mu        sync.RWMutex
	closed    bool
	closing   chan struct{} // closed when Close starts: unblocks senders waiting for room
	closeOnce sync.Once
	// verify is Search's table for checking the items of a lump
	// (search.go), made at first use.
	verifyOnce sync.Once
	verify     *verifier
	verifyErr  error
	closeErr   error

	// The WAL's sync (walsync.go). committing counts the batches that
	// began to commit (runBatch, before the commit makes them visible),
	// committed those whose commit returned. syncMu serializes the syncs
	// and guards wal; syncStarted counts the syncs begun, syncDone is the
	// number of the last one completed, syncedTo the committed count it
	// covered. syncErr is set for good when a sync fails.
	committing  atomic.Uint64
	committed   atomic.Uint64
	syncMu      sync.Mutex
	wal         walFile
	syncStarted atomic.Uint64
	syncDone    atomic.Uint64
	syncedTo    atomic.Uint64
	syncErr     atomic.Pointer[error]

	sigMu sync.Mutex
	// changed is closed (and replaced) after every commit that added
	// items or acknowledged some; closed for good by Close.
	changed chan struct{}

	id           string               // the database's id (meta); set by Open
	stmts        map[string]*sql.Stmt // by query; owned by commitLoop, closed by Close
	unacked      int                  // owned by commitLoop (and Open before it starts)
	unackedBytes int64                // payload bytes of unacked items; owned like unacked
	count        atomic.Int64         // unacked as of the last commit, for Len
	countBytes   atomic.Int64         // unackedBytes as of the last commit, for Bytes
	kindsDelta   map[string]int       // runBatch's changes to the unacked count by kind, applied by commit; owned by commitLoop
	txns         atomic.Int64         // committed batch transactions, for tests
	// shares counts unacked items and bytes per sender as of the last
	// commit; sharesNext is runBatch's copy, kept by commit on success.
	// Owned by commitLoop (and Open before it starts).
	shares, sharesNext inbox.Shares

	// kinds counts unacked items by kind as of the last commit, for
	// CountKinds: a count in SQL would read every unacknowledged row
	// (their kind is stored with the payload), for every page of a
	// large inbox listed.
	kindsMu sync.Mutex
	kinds   map[string]int

	// full is set when an admission was refused for lack of room and
	// cleared only once the unacknowledged items fall below 90% of
	// MaxItems and the largest refused record (need bytes) fits again:
	// until then every admission is refused, so a later, smaller envelope
	// cannot slip in ahead of a refused one its sender will retry. The
	// *Next values are runBatch's, kept by commit on success. All are
	// owned by commitLoop.
	full, fullNext bool
	need, needNext int64

	// history is the payload bytes of acknowledged items; historyNext
	// is runBatch's, kept by commit on success. checkpoint is the WAL
	// checkpoint mode commit runs after a batch that vacuumed ("": none).
	// All are owned by commitLoop.
	history, historyNext int64
	checkpoint           string

	// deliveredErr holds the first failure of an asynchronous
	// Outbox.Delivered since the last Delivered call reported one.
	deliveredErr atomic.Pointer[error]
	// commitErr is the error of the last transaction if it failed (a full
	// disk, an I/O error), nil once one commits: what Writable reports.
	commitErr atomic.Pointer[error]

	// Search index high-water mark (search.go): indexed is the highest
	// seq up to which every stored item has been indexed (meta
	// search_indexed), owned by commitLoop (and Open before it starts);
	// indexedSeq is its copy for Search. lastSeq is the highest seq of
	// an admitted item as of the last commit; lastSeqNext is runBatch's,
	// kept by commit on success.
	indexed     int64
	indexedSeq  atomic.Int64
	lastSeq     atomic.Int64
	lastSeqNext int64
	// recent holds the search texts of the items admitted above
	// recentFrom; deleted is runBatch's report that it may have deleted
	// items (search.go). Owned by commitLoop (and Open before it starts).
	recent      []indexed
	recentBytes int
	recentFrom  int64
	deleted     bool

	// pending holds the keys admitted since the duplicate filter's last
	// merge into the dedup table (dedup.go); dedup is runBatch's view on
	// top of it. Both are owned by commitLoop.
	pending map[dedupKey]dedupEntry
	dedup   dedupBatch
	// merging is a merge in slices (dedup.go): the keys pending when it
	// started, in key order, not yet written; the mark moves to
	// mergingTo once all are. Owned by commitLoop.
	merging   []dedupAdd
	mergingTo int64
	// run is runBatch's state for a run of admissions (admit.go), owned
	// by commitLoop.
	run admitRun
	// merged is the merge mark (meta dedup_merged) as last written or
	// read; owned by commitLoop (and Open before it starts).
	merged int64
}

type opKind uint8

const (
	opAdmit opKind = iota
	opAck
	opExpire
	// Outbox operations (outbox.go).
	opOutboxAdd
	opOutboxDelivered
	opOutboxAttempted
	opOutboxKill
	opOutboxRevive
	opOutboxDrop
	opOutboxSaveBreaker
	opOutboxSync
	opOutboxPrune
	// Space operations (space.go).
	opSpaceRemember
	opSpaceForget
	opSpacePutGrant
	opSpaceDeleteGrants
	opSpacePutProposal
	opSpaceExpire
	// Send record and idempotency operations (sent.go), slice B.
	opSentPut
	opSentUpdate
	opSentPrune
	opIdemClaim
	opIdemFinish
	opIdemRelease
	opSentBatch
	// Task operations (tasks.go; broadcast and tasks slice).
	opTaskTouch
	opTaskComplete
	// Request lifecycle (slice F, requests.go): fn runs in the batch.
	opRequests
	// opIndex indexes one page of items for search, up to upTo, after
	// the batch it came in commits (search.go).
	opIndex
	// opMerge merges the duplicate filter's pending keys into the dedup
	// table (dedup.go).
	opMerge
	// opMergeSlice merges the next slice of the keys being merged a
	// slice at a time (dedup.go).
	opMergeSlice
)

// request is one write for commitLoop. done is 1-buffered and receives
// exactly one result.
type request struct {
	op   opKind
	rec  Record                         // opAdmit
	text string                         // opAdmit: rec's search text (search.go)
	seqs []uint64                       // opAck
	ob   *outboxReq                     // opOutbox*; nil for the others
	sp   *spaceReq                      // opSpace*; nil for the others
	sn   *sentReq                       // opSent*, opIdem*; nil for the others
	tk   *taskReq                       // opTask*; nil for the others
	rq   func(*outboxTx, *result) error // opRequests; nil for the others
	upTo int64                          // opIndex
	done chan result
}

// result is the outcome of one request. n and m: for opAck, n acknowledged;
// opExpire, n dedup rows and m history rows deleted; opOutboxDrop, n
// dropped; opSpaceRemember, n is 1 if fresh; opSpaceDeleteGrants, n
// deleted; opSpaceExpire, n seen rows and m proposals deleted.
type result struct {
	dup   bool
	n, m  int
	seq   uint64              // opOutboxAdd: the new entry's Seq; opAdmit: the item's
	revd  []outbox.Entry      // opOutboxRevive: the revived entries
	dead  []outbox.DeadLetter // opOutboxPrune: the removed dead letters
	idem  *Idem               // opIdemClaim: the key's record when it is in use, or claimed again (claim)
	claim bool                // opIdemClaim: idem is a released key, now claimed again
	err   error
	// syncAfter is Store.syncStarted once the batch committed: a sync
	// begun after that holds it (syncSince).
	syncAfter uint64
}

// dsn builds the connection string. Every pooled connection runs these
// pragmas when it opens.
//
// Durability: synchronous=NORMAL, with the store syncing the WAL itself
// before anyone learns of a commit (walsync.go): "acked means on disk",
// one sync for many batches as with FULL's group commit, without the
// committer waiting for the disk. (NORMAL alone would only be safe
// against a process crash: after a power loss the last commits may be
// gone, envelopes already acknowledged among them.)
//
// _txlock=immediate: transactions take the write lock at BEGIN, so a
// transaction never fails half-way trying to upgrade a read lock.
//
// journal_size_limit truncates the WAL after a checkpoint to at most
// walMax bytes. (auto_vacuum is not among these pragmas: setting it
// writes the database header, a write transaction on every connection
// opened; Open sets it once, see convertVacuum.)
func dsn(path string, walMax int64, extra string) string {
	// The path is a URI path: escape what SQLite's URI parser would
	// interpret.
	p := strings.NewReplacer("%", "%25", "?", "%3f", "#", "%23").Replace(path)
	return "file:" + p +
		"?_pragma=busy_timeout(" + fmt.Sprint(busyTimeout.Milliseconds()) + ")" +
		"&_pragma=journal_mode(WAL)" +
		"&_pragma=journal_size_limit(" + fmt.Sprint(walMax) + ")" +
		"&_pragma=synchronous(NORMAL)" +
		"&_txlock=immediate" + extra
}

// Open opens the store at path, creating the file with mode 0600 if it does
// not exist, and brings its schema up to date. It refuses a database with a
// newer schema version ([ErrNewerSchema]), and a database, -wal or -shm
// file that is a symbolic link, another user's or writable by group or
// others (an error wrapping filemode.ErrUnsafe that gives the fix); one
// that others may only read is narrowed to 0600.
func Open(path string, opts Options) (*Store, error) {
	opts = opts.withDefaults()
	if opts.ReadOnly {
		return openReadOnly(path, opts)
	}
	if err := checkFiles(path); err != nil {
		return nil, err
	}
	removeLeftovers(path)
	if _, err := os.Lstat(path); errors.Is(err, fs.ErrNotExist) {
		if err := checkOrphanWAL(path); err != nil {
			return nil, err
		}
		if err := create(path, opts); err != nil {
			return nil, fmt.Errorf("store: create %s: %w", path, err)
		}
	}
	if err := checkNotEmpty(path); err != nil {
		return nil, err
	}
	// A file an earlier build or the user left wider than 0600 is
	// narrowed (the -wal and -shm once SQLite has opened them, below:
	// SQLite creates them with the main file's permissions).
	if err := filemode.Tighten(path); err != nil {
		return nil, fmt.Errorf("store: open %s: %w", path, err)
	}
	// Connections opening a new database at once can deadlock switching
	// it to WAL: SQLite fails one of them with SQLITE_BUSY at once,
	// without waiting (busy_timeout does not apply). Open again, for up
	// to busyTimeout, as the other connection will have finished.
	var s *Store
	deadline := time.Now().Add(busyTimeout)
	for pause := 5 * time.Millisecond; ; pause = min(2*pause, 100*time.Millisecond) {
		db, err := sql.Open("sqlite", dsn(path, opts.WALMaxBytes, opts.pragmas))
		if err != nil {
			return nil, fmt.Errorf("store: open %s: %w", path, err)
		}
		db.SetMaxOpenConns(maxConns)
		db.SetMaxIdleConns(maxConns)
		s = newStore(db, opts, path)
		err = s.init()
		if err == nil {
			break
		}
		db.Close()
		if !isBusy(err) || time.Now().After(deadline) {
			return nil, openError(path, err)
		}
		time.Sleep(pause)
	}
	for _, p := range []string{path + "-wal", path + "-shm"} {
		if err := filemode.Tighten(p); err != nil {
			s.db.Close()
			return nil, fmt.Errorf("store: open %s: %w", path, err)
		}
	}
	s.wg.Add(1)
	go s.commitLoop()
	return s, nil
}

// newStore is a writable Store on db, not yet initialised.
func newStore(db *sql.DB, opts Options, path string) *Store {
	return &Store{
		db:      db,
		opts:    opts,
		path:    path,
		reqs:    make(chan *request, opts.MaxBatch),
		wal:     walFile{path: path + "-wal"},
		closing: make(chan struct{}),
		changed: make(chan struct{}),

		kindsDelta: map[string]int{},
		kinds:      map[string]int{},
		pending:    map[dedupKey]dedupEntry{},
	}
}

// create makes a new database at path, whole: it is made under a
// temporary name beside path, with its schema, and then linked to path
// (a concurrent create that got there first wins; this one is dropped).
// So a database file Open made is never empty, and an empty one is
// refused (ErrEmptyFile) instead of taken for a new store.
func create(path string, opts Options) error {
	var b [8]byte
	rand.Read(b[:])
	tmp := path + ".new-" + hex.EncodeToString(b[:])
	defer func() {
		for _, p := range []string{tmp, tmp + "-wal", tmp + "-shm"} {
			os.Remove(p)
		}
	}()
	f, err := os.OpenFile(tmp, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return err
	}
	f.Close()
	db, err := sql.Open("sqlite", dsn(tmp, opts.WALMaxBytes, opts.pragmas))
	if err != nil {
		return err
	}
	err = newStore(db, opts, tmp).init()
	// Closing the last connection checkpoints the WAL into the file and
	// removes it: the file alone is the database.
	if cerr := db.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return err
	}
	if err := link(tmp, path); err != nil && !errors.Is(err, fs.ErrExist) {
		// A file system without hard links: a rename, unless another
		// create got there first.
		if _, lerr := os.Lstat(path); lerr == nil {
			return nil
		}
		if rerr := os.Rename(tmp, path); rerr != nil {
			return fmt.Errorf("%w; rename: %w", err, rerr)
		}
	}
	return nil
}

// link is os.Link (tests replace it).
var link = os.Link

// removeLeftovers removes what a create that crashed left beside path:
// its temporary files (an older one: a create running now is never that
// slow), or a second name of the database if it crashed after linking.
func removeLeftovers(path string) {
	dir, prefix := filepath.Split(path)
	ents, _ := os.ReadDir(dir)
	for _, e := range ents {
		if !strings.HasPrefix(e.Name(), prefix+".new-") {
			continue
		}
		if fi, err := e.Info(); err == nil && time.Since(fi.ModTime()) > time.Minute {
			os.Remove(filepath.Join(dir, e.Name()))
		}
	}
}

// checkOrphanWAL refuses a -wal file beside path, whose database is
// missing ([ErrOrphanWAL]): SQLite would replay it into a new database,
// another database's pages or a damaged log's.
func checkOrphanWAL(path string) error {
	if fi, err := os.Lstat(path + "-wal"); err == nil && fi.Size() > 0 {
		return fmt.Errorf("store: open %s: %w: %s", path, ErrOrphanWAL, orphanFix)
	}
	return nil
}

// checkNotEmpty refuses an empty database file ([ErrEmptyFile]).
func checkNotEmpty(path string) error {
	if fi, err := os.Stat(path); err == nil && fi.Size() == 0 {
		return fmt.Errorf("store: open %s: %w: %s", path, ErrEmptyFile, emptyFix)
	}
	return nil
}

// openError is the error of a failed Open of path: a damaged database
// ([ErrDamaged]) says what to do.
func openError(path string, err error) error {
	var e *sqlite.Error
	if errors.As(err, &e) && (e.Code()&0xff == sqliteCorrupt || e.Code()&0xff == sqliteNotADB) {
		return fmt.Errorf("store: open %s: %w (%w): %s", path, ErrDamaged, err, damagedFix)
	}
	if errors.As(err, &e) && e.Code()&0xff == sqliteCantOpen {
		if werr := writableDir(filepath.Dir(path)); readOnlyDir(werr) {
			return fmt.Errorf("store: open %s: %w: the directory cannot be written (%v), and SQLite creates %s-shm beside the database even to read it; make the directory writable", path, err, werr, filepath.Base(path))
		}
	}
	return fmt.Errorf("store: open %s: %w", path, err)
}

// readOnlyDir reports whether err, writableDir's, says the directory is
// there but cannot be written.
func readOnlyDir(err error) bool {
	return errors.Is(err, fs.ErrPermission) || errors.Is(err, syscall.EROFS)
}

// writableDir reports why a file cannot be created in dir (nil: it can).
// It creates one and removes it: called only once opening has failed,
// it is the one file a read-only open may make.
func writableDir(dir string) error {
	f, err := os.CreateTemp(dir, ".meerkat-probe-*")
	if err != nil {
		var pe *fs.PathError
		if errors.As(err, &pe) {
			return pe.Err // the reason: the path is the caller's
		}
		return err
	}
	f.Close()
	os.Remove(f.Name())
	return nil
}

// SQLite's result codes for a damaged file, for one that is not a
// database, and for a file it cannot open (or whose -shm it cannot
// create).
const (
	sqliteCorrupt  = 11
	sqliteNotADB   = 26
	sqliteCantOpen = 14
)

// checkFiles refuses a database, -wal or -shm file that is a symbolic
// link, another user's, or writable by group or others
// (internal/filemode): whoever can write them can plant or erase what the
// node holds. Missing files are fine.
func checkFiles(path string) error {
	for _, p := range []string{path, path + "-wal", path + "-shm"} {
		if err := filemode.File(p); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("store: open %s: %w", path, err)
		}
	}
	return nil
}

// sqliteBusy is SQLite's result code SQLITE_BUSY.
const sqliteBusy = 5

// isBusy reports whether err is SQLITE_BUSY (in any of its extended
// forms).
func isBusy(err error) bool {
	var e *sqlite.Error
	return errors.As(err, &e) && e.Code()&0xff == sqliteBusy
}

func (s *Store) init() error {
	ctx := context.Background()
	var mode string
	if err := s.db.QueryRowContext(ctx, `PRAGMA journal_mode`).Scan(&mode); err != nil {
		return fmt.Errorf("read journal mode: %w", err)
	}
	if !strings.EqualFold(mode, "wal") {
		return fmt.Errorf("journal mode is %q, want wal", mode)
	}
	if err := migrate(ctx, s.db); err != nil {
		return err
	}
	if err := s.convertVacuum(ctx); err != nil {
		return err
	}
	if err := s.db.QueryRowContext(ctx, `SELECT value FROM meta WHERE key = 'id'`).Scan(&s.id); err != nil {
		return fmt.Errorf("read the database id: %w", err)
	}
	if err := s.recoverDedup(ctx); err != nil {
		return err
	}
	if err := s.loadIndexMark(ctx); err != nil {
		return err
	}
	return s.loadCounts(ctx)
}

// loadCounts reads the counts the store keeps in memory: unacknowledged
// items, their bytes, and how many of each kind.
func (s *Store) loadCounts(ctx context.Context) error {
	if err := s.db.QueryRowContext(ctx, `SELECT count(*), COALESCE(SUM(length(payload)), 0) FROM items WHERE acked_at IS NULL`).Scan(&s.unacked, &s.unackedBytes); err != nil {
		return fmt.Errorf("count items: %w", err)
	}
	if err := s.db.QueryRowContext(ctx, sqlHistoryBytes).Scan(&s.history); err != nil {
		return fmt.Errorf("count history: %w", err)
	}
	s.count.Store(int64(s.unacked))
	s.countBytes.Store(s.unackedBytes)
	rows, err := s.db.QueryContext(ctx, `SELECT kind, count(*) FROM items WHERE acked_at IS NULL GROUP BY kind`)
	if err != nil {
		return fmt.Errorf("count items by kind: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		var kind string
		var n int
		if err := rows.Scan(&kind, &n); err != nil {
			return fmt.Errorf("count items by kind: %w", err)
		}
		s.kinds[kind] = n
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("count items by kind: %w", err)
	}
	return s.loadShares(ctx)
}

// loadShares counts the unacknowledged items and bytes of each sender.
func (s *Store) loadShares(ctx context.Context) error {
	rows, err := s.db.QueryContext(ctx, `SELECT sender, count(*), COALESCE(SUM(length(payload)), 0) FROM items WHERE acked_at IS NULL GROUP BY sender`)
	if err != nil {
		return fmt.Errorf("count items by sender: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		var sender []byte
		var n, b int64
		if err := rows.Scan(&sender, &n, &b); err != nil {
			return fmt.Errorf("count items by sender: %w", err)
		}
		if k := shareKey(sender); k != "" {
			s.shares.Add(k, n, b)
		}
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("count items by sender: %w", err)
	}
	return nil
}

// shareKey is a sender's key in Store.shares: "" for a zero sender
// (local items, which have no share).
func shareKey(sender []byte) string {
	for _, b := range sender {
		if b != 0 {
			return string(sender)
		}
	}
	return ""
}

// openReadOnly is Open with opts.ReadOnly: no committer runs.
func openReadOnly(path string, opts Options) (*Store, error) {
	if _, err := os.Stat(path); err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			if err := checkOrphanWAL(path); err != nil {
				return nil, err
			}
		}
		return nil, fmt.Errorf("store: open %s: %w", path, err)
	}
	if err := checkFiles(path); err != nil {
		return nil, err
	}
	if err := checkNotEmpty(path); err != nil {
		return nil, err
	}
	p := strings.NewReplacer("%", "%25", "?", "%3f", "#", "%23").Replace(path)
	db, err := sql.Open("sqlite", "file:"+p+"?mode=ro&_pragma=busy_timeout("+fmt.Sprint(busyTimeout.Milliseconds())+")&_pragma=query_only(1)")
	if err != nil {
		return nil, fmt.Errorf("store: open %s: %w", path, err)
	}
	db.SetMaxOpenConns(maxConns)
	db.SetMaxIdleConns(maxConns)
	s := &Store{db: db, opts: opts, path: path, reqs: make(chan *request), closing: make(chan struct{}), changed: make(chan struct{}), kinds: map[string]int{}}
	var version int
	err = db.QueryRow(`SELECT version FROM schema_version`).Scan(&version)
	switch {
	case err != nil:
		err = fmt.Errorf("read schema version: %w", err)
	case version > schemaVersion:
		err = fmt.Errorf("%w: version %d, this build supports up to %d", ErrNewerSchema, version, schemaVersion)
	case version < schemaVersion:
		err = fmt.Errorf("%w: version %d; a daemon of this build upgrades it when it starts", ErrOlderSchema, version)
	default:
		if err = db.QueryRow(`SELECT value FROM meta WHERE key = 'id'`).Scan(&s.id); err != nil {
			err = fmt.Errorf("read the database id: %w", err)
		} else {
			err = s.loadCounts(context.Background())
		}
	}
	if err != nil {
		db.Close()
		return nil, openError(path, err)
	}
	return s, nil
}

// Check reads the database at path as a read-only Open does (a missing
// file is fine, Open creates it, unless its -wal file is there:
// [ErrOrphanWAL]) and, if thorough, has SQLite check its structure
// (quick_check): nil, or an error saying what is wrong and, for
// [ErrEmptyFile], [ErrDamaged] and [ErrOrphanWAL], what to do. A database
// of an older schema passes: a writing Open upgrades it. The thorough
// check reads every page, so it takes time in proportion to the file's
// size, holding one read snapshot all along: a writer's checkpoint that
// must wait for readers waits for it.
func Check(path string, thorough bool) error {
	if _, err := os.Lstat(path); errors.Is(err, fs.ErrNotExist) {
		return checkOrphanWAL(path)
	}
	s, err := Open(path, Options{ReadOnly: true})
	if errors.Is(err, ErrOlderSchema) {
		return nil
	}
	if err != nil {
		return err
	}
	defer s.Close()
	if !thorough {
		return nil
	}
	var verdict string
	if err := s.db.QueryRow(`PRAGMA quick_check(1)`).Scan(&verdict); err != nil {
		return openError(path, err)
	}
	if verdict != "ok" {
		return fmt.Errorf("store: check %s: %w (%s): %s", path, ErrDamaged, verdict, damagedFix)
	}
	return nil
}

// send hands req to commitLoop, waiting for room while ctx allows.
func (s *Store) send(ctx context.Context, req *request) error {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if err := s.sendable(); err != nil {
		return err
	}
	select {
	case s.reqs <- req:
		return nil
	case <-s.closing:
		return ErrClosed
	case <-ctx.Done():
		return ctx.Err()
	}
}

// sendWithin is send with the wait for room bounded by a duration: it
// tries the queue first, and only a full queue costs a context with its
// timer. (One per admission cost as much as queueing it.)
func (s *Store) sendWithin(req *request, wait time.Duration) error {
	if sent, err := s.trySend(req); sent || err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	err := s.send(ctx, req)
	if errors.Is(err, context.DeadlineExceeded) {
		return fmt.Errorf("store: no room in the commit queue within %v: %w", wait, err)
	}
	return err
}

// trySend hands req to commitLoop if the queue has room now.
func (s *Store) trySend(req *request) (sent bool, err error) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if err := s.sendable(); err != nil {
		return false, err
	}
	select {
	case s.reqs <- req:
		return true, nil
	default:
		return false, nil
	}
}

// sendable is why nothing can be sent now, if anything. The caller holds
// s.mu (read).
func (s *Store) sendable() error {
	if s.closed {
		return ErrClosed
	}
	if s.opts.ReadOnly {
		return ErrReadOnly
	}
	if p := s.syncErr.Load(); p != nil {
		return *p
	}
	return nil
}

// do sends req and waits for its result, and for the WAL's sync that
// makes it durable. If ctx ends after req was sent, the request may still
// commit.
func (s *Store) do(ctx context.Context, req *request) result {
	req.done = make(chan result, 1)
	if err := s.send(ctx, req); err != nil {
		return result{err: err}
	}
	select {
	case res := <-req.done:
		if res.err == nil {
			res.err = s.syncSince(res.syncAfter)
		}
		return res
	case <-ctx.Done():
		return result{err: ctx.Err()}
	}
}

// Admit stores r and returns once the transaction holding it committed: a
// nil error means r is on disk and the envelope may be acknowledged. It
// returns dup=true (and a nil error) without storing anything if (r.Sender,
// r.ID) was admitted before within the dedup window — acknowledged or not,
// earlier in the same batch, or before a restart. It returns ErrFull when
// Options.MaxItems unacknowledged items are stored (counting the batch), and
// ErrClosed after Close.
//
// If ctx ends while Admit waits, it returns ctx.Err(); r may or may not have
// been stored, so the caller must not acknowledge it (a retry is then
// recognised as a duplicate if it was). r.Payload must not be modified
// while Admit runs.
func (s *Store) Admit(ctx context.Context, r Record) (dup bool, err error) {
	if r.Received.IsZero() {
		r.Received = s.opts.Now()
	}
	res := s.do(ctx, &request{op: opAdmit, rec: r, text: s.searchText(r)})
	return res.dup, res.err
}

// Ack marks the items with the given sequence numbers acknowledged: they
// leave List and Len and are kept as history for Options.HistoryRetention
// (and while within Options.HistoryMaxBytes: an Ack that takes history
// past it deletes the oldest acknowledged items).
// It returns how many it marked; unknown or already acknowledged numbers are
// skipped. Like Admit it returns after the commit.
func (s *Store) Ack(seqs ...uint64) (int, error) {
	if len(seqs) == 0 {
		if err := s.checkOpen(); err != nil {
			return 0, err
		}
		return 0, nil
	}
	res := s.do(context.Background(), &request{op: opAck, seqs: seqs})
	return res.n, res.err
}

// Expire deletes dedup rows older than Options.DedupWindow (except those
// whose item is still unacknowledged, so it cannot be delivered twice) and
// acknowledged items older than Options.HistoryRetention, counted from
// their acknowledgement, then the oldest acknowledged items while their
// payloads exceed Options.HistoryMaxBytes (down to 9/10 of it). It never
// deletes unacknowledged items. It gives the freed pages back to the file
// system (incremental vacuum) and checkpoints the WAL, truncating it. It
// returns how many rows of each it deleted. Callers run it periodically.
func (s *Store) Expire() (dedup, history int, err error) {
	res := s.do(context.Background(), &request{op: opExpire})
	return res.n, res.m, res.err
}

func (s *Store) checkOpen() error {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.closed {
		return ErrClosed
	}
	return nil
}

// List returns up to limit unacknowledged records with Seq above after,
// oldest first (limit <= 0: all).
func (s *Store) List(after uint64, limit int) ([]Record, error) {
	recs, _, err := s.ListBytes(after, limit, 0)
	return recs, err
}

// ListBytes is List cut short once the payloads read reach maxBytes (0:
// no bound), so that a page of large items is not read whole: it holds
// at least one record (when there is one), and cut reports a page cut
// short before limit, after which more records may follow.
func (s *Store) ListBytes(after uint64, limit, maxBytes int) (recs []Record, cut bool, err error) {
	return s.list(`SELECT seq, sender, id, kind, peer, received, payload, class
		FROM items WHERE acked_at IS NULL AND seq > ? ORDER BY seq LIMIT ?`, after, limit, maxBytes)
}

// ListKind is List for the records of one kind only, without their
// payloads (Payload is empty): for a caller that needs only what the
// columns say (the sender, the id), so that reading many large items
// costs neither their bytes nor decoding them.
func (s *Store) ListKind(kind string, after uint64, limit int) ([]Record, error) {
	recs, _, err := s.list(`SELECT seq, sender, id, kind, peer, received, x'', class
		FROM items WHERE acked_at IS NULL AND kind = ? AND seq > ? ORDER BY seq LIMIT ?`, after, limit, 0, kind)
	return recs, err
}

// DefaultClass is the class of a record admitted without one, and of the
// items stored before classes existed.
const DefaultClass = "normal"

// ListClass is List for the records of one class only.
func (s *Store) ListClass(class string, after uint64, limit int) ([]Record, error) {
	recs, _, err := s.ListClassBytes(class, after, limit, 0)
	return recs, err
}

// ListClassBytes is ListClass cut short as ListBytes is.
func (s *Store) ListClassBytes(class string, after uint64, limit, maxBytes int) (recs []Record, cut bool, err error) {
	return s.list(`SELECT seq, sender, id, kind, peer, received, payload, class
		FROM items WHERE acked_at IS NULL AND class = ? AND seq > ? ORDER BY seq LIMIT ?`, after, limit, maxBytes, class)
}

// list runs q, a query of records after a seq with a limit (and, first,
// the args in pre), stopping once the payloads read reach maxBytes (when
// positive): rows are read one at a time, so the rest are not read.
func (s *Store) list(q string, after uint64, limit, maxBytes int, pre ...any) (out []Record, cut bool, err error) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.closed {
		return nil, false, ErrClosed
	}
	if after >= math.MaxInt64 {
		return nil, false, nil
	}
	if limit <= 0 {
		limit = -1 // no limit in SQLite
	}
	rows, err := s.db.Query(q, append(pre, int64(after), limit)...)
	if err != nil {
		return nil, false, fmt.Errorf("store: list: %w", err)
	}
	defer rows.Close()
	size := 0
	for {
		if maxBytes > 0 && size >= maxBytes && len(out) != limit {
			cut = true // rows.Close ends the query; the next row is not read
			break
		}
		if !rows.Next() {
			break
		}
		var (
			r             Record
			seq, received int64
			sender, id    []byte
		)
		if err := rows.Scan(&seq, &sender, &id, &r.Kind, &r.Peer, &received, &r.Payload, &r.Class); err != nil {
			return nil, false, fmt.Errorf("store: list: %w", err)
		}
		if len(sender) != len(r.Sender) || len(id) != len(r.ID) {
			return nil, false, fmt.Errorf("store: list: item %d has a malformed key", seq)
		}
		r.Seq = uint64(seq)
		copy(r.Sender[:], sender)
		copy(r.ID[:], id)
		r.Received = time.Unix(0, received)
		if r.Payload == nil {
			r.Payload = []byte{}
		}
		size += len(r.Payload)
		out = append(out, r)
	}
	if err := rows.Err(); err != nil {
		return nil, false, fmt.Errorf("store: list: %w", err)
	}
	if err := s.awaitSynced(); err != nil {
		return nil, false, fmt.Errorf("store: list: %w", err)
	}
	return out, cut, nil
}

// LastSeq returns the highest seq the store has handed out (0: none),
// whether or not its item is still stored: no item has a higher one,
// and no cursor a reader was given does either.
func (s *Store) LastSeq() (uint64, error) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.closed {
		return 0, ErrClosed
	}
	var seq int64
	if err := s.db.QueryRow(`SELECT coalesce((SELECT seq FROM sqlite_sequence WHERE name = 'items'), 0)`).Scan(&seq); err != nil {
		return 0, fmt.Errorf("store: last seq: %w", err)
	}
	if err := s.awaitSynced(); err != nil {
		return 0, fmt.Errorf("store: last seq: %w", err)
	}
	return uint64(seq), nil
}

// CountClasses returns how many unacknowledged items each class holds
// (classes with none are left out).
func (s *Store) CountClasses() (map[string]int, error) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.closed {
		return nil, ErrClosed
	}
	rows, err := s.db.Query(`SELECT class, count(*) FROM items WHERE acked_at IS NULL GROUP BY class`)
	if err != nil {
		return nil, fmt.Errorf("store: count classes: %w", err)
	}
	defer rows.Close()
	out := map[string]int{}
	for rows.Next() {
		var (
			c string
			n int
		)
		if err := rows.Scan(&c, &n); err != nil {
			return nil, fmt.Errorf("store: count classes: %w", err)
		}
		out[c] = n
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("store: count classes: %w", err)
	}
	return out, nil
}

// Len returns the number of unacknowledged items as of the last commit.
func (s *Store) Len() (int, error) {
	if err := s.checkOpen(); err != nil {
		return 0, err
	}
	return int(s.count.Load()), nil
}

// Bytes returns the payload bytes of the unacknowledged items as of the
// last commit.
func (s *Store) Bytes() (int64, error) {
	if err := s.checkOpen(); err != nil {
		return 0, err
	}
	return s.countBytes.Load(), nil
}

// Writable returns nil if the database takes writes now: it is open and
// a write transaction can begin (the file and its directory are writable,
// the disk answers); it writes nothing. It waits for the write lock up to
// ctx's end.
func (s *Store) Writable(ctx context.Context) error {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.closed {
		return ErrClosed
	}
	conn, err := s.db.Conn(ctx)
	if err != nil {
		return fmt.Errorf("store: not writable: %w", err)
	}
	defer conn.Close()
	if _, err := conn.ExecContext(ctx, `BEGIN IMMEDIATE`); err != nil {
		return fmt.Errorf("store: not writable: %w", err)
	}
	if _, err := conn.ExecContext(context.Background(), `ROLLBACK`); err != nil {
		return fmt.Errorf("store: not writable: %w", err)
	}
	if p := s.syncErr.Load(); p != nil {
		return fmt.Errorf("store: not writable: %w", *p)
	}
	if p := s.commitErr.Load(); p != nil {
		// A transaction can begin on a full disk: only a commit finds out.
		return fmt.Errorf("store: not writable: the last write failed: %w", *p)
	}
	return nil
}

// ID returns the database's id: random, made when the database was
// created (or upgraded to schema version 4), the same for every Open of
// it. Sequence numbers ([Record].Seq) are never reused within one
// database; a different ID means a different database, whose sequence
// numbers start over.
func (s *Store) ID() string { return s.id }

// Changed returns a channel closed at the next commit that adds items, the
// next acknowledgement, or Close (after Close it is always closed). Waiters
// list again when it fires.
func (s *Store) Changed() <-chan struct{} {
	s.sigMu.Lock()
	defer s.sigMu.Unlock()
	return s.changed
}

func (s *Store) broadcast() {
	s.sigMu.Lock()
	defer s.sigMu.Unlock()
	close(s.changed)
	s.changed = make(chan struct{})
}

// Close stops admission, lets every request already handed to the
// committer complete (those still waiting for room fail with ErrClosed),
// stops the committer and closes the database. Afterwards every method
// returns ErrClosed. Close is idempotent; it returns the first call's
// result.
func (s *Store) Close() error {
	s.closeOnce.Do(func() {
		close(s.closing)
		s.mu.Lock()
		s.closed = true
		close(s.reqs) // no sender is inside send now, and none will enter
		s.mu.Unlock()
		s.wg.Wait() // commitLoop answers everything in reqs, then exits
		walErr := s.closeWAL()
		for _, st := range s.stmts {
			st.Close()
		}
		s.sigMu.Lock()
		close(s.changed) // wake waiters for good
		s.sigMu.Unlock()
		if s.verify != nil {
			s.verify.db.Close()
		}
		if err := s.db.Close(); err != nil {
			s.closeErr = fmt.Errorf("store: close: %w", err)
		} else if walErr != nil {
			s.closeErr = fmt.Errorf("store: close: %w", walErr)
		}
	})
	return s.closeErr
}

// commitLoop is the only writer. It collects requests until FlushInterval
// has passed since the first of a batch or MaxBatch are collected (with no
// FlushInterval: until none is queued), commits them in one transaction
// and answers them. It exits when reqs is closed and drained.
func (s *Store) commitLoop() {
	defer s.wg.Done()
	batch := make([]*request, 0, s.opts.MaxBatch)
	wait := s.opts.FlushInterval > 0
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	idle := time.NewTimer(time.Hour)
	idle.Stop()
	indexedLast := false // the last round indexed a page
	for {
		var req *request
		ok := true
		if s.indexBehind() {
			// Index in the background, a page per round, yielding to
			// admissions: a full page waiting is indexed between groups
			// (unless the last round indexed one), a partial one once no
			// request came for indexIdle.
			if !indexedLast && s.lastSeq.Load()-s.indexed >= indexPage {
				s.indexPage(s.lastSeq.Load())
				indexedLast = true
				continue
			}
			idle.Reset(indexIdle)
			select {
			case req, ok = <-s.reqs:
				idle.Stop()
			case <-idle.C:
				s.indexPage(s.lastSeq.Load())
				indexedLast = true
				continue
			}
		} else if len(s.pending) > 0 {
			// Merge the duplicate filter's keys once nothing came for
			// mergeIdle.
			idle.Reset(s.opts.mergeIdle)
			select {
			case req, ok = <-s.reqs:
				idle.Stop()
			case <-idle.C:
				s.mergePending()
				continue
			}
		} else {
			req, ok = <-s.reqs
		}
		indexedLast = false
		if !ok {
			// Closing: index what is left, so that a read-only store
			// (a command without the daemon) finds it too, and merge the
			// duplicate filter's keys (which the next Open would do).
			for s.indexBehind() && s.indexPage(s.lastSeq.Load()) == nil {
			}
			s.mergePending()
			return
		}
		batch = append(batch, req)
		if wait {
			timer.Reset(s.opts.FlushInterval)
		}
	collect:
		for len(batch) < s.opts.MaxBatch {
			var more *request
			if wait {
				select {
				case more, ok = <-s.reqs:
				case <-timer.C:
					break collect
				}
			} else {
				select {
				case more, ok = <-s.reqs:
				default:
					break collect
				}
			}
			if !ok {
				break collect // closing: commit what we have, then exit
			}
			batch = append(batch, more)
		}
		timer.Stop()
		s.commit(batch)
		if len(s.merging) > 0 || len(s.pending) >= s.opts.mergeAt {
			// In a transaction of its own: a merge that fails leaves
			// the requests of the batch alone.
			s.mergeSlice()
		}
		clear(batch)
		batch = batch[:0]
	}
}

// commit runs batch in one transaction and answers every request: with its
// own result if the transaction committed, with the transaction's error if
// not (then nothing of the batch was stored).
func (s *Store) commit(batch []*request) {
	res := make([]result, len(batch))
	unacked, added, acked, bytes, err := s.runBatch(batch, res)
	if err != nil {
		err = fmt.Errorf("store: commit: %w", err)
		s.commitErr.Store(&err)
		for _, req := range batch {
			if req.op == opOutboxDelivered { // no one waits for it
				s.deliveredErr.CompareAndSwap(nil, &err)
			}
			req.done <- result{err: err}
		}
		return
	}
	s.commitErr.Store(nil)
	after := s.syncStarted.Load() // the batch's frames are written: a sync begun after this holds them
	for i := range res {
		res[i].syncAfter = after
	}
	s.dedup.commit()
	s.unacked, s.unackedBytes = unacked, bytes
	s.full, s.need = s.fullNext, s.needNext
	s.shares = s.sharesNext
	s.history = s.historyNext
	if s.checkpoint != "" {
		// Copy the WAL into the main file, which truncates it to its
		// pages in use; TRUNCATE (after Expire) also empties the WAL,
		// waiting up to busyTimeout for readers. A checkpoint readers
		// keep from completing is finished by a later one: nothing to
		// report.
		s.db.Exec(`PRAGMA wal_checkpoint(` + s.checkpoint + `)`)
		s.checkpoint = ""
	}
	s.count.Store(int64(unacked))
	s.countBytes.Store(bytes)
	if len(s.kindsDelta) > 0 {
		s.kindsMu.Lock()
		for k, d := range s.kindsDelta {
			if s.kinds[k] += d; s.kinds[k] == 0 {
				delete(s.kinds, k)
			}
		}
		s.kindsMu.Unlock()
	}
	s.lastSeq.Store(s.lastSeqNext)
	s.keepTexts(batch, res)
	if len(batch) != 1 || (batch[0].op != opMerge && batch[0].op != opMergeSlice) { // a merge on its own is not a request's
		s.txns.Add(1)
	}
	if added > 0 || acked > 0 {
		s.broadcast()
	}
	indexing := false
	for i, req := range batch {
		if req.op == opIndex {
			indexing = true
			continue
		}
		req.done <- res[i]
	}
	if !indexing {
		return
	}
	// Searches waiting for the index: one page after the batch, with
	// every admission of it answered first.
	for _, req := range batch {
		if req.op == opIndex {
			req.done <- result{err: s.indexPage(req.upTo)}
		}
	}
}

const (
	sqlAck         = `UPDATE items SET acked_at = ? WHERE seq = ? AND acked_at IS NULL RETURNING length(payload), kind, sender`
	sqlExpireDedup = `DELETE FROM dedup WHERE first_seen < ?1 AND NOT EXISTS (SELECT 1 FROM items i
		WHERE i.seq = dedup.seq AND i.acked_at IS NULL)`
	sqlExpireItems = `DELETE FROM items WHERE acked_at IS NOT NULL AND acked_at < ?`
	// sqlHistoryBytes sums the payloads of acknowledged items.
	sqlHistoryBytes = `SELECT COALESCE(SUM(length(payload)), 0) FROM items WHERE acked_at IS NOT NULL`
	// sqlTrimHistory deletes the oldest acknowledged items (by the time
	// of their acknowledgement, then seq) until the payloads of those
	// left sum to at most ?1.
	sqlTrimHistory = `DELETE FROM items WHERE seq IN (SELECT seq FROM (
		SELECT seq, SUM(length(payload)) OVER (ORDER BY acked_at DESC, seq DESC) AS kept
		FROM items WHERE acked_at IS NOT NULL) WHERE kept > ?1)
		RETURNING length(payload)`
)

// runBatch executes batch in one transaction, filling res. It returns the
// unacknowledged count after the batch and how many items it added and
// acknowledged; on error the transaction was rolled back.
func (s *Store) runBatch(batch []*request, res []result) (unacked, added, acked int, bytes int64, err error) {
	ctx := context.Background()
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return 0, 0, 0, 0, err
	}
	defer tx.Rollback()
	now := s.opts.Now()
	nowNS := now.UnixNano()
	var ack *sql.Stmt
	d := &s.dedup
	d.reset(s)
	ob := outboxTx{ctx: ctx, tx: tx, s: s}
	sp := spaceTx{&ob}
	prepare := func(p **sql.Stmt, q string) error {
		if *p != nil {
			return nil
		}
		st, err := s.txStmt(ctx, tx, q)
		*p = st
		return err
	}
	cutoff := now.Add(-s.opts.DedupWindow).UnixNano()
	run := &s.run
	run.reset(s)
	// refuse answers admission i, refused for want of room: a duplicate is
	// still answered as one, anything else gets why.
	// isDup reports whether key, of an admission of the run, is a
	// duplicate: of a key admitted since the last merge, or one the dedup
	// table holds.
	isDup := func(key dedupKey) (bool, error) {
		dup, err := d.pendingDup(ctx, tx, key, cutoff)
		return dup || run.dup(key), err
	}
	refuse := func(i int, r *Record, why error) error {
		dup, err := isDup(makeDedupKey(r))
		if err != nil {
			return err
		}
		if dup {
			res[i].dup = true
		} else {
			res[i].err = why
		}
		return nil
	}
	unacked, bytes = s.unacked, s.unackedBytes
	clear(s.kindsDelta)
	full, need := s.full, s.need
	defer func() { s.fullNext, s.needNext = full, need }()
	s.sharesNext = s.shares
	cloned := false // sharesNext is a copy runBatch may change
	share := func(sender []byte, items, bytes int64) {
		k := shareKey(sender)
		if k == "" {
			return
		}
		if !cloned {
			s.sharesNext, cloned = s.shares.Clone(), true
		}
		s.sharesNext.Add(k, items, bytes)
	}
	history := s.history
	defer func() { s.historyNext = history }()
	lastSeq := s.lastSeq.Load()
	defer func() { s.lastSeqNext = lastSeq }()
	s.checkpoint = ""
	vacuum, mergeNow := false, false
	lowItems := max(s.opts.MaxItems*9/10, 1)
	knownTo := 0 // run.known holds the dedup table's verdict for batch[:knownTo]
	for i, req := range batch {
		if req.op != opAdmit {
			if err := run.flush(ctx, tx, d, res, &lastSeq); err != nil {
				return 0, 0, 0, 0, err
			}
		}
		switch req.op {
		case opAdmit:
			if i >= knownTo { // a run starts
				for knownTo = i; knownTo < len(batch) && batch[knownTo].op == opAdmit; knownTo++ {
				}
				if err := run.lookup(ctx, tx, batch[i:knownTo], cutoff); err != nil {
					return 0, 0, 0, 0, err
				}
			}
			r := &req.rec
			payload := r.Payload
			if payload == nil {
				payload = []byte{} // NOT NULL: store an empty blob
			}
			if full && (unacked == 0 || unacked < lowItems && (s.opts.MaxBytes <= 0 || bytes+need <= s.opts.MaxBytes)) {
				full, need = false, 0 // room again
			}
			if full || unacked >= s.opts.MaxItems || s.opts.MaxBytes > 0 && unacked > 0 && bytes+int64(len(payload)) > s.opts.MaxBytes {
				full, need = true, max(need, int64(len(payload)))
				if err := refuse(i, r, ErrFull); err != nil {
					return 0, 0, 0, 0, err
				}
				continue
			}
			if k := shareKey(r.Sender[:]); k != "" && s.opts.PeerShare > 0 &&
				!s.sharesNext.Admit(s.opts.PeerShare, k, inbox.Usage{Items: int64(unacked), Bytes: bytes},
					inbox.Usage{Items: int64(s.opts.MaxItems), Bytes: s.opts.MaxBytes}, int64(len(payload))) {
				// Over its share: refused, but not the full latch, which
				// would refuse the other senders too.
				if err := refuse(i, r, ErrShare); err != nil {
					return 0, 0, 0, 0, err
				}
				continue
			}
			key := makeDedupKey(r)
			if dup, err := isDup(key); err != nil {
				return 0, 0, 0, 0, err
			} else if dup {
				res[i].dup = true
				continue
			}
			class := r.Class
			if class == "" {
				class = DefaultClass
			}
			d.add(key, dedupEntry{firstSeen: nowNS}) // its seq once written
			run.add(runRow{i: i, key: key, add: d.index[key], rec: r, payload: payload, class: class})
			if len(run.rows) == insertRows {
				if err := run.flush(ctx, tx, d, res, &lastSeq); err != nil {
					return 0, 0, 0, 0, err
				}
			}
			unacked++
			added++
			bytes += int64(len(payload))
			s.kindsDelta[r.Kind]++
			share(r.Sender[:], 1, int64(len(payload)))
		case opAck:
			if err := prepare(&ack, sqlAck); err != nil {
				return 0, 0, 0, 0, err
			}
			for _, seq := range req.seqs {
				if seq == 0 || seq > math.MaxInt64 {
					continue
				}
				var size int64
				var kind string
				var sender []byte
				switch err := ack.QueryRowContext(ctx, nowNS, int64(seq)).Scan(&size, &kind, &sender); err {
				case nil:
					res[i].n++
					bytes -= size
					history += size
					s.kindsDelta[kind]--
					share(sender, -1, -size)
				case sql.ErrNoRows: // unknown or already acknowledged
				default:
					return 0, 0, 0, 0, err
				}
			}
			unacked -= res[i].n
			acked += res[i].n
		case opExpire:
			// Items are deleted: their keys go to the table first.
			if err := d.merge(ctx, tx, lastSeq); err != nil {
				return 0, 0, 0, 0, err
			}
			r, err := tx.ExecContext(ctx, sqlExpireDedup, cutoff)
			if err != nil {
				return 0, 0, 0, 0, err
			}
			n, err := r.RowsAffected()
			if err != nil {
				return 0, 0, 0, 0, err
			}
			r, err = tx.ExecContext(ctx, sqlExpireItems, now.Add(-s.opts.HistoryRetention).UnixNano())
			if err != nil {
				return 0, 0, 0, 0, err
			}
			m, err := r.RowsAffected()
			if err != nil {
				return 0, 0, 0, 0, err
			}
			if err := tx.QueryRowContext(ctx, sqlHistoryBytes).Scan(&history); err != nil {
				return 0, 0, 0, 0, err
			}
			trimmed, err := s.trimHistory(ctx, tx, &history)
			if err != nil {
				return 0, 0, 0, 0, err
			}
			res[i].n, res[i].m = int(n), int(m)+trimmed
			vacuum = true
			s.checkpoint = "TRUNCATE"
		case opOutboxAdd, opOutboxDelivered, opOutboxAttempted, opOutboxKill,
			opOutboxRevive, opOutboxDrop, opOutboxSaveBreaker, opOutboxSync, opOutboxPrune:
			if err := ob.run(req, &res[i]); err != nil {
				return 0, 0, 0, 0, err
			}
		case opSpaceRemember, opSpaceForget, opSpacePutGrant, opSpaceDeleteGrants,
			opSpacePutProposal, opSpaceExpire:
			if err := sp.run(req, &res[i]); err != nil {
				return 0, 0, 0, 0, err
			}
		case opSentPut, opSentUpdate, opSentPrune, opIdemClaim, opIdemFinish, opIdemRelease, opSentBatch:
			if err := ob.runSent(req, &res[i]); err != nil {
				return 0, 0, 0, 0, err
			}
		case opTaskTouch, opTaskComplete: // broadcast and tasks slice
			if err := (taskTx{&ob}).run(req, &res[i]); err != nil {
				return 0, 0, 0, 0, err
			}
		case opRequests: // slice F
			if err := req.rq(&ob, &res[i]); err != nil {
				return 0, 0, 0, 0, err
			}
		case opMerge:
			mergeNow = true
		case opMergeSlice:
			if err := d.mergeSlice(ctx, tx); err != nil {
				return 0, 0, 0, 0, err
			}
		case opIndex: // after the commit (commit)
		default:
			panic(fmt.Sprintf("bug: store: unknown op %d", req.op))
		}
	}
	if err := run.flush(ctx, tx, d, res, &lastSeq); err != nil {
		return 0, 0, 0, 0, err
	}
	if acked > 0 && s.opts.HistoryMaxBytes >= 0 && history > s.opts.HistoryMaxBytes {
		if err := d.merge(ctx, tx, lastSeq); err != nil { // as for opExpire
			return 0, 0, 0, 0, err
		}
		if _, err := s.trimHistory(ctx, tx, &history); err != nil {
			return 0, 0, 0, 0, err
		}
		vacuum = true
	}
	if mergeNow {
		if err := d.merge(ctx, tx, lastSeq); err != nil {
			return 0, 0, 0, 0, err
		}
	}
	s.deleted = vacuum
	if vacuum {
		// Hand the pages the deletions freed back to the file system (in
		// the WAL now; in the main file once checkpointed, after commit).
		if _, err := tx.ExecContext(ctx, `PRAGMA incremental_vacuum`); err != nil {
			return 0, 0, 0, 0, err
		}
		if s.checkpoint == "" {
			s.checkpoint = "PASSIVE"
		}
	}
	s.committing.Add(1) // before readers can see the batch (awaitSynced)
	err = tx.Commit()
	s.committed.Store(s.committing.Load())
	if err != nil {
		return 0, 0, 0, 0, err
	}
	return unacked, added, acked, bytes, nil
}

// trimHistory deletes the oldest acknowledged items while *history is
// over Options.HistoryMaxBytes, down to 9/10 of it (so that the next
// acknowledgements do not each trim one item), and subtracts what it
// deleted from *history. It returns how many items it deleted.
func (s *Store) trimHistory(ctx context.Context, tx *sql.Tx, history *int64) (int, error) {
	limit := s.opts.HistoryMaxBytes
	if limit < 0 || *history <= limit {
		return 0, nil
	}
	rows, err := tx.QueryContext(ctx, sqlTrimHistory, limit-limit/10)
	if err != nil {
		return 0, err
	}
	defer rows.Close()
	n := 0
	for rows.Next() {
		var size int64
		if err := rows.Scan(&size); err != nil {
			return 0, err
		}
		*history -= size
		n++
	}
	return n, rows.Err()
}

// convertVacuum switches the database to auto_vacuum=INCREMENTAL, so
// that pages freed by deletions can be handed back to the file system
// (PRAGMA incremental_vacuum) instead of staying in the file for ever.
// SQLite changes the mode of a database with tables only with a VACUUM,
// which rewrites the file with its live pages: once, when a writing Open
// first finds another mode (a new file, just migrated, costs nothing; a
// file of an older build needs free disk space for a copy of its live
// data, not of its free pages, which it drops).
func (s *Store) convertVacuum(ctx context.Context) error {
	var mode int
	if err := s.db.QueryRowContext(ctx, `PRAGMA auto_vacuum`).Scan(&mode); err != nil {
		return fmt.Errorf("read auto_vacuum: %w", err)
	}
	if mode == autoVacuumIncremental {
		return nil
	}
	c, err := s.db.Conn(ctx) // the pragma applies to the connection running VACUUM
	if err != nil {
		return err
	}
	defer c.Close()
	if _, err := c.ExecContext(ctx, `PRAGMA auto_vacuum = INCREMENTAL`); err != nil {
		return fmt.Errorf("set auto_vacuum: %w", err)
	}
	if _, err := c.ExecContext(ctx, `VACUUM`); err != nil {
		return fmt.Errorf("vacuum to switch to incremental vacuum: %w", err)
	}
	return nil
}

// autoVacuumIncremental is PRAGMA auto_vacuum's value for INCREMENTAL.
const autoVacuumIncremental = 2

// DiskSize returns the bytes the database takes on disk: its file and
// its write-ahead log.
func (s *Store) DiskSize() (int64, error) {
	if err := s.checkOpen(); err != nil {
		return 0, err
	}
	var n int64
	for _, p := range []string{s.path, s.path + "-wal"} {
		fi, err := os.Stat(p)
		if errors.Is(err, fs.ErrNotExist) && p != s.path {
			continue
		}
		if err != nil {
			return 0, fmt.Errorf("store: size: %w", err)
		}
		n += fi.Size()
	}
	return n, nil
}

// prepared returns the database-level statement for q, preparing it the
// first time. tx.StmtContext then reuses its preparation on the
// transaction's connection, so a batch does not compile its statements
// again. Only commitLoop calls it.
func (s *Store) prepared(ctx context.Context, q string) (*sql.Stmt, error) {
	if st, ok := s.stmts[q]; ok {
		return st, nil
	}
	st, err := s.db.PrepareContext(ctx, q)
	if err != nil {
		return nil, err
	}
	if s.stmts == nil {
		s.stmts = map[string]*sql.Stmt{}
	}
	s.stmts[q] = st
	return st, nil
}

// txStmt is the committer's prepared statement for q, in tx.
func (s *Store) txStmt(ctx context.Context, tx *sql.Tx, q string) (*sql.Stmt, error) {
	st, err := s.prepared(ctx, q)
	if err != nil {
		return nil, err
	}
	return tx.StmtContext(ctx, st), nil
}

// txExec runs q, a statement the committer runs often, in tx with args,
// prepared once.
func (s *Store) txExec(ctx context.Context, tx *sql.Tx, q string, args ...any) error {
	st, err := s.txStmt(ctx, tx, q)
	if err != nil {
		return err
	}
	_, err = st.ExecContext(ctx, args...)
	return err
}

// CountKinds returns how many unacknowledged items have one of the given
// kinds as of the last commit (counted in memory, like Len).
func (s *Store) CountKinds(kinds ...string) (int, error) {
	if err := s.checkOpen(); err != nil {
		return 0, err
	}
	s.kindsMu.Lock()
	defer s.kindsMu.Unlock()
	n := 0
	for i, k := range kinds {
		if !slices.Contains(kinds[:i], k) {
			n += s.kinds[k]
		}
	}
	return n, nil
}

// Pending is an admission queued by [Store.AdmitAsync]. One goroutine
// at a time uses it.
type Pending struct {
	s    *Store
	done chan result
	err  error // refused before it was queued
	// The outcome, once received: got is set, with the admission's
	// result (dup, resErr) and its batch's syncAfter.
	got       bool
	dup       bool
	resErr    error
	syncAfter uint64
}

// receive takes the outcome from done, waiting for it.
func (p *Pending) receive() {
	res := <-p.done
	p.got, p.dup, p.resErr, p.syncAfter = true, res.dup, res.err, res.syncAfter
}

// Ready reports whether the outcome is known and durable, so Wait would
// not block.
func (p *Pending) Ready() bool {
	if p.err != nil {
		return true
	}
	if !p.got && len(p.done) > 0 {
		p.receive()
	}
	return p.got && (p.resErr != nil || p.s.synced(p.syncAfter))
}

// Wait blocks until the admission's batch committed (or failed) and the
// WAL holding it is synced, and returns what Admit would have returned.
// Call it once.
func (p *Pending) Wait() (dup bool, err error) {
	if p.err != nil {
		return false, p.err
	}
	if !p.got {
		p.receive()
	}
	if p.resErr != nil {
		return false, p.resErr
	}
	if err := p.s.syncSince(p.syncAfter); err != nil {
		return false, err
	}
	return p.dup, nil
}

// AdmitAsync queues r for the next group commit without waiting for it:
// it waits at most wait for room in the queue, then returns a Pending
// whose Wait fails with an error wrapping context.DeadlineExceeded. Call
// Wait on the result before acknowledging the envelope. Many admissions
// queued this way from one goroutine commit together, where Admit would
// commit them one batch after another.
func (s *Store) AdmitAsync(r Record, wait time.Duration) *Pending {
	if r.Received.IsZero() {
		r.Received = s.opts.Now()
	}
	req := &request{op: opAdmit, rec: r, text: s.searchText(r), done: make(chan result, 1)}
	if err := s.sendWithin(req, wait); err != nil {
		return &Pending{err: err}
	}
	return &Pending{s: s, done: req.done}
}
