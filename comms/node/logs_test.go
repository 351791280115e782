package node

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/meerkatd/meerkatd/comms"
	"github.com/meerkatd/meerkatd/config"
	"github.com/meerkatd/meerkatd/identity"
	"github.com/meerkatd/meerkatd/internal/testutil"
	"github.com/meerkatd/meerkatd/transport"
	"github.com/meerkatd/meerkatd/trust"
)

// logLines parses every line of a JSON log; a line that is not a JSON
// object fails the test.
func logLines(t *testing.T, s string) []map[string]any {
	t.Helper()
	var out []map[string]any
	for _, line := range strings.Split(strings.TrimSuffix(s, "\n"), "\n") {
		if line == "" {
			continue
		}
		var m map[string]any
		if err := json.Unmarshal([]byte(line), &m); err != nil {
			t.Fatalf("log line is not JSON: %q: %v", line, err)
		}
		out = append(out, m)
	}
	return out
}

func withMsg(lines []map[string]any, msg string) []map[string]any {
	var out []map[string]any
	for _, l := range lines {
		if l["msg"] == msg {
			out = append(out, l)
		}
	}
	return out
}

// An outage seen in the JSON log: alice sends reliably to bob while bob
// is down (retries, the breaker opens, a short-lived send dies), then bob
// starts and alice's probe gets through (the breaker closes, bob
// recovers). Every line is JSON; no line holds a body.
func TestOutageLog(t *testing.T) {
	const body = "the-body-must-not-be-logged"
	ah, _ := testHome(t, "alice", func(c *config.Config) {
		c.Store.Mode = config.StoreMemory
		c.Outbox.Backoff = "20ms"
		c.Outbox.BreakerFailures = 2
		c.Outbox.BreakerOpenSecs = 1
	})
	bdir, err := os.MkdirTemp("", "mkb")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(bdir) })
	bh, _, err := OpenHome(bdir, OpenOptions{Create: true})
	if err != nil {
		t.Fatal(err)
	}
	bh.Config.Name = "bob"
	bh.Config.Store.Mode = config.StoreMemory
	bobAddr := transport.Addr{Scheme: transport.SchemeUDS, Path: filepath.Join(bdir, config.DefaultSocketName)}
	saveTrust(t, ah.TrustPath(), trust.Peer{Name: "bob", ID: bh.Key.ID(), Addr: bobAddr})
	saveTrust(t, bh.TrustPath(), trust.Peer{Name: "alice", ID: ah.Key.ID(), Addr: transport.Addr{Scheme: transport.SchemeUDS, Path: filepath.Join(ah.Dir, config.DefaultSocketName)}})

	var logBuf testutil.SyncBuffer
	alice, err := Start(ah, Options{Mode: ModeServe, Logger: NewLogger(&logBuf, config.Log{Level: "info", Format: config.LogJSON})})
	if err != nil {
		t.Fatal(err)
	}
	defer alice.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	sent, err := alice.SendMessage(ctx, "bob", body, reliable)
	if err != nil || sent.Delivery != DeliveryQueued {
		t.Fatalf("reliable send while bob is down: %+v, %v", sent, err)
	}
	dead, err := alice.SendMessage(ctx, "bob", body, SendOptions{Reliable: true, TTL: 50 * time.Millisecond, NoWait: true})
	if err != nil {
		t.Fatal(err)
	}
	has := func(msg string) func() bool {
		return func() bool { return strings.Contains(logBuf.String(), `"msg":"`+msg+`"`) }
	}
	waitFor(t, 10*time.Second, "the breaker to open", has(msgOpen))
	waitFor(t, 10*time.Second, "the dead letter", has(msgDeadLetter))

	bob, err := Start(bh, Options{Mode: ModeServe})
	if err != nil {
		t.Fatal(err)
	}
	defer bob.Close()
	waitFor(t, 10*time.Second, "bob's recovery", has(msgRecovered))
	waitFor(t, 10*time.Second, "the outbox to empty", func() bool {
		o, err := alice.Outbox(ctx)
		return err == nil && len(o.Entries) == 0
	})
	alice.Close()

	out := logBuf.String()
	if strings.Contains(out, body) {
		t.Errorf("a body is in the log:\n%s", out)
	}
	lines := logLines(t, out)
	key := bh.Key.ID().String()
	retries := withMsg(lines, msgRetry)
	if len(retries) == 0 {
		t.Fatalf("no retry line:\n%s", out)
	}
	r := retries[0]
	if r["peer"] != "bob" || r["key"] != key || r["level"] != "INFO" || r["attempt"] != 1.0 || r["error_kind"] != "unreachable" || r["next_attempt"] == nil || r["id"] == nil {
		t.Errorf("retry line %v", r)
	}
	// One retry line per peer and interval, though there were more.
	if len(retries) != 1 {
		t.Errorf("%d retry lines within one interval, want 1", len(retries))
	}
	if o := withMsg(lines, msgOpen); len(o) == 0 || o[0]["peer"] != "bob" || o[0]["failures"] != 2.0 || o[0]["until"] == nil {
		t.Errorf("breaker open lines %v", o)
	}
	if p := withMsg(lines, msgProbe); len(p) == 0 {
		t.Errorf("no probe line:\n%s", out)
	}
	if c := withMsg(lines, msgClosed); len(c) != 1 || c[0]["peer"] != "bob" {
		t.Errorf("breaker closed lines %v", c)
	}
	if rec := withMsg(lines, msgRecovered); len(rec) != 1 || rec[0]["peer"] != "bob" || rec[0]["key"] != key || rec[0]["waiting"] != 0.0 {
		t.Errorf("recovery lines %v", rec)
	}
	if d := withMsg(lines, msgDeadLetter); len(d) != 1 || d[0]["id"] != dead.ID || d[0]["peer"] != "bob" || !strings.HasPrefix(fmt.Sprint(d[0]["reason"]), "expired") {
		t.Errorf("dead letter lines %v", d)
	}
}

