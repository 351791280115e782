//go:build unix

package space_test

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/meerkatd/meerkatd/comms/space"
	"github.com/meerkatd/meerkatd/internal/filemode"
)

// Whoever can write spaces.json decides who may act in the node's spaces:
// a rosters file group or others may write is refused with the fix.
func TestLoadRosterRefusesUnsafeFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "spaces.json")
	if err := (&space.Roster{}).Save(path); err != nil {
		t.Fatal(err)
	}
	if _, err := space.LoadRoster(path); err != nil {
		t.Fatalf("LoadRoster(0600) = %v", err)
	}
	if err := os.Chmod(path, 0o666); err != nil {
		t.Fatal(err)
	}
	_, err := space.LoadRoster(path)
	if !errors.Is(err, filemode.ErrUnsafe) || !strings.Contains(err.Error(), "fix with: chmod 600 "+path) {
		t.Fatalf("LoadRoster(0666) = %v, want ErrUnsafe with the chmod fix", err)
	}
}
