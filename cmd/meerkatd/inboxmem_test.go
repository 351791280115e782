package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/meerkatd/meerkatd/comms/node"
	"github.com/meerkatd/meerkatd/comms/wire"
	"github.com/meerkatd/meerkatd/identity"
	"github.com/meerkatd/meerkatd/inbox/store"
	"github.com/meerkatd/meerkatd/internal/testutil"
)

// procStatusKB returns a field of /proc/PID/status in KiB (VmRSS, VmHWM).
func procStatusKB(pid int, field string) (int64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, err
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, field+":"); ok {
			return strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
		}
	}
	return 0, fmt.Errorf("no %s in /proc/%d/status", field, pid)
}

// fillInbox stores count messages of about size bytes each, signed by
// from for to, straight into the database at path (no daemon may run on
// it), and returns their envelope ids. Sealing runs on every CPU; the
// store commits in groups.
func fillInbox(t *testing.T, path string, from *identity.Keypair, to identity.PeerID, count, size int) map[string]bool {
	t.Helper()
	st, err := store.Open(path, store.Options{MaxItems: 2 * count, MaxBytes: 4 * int64(count) * int64(size)})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	filler := strings.Repeat("0123456789abcdef", size/16+1)[:size]
	recs := make(chan store.Record, 256)
	var wg sync.WaitGroup
	workers := runtime.GOMAXPROCS(0)
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := w; i < count; i += workers {
				body := fmt.Sprintf("item %06d ", i) + filler
				e, err := wire.Seal(from, identity.NewUUID(), to, wire.Message(body[:size]))
				if err != nil {
					t.Error(err)
					return
				}
				p, err := e.MarshalBinary()
				if err != nil {
					t.Error(err)
					return
				}
				recs <- store.Record{Sender: e.From, ID: e.ID, Kind: wire.TypeMessage, Peer: "alice", Payload: p}
			}
		}()
	}
	go func() { wg.Wait(); close(recs) }()
	ids := make(map[string]bool, count)
	var pending []*store.Pending
	for r := range recs {
		ids[identity.UUID(r.ID).String()] = true
		pending = append(pending, st.AdmitAsync(r, time.Minute))
	}
	for _, p := range pending {
		if dup, err := p.Wait(); err != nil || dup {
			t.Fatalf("admitting into the inbox: dup %v, %v", dup, err)
		}
	}
	if t.Failed() || len(ids) != count {
		t.Fatalf("filled %d of %d", len(ids), count)
	}
	return ids
}

// An inbox of 20,000 items (about 200 MB) is listed and acknowledged page
// by page through the CLI and the daemon's control socket, each item once,
// while the daemon's memory stays far below the inbox's size.
//
// The bound: a Receive call holds one page, at most MaxBatchItems items
// or about MaxBatchBytes (4 MiB) of content, in three forms at once (the
// stored records read a listPage at a time, the decoded messages, the
// JSON reply), and the CLI acknowledges a page before it asks for the
// next. So the daemon's live heap grows by some tens of MB at most, and
// with the Go collector's headroom (GOGC=100 doubles the live heap) and
// SQLite's page cache it stays under 100 MB; a daemon that read the
// whole inbox for one call, or at startup, would hold at least its
// 200 MB. The CLI streams the same way (each page printed as it comes),
// so its peak stays under the bound too.
//
// Under the race detector the fill alone takes minutes (SQLite and
// ed25519 run instrumented) and the processes' memory is mostly the
// detector's own, so a race build lists a smaller inbox and checks only
// that each item is listed and acknowledged once; make alloc runs the
// memory bound without -race.
func TestInboxPagingMemory(t *testing.T) {
	t.Parallel()
	count, size := 20000, 10<<10
	const maxGrowthKB = 100 << 10
	checkMemory := runtime.GOOS == "linux" && !testutil.RaceEnabled()
	if testutil.RaceEnabled() {
		count, size = 2000, 1<<10
	}
	if runtime.GOOS != "linux" {
		t.Log("memory is read from /proc: checking only that every item is listed and acknowledged once")
	}

	bob := newNode(t, "bob")
	bob.env = append(bob.env,
		"MEERKAT_COMMS_INBOX_MAX="+strconv.Itoa(2*count),
		"MEERKAT_COMMS_INBOX_MAX_BYTES="+strconv.Itoa(4*count*size))
	alice, err := identity.GenerateKeypair()
	if err != nil {
		t.Fatal(err)
	}
	bob.ok("peers", "add", "alice", alice.ID().String(), "uds://"+filepath.Join(bob.home, "alice.sock"))
	bobKey, err := identity.ParsePeerID(bob.key)
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	want := fillInbox(t, filepath.Join(bob.home, node.DBFileName), alice, bobKey, count, size)
	fi, err := os.Stat(filepath.Join(bob.home, node.DBFileName))
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("stored %d items of %d bytes in %v: database %d MB", count, size, time.Since(start).Round(time.Millisecond), fi.Size()>>20)

	bob.start()
	pid := bob.d.cmd.Process.Pid
	var rssStart int64
	if checkMemory {
		if rssStart, err = procStatusKB(pid, "VmRSS"); err != nil {
			t.Fatal(err)
		}
	}
	if s := bob.status(); !s.Daemon {
		t.Fatalf("bob's status: %s", jsonText(s))
	}
	var st struct {
		Inbox int `json:"inbox"`
	}
	bob.okJSON(&st, "status", "--json")
	if st.Inbox != count {
		t.Fatalf("bob's inbox holds %d items, want %d", st.Inbox, count)
	}

	// The listing: stdout is read as it comes (about 200 MB of JSON),
	// keeping only the ids.
	start = time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, binary(t), "inbox", "--ack", "--json", "--page", "500", "--home", bob.home)
	cmd.Env = append(baseEnv(), bob.env...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	seen := make(map[string]int, count)
	listed, decodeErr := decodeInboxIDs(bufio.NewReaderSize(stdout, 1<<20), func(id string) { seen[id]++ })
	waitErr := cmd.Wait()
	if decodeErr != nil || waitErr != nil {
		t.Fatalf("inbox --ack --json: %v, %v\nstderr: %s", waitErr, decodeErr, stderr.String())
	}
	t.Logf("listed and acknowledged %d items in %v", listed, time.Since(start).Round(time.Millisecond))
	for id, n := range seen {
		if n != 1 || !want[id] {
			t.Errorf("item %s listed %d times (stored by the test: %v)", id, n, want[id])
		}
	}
	if listed != count || len(seen) != count {
		t.Errorf("listed %d items, %d distinct; want %d", listed, len(seen), count)
	}
	bob.okJSON(&st, "status", "--json")
	if st.Inbox != 0 {
		t.Errorf("after inbox --ack bob's inbox holds %d items, want 0", st.Inbox)
	}

	if !checkMemory {
		return
	}
	hwm, err := procStatusKB(pid, "VmHWM")
	if err != nil {
		t.Fatal(err)
	}
	cliPeak := cmd.ProcessState.SysUsage().(*syscall.Rusage).Maxrss // KiB on Linux
	t.Logf("daemon: VmRSS %d MB at start, peak VmHWM %d MB; CLI peak %d MB; inbox %d MB",
		rssStart>>10, hwm>>10, cliPeak>>10, int64(count)*int64(size)>>20)
	if hwm-rssStart > maxGrowthKB {
		t.Errorf("the daemon's peak memory grew by %d MB over its %d MB at start while listing a %d MB inbox; want under %d MB",
			(hwm-rssStart)>>10, rssStart>>10, int64(count)*int64(size)>>20, maxGrowthKB>>10)
	}
	if hwm > 2*maxGrowthKB {
		t.Errorf("the daemon's peak memory is %d MB (it held much of the inbox at startup?)", hwm>>10)
	}
	if cliPeak > maxGrowthKB {
		t.Errorf("the CLI's peak memory is %d MB while listing a %d MB inbox; want under %d MB",
			cliPeak>>10, int64(count)*int64(size)>>20, maxGrowthKB>>10)
	}
}

