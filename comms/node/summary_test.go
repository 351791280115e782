package node

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/meerkatd/meerkatd/comms"
	"github.com/meerkatd/meerkatd/comms/audit"
	"github.com/meerkatd/meerkatd/comms/wire"
	"github.com/meerkatd/meerkatd/config"
	"github.com/meerkatd/meerkatd/identity"
	"github.com/meerkatd/meerkatd/transport"
	"github.com/meerkatd/meerkatd/trust"
	"github.com/meerkatd/meerkatd/trust/pair"
)

// logCapture is a slog handler that keeps every record.
type logCapture struct {
	mu   sync.Mutex
	recs []slog.Record
}

func (c *logCapture) Enabled(context.Context, slog.Level) bool { return true }
func (c *logCapture) Handle(_ context.Context, r slog.Record) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.recs = append(c.recs, r.Clone())
	return nil
}
func (c *logCapture) WithAttrs([]slog.Attr) slog.Handler { return c }
func (c *logCapture) WithGroup(string) slog.Handler      { return c }

// matching returns the records whose message contains s.
func (c *logCapture) matching(s string) []slog.Record {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []slog.Record
	for _, r := range c.recs {
		if strings.Contains(r.Message, s) {
			out = append(out, r)
		}
	}
	return out
}

func attrOf(r slog.Record, key string) slog.Value {
	var v slog.Value
	r.Attrs(func(a slog.Attr) bool {
		if a.Key == key {
			v = a.Value
			return false
		}
		return true
	})
	return v
}

// Failed pairing attempts are logged as one summary line per interval,
// not one line each.
func TestPairFailuresOneLinePerInterval(t *testing.T) {
	var c logCapture
	p := newPairFailures(slog.New(&c))
	now := time.Date(2026, 3, 4, 5, 6, 7, 0, time.UTC)
	p.now = func() time.Time { return now }
	for i := range 10000 {
		err := pair.ErrNoOffer
		if i%10 == 0 {
			err = pair.ErrRateLimited
		}
		p.note(fmt.Sprintf("10.0.%d.%d", i>>8&0xff, i&0xff), err)
	}
	p.note("2001:db8::1", pair.ErrNoOffer) // one /64 with the next
	p.note("2001:db8::2", pair.ErrNoOffer)
	if n := len(c.matching("pairing")); n != 0 {
		t.Fatalf("%d log lines before the interval ended, want 0", n)
	}
	p.flush()
	lines := c.matching("pairing")
	if len(lines) != 1 {
		t.Fatalf("%d log lines for one interval, want 1", len(lines))
	}
	r := lines[0]
	if got := attrOf(r, "failed").Int64(); got != 10002 {
		t.Errorf("failed = %d, want 10002", got)
	}
	if got := attrOf(r, "sources").Int64(); got != maxPairSources {
		t.Errorf("sources = %d, want %d (bounded)", got, maxPairSources)
	}
	if !attrOf(r, "more_sources").Bool() {
		t.Error("more_sources not set past the bound")
	}
	if got := attrOf(r, "rate_limited").Int64(); got != 1000 {
		t.Errorf("rate_limited = %d, want 1000", got)
	}
	p.flush() // nothing new: nothing logged
	now = now.Add(summaryInterval)
	p.note("2001:db8::1", pair.ErrNoOffer)
	p.note("2001:db8::ffff", pair.ErrBadProof)
	p.flush()
	lines = c.matching("pairing")
	if len(lines) != 2 {
		t.Fatalf("%d log lines after two intervals, want 2", len(lines))
	}
	if r := lines[1]; attrOf(r, "sources").Int64() != 1 || attrOf(r, "top_source").String() != "2001:db8::/64" ||
		attrOf(r, "since").String() != now.Format(time.RFC3339) {
		t.Errorf("second interval: %v", r)
	}
}

