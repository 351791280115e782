//go:build unix

package audit

import (
	"path/filepath"
	"syscall"
	"testing"
)

// addSpecialFiles adds a FIFO to the non-regular paths: opening one must
// fail, not block waiting for a writer or reader.
func addSpecialFiles(t *testing.T, dir string, paths map[string]string) {
	t.Helper()
	fifo := filepath.Join(dir, "fifo.log")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	paths["fifo"] = fifo
}
