//go:build unix

package identity_test

import (
	"errors"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/meerkatd/meerkatd/identity"
)

// A FIFO in place of the seed or of the public key is refused as a file
// that is not regular; loading does not wait for a writer to open it.
func TestLoadRefusesFIFO(t *testing.T) {
	for _, name := range []string{identity.KeyFile, identity.PubFile} {
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			kp, err := identity.GenerateKeypair()
			if err != nil {
				t.Fatal(err)
			}
			if err := kp.Save(dir); err != nil {
				t.Fatal(err)
			}
			path := filepath.Join(dir, name)
			if err := os.Remove(path); err != nil {
				t.Fatal(err)
			}
			if err := syscall.Mkfifo(path, 0o600); err != nil {
				t.Fatal(err)
			}
			done := make(chan error, 1)
			go func() {
				_, err := identity.LoadKeypair(dir)
				done <- err
			}()
			select {
			case err := <-done:
				if !errors.Is(err, identity.ErrKeyFile) {
					t.Fatalf("LoadKeypair with a FIFO at %s: %v, want ErrKeyFile", name, err)
				}
			case <-time.After(5 * time.Second):
				// Release the blocked open so the goroutine ends.
				if f, err := os.OpenFile(path, os.O_WRONLY|syscall.O_NONBLOCK, 0); err == nil {
					f.Close()
				}
				<-done
				t.Fatalf("LoadKeypair waited on the FIFO at %s", name)
			}
		})
	}
}
