package main

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/meerkatd/meerkatd/comms/node"
	"github.com/meerkatd/meerkatd/identity"
	"github.com/meerkatd/meerkatd/internal/testutil"
)

// meerkatd run --log-format json logs JSON lines only: a warning for a
// misspelt MEERKAT_* variable, then the start line with the version, the
// key, the listeners and the store.
func TestRunLogsJSON(t *testing.T) {
	t.Parallel()
	home, err := os.MkdirTemp("", "mkr") // short: the socket paths must fit
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(home) })
	if code, _, errOut := run(t, nil, "init", "--home", home); code != exitOK {
		t.Fatalf("init: %d %s", code, errOut)
	}
	kp, err := identity.LoadKeypair(home)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(binary(t), "run", "--home", home, "--log-format", "json")
	cmd.Env = append(baseEnv(), "MEERKAT_COMMS_ACK_TIMOUT=3", "MEERKAT_LOG_LEVEL=info")
	var stderr testutil.SyncBuffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Process.Kill()
	testutil.WaitFor(t, 20*time.Second, "the start line", func() bool { return strings.Contains(stderr.String(), `"msg":"meerkatd running"`) })
	if err := cmd.Process.Signal(syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	if err := cmd.Wait(); err != nil {
		t.Fatalf("run after SIGINT: %v\n%s", err, stderr.String())
	}
	var start, warn map[string]any
	for _, line := range strings.Split(strings.TrimSpace(stderr.String()), "\n") {
		var m map[string]any
		if err := json.Unmarshal([]byte(line), &m); err != nil {
			t.Fatalf("not a JSON line: %q", line)
		}
		switch {
		case m["msg"] == "meerkatd running":
			start = m
		case m["level"] == "WARN" && strings.Contains(m["msg"].(string), "MEERKAT_COMMS_ACK_TIMOUT"):
			warn = m
		}
	}
	if warn == nil || !strings.Contains(warn["msg"].(string), "did you mean MEERKAT_COMMS_ACK_TIMEOUT?") {
		t.Errorf("no warning for the misspelt variable:\n%s", stderr.String())
	}
	if start == nil || start["version"] == nil || start["version"] == "" || start["pubkey"] != kp.ID().String() ||
		!strings.Contains(start["listen"].(string), "uds://"+home) || start["store"] != "sqlite" ||
		start["store_path"] != filepath.Join(home, node.DBFileName) {
		t.Errorf("start line %v", start)
	}
}
