package testutil

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime/debug"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// binDirPrefix names the per-process directories holding a built meerkatd.
const binDirPrefix = "meerkatd-testbin-"

// meerkatd builds cmd/meerkatd once per test process.
var meerkatd = sync.OnceValues(func() (string, error) {
	removeStaleBinDirs()
	dir, err := os.MkdirTemp("", binDirPrefix+strconv.Itoa(os.Getpid())+"-")
	if err != nil {
		return "", err
	}
	path := filepath.Join(dir, "meerkatd")
	args := []string{"build", "-o", path}
	if RaceEnabled() {
		args = append(args, "-race")
	}
	args = append(args, "github.com/meerkatd/meerkatd/cmd/meerkatd")
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	if out, err := exec.CommandContext(ctx, "go", args...).CombinedOutput(); err != nil {
		return "", fmt.Errorf("go %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return path, nil
})

// Meerkatd returns the path of a meerkatd binary built from this module,
// once per test process, with -race when the tests run with it (so races
// in the children fail the tests too). A test process cannot clean up
// after its last test without a TestMain, so each one removes the
// binaries of earlier test processes that have exited.
func Meerkatd(t testing.TB) string {
	t.Helper()
	path, err := meerkatd()
	if err != nil {
		t.Fatalf("building meerkatd: %v", err)
	}
	return path
}

// MeerkatdErr is Meerkatd for callers without a testing.TB (a TestMain).
func MeerkatdErr() (string, error) { return meerkatd() }

// RaceEnabled reports whether this test binary was built with -race.
func RaceEnabled() bool {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return false
	}
	for _, s := range bi.Settings {
		if s.Key == "-race" {
			return s.Value == "true"
		}
	}
	return false
}

// removeStaleBinDirs deletes the binary directories of test processes
// that no longer run.
func removeStaleBinDirs() {
	matches, _ := filepath.Glob(filepath.Join(os.TempDir(), binDirPrefix+"*"))
	for _, m := range matches {
		pidStr, _, _ := strings.Cut(strings.TrimPrefix(filepath.Base(m), binDirPrefix), "-")
		pid, err := strconv.Atoi(pidStr)
		if err != nil || pid == os.Getpid() {
			continue
		}
		if err := syscall.Kill(pid, 0); errors.Is(err, syscall.ESRCH) {
			os.RemoveAll(m)
		}
	}
}
