package atomicfile_test

import (
	"bytes"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"

	"github.com/meerkatd/meerkatd/internal/atomicfile"
)

// dirNames returns the sorted names in dir.
func dirNames(t *testing.T, dir string) []string {
	t.Helper()
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range ents {
		names = append(names, e.Name())
	}
	slices.Sort(names)
	return names
}

func TestWriteFile(t *testing.T) {
	for _, tc := range []struct {
		name  string
		old   []byte // nil: no file at path before
		data  []byte
		perm  fs.FileMode
		umask int
	}{
		{name: "new private file", data: []byte("secret"), perm: 0o600, umask: 0o022},
		{name: "new public file", data: []byte("public"), perm: 0o644, umask: 0o022},
		{name: "read-only file", data: []byte("ro"), perm: 0o400, umask: 0o022},
		{name: "umask narrower than perm", data: []byte("public"), perm: 0o644, umask: 0o077},
		{name: "umask zero", data: []byte("private"), perm: 0o600, umask: 0},
		{name: "empty data", data: []byte{}, perm: 0o600, umask: 0o022},
		{name: "replace longer content", old: []byte("a much longer old content"), data: []byte("short"), perm: 0o600, umask: 0o022},
		{name: "replace a looser file", old: []byte("old"), data: []byte("new"), perm: 0o600, umask: 0o022},
		{name: "large data", data: bytes.Repeat([]byte("0123456789abcdef"), 1<<16), perm: 0o600, umask: 0o022},
	} {
		t.Run(tc.name, func(t *testing.T) {
			// The umask is per process: these subtests do not run in
			// parallel with anything.
			defer syscall.Umask(syscall.Umask(tc.umask))
			dir := t.TempDir()
			path := filepath.Join(dir, "file")
			if tc.old != nil {
				if err := os.WriteFile(path, tc.old, 0o666); err != nil {
					t.Fatal(err)
				}
				if err := os.Chmod(path, 0o666); err != nil {
					t.Fatal(err)
				}
			}
			if err := atomicfile.WriteFile(path, tc.data, tc.perm); err != nil {
				t.Fatalf("WriteFile: %v", err)
			}
			got, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(got, tc.data) {
				t.Errorf("file holds %d bytes, want the %d written", len(got), len(tc.data))
			}
			st, err := os.Stat(path)
			if err != nil {
				t.Fatal(err)
			}
			if st.Mode() != tc.perm {
				t.Errorf("file mode %v, want %v", st.Mode(), tc.perm)
			}
			if names := dirNames(t, dir); !slices.Equal(names, []string{"file"}) {
				t.Errorf("directory holds %q, want only \"file\" (leftover temporary file?)", names)
			}
		})
	}
}

// TestWriteFileReplacesByRename checks that the old file is not written in
// place: a reader that opened it keeps the old content.
func TestWriteFileReplacesByRename(t *testing.T) {
	path := filepath.Join(t.TempDir(), "file")
	if err := atomicfile.WriteFile(path, []byte("old"), 0o600); err != nil {
		t.Fatal(err)
	}
	oldSt, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := atomicfile.WriteFile(path, []byte("new"), 0o600); err != nil {
		t.Fatal(err)
	}
	if got, err := io.ReadAll(f); err != nil || string(got) != "old" {
		t.Errorf("an open handle on the old file reads %q, %v; want \"old\"", got, err)
	}
	newSt, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if os.SameFile(oldSt, newSt) {
		t.Error("WriteFile rewrote the file in place instead of renaming a new one over it")
	}
}

// TestWriteFileReplacesSymlink checks that a symbolic link at path is
// replaced, and the file it points to left alone.
func TestWriteFileReplacesSymlink(t *testing.T) {
	dir := t.TempDir()
	target := filepath.Join(dir, "target")
	if err := os.WriteFile(target, []byte("target"), 0o600); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "link")
	if err := os.Symlink(target, path); err != nil {
		t.Fatal(err)
	}
	if err := atomicfile.WriteFile(path, []byte("new"), 0o600); err != nil {
		t.Fatal(err)
	}
	if got, err := os.ReadFile(target); err != nil || string(got) != "target" {
		t.Errorf("the link's target holds %q, %v; want it untouched", got, err)
	}
	st, err := os.Lstat(path)
	if err != nil {
		t.Fatal(err)
	}
	if !st.Mode().IsRegular() {
		t.Errorf("path is %v after WriteFile, want a regular file", st.Mode())
	}
}

