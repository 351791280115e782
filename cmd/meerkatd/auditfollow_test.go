package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/meerkatd/meerkatd/comms/audit"
	"github.com/meerkatd/meerkatd/identity"
	"github.com/meerkatd/meerkatd/internal/testutil"
)

// meerkatd audit --follow --json prints the rows there, then those
// written while it runs, across rotations, each once, until SIGINT, when
// it exits 0.
func TestAuditFollow(t *testing.T) {
	t.Parallel()
	home := t.TempDir()
	if code, _, errOut := run(t, nil, "init", "--home", home); code != exitOK {
		t.Fatalf("init: %d %s", code, errOut)
	}
	path := filepath.Join(home, audit.FileName)
	l, err := audit.Open(path, audit.Options{MaxBytes: 1500, FlushInterval: time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	n := 0
	write := func(k int) {
		for range k {
			l.Record(audit.Record{Dir: audit.DirOut, Event: audit.EventSent, Peer: "bob", Kind: "message", ID: fmt.Sprintf("00000000-0000-4000-8000-%012d", n)})
			n++
		}
	}
	write(3)
	testutil.WaitFor(t, 10*time.Second, "the first rows", func() bool {
		recs, _, err := audit.Read(path, audit.Filter{}, 0)
		return err == nil && len(recs) == 3
	})

	cmd := exec.Command(binary(t), "audit", "--follow", "--json", "--peer", "bob", "--home", home)
	cmd.Env = baseEnv()
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var ids []string
	var bad []string
	read := make(chan struct{})
	go func() {
		defer close(read)
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			var r audit.Record
			mu.Lock()
			if err := json.Unmarshal(sc.Bytes(), &r); err != nil {
				bad = append(bad, sc.Text())
			} else {
				ids = append(ids, r.ID)
			}
			mu.Unlock()
		}
	}()
	seen := func(k int) func() bool {
		return func() bool { mu.Lock(); defer mu.Unlock(); return len(ids) >= k }
	}
	testutil.WaitFor(t, 10*time.Second, "the rows already there", seen(3))
	for range 6 { // batches of four rows (~600 bytes): several rotations, at most one per batch
		write(4)
		testutil.WaitFor(t, 10*time.Second, "a batch", seen(n))
	}
	if err := cmd.Process.Signal(syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	<-read
	if err := cmd.Wait(); err != nil {
		t.Fatalf("audit --follow after SIGINT: %v", err)
	}
	if _, err := os.Stat(path + ".1"); err != nil {
		t.Fatalf("the log never rotated: %v", err)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(bad) > 0 || len(ids) != n {
		t.Fatalf("%d rows (want %d), bad lines %q", len(ids), n, bad)
	}
	for i, id := range ids {
		if want := fmt.Sprintf("00000000-0000-4000-8000-%012d", i); id != want {
			t.Fatalf("row %d is %s, want %s", i, id, want)
		}
	}
}

// meerkatd audit --peer with a name that is neither a trusted peer's nor
// in the log fails as other commands do with an unknown peer (exit 4,
// unknown_peer; with --json the JSON error), whether or not there is a
// log. A trusted peer's name, a key, a trusted peer's UUID (its key's
// rows) and the name of a peer since removed that the log carries are
// still accepted.
func TestAuditUnknownPeer(t *testing.T) {
	home := t.TempDir()
	if code, _, errOut := run(t, nil, "init", "--home", home); code != exitOK {
		t.Fatalf("init: %d %s", code, errOut)
	}
	unknown := func(when string) {
		t.Helper()
		code, out, errOut := run(t, nil, "audit", "--peer", "nobody", "--home", home)
		if code != exitUnknownPeer || out != "" || errOut != "meerkatd audit: unknown peer: \"nobody\" (unknown_peer)\n" {
			t.Errorf("%s: exit %d, stdout %q, stderr %q; want exit %d, unknown_peer", when, code, out, errOut, exitUnknownPeer)
		}
		code, out, errOut = run(t, nil, "audit", "--peer", "nobody", "--json", "--home", home)
		var doc struct {
			Error struct{ Code, Message string } `json:"error"`
		}
		if err := json.Unmarshal([]byte(out), &doc); err != nil || code != exitUnknownPeer || doc.Error.Code != "unknown_peer" || doc.Error.Message != `unknown peer: "nobody"` {
			t.Errorf("%s --json: exit %d, stdout %q (%v), stderr %q; want exit %d and an unknown_peer JSON error", when, code, out, err, errOut, exitUnknownPeer)
		}
	}
	unknown("no log")

	carol, _ := identity.GenerateKeypair()
	gone, _ := identity.GenerateKeypair()
	if code, _, errOut := run(t, nil, "peers", "add", "carol", carol.ID().String(), "uds:///tmp/carol.sock", "--home", home); code != exitOK {
		t.Fatalf("peers add: %d %s", code, errOut)
	}
	l, err := audit.Open(filepath.Join(home, audit.FileName), audit.Options{})
	if err != nil {
		t.Fatal(err)
	}
	l.Record(audit.Record{Dir: audit.DirOut, Event: audit.EventSent, Peer: "carol", Key: carol.ID().String(), Kind: "message", ID: "00000000-0000-4000-8000-000000000001"})
	l.Record(audit.Record{Dir: audit.DirOut, Event: audit.EventSent, Peer: "dave", Key: gone.ID().String(), Kind: "message", ID: "00000000-0000-4000-8000-000000000002"})
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	unknown("with a log")

	for _, tc := range []struct{ peer, id string }{
		{"carol", "00000000-0000-4000-8000-000000000001"},
		{"CAROL", "00000000-0000-4000-8000-000000000001"}, // a trusted name in any letter case, as elsewhere
		{carol.ID().String(), "00000000-0000-4000-8000-000000000001"},
		{carol.ID().UUID().String(), "00000000-0000-4000-8000-000000000001"},
		{"dave", "00000000-0000-4000-8000-000000000002"}, // removed, but in the log
		{gone.ID().String(), "00000000-0000-4000-8000-000000000002"},
	} {
		code, out, errOut := run(t, nil, "audit", "--peer", tc.peer, "--json", "--home", home)
		var r audit.Record
		if code != exitOK || json.Unmarshal([]byte(out), &r) != nil || r.ID != tc.id {
			t.Errorf("audit --peer %s: exit %d, stdout %q, stderr %q; want the row %s", tc.peer, code, out, errOut, tc.id)
		}
	}
	// A key that does not parse is a bad argument, not an unknown peer.
	if code, _, errOut := run(t, nil, "audit", "--peer", "ed25519:not-base64", "--home", home); code != exitUsage || !strings.Contains(errOut, "not a valid key") {
		t.Errorf("audit --peer with a malformed key: exit %d, stderr %q; want exit %d", code, errOut, exitUsage)
	}
}

// meerkatd audit --event with an event the log does not have fails with
// bad_argument (exit 2) listing the events, with or without a log, also
// with --follow; every event of the log's, and an event a row carries
// (a newer build's), is accepted.
func TestAuditUnknownEvent(t *testing.T) {
	home := t.TempDir()
	if code, _, errOut := run(t, nil, "init", "--home", home); code != exitOK {
		t.Fatalf("init: %d %s", code, errOut)
	}
	refused := func(when string, args ...string) {
		t.Helper()
		code, out, errOut := run(t, nil, append([]string{"audit", "--event", "bogus", "--home", home}, args...)...)
		if code != exitUsage || out != "" || !strings.Contains(errOut, `unknown audit event "bogus": want one of received, duplicate, refused,`) || !strings.Contains(errOut, "dead_letter") || !strings.HasSuffix(errOut, "(bad_argument)\n") {
			t.Errorf("%s: exit %d, stdout %q, stderr %q; want exit %d, bad_argument listing the events", when, code, out, errOut, exitUsage)
		}
	}
	refused("no log")
	l, err := audit.Open(filepath.Join(home, audit.FileName), audit.Options{})
	if err != nil {
		t.Fatal(err)
	}
	l.Record(audit.Record{Dir: audit.DirOut, Event: audit.EventSent, Kind: "message", ID: "00000000-0000-4000-8000-000000000001"})
	l.Record(audit.Record{Dir: audit.DirOut, Event: "teleported", Kind: "message", ID: "00000000-0000-4000-8000-000000000002"})
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	refused("with a log")
	// --follow is refused too, before it follows anything (bounded: a
	// follow runs until interrupted).
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, binary(t), "audit", "--event", "bogus", "--follow", "--home", home)
	cmd.Env = baseEnv()
	if out, err := cmd.CombinedOutput(); cmd.ProcessState.ExitCode() != exitUsage || !strings.Contains(string(out), `unknown audit event "bogus"`) {
		t.Errorf("audit --event bogus --follow: %v, %s", err, out)
	}
	for _, ev := range append(slices.Clone(audit.Events), "teleported") {
		if code, _, errOut := run(t, nil, "audit", "--event", ev, "--home", home); code != exitOK {
			t.Errorf("audit --event %s: exit %d, %s", ev, code, errOut)
		}
	}
}