// freeTCP returns a loopback address whose port was free a moment ago.
func freeTCP(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// wrongHello is a pairing hello for an offer that does not exist.
func wrongHello(t *testing.T, key identity.PeerID) []byte {
	t.Helper()
	id := make([]byte, 16)
	rand.Read(id)
	b, err := json.Marshal(map[string]any{"offer": hex.EncodeToString(id), "key": key.String(), "name": "spray",
		"addr": "tcp://127.0.0.1:1", "nonce": make([]byte, 32)})
	if err != nil {
		t.Fatal(err)
	}
	return append(append([]byte(pair.Magic), b...), '\n')
}

// A spray of pairing attempts from thousands of loopback addresses, all
// with wrong codes, neither stops the right code from another address
// from pairing nor writes a log line per attempt.
func TestPairingSprayEndToEnd(t *testing.T) {
	if testing.Short() {
		t.Skip("thousands of TCP connections")
	}
	tcp := func(c *config.Config) { c.Comms.ListenTCP = freeTCP(t); c.Comms.MaxConnections = 4096 }
	var logs logCapture
	ha, _ := testHome(t, "alice", tcp)
	var empty *trust.List
	if err := empty.Save(ha.TrustPath()); err != nil {
		t.Fatal(err)
	}
	alice, err := Start(ha, Options{Mode: ModeServe, Logger: slog.New(&logs)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { alice.Close() })
	hb, _ := testHome(t, "bob", tcp)
	if err := empty.Save(hb.TrustPath()); err != nil {
		t.Fatal(err)
	}
	bob := startTest(t, hb, ModeServe)
	var target string
	for _, a := range alice.Addrs() {
		if a.Scheme == transport.SchemeTCP {
			target = net.JoinHostPort(a.Host, fmt.Sprint(a.Port))
		}
	}
	// Probe: can this host dial from 127.1.0.1 (Linux routes all of 127/8
	// to loopback; others may not)?
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.IPv4(127, 1, 0, 1)}, Timeout: 5 * time.Second}
	if c, err := d.Dial("tcp", target); err != nil {
		t.Skipf("cannot dial from other loopback addresses here: %v", err)
	} else {
		c.Close()
	}
	const sources = 4200 // more than the old limiter's 4096-source table
	stranger, _ := identity.GenerateKeypair()
	hello := wrongHello(t, stranger.ID())
	var wg sync.WaitGroup
	var mu sync.Mutex
	refused := 0
	work := make(chan int)
	for range 32 {
		wg.Go(func() {
			for i := range work {
				d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.IPv4(127, 1, byte(i>>8), byte(i))}, Timeout: 5 * time.Second}
				c, err := d.Dial("tcp", target)
				if err != nil {
					continue
				}
				c.SetDeadline(time.Now().Add(10 * time.Second))
				c.Write(hello)
				line, _ := bufio.NewReader(c).ReadString('\n')
				c.Close()
				if strings.Contains(line, "error") {
					mu.Lock()
					refused++
					mu.Unlock()
				}
			}
		})
	}
	for i := range sources {
		work <- i + 1
	}
	close(work)
	wg.Wait()
	if refused < sources/2 {
		t.Fatalf("only %d of %d spray attempts were answered", refused, sources)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	o, err := alice.PairOffer(ctx, PairOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := bob.PairAccept(ctx, o.Line, ""); err != nil { // from 127.0.0.1
		t.Fatalf("the right code after a spray from %d addresses: %v", sources, err)
	}
	if n := len(logs.matching("pairing")); n != 0 {
		t.Fatalf("%d pairing log lines during the interval, want 0 (one summary per interval)", n)
	}
	alice.flushSummaries()
	lines := logs.matching("pairing")
	if len(lines) != 1 || attrOf(lines[0], "failed").Int64() < int64(refused) {
		t.Fatalf("pairing log lines after the interval: %v", lines)
	}
}

// auditNode is a serving node with an audit log of at most maxBytes
// (bodies recorded), whose trust list holds bob.
func auditNode(t *testing.T, maxBytes int) (*Node, *identity.Keypair) {
	t.Helper()
	h, bob := testHome(t, "alice", func(c *config.Config) {
		c.Store.Mode = config.StoreMemory
		c.Audit.Enabled, c.Audit.Bodies, c.Audit.MaxBytes = true, true, maxBytes
	})
	return startTest(t, h, ModeServe), bob
}

// readAudit closes n and returns every row of its audit log.
func readAudit(t *testing.T, n *Node) []audit.Record {
	t.Helper()
	n.Close()
	recs, st, err := audit.Read(filepath.Join(n.h.Dir, audit.FileName), audit.Filter{}, 0)
	if err != nil || st.Skipped() != 0 {
		t.Fatalf("read: %v, %+v", err, st)
	}
	return recs
}

// A 100,000-frame stranger flood — refusals before the signature check,
// with 4 KiB kinds, some claiming bob's key — keeps the audit log's earlier
// rows (nothing rotates), writes a bounded number of rows, never names bob
// for what he did not sign, and keeps peer-chosen text to a short excerpt.
func TestAuditStrangerFlood(t *testing.T) {
	n, bob := auditNode(t, 1<<20)
	earlier := comms.Event{Type: comms.EventReceived, Peer: "bob", From: bob.ID(), Kind: wire.TypeMessage, ID: identity.NewUUID(), Size: 100}
	n.observeInbound(earlier)
	strangers := make([]identity.PeerID, 200) // more than a summary holds
	for i := range strangers {
		kp, _ := identity.GenerateKeypair()
		strangers[i] = kp.ID()
	}
	long := strings.Repeat("\x1b[2J", 1<<10) // 4 KiB of terminal escapes as the kind
	const frames, intervals = 100000, 5
	for i := range frames {
		var ev comms.Event
		switch i % 4 {
		case 0: // a forgery claiming bob: the Router knows bob's name, but the signature failed
			ev = comms.Event{Type: comms.EventRefused, Peer: "bob", From: bob.ID(), Kind: long, ID: identity.NewUUID(), Reason: comms.RejectBadSignature, Size: 5000}
		case 1:
			ev = comms.Event{Type: comms.EventRefused, From: strangers[i/4%len(strangers)], Kind: long, ID: identity.NewUUID(), Reason: comms.RejectUntrusted, Size: 5000}
		case 2:
			ev = comms.Event{Type: comms.EventRefused, Reason: comms.RejectMalformed, Size: 5000}
		case 3:
			ev = comms.Event{Type: comms.EventRefused, From: strangers[0], Kind: long, Reason: comms.RejectNotForUs, Size: 5000}
		}
		n.observeInbound(ev)
		if (i+1)%(frames/intervals) == 0 {
			n.flushSummaries()
		}
	}
	recs := readAudit(t, n)
	if _, err := os.Stat(filepath.Join(n.h.Dir, audit.FileName+".1")); err == nil {
		t.Error("the flood rotated the audit log")
	}
	if len(recs) == 0 || recs[0].Event != audit.EventReceived || recs[0].ID != earlier.ID.String() {
		t.Fatalf("the earlier row is gone; first row %+v", recs[0])
	}
	if max := 1 + intervals*(maxSummaryRows+4); len(recs) > max {
		t.Fatalf("%d rows for the flood, want at most %d", len(recs), max)
	}
	total := 0
	for _, r := range recs[1:] {
		total += r.Count
		if r.Peer != "" || r.Key != "" {
			t.Errorf("a refusal before the signature check names a peer: %+v", r)
		}
		if len(r.Kind) > maxExcerpt+len("…") || strings.Contains(r.Kind, "\x1b") || len(r.Body) != 0 || r.ID != "" {
			t.Errorf("peer-chosen text in a row: kind %q (%d bytes), body %d bytes, id %q", r.Kind, len(r.Kind), len(r.Body), r.ID)
		}
		if r.Reason == comms.RejectBadSignature && r.Claimed != bob.ID().String() {
			t.Errorf("bad signature row: claimed %q, want bob's key as a claim", r.Claimed)
		}
	}
	if total != frames {
		t.Errorf("rows count %d refusals, want %d", total, frames)
	}
	if bobs, _, _ := audit.Read(filepath.Join(n.h.Dir, audit.FileName), audit.Filter{Peer: "bob"}, 0); len(bobs) != 1 {
		t.Errorf("meerkatd audit --peer bob shows %d rows, want only the one bob signed", len(bobs))
	}
}

// Acks from a trusted peer are counted in one row per interval.
func TestAuditAcksCounted(t *testing.T) {
	n, bob := auditNode(t, 1<<20)
	for range 1000 {
		n.observeInbound(comms.Event{Type: comms.EventAck, Peer: "bob", From: bob.ID(), Kind: wire.TypeAck, ID: identity.NewUUID(), Size: 150})
	}
	recs := readAudit(t, n) // Close writes the last summary
	if len(recs) != 1 {
		t.Fatalf("%d rows for 1000 acks, want 1: %+v", len(recs), recs)
	}
	if r := recs[0]; r.Event != audit.EventAcks || r.Peer != "bob" || r.Key != bob.ID().String() || r.Count != 1000 || r.Size != 150000 {
		t.Fatalf("acks row %+v", r)
	}
}

// A replayed envelope is verified and acknowledged each time, but its
// rows are not: the first few duplicates of a sender in an interval have
// a row each, the rest one summary row naming the verified peer, so that
// a replay cannot rotate earlier rows out of the log.
func TestAuditDuplicatesSummed(t *testing.T) {
	n, bob := auditNode(t, 64<<10)
	earlier := comms.Event{Type: comms.EventReceived, Peer: "bob", From: bob.ID(), Kind: wire.TypeMessage, ID: identity.NewUUID(), Size: 100}
	n.observeInbound(earlier)
	const copies, intervals = 30000, 3
	for i := range copies {
		n.observeInbound(comms.Event{Type: comms.EventDuplicate, Peer: "bob", From: bob.ID(), Kind: wire.TypeMessage, ID: earlier.ID, Size: 100})
		if (i+1)%(copies/intervals) == 0 {
			n.flushSummaries()
		}
	}
	recs := readAudit(t, n)
	if _, err := os.Stat(filepath.Join(n.h.Dir, audit.FileName+".1")); err == nil {
		t.Error("the replay rotated the audit log")
	}
	if len(recs) == 0 || recs[0].ID != earlier.ID.String() {
		t.Fatalf("the earlier row is gone; %d rows", len(recs))
	}
	if want := 1 + intervals*(maxOwnRows+1); len(recs) != want {
		t.Fatalf("%d rows, want %d (per interval %d rows of their own and a summary)", len(recs), want, maxOwnRows)
	}
	own, total := 0, 0
	for _, r := range recs[1:] {
		if r.Event != audit.EventDuplicate || r.Peer != "bob" || r.Key != bob.ID().String() {
			t.Fatalf("row %+v", r)
		}
		if r.Count == 0 {
			own++
			total++
			if r.ID != earlier.ID.String() {
				t.Errorf("a duplicate's own row has id %q", r.ID)
			}
		} else {
			total += r.Count
		}
	}
	if own != intervals*maxOwnRows || total != copies {
		t.Errorf("%d rows of their own, %d duplicates counted; want %d and %d", own, total, intervals*maxOwnRows, copies)
	}
}

// Real frames from a stranger over the Unix socket end up as one summary
// row with their count.
func TestAuditStrangerFramesEndToEnd(t *testing.T) {
	n, _ := auditNode(t, 1<<20)
	stranger, _ := identity.GenerateKeypair()
	const frames = 50
	for range frames {
		e, _ := wire.Seal(stranger, identity.NewUUID(), n.h.Key.ID(), wire.Message(strings.Repeat("x", 100)))
		payload, _ := e.MarshalBinary()
		c, err := net.Dial("unix", n.Addrs()[0].Path)
		if err != nil {
			t.Fatal(err)
		}
		transport.WriteFrame(c, payload)
		c.SetReadDeadline(time.Now().Add(10 * time.Second))
		c.Read(make([]byte, 1)) // the node closes the connection
		c.Close()
	}
	waitFor(t, 10*time.Second, "the refusals", func() bool {
		return n.r.Stats().Rejected[comms.RejectUntrusted] >= frames
	})
	recs := readAudit(t, n)
	if len(recs) != 1 || recs[0].Count != frames || recs[0].Claimed != stranger.ID().String() || recs[0].Reason != comms.RejectUntrusted {
		t.Fatalf("rows %+v, want one untrusted row counting %d", recs, frames)
	}
}
