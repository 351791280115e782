//go:build unix

package filemode_test

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/meerkatd/meerkatd/internal/filemode"
)

func write(t *testing.T, path string, mode fs.FileMode) {
	t.Helper()
	if err := os.WriteFile(path, []byte("x"), mode); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(path, mode); err != nil { // umask-independent
		t.Fatal(err)
	}
}

func TestFile(t *testing.T) {
	dir := t.TempDir()
	me := filemode.Current()
	other := filemode.Checker{UID: os.Getuid() + 4242}
	reg := func(name string, mode fs.FileMode) string {
		p := filepath.Join(dir, name)
		write(t, p, mode)
		return p
	}
	link := filepath.Join(dir, "link")
	if err := os.Symlink(reg("target", 0o600), link); err != nil {
		t.Fatal(err)
	}
	fifo := filepath.Join(dir, "fifo")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name string
		c    filemode.Checker
		path string
		want string // "" passes; else a substring of the error
	}{
		{"0600", me, reg("private", 0o600), ""},
		{"0644 is readable, not writable", me, reg("public", 0o644), ""},
		{"0400", me, reg("readonly", 0o400), ""},
		{"group-writable", me, reg("group", 0o660), "fix with: chmod 600 " + filepath.Join(dir, "group")},
		{"other-writable", me, reg("other", 0o602), "chmod 600"},
		{"owned by another uid", other, reg("theirs", 0o644), "not you"},
		{"another uid's, group-writable", other, reg("theirs-gw", 0o664), "not you"},
		{"symbolic link", me, link, "symbolic link"},
		{"FIFO", me, fifo, "not a regular file"},
		{"directory", me, dir, "not a regular file"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.c.File(tc.path)
			if tc.want == "" {
				if err != nil {
					t.Fatalf("File(%s) = %v, want nil", tc.path, err)
				}
				return
			}
			if !errors.Is(err, filemode.ErrUnsafe) || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), tc.path) {
				t.Fatalf("File(%s) = %v, want ErrUnsafe naming the file and %q", tc.path, err, tc.want)
			}
		})
	}
	if err := me.File(filepath.Join(dir, "missing")); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("File(missing) = %v, want fs.ErrNotExist", err)
	}
}

func TestOwnerMessage(t *testing.T) {
	p := filepath.Join(t.TempDir(), "f")
	write(t, p, 0o600)
	fi, err := os.Lstat(p)
	if err != nil {
		t.Fatal(err)
	}
	uid := fi.Sys().(*syscall.Stat_t).Uid
	err = filemode.Checker{UID: 4242}.File(p)
	if uid == 4242 {
		t.Skip("the test runs as uid 4242")
	}
	want := "owned by uid " + strconv.Itoa(int(uid)) + ", not you (uid 4242); move it away, or fix with: chown 4242 " + p
	if err == nil || !strings.Contains(err.Error(), want) {
		t.Fatalf("err = %v, want %q", err, want)
	}
}

func TestDir(t *testing.T) {
	base := t.TempDir()
	if err := os.Chmod(base, 0o700); err != nil {
		t.Fatal(err)
	}
	mk := func(name string, mode fs.FileMode) string {
		p := filepath.Join(base, name)
		if err := os.Mkdir(p, 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(p, mode); err != nil {
			t.Fatal(err)
		}
		return p
	}
	home := mk("home", 0o700)
	if err := filemode.Dir(home); err != nil {
		t.Fatalf("Dir(0700 home) = %v", err)
	}
	if err := filemode.Dir(mk("open", 0o755)); err != nil {
		t.Fatalf("Dir(0755 home) = %v", err)
	}
	gw := mk("gw", 0o770)
	if err := filemode.Dir(gw); !errors.Is(err, filemode.ErrUnsafe) || !strings.Contains(err.Error(), "fix with: chmod 700 "+gw) {
		t.Fatalf("Dir(0770 home) = %v, want the chmod 700 fix", err)
	}
	if err := (filemode.Checker{UID: os.Getuid() + 4242}).Dir(home); !errors.Is(err, filemode.ErrUnsafe) || !strings.Contains(err.Error(), "not you") {
		t.Fatalf("Dir(another uid's home) = %v, want ErrUnsafe", err)
	}

	// The parent chain: a home inside a group-writable directory can be
	// replaced by the group; inside a sticky one (like /tmp) it cannot.
	shared := mk("shared", 0o775)
	inShared := filepath.Join(shared, "home")
	if err := os.Mkdir(inShared, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := filemode.Dir(inShared); !errors.Is(err, filemode.ErrUnsafe) || !strings.Contains(err.Error(), "chmod go-w "+shared) {
		t.Fatalf("Dir(home in a group-writable dir) = %v, want the chmod go-w fix for the parent", err)
	}
	sticky := mk("sticky", 0o777|fs.ModeSticky)
	if err := os.Chmod(sticky, 0o777|fs.ModeSticky); err != nil {
		t.Fatal(err)
	}
	inSticky := filepath.Join(sticky, "home")
	if err := os.Mkdir(inSticky, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := filemode.Dir(inSticky); err != nil {
		t.Fatalf("Dir(home in a sticky dir) = %v, want nil", err)
	}
	// Reached through a link: the directory it names, and its parents, count.
	link := filepath.Join(base, "link")
	if err := os.Symlink(inShared, link); err != nil {
		t.Fatal(err)
	}
	if err := filemode.Dir(link); !errors.Is(err, filemode.ErrUnsafe) {
		t.Fatalf("Dir(link to a home in a group-writable dir) = %v, want ErrUnsafe", err)
	}
	// A home still to be made: the directories above it that exist,
	// the nearest reached through a link as well.
	sharedLink := filepath.Join(base, "shared-link")
	if err := os.Symlink(shared, sharedLink); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{filepath.Join(shared, "a", "home"), filepath.Join(sharedLink, "a", "home")} {
		if err := filemode.Above(p); !errors.Is(err, filemode.ErrUnsafe) || !strings.Contains(err.Error(), "chmod go-w "+shared) {
			t.Errorf("Above(%s) = %v, want the chmod go-w fix for %s", p, err, shared)
		}
	}
	if err := filemode.Above(filepath.Join(sticky, "a", "home")); err != nil {
		t.Errorf("Above(a home to be made in a sticky dir) = %v, want nil", err)
	}
}

func TestTighten(t *testing.T) {
	dir := t.TempDir()
	for _, mode := range []fs.FileMode{0o644, 0o666, 0o640, 0o604, 0o600, 0o400} {
		p := filepath.Join(dir, mode.String())
		write(t, p, mode)
		if err := filemode.Tighten(p); err != nil {
			t.Fatal(err)
		}
		fi, err := os.Stat(p)
		if err != nil {
			t.Fatal(err)
		}
		if want := mode & 0o700; fi.Mode().Perm() != want {
			t.Errorf("Tighten(%v): mode %v, want %v", mode, fi.Mode().Perm(), want)
		}
	}
	if err := filemode.Tighten(filepath.Join(dir, "missing")); err != nil {
		t.Errorf("Tighten(missing) = %v", err)
	}
}
