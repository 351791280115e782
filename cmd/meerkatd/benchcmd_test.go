package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestBenchUsage: bench's errors about its flags, and about the arguments
// of its hidden children, are usage errors. The suite itself is tested in
// package bench (TestBenchQuick).
func TestBenchUsage(t *testing.T) {
	for _, tc := range []struct {
		args   []string
		stderr string
	}{
		{[]string{"bench", "--transport", "x"}, `--transport "x": want uds, tcp, tls`},
		{[]string{"bench", "--only", "sequential,bogus"}, `--only "bogus": want some of`},
		{[]string{"bench", "--transport", "tcp,nats"}, "--transport nats needs a NATS server: start one (make nats-dev) and pass --nats-url"},
		{[]string{"bench", "--transport", "nats-unsealed"}, "--transport nats-unsealed needs a NATS server"},
		{[]string{"bench", "--reps", "-1"}, `--reps "-1": at least 1`},
		{[]string{"bench", "--reps", "0"}, `--reps "0": at least 1`},
		{[]string{"bench", "--msgs", "5"}, `--msgs "5": at least 10`},
		{[]string{"bench", "--reps", "99999999999"}, `--reps "99999999999": not a whole number from 1 to 2147483647`},
		{[]string{"bench", "--nats", "/nonexistent/natsbench"}, "--nats /nonexistent/natsbench: no such program"},
		{[]string{"bench", "--nats-url", "nats://u:hunter2@127.0.0.1:4222", "--transport", "nats"}, "credentials do not belong in the URL"},
		{[]string{"bench", "--idle-conns", "0"}, `--idle-conns "0": at least 1`},
		{[]string{"bench", "--duration", "0s"}, `--duration "0s": must be positive`},
		{[]string{"bench", "--html", ""}, `--html "": needs a file name`},
		{[]string{"bench", "--html="}, `--html "": needs a file name`},
		{[]string{"bench", "extra"}, "want no arguments"},
		{[]string{"bench", "echo"}, "bench echo uds|tcp ADDRESS"},
		{[]string{"bench", "flood", "uds:///nowhere.sock", "00", "0"}, `CONNS "0"`},
	} {
		code, _, errOut := run(t, nil, tc.args...)
		if code != exitUsage || !strings.Contains(errOut, tc.stderr) || !strings.Contains(errOut, "usage: meerkatd bench [") {
			t.Errorf("%q: code %d, stderr %q; want %d, %q and the usage", tc.args, code, errOut, exitUsage, tc.stderr)
		}
		if strings.Contains(errOut, "hunter2") {
			t.Errorf("%q: the password is in the error: %q", tc.args, errOut)
		}
	}
}

// TestBenchHTMLUnwritable: --html to a path that cannot be written fails
// at once, naming the path, before any repetition runs.
func TestBenchHTMLUnwritable(t *testing.T) {
	path := filepath.Join(t.TempDir(), "no-such-dir", "bench.html")
	start := time.Now()
	code, out, errOut := run(t, nil, "bench", "--quick", "--html", path)
	if code == exitOK || !strings.Contains(errOut, "--html: cannot write "+path) {
		t.Fatalf("code %d, stderr %q; want a failure naming %s", code, errOut, path)
	}
	if out != "" || strings.Contains(errOut, "repetition") || time.Since(start) > 5*time.Second {
		t.Errorf("the run started: %v, stdout %q, stderr %q", time.Since(start), out, errOut)
	}
}

// Ctrl-C during a bench run exits 130 (interrupted), not 1 with Go's
// "context canceled", and leaves no child process.
func TestBenchInterrupted(t *testing.T) {
	t.Parallel()
	tmp := t.TempDir()
	cmd := exec.Command(binary(t), "bench", "--quick", "--only", "sequential,pipelined")
	cmd.Env = append(os.Environ(), "TMPDIR="+tmp)
	errPath := filepath.Join(t.TempDir(), "stderr")
	errFile, err := os.Create(errPath)
	if err != nil {
		t.Fatal(err)
	}
	defer errFile.Close()
	cmd.Stderr = errFile
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	stderr := func() string { b, _ := os.ReadFile(errPath); return string(b) }
	// Interrupt once the first repetition has started (children running).
	deadline := time.Now().Add(time.Minute)
	for !strings.Contains(stderr(), "repetition") && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	cmd.Process.Signal(syscall.SIGINT)
	cmd.Wait()
	if code := cmd.ProcessState.ExitCode(); code != exitInterrupted || strings.Contains(stderr(), "context canceled") {
		t.Fatalf("exit %d, stderr %q; want %d and no Go error text", code, stderr(), exitInterrupted)
	}
	if ents, _ := os.ReadDir(tmp); len(ents) != 0 {
		t.Errorf("left in TMPDIR: %v", ents)
	}
}