// TestWriteFileFailure checks that a failed write returns an error naming
// path, leaves no temporary file and leaves what was at path untouched.
func TestWriteFileFailure(t *testing.T) {
	for _, tc := range []struct {
		name  string
		setup func(t *testing.T, dir string) (path string, check func(t *testing.T))
		perm  fs.FileMode
	}{
		{
			// The temporary file is created, written and synced; the
			// rename fails.
			name: "path is a non-empty directory",
			perm: 0o600,
			setup: func(t *testing.T, dir string) (string, func(*testing.T)) {
				path := filepath.Join(dir, "file")
				inner := filepath.Join(path, "inner")
				if err := os.Mkdir(path, 0o700); err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(inner, []byte("old"), 0o600); err != nil {
					t.Fatal(err)
				}
				return path, func(t *testing.T) {
					if got, err := os.ReadFile(inner); err != nil || string(got) != "old" {
						t.Errorf("the directory at path lost its content: %q, %v", got, err)
					}
				}
			},
		},
		{
			// path itself is a valid name; the temporary name is too long.
			name: "temporary name too long",
			perm: 0o600,
			setup: func(t *testing.T, dir string) (string, func(*testing.T)) {
				path := filepath.Join(dir, strings.Repeat("n", 250))
				return path, oldFile(t, path)
			},
		},
		{
			name: "directory missing",
			perm: 0o600,
			setup: func(t *testing.T, dir string) (string, func(*testing.T)) {
				return filepath.Join(dir, "missing", "file"), func(*testing.T) {}
			},
		},
		{
			name: "directory not writable",
			perm: 0o600,
			setup: func(t *testing.T, dir string) (string, func(*testing.T)) {
				if os.Geteuid() == 0 {
					t.Skip("root may write anywhere")
				}
				path := filepath.Join(dir, "file")
				check := oldFile(t, path)
				if err := os.Chmod(dir, 0o500); err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { os.Chmod(dir, 0o700) })
				return path, check
			},
		},
		{
			name: "mode with more than permission bits",
			perm: fs.ModeDir | 0o700,
			setup: func(t *testing.T, dir string) (string, func(*testing.T)) {
				path := filepath.Join(dir, "file")
				return path, oldFile(t, path)
			},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			path, check := tc.setup(t, dir)
			before := dirNames(t, dir)
			err := atomicfile.WriteFile(path, []byte("new"), tc.perm)
			if err == nil {
				t.Fatal("WriteFile succeeded, want an error")
			}
			if !strings.Contains(err.Error(), path) {
				t.Errorf("error %q does not name %s", err, path)
			}
			if after := dirNames(t, dir); !slices.Equal(after, before) {
				t.Errorf("directory held %q before, %q after the failure (leftover temporary file?)", before, after)
			}
			check(t)
		})
	}
}

// oldFile writes "old" at path and returns a check that it is still there,
// with its mode.
func oldFile(t *testing.T, path string) func(*testing.T) {
	t.Helper()
	if err := os.WriteFile(path, []byte("old"), 0o640); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(path, 0o640); err != nil {
		t.Fatal(err)
	}
	return func(t *testing.T) {
		t.Helper()
		got, err := os.ReadFile(path)
		if err != nil || string(got) != "old" {
			t.Errorf("old file holds %q, %v; want \"old\" untouched", got, err)
		}
		if st, err := os.Stat(path); err != nil || st.Mode() != 0o640 {
			t.Errorf("old file mode changed: %v, %v", st.Mode(), err)
		}
	}
}

// TestWriteFileConcurrent runs writers of different contents against one
// path while readers read it: every read, and the end result, is one
// writer's whole content, and no temporary file remains.
func TestWriteFileConcurrent(t *testing.T) {
	const (
		writers = 8
		rounds  = 20
		size    = 64 << 10
	)
	dir := t.TempDir()
	path := filepath.Join(dir, "file")
	content := func(w int) []byte { return bytes.Repeat([]byte{byte('a' + w)}, size) }
	whole := func(b []byte) bool {
		return len(b) == size && bytes.Count(b, b[:1]) == size && b[0] >= 'a' && b[0] < 'a'+writers
	}
	if err := atomicfile.WriteFile(path, content(0), 0o600); err != nil {
		t.Fatal(err)
	}

	done := make(chan struct{})
	var readers sync.WaitGroup
	for range 2 {
		readers.Go(func() {
			for {
				select {
				case <-done:
					return
				default:
				}
				b, err := os.ReadFile(path)
				if err != nil {
					t.Errorf("read during writes: %v", err)
					return
				}
				if !whole(b) {
					t.Errorf("a reader saw %d bytes that are not one writer's whole content", len(b))
					return
				}
			}
		})
	}
	var writersWG sync.WaitGroup
	for w := range writers {
		writersWG.Go(func() {
			for range rounds {
				if err := atomicfile.WriteFile(path, content(w), 0o600); err != nil {
					t.Errorf("writer %d: %v", w, err)
					return
				}
			}
		})
	}
	writersWG.Wait()
	close(done)
	readers.Wait()

	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if !whole(b) {
		t.Errorf("after the writers, the file holds %d bytes that are not one writer's whole content", len(b))
	}
	if st, err := os.Stat(path); err != nil || st.Mode() != 0o600 {
		t.Errorf("after the writers: mode %v, %v; want 0600", st.Mode(), err)
	}
	if names := dirNames(t, dir); !slices.Equal(names, []string{"file"}) {
		t.Errorf("directory holds %q, want only \"file\" (leftover temporary file?)", names)
	}
}

func ExampleWriteFile() {
	dir, err := os.MkdirTemp("", "example")
	if err != nil {
		panic(err)
	}
	defer os.RemoveAll(dir)
	path := filepath.Join(dir, "secret")
	if err := atomicfile.WriteFile(path, []byte("s3cret"), 0o600); err != nil {
		panic(err)
	}
	st, _ := os.Stat(path)
	fmt.Println(st.Mode())
	// Output: -rw-------
}