// decodeInboxIDs reads the output of inbox --json, {"messages": [...],
// "cursor": …}, one message at a time, and calls f with each id.
func decodeInboxIDs(r *bufio.Reader, f func(id string)) (int, error) {
	dec := json.NewDecoder(r)
	expect := func(want json.Delim) error {
		tok, err := dec.Token()
		if err != nil {
			return err
		}
		if tok != want {
			return fmt.Errorf("got %v, want %v", tok, want)
		}
		return nil
	}
	if err := expect('{'); err != nil {
		return 0, err
	}
	n := 0
	for dec.More() {
		key, err := dec.Token()
		if err != nil {
			return n, err
		}
		if key != "messages" {
			var skip json.RawMessage
			if err := dec.Decode(&skip); err != nil {
				return n, err
			}
			continue
		}
		if err := expect('['); err != nil {
			return n, err
		}
		for dec.More() {
			var m struct {
				ID   string `json:"id"`
				Kind string `json:"kind"`
			}
			if err := dec.Decode(&m); err != nil {
				return n, err
			}
			if m.Kind != wire.TypeMessage {
				return n, fmt.Errorf("item %s is a %q", m.ID, m.Kind)
			}
			f(m.ID)
			n++
		}
		if err := expect(']'); err != nil {
			return n, err
		}
	}
	return n, expect('}')
}

// inbox --wait ended by SIGINT exits 130 and does not say the inbox is
// empty, also when it was started with SIGINT ignored (a background job
// of a script): it waits for the signal, not for the end of the wait.
func TestInboxWaitInterrupted(t *testing.T) {
	t.Parallel()
	n := newNode(t, "alice")
	n.start()
	for _, extra := range [][]string{nil, {"--json"}} {
		args := append([]string{"-c", `trap "" INT; exec "$0" "$@"`, binary(t), "inbox", "--wait", "5s", "--home", n.home}, extra...)
		cmd := exec.Command("sh", args...)
		cmd.Env = append(baseEnv(), n.env...)
		var stdout, stderr bytes.Buffer
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		start := time.Now()
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		done := make(chan struct{})
		go func() { cmd.Wait(); close(done) }()
		// SIGINT until it is caught: ignored until inbox asks for it.
		tick := time.NewTicker(20 * time.Millisecond)
	signals:
		for {
			select {
			case <-done:
				break signals
			case <-tick.C:
				cmd.Process.Signal(syscall.SIGINT)
			}
		}
		tick.Stop()
		el := time.Since(start)
		if code := cmd.ProcessState.ExitCode(); code != exitInterrupted || el > 4*time.Second ||
			strings.Contains(stderr.String(), "inbox empty") || stdout.Len() != 0 || !strings.Contains(stderr.String(), "interrupted") {
			t.Fatalf("inbox --wait %v, SIGINT: exit %d after %v, stdout %q, stderr %q; want exit %d at once, nothing on stdout, no \"inbox empty\"",
				extra, code, el, stdout.String(), stderr.String(), exitInterrupted)
		}
	}
}
