package node

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/meerkatd/meerkatd/comms/audit"
	"github.com/meerkatd/meerkatd/comms/outbox"
	"github.com/meerkatd/meerkatd/comms/wire"
	"github.com/meerkatd/meerkatd/config"
)

// Dead letters beyond outbox.dead_letters_max are deleted oldest first,
// each deletion an audit row; the newest stays.
func TestDeadLettersPrunedAndAudited(t *testing.T) {
	h, _ := testHome(t, "alice", func(c *config.Config) {
		c.Outbox.Backoff = "20ms"
		c.Outbox.DeadLettersMax = 1
		c.Audit.Enabled = true
	})
	n := startTest(t, h, ModeServe)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	var ids []string
	for i := range 3 {
		sent, err := n.SendMessage(ctx, "bob", "lost", SendOptions{Reliable: true, TTL: 50 * time.Millisecond, NoWait: true})
		if err != nil {
			t.Fatalf("send %d: %v", i, err)
		}
		ids = append(ids, sent.ID)
		waitFor(t, 10*time.Second, "the dead letter", func() bool {
			dl, err := n.DeadLetters(ctx)
			return err == nil && len(dl) == i+1
		})
	}
	if k, err := n.ob.Prune(); err != nil || k != 2 {
		t.Fatalf("Prune = %d, %v; want 2", k, err)
	}
	dl, err := n.DeadLetters(ctx)
	if err != nil || len(dl) != 1 || dl[0].ID != ids[2] {
		t.Fatalf("dead letters left: %+v, %v; want the newest", dl, err)
	}
	st, err := n.Status(ctx)
	if err != nil || st.DeadLetters != 1 {
		t.Fatalf("status: %d dead letters, %v", st.DeadLetters, err)
	}
	var dropped []audit.Record
	for _, r := range readAudit(t, n) {
		if r.Event == audit.EventDroppedDeadLetter {
			dropped = append(dropped, r)
		}
	}
	if len(dropped) != 2 || dropped[0].ID != ids[0] || dropped[1].ID != ids[1] {
		t.Fatalf("audit rows for dropped dead letters: %+v; want %s, %s", dropped, ids[0], ids[1])
	}
	for _, r := range dropped {
		if r.Dir != audit.DirOut || r.Peer != "bob" || !strings.HasPrefix(r.Reason, outbox.PruneCap+": "+outbox.ReasonExpired) {
			t.Fatalf("audit row %+v", r)
		}
	}
}

// status shows the size of the database, which grows as items arrive.
func TestStatusShowsDatabaseSize(t *testing.T) {
	h, bob := testHome(t, "alice", nil)
	n := startTest(t, h, ModeServe)
	ctx := context.Background()
	st, err := n.Status(ctx)
	if err != nil || st.DBBytes <= 0 {
		t.Fatalf("status of a new node: db_bytes %d, %v; want > 0", st.DBBytes, err)
	}
	before := st.DBBytes
	for range 50 {
		arrive(t, n, bob, wire.Message(strings.Repeat("x", 8<<10)))
	}
	st, err = n.Status(ctx)
	if err != nil || st.DBBytes <= before {
		t.Fatalf("db_bytes after 50 items of 8 KiB: %d (was %d), %v", st.DBBytes, before, err)
	}

	// In memory mode there is no database.
	hm, _ := testHome(t, "mem", func(c *config.Config) { c.Store.Mode = config.StoreMemory })
	m := startTest(t, hm, ModeServe)
	if st, err := m.Status(ctx); err != nil || st.DBBytes != 0 {
		t.Fatalf("memory node: db_bytes %d, %v; want 0", st.DBBytes, err)
	}
}

// A trusted peer flooding a node whose agent acknowledges everything it
// gets does not grow the database past the history cap (plus the WAL the
// writes go through), and a backlog acknowledged at once gives its space
// back to the file system.
func TestFloodStaysUnderHistoryCap(t *testing.T) {
	const (
		capBytes = 1 << 20
		size     = 32 << 10
		slack    = 6 << 20 // the WAL between checkpoints, and free pages not yet handed back
	)
	h, bob := testHome(t, "alice", func(c *config.Config) { c.Store.HistoryMaxBytes = capBytes })
	n := startTest(t, h, ModeServe)
	ctx := context.Background()
	body := strings.Repeat("x", size)
	dbBytes := func() int64 {
		t.Helper()
		st, err := n.Status(ctx)
		if err != nil {
			t.Fatal(err)
		}
		return st.DBBytes
	}
	ackAll := func() int { // page by page, as an agent does
		t.Helper()
		total := 0
		for {
			b, err := n.Receive(ctx, Query{Limit: 1000})
			if err != nil {
				t.Fatal(err)
			}
			if len(b.Messages) == 0 {
				return total
			}
			a, err := n.Ack(ctx, AckRequest{UpTo: b.Cursor})
			if err != nil {
				t.Fatal(err)
			}
			total += a.Acked
		}
	}
	// 20 MB through the node, acknowledged as it comes.
	var peak int64
	for range 60 {
		for range 10 {
			arrive(t, n, bob, wire.Message(body))
		}
		if k := ackAll(); k != 10 {
			t.Fatalf("acknowledged %d, want 10", k)
		}
		peak = max(peak, dbBytes())
	}
	t.Logf("peak database size during a %d MB flood: %d bytes", 600*size>>20, peak)
	if peak > capBytes+slack {
		t.Fatalf("the database reached %d bytes under a history cap of %d", peak, capBytes)
	}

	// A 8 MB backlog, then acknowledged.
	for range 256 {
		arrive(t, n, bob, wire.Message(body))
	}
	before := dbBytes()
	if before < 256*size {
		t.Fatalf("database with an 8 MB backlog: %d bytes", before)
	}
	if k := ackAll(); k != 256 {
		t.Fatalf("acknowledged %d, want 256", k)
	}
	// The pages the acknowledgement freed go back to the file system as
	// soon as they are checkpointed into the main file; the write-ahead
	// log keeps its size until the hourly maintenance empties it, run
	// here at once.
	main := fileSize(t, filepath.Join(h.Dir, "meerkat.db"))
	if main > capBytes+slack {
		t.Fatalf("the main database file kept %d bytes after its backlog was acknowledged (history cap %d)", main, capBytes)
	}
	if _, _, err := n.mail.(*durableMail).st.Expire(); err != nil {
		t.Fatal(err)
	}
	after := dbBytes()
	t.Logf("database before and after acknowledging the backlog: %d, %d bytes (main file %d)", before, after, main)
	if after > capBytes+slack || after > before/2 {
		t.Fatalf("the database kept %d bytes (was %d) after its backlog was acknowledged", after, before)
	}
}

func fileSize(t *testing.T, path string) int64 {
	t.Helper()
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	return fi.Size()
}
