package control

import (
	"bufio"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"
)

// TestMain doubles as the probe of TestServerRefusesOtherUserProcess:
// run with MEERKAT_CONTROL_PROBE=PATH (as another user), the test binary
// sends one request to the control socket at PATH, prints the reply and
// exits.
func TestMain(m *testing.M) {
	if path := os.Getenv("MEERKAT_CONTROL_PROBE"); path != "" {
		os.Exit(probe(path))
	}
	os.Exit(m.Run())
}

func probe(path string) int {
	c, err := net.DialTimeout("unix", path, 5*time.Second)
	if err != nil {
		os.Stderr.WriteString(err.Error())
		return 1
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(10 * time.Second))
	c.Write([]byte(`{"op":"self"}` + "\n")) // a refusal may close it first; the answer is read all the same
	line, err := bufio.NewReader(c).ReadBytes('\n')
	if err != nil {
		os.Stderr.WriteString(err.Error())
		return 1
	}
	os.Stdout.Write(line)
	return 0
}

// probeAs runs this test binary as uid against the control socket at
// path and returns what it printed.
func probeAs(t *testing.T, uid uint32, path string) ([]byte, error) {
	t.Helper()
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	dir, err := os.MkdirTemp("", "mkprobe") // t.TempDir's parent is private
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(dir, "probe")
	b, err := os.ReadFile(self)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(bin, b, 0o755); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin)
	cmd.Env = []string{"MEERKAT_CONTROL_PROBE=" + path}
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uid, Gid: uid}}
	cmd.WaitDelay = 10 * time.Second
	out, err := cmd.Output()
	if ee, ok := err.(*exec.ExitError); ok {
		return append(out, ee.Stderr...), err
	}
	return out, err
}
