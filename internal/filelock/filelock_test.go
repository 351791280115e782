package filelock

import (
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"testing"
)

// TestLockSerialisesEdits: read-modify-write edits of one file under Lock,
// from many goroutines each with its own descriptor (as separate
// processes have), lose none of each other's changes.
func TestLockSerialisesEdits(t *testing.T) {
	path := filepath.Join(t.TempDir(), "counter")
	if err := os.WriteFile(path, []byte("0"), 0o600); err != nil {
		t.Fatal(err)
	}
	const editors, edits = 8, 25
	var wg sync.WaitGroup
	errs := make(chan error, editors*edits)
	for range editors {
		wg.Go(func() {
			for range edits {
				unlock, err := Lock(path)
				if err != nil {
					errs <- err
					return
				}
				b, err := os.ReadFile(path)
				if err == nil {
					var n int
					if n, err = strconv.Atoi(string(b)); err == nil {
						err = os.WriteFile(path, []byte(strconv.Itoa(n+1)), 0o600)
					}
				}
				unlock()
				if err != nil {
					errs <- err
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if got := string(b); got != strconv.Itoa(editors*edits) {
		t.Fatalf("counter %s after %d edits: some were lost", got, editors*edits)
	}
	fi, err := os.Stat(path + ".lock")
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("lock file: %v, %v (want mode 0600)", fi, err)
	}
}

func TestLockMissingDirectory(t *testing.T) {
	if _, err := Lock(filepath.Join(t.TempDir(), "no", "such", "file")); err == nil {
		t.Fatal("Lock in a missing directory: no error")
	}
}
