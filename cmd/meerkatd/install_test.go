package main

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// make install puts a meerkatd that runs into PREFIX/bin; make uninstall
// takes it away again.
func TestMakeInstall(t *testing.T) {
	t.Parallel()
	mk, err := exec.LookPath("make")
	if err != nil {
		t.Skip("make is not installed")
	}
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	tmp := t.TempDir()
	prefix := filepath.Join(tmp, "prefix with space")
	// BIN: the build goes to the test's directory, not the clone's bin/.
	vars := []string{"PREFIX=" + prefix, "BIN=" + filepath.Join(tmp, "build", "meerkatd")}
	makeIn := func(target string) {
		t.Helper()
		cmd := exec.Command(mk, append([]string{"-C", root, target}, vars...)...)
		cmd.Env = childEnv()
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("make %s: %v\n%s", target, err, out)
		}
	}
	makeIn("install")
	installed := filepath.Join(prefix, "bin", "meerkatd")
	out, err := exec.Command(installed, "version").CombinedOutput()
	if err != nil || !strings.HasPrefix(string(out), "meerkatd ") {
		t.Fatalf("%s version: %v\n%s", installed, err, out)
	}
	makeIn("uninstall")
	if _, err := os.Stat(installed); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("after make uninstall: %v", err)
	}
}
