package trust

import (
	"bytes"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
)

func TestSaveLoadRoundTrip(t *testing.T) {
	l := mustNew(t,
		peer(t, "zed", 3, "tcp://[2001:db8::1]:4201", `{"tags":["a","b"],"nested":{"n":1.5e3,"s":"<&> ünï \u2028"},"null":null}`),
		peer(t, "alice", 1, "uds:///run/meerkat/alice.sock", ""),
		peer(t, "bob", 2, "tcp://bob.example:4200", `{}`),
	)
	dir := filepath.Join(t.TempDir(), "home", "nested")
	path := filepath.Join(dir, FileName)
	if err := l.Save(path); err != nil {
		t.Fatal(err)
	}
	got, err := Load(path)
	if err != nil {
		t.Fatal(err)
	}
	if !got.Equal(l) {
		t.Errorf("round trip changed the list:\n got %+v\nwant %+v", got.Peers(), l.Peers())
	}
	for _, p := range l.Peers() {
		q, ok := got.Lookup(p.ID)
		if !ok || q.Name != p.Name || q.Addr != p.Addr || !bytes.Equal(q.Meta, p.Meta) {
			t.Errorf("peer %s: got %+v, want %+v", p.Name, q, p)
		}
	}
	if runtime.GOOS != "windows" {
		if st, err := os.Stat(path); err != nil || st.Mode().Perm() != 0o600 {
			t.Errorf("file mode %v, %v; want 0600", st.Mode().Perm(), err)
		}
		if st, err := os.Stat(dir); err != nil || st.Mode().Perm() != 0o700 {
			t.Errorf("dir mode %v, %v; want 0700", st.Mode().Perm(), err)
		}
	}
	// Saving what was loaded gives the same bytes.
	first, _ := os.ReadFile(path)
	if err := got.Save(path); err != nil {
		t.Fatal(err)
	}
	second, _ := os.ReadFile(path)
	if !bytes.Equal(first, second) {
		t.Errorf("Save is not stable:\n%s\n%s", first, second)
	}
	if !bytes.HasSuffix(first, []byte("\n")) || !bytes.Contains(first, []byte("\n  \"peers\": [")) {
		t.Errorf("saved file is not indented text ending in a newline:\n%s", first)
	}
}

func TestSaveReplacesAtomically(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, FileName)
	if err := os.WriteFile(path, []byte("old"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(path, 0o644); err != nil {
		t.Fatal(err)
	}
	l := mustNew(t, peer(t, "alice", 1, "tcp://h:1", ""))
	if err := l.Save(path); err != nil {
		t.Fatal(err)
	}
	if st, _ := os.Stat(path); runtime.GOOS != "windows" && st.Mode().Perm() != 0o600 {
		t.Errorf("mode after replacing a 0644 file = %v, want 0600", st.Mode().Perm())
	}
	entries, _ := os.ReadDir(dir)
	if len(entries) != 1 {
		var names []string
		for _, e := range entries {
			names = append(names, e.Name())
		}
		t.Errorf("directory holds %v, want only the trust file", names)
	}
	// A failed save leaves the old file and no temporary behind.
	if err := l.Save(filepath.Join(path, "sub", FileName)); err == nil {
		t.Error("Save under a regular file succeeded")
	}
	if got, err := Load(path); err != nil || !got.Equal(l) {
		t.Errorf("Load after a failed save: %v", err)
	}
}

func TestSaveNilList(t *testing.T) {
	path := filepath.Join(t.TempDir(), FileName)
	if err := (*List)(nil).Save(path); err != nil {
		t.Fatal(err)
	}
	data, _ := os.ReadFile(path)
	if string(data) != "{\n  \"peers\": []\n}\n" {
		t.Errorf("nil list saved as %q", data)
	}
	l, err := Load(path)
	if err != nil || l == nil || l.Len() != 0 {
		t.Errorf("Load = %v, %v", l, err)
	}
}

func TestLoadMissing(t *testing.T) {
	path := filepath.Join(t.TempDir(), "none", FileName)
	if _, err := Load(path); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("Load of a missing file: %v, want fs.ErrNotExist", err)
	}
	l, err := LoadOrEmpty(path)
	if err != nil || l == nil || l.Len() != 0 {
		t.Errorf("LoadOrEmpty of a missing file = %v, %v; want an empty list", l, err)
	}
}

func TestLoadErrors(t *testing.T) {
	if runtime.GOOS == "windows" {
		t.Skip("permission bits")
	}
	dir := t.TempDir()
	write := func(name, data string, mode fs.FileMode) string {
		t.Helper()
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(data), mode); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(p, mode); err != nil { // past the umask
			t.Fatal(err)
		}
		return p
	}
	good := withKeys(`{"peers":[{"name":"alice","pubkey":"@1","addr":"tcp://h:1"}]}`)
	tests := []struct {
		name string
		path string
		want error
		msg  string
	}{
		{"row error names the file", write("bad.json", withKeys(`{"peers":[{"name":"alice","pubkey":"@1","addr":"tcp://h:1"},{"name":"bob","pubkey":"nope","addr":"tcp://h:1"}]}`), 0o600),
			&RowError{}, `bad.json: peers[1] ("bob"): pubkey: identity:`},
		{"file error names the file", write("syntax.json", `{"peers":[`, 0o600), ErrFormat, "syntax.json: line 1"},
		{"too large", write("big.json", `{"peers":[]}`+strings.Repeat("\n", MaxFileSize), 0o600), ErrTooLarge, "big.json"},
		{"group writable", write("gw.json", good, 0o620), ErrUnsafeFile, "chmod 600"},
		{"world writable", write("ww.json", good, 0o606), ErrUnsafeFile, "chmod 600"},
		{"directory", dir, ErrUnsafeFile, "not a regular file"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			l, err := Load(tt.path)
			if err == nil {
				t.Fatalf("Load succeeded with %d peers", l.Len())
			}
			if re, ok := tt.want.(*RowError); ok {
				if !errors.As(err, &re) {
					t.Errorf("error %v is not a RowError", err)
				}
			} else if !errors.Is(err, tt.want) {
				t.Errorf("error %v, want %v", err, tt.want)
			}
			if !strings.Contains(err.Error(), tt.msg) {
				t.Errorf("error %q does not contain %q", err, tt.msg)
			}
		})
	}
	// Readable by others is fine: the file holds only public keys.
	if _, err := Load(write("public.json", good, 0o644)); err != nil {
		t.Errorf("Load of a 0644 file: %v", err)
	}
}

func TestSaveRefusesOversizedList(t *testing.T) {
	big := `{"pad":"` + strings.Repeat("x", MaxFileSize) + `"}`
	l := mustNew(t, peer(t, "alice", 1, "tcp://h:1", big))
	path := filepath.Join(t.TempDir(), FileName)
	if err := l.Save(path); !errors.Is(err, ErrTooLarge) {
		t.Errorf("Save of an oversized list: %v, want ErrTooLarge", err)
	}
	if _, err := os.Stat(path); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("oversized Save left a file: %v", err)
	}
}
