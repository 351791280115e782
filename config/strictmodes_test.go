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

// A file holding the NATS password must be the owner's alone to read.
func TestLoadRefusesReadablePassword(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, config.FileName)
	body := "[nats]\nservers = [\"nats://127.0.0.1:4222\"]\nuser = \"n\"\npassword = \"s3cret\"\n"
	if err := os.WriteFile(path, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	if c, err := config.Load(path); err != nil || c.NATS.Password != "s3cret" {
		t.Fatalf("Load(0600) = %+v, %v", c.NATS, err)
	}
	for _, mode := range []os.FileMode{0o640, 0o604, 0o644} {
		if err := os.Chmod(path, mode); err != nil {
			t.Fatal(err)
		}
		_, err := config.Load(path)
		var ce *config.Error
		if !errors.As(err, &ce) || ce.Key != "nats.password" || !strings.Contains(err.Error(), "chmod 600") || strings.Contains(err.Error(), "s3cret") {
			t.Fatalf("Load(%04o) = %v, want a nats.password error with the fix and without the password", mode, err)
		}
	}
	// Without a password the same mode is fine.
	if err := os.WriteFile(path, []byte("[nats]\nservers = [\"nats://127.0.0.1:4222\"]\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := config.Load(path); err != nil {
		t.Fatalf("Load(0644) without a password = %v", err)
	}
}