func saveTrust(t *testing.T, path string, peers ...trust.Peer) {
	t.Helper()
	l, err := trust.New(peers...)
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Save(path); err != nil {
		t.Fatal(err)
	}
}

// The lines about one peer are limited per interval; those left out are
// counted and told with the next line, or at the next flush.
func TestEventLogLimits(t *testing.T) {
	var buf testutil.SyncBuffer
	l := newEventLog(slog.New(slog.NewJSONHandler(&buf, nil)), time.Minute)
	var mu sync.Mutex
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	l.now = func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	advance := func(d time.Duration) { mu.Lock(); now = now.Add(d); mu.Unlock() }
	a, b := peerN(1), peerN(2)
	start := now
	for i := range 5 {
		l.info("m", a, "a", "i", i)
		advance(time.Second)
	}
	l.info("m", b, "b", "i", 0)
	l.info("other", b, "b", "i", 0)
	l.flush() // within the interval: nothing yet
	advance(time.Minute)
	l.flush() // a's four held lines: one count line
	l.flush() // nothing more
	l.info("m", a, "a", "i", 9)
	advance(2 * time.Minute)
	l.info("m", a, "a", "i", 10)

	type row struct {
		Msg             string
		Peer            string
		I               int
		At              string
		NotLogged       int `json:"not_logged"`
		NotLoggedBefore int `json:"not_logged_before"`
	}
	var got []row
	for _, m := range logLines(t, buf.String()) {
		b, _ := json.Marshal(m)
		var r row
		json.Unmarshal(b, &r)
		got = append(got, r)
	}
	want := []row{
		{Msg: "m", Peer: "a", I: 0},
		{Msg: "m", Peer: "b", I: 0},
		{Msg: "other", Peer: "b", I: 0},
		{Msg: "m (the last of several)", Peer: "a", I: 4, At: start.Add(4 * time.Second).Format(time.RFC3339), NotLogged: 4},
		{Msg: "m", Peer: "a", I: 10, NotLoggedBefore: 1},
	}
	if !slices.Equal(got, want) {
		t.Errorf("lines\n%+v\nwant\n%+v", got, want)
	}
}

// A line about a peer comes after the count lines of that peer's other
// events left out before it, oldest first: a breaker's "open" held back
// is not read after its "closed".
func TestEventLogOrder(t *testing.T) {
	var buf testutil.SyncBuffer
	l := newEventLog(slog.New(slog.NewJSONHandler(&buf, nil)), time.Minute)
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	l.now = func() time.Time { return now }
	a, b := peerN(1), peerN(2)
	for _, ev := range []struct {
		msg  string
		peer identity.PeerID
	}{{msgOpen, a}, {msgProbe, a}, {msgOpen, a}, {msgProbe, a}, {msgOpen, a}, {msgOpen, b}, {msgOpen, b}, {msgClosed, a}} {
		l.info(ev.msg, ev.peer, map[identity.PeerID]string{a: "a", b: "b"}[ev.peer])
		now = now.Add(time.Second)
	}
	var got []string
	for _, m := range logLines(t, buf.String()) {
		got = append(got, fmt.Sprint(m["msg"], " ", m["peer"], " ", m["not_logged"]))
	}
	want := []string{
		msgOpen + " a <nil>", msgProbe + " a <nil>", msgOpen + " b <nil>",
		msgProbe + " (the last of several) a 1", msgOpen + " (the last of several) a 2", // by when their last was held: 00:03, 00:04
		msgClosed + " a <nil>",
	}
	if !slices.Equal(got, want) {
		t.Errorf("lines\n%q\nwant\n%q", got, want)
	}
	l.flush()
	now = now.Add(time.Minute)
	l.flush() // b's held "open" comes at the end of its minute
	if lines := logLines(t, buf.String()); len(lines) != 7 || lines[6]["msg"] != msgOpen+" (the last of several)" || lines[6]["peer"] != "b" {
		t.Errorf("after the flush: %v", lines)
	}
}

