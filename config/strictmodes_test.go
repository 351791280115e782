//go:build unix

package config_test

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/meerkatd/meerkatd/config"
	"github.com/meerkatd/meerkatd/internal/filemode"
)

// Whoever can write meerkat.toml decides where the node listens: a file
// group or others may write, or a symbolic link, is refused with the fix.
func TestLoadRefusesUnsafeFile(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, config.FileName)
	if err := os.WriteFile(path, []byte("name = \"n\"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(path, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := config.Load(path); err != nil {
		t.Fatalf("Load(0644) = %v", err)
	}
	if err := os.Chmod(path, 0o664); err != nil {
		t.Fatal(err)
	}
	_, err := config.Load(path)
	var ce *config.Error
	if !errors.Is(err, filemode.ErrUnsafe) || !errors.As(err, &ce) || !strings.Contains(err.Error(), "fix with: chmod 600 "+path) {
		t.Fatalf("Load(0664) = %v, want a *config.Error with the chmod fix", err)
	}
	link := filepath.Join(dir, "link.toml")
	if err := os.Symlink(path, link); err != nil {
		t.Fatal(err)
	}
	if _, err := config.LoadOrDefault(link); !errors.Is(err, filemode.ErrUnsafe) {
		t.Fatalf("LoadOrDefault(symlink) = %v, want ErrUnsafe", err)
	}
}
