package node

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestReadInput(t *testing.T) {
	dir := t.TempDir()
	file := func(name, content string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	exact := strings.Repeat("x", MaxInput)
	tests := []struct {
		name, arg, stdin string
		want             string
		code, errHas     string
	}{
		{"plain", "hello", "", "hello", "", ""},
		{"at in the middle", "a@b", "", "a@b", "", ""},
		{"stdin", "-", "from stdin", "from stdin", "", ""},
		{"file", "@" + file("body", "from a file"), "", "from a file", "", ""},
		{"empty file", "@" + file("empty", ""), "", "", "", ""},
		{"exactly the limit", "@" + file("exact", exact), "", exact, "", ""},
		{"over the limit", "@" + file("over", exact+"y"), "", "", CodeBodyTooLarge, "longer than 1048576 bytes"},
		{"stdin over the limit", "-", exact + "y", "", CodeBodyTooLarge, "longer than"},
		{"not UTF-8", "@" + file("latin1", "caf\xe9"), "", "", CodeBadArgument, "not UTF-8"},
		{"no file name", "@", "", "", CodeBadArgument, "@ needs a file name"},
		{"a directory", "@" + dir, "", "", CodeBadArgument, "is a directory, not a file"},
		{"missing", "@" + filepath.Join(dir, "nope"), "", "", CodeBadArgument, "no such file"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := ReadInput(strings.NewReader(tt.stdin), "the body", tt.arg)
			if tt.code == "" {
				if err != nil || got != tt.want {
					t.Fatalf("got %.40q, %v; want %.40q", got, err, tt.want)
				}
				return
			}
			if CodeOf(err) != tt.code || !strings.Contains(err.Error(), tt.errHas) || !strings.HasPrefix(err.Error(), "the body") && tt.code == CodeBadArgument {
				t.Fatalf("error %v (%s); want %s with %q", err, CodeOf(err), tt.code, tt.errHas)
			}
		})
	}
}