// The flush at the end of one event's minute writes the peer's other
// held lines with it, in the order they happened: a "closed" held after
// an "open" is not written a minute after it.
func TestEventLogFlushOrder(t *testing.T) {
	var buf testutil.SyncBuffer
	l := newEventLog(slog.New(slog.NewJSONHandler(&buf, nil)), time.Minute)
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	l.now = func() time.Time { return now }
	a := peerN(1)
	for _, msg := range []string{msgOpen, msgClosed, msgOpen, msgClosed, msgOpen} {
		l.info(msg, a, "a")
		now = now.Add(time.Second)
	}
	now = now.Add(time.Minute - 5*time.Second) // the first line's minute is over, the second's not
	l.flush()
	var got []string
	for _, m := range logLines(t, buf.String()) {
		got = append(got, fmt.Sprint(m["msg"], " ", m["not_logged"]))
	}
	want := []string{msgOpen + " <nil>", msgClosed + " <nil>", msgClosed + " (the last of several) 1", msgOpen + " (the last of several) 2"}
	if !slices.Equal(got, want) {
		t.Errorf("lines\n%q\nwant\n%q", got, want)
	}
}

func peerN(b byte) identity.PeerID {
	var raw [32]byte
	raw[0] = b
	id, err := identity.PeerIDFromBytes(raw[:])
	if err != nil {
		panic(err)
	}
	return id
}

func TestErrorKind(t *testing.T) {
	for _, tc := range []struct {
		err  error
		want string
	}{
		{nil, "unknown"},
		{fmt.Errorf("dial: %w", syscall.ECONNREFUSED), "unreachable"},
		{fmt.Errorf("dial: %w", syscall.ENOENT), "unreachable"},
		{fmt.Errorf("ack: %w", context.DeadlineExceeded), "timeout"},
		{fmt.Errorf("x: %w", comms.ErrPeerOffline), "offline"},
		{comms.ErrPlaintextRefused, "plaintext_refused"},
		{fmt.Errorf("x: %w: %w", comms.ErrPeerOffline, &net.DNSError{Err: "no such host", Name: "carol.invalid", IsNotFound: true}), "name_resolution"},
		{fmt.Errorf("x: %w: %w", comms.ErrPeerOffline, &net.DNSError{Err: "i/o timeout", Name: "slow.example", IsTimeout: true}), "offline"},
		{errors.New("something else"), "other"},
	} {
		if got := errorKind(tc.err); got != tc.want {
			t.Errorf("errorKind(%v) = %s, want %s", tc.err, got, tc.want)
		}
	}
}

// A trust reload logs the count and the names added and removed.
func TestTrustReloadLog(t *testing.T) {
	var buf testutil.SyncBuffer
	log := slog.New(slog.NewJSONHandler(&buf, nil))
	addr := transport.Addr{Scheme: transport.SchemeUDS, Path: "/x.sock"}
	before, _ := trust.New(trust.Peer{Name: "a", ID: peerN(1), Addr: addr}, trust.Peer{Name: "b", ID: peerN(2), Addr: addr})
	after, _ := trust.New(trust.Peer{Name: "b", ID: peerN(3), Addr: addr}, trust.Peer{Name: "c", ID: peerN(4), Addr: addr})
	logTrustReload(log, before, after)
	lines := logLines(t, buf.String())
	if len(lines) != 1 {
		t.Fatalf("lines %v", lines)
	}
	l := lines[0]
	if l["peers"] != 2.0 || fmt.Sprint(l["added"]) != "[b c]" || fmt.Sprint(l["removed"]) != "[a b]" || l["readdressed"] != nil {
		t.Errorf("reload line %v", l)
	}
	// The same key at another address: readdressed, not added and removed.
	var buf2 testutil.SyncBuffer
	log = slog.New(slog.NewJSONHandler(&buf2, nil))
	moved, _ := trust.New(trust.Peer{Name: "b", ID: peerN(3), Addr: transport.Addr{Scheme: transport.SchemeUDS, Path: "/y.sock"}}, trust.Peer{Name: "c", ID: peerN(4), Addr: addr})
	logTrustReload(log, after, moved)
	if l := logLines(t, buf2.String())[0]; fmt.Sprint(l["added"], l["removed"], l["readdressed"]) != "[] [] [b]" {
		t.Errorf("reload line after an address change %v", l)
	}
}
