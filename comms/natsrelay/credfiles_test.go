package natsrelay

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/nats-io/nkeys"
)

// credsText is a credentials file as nsc writes one: a JWT (three
// dot-separated parts; not checked here) and a seed, each decorated.
func credsText(jwt string, seed []byte) string {
	return fmt.Sprintf("-----BEGIN NATS USER JWT-----\n%s\n------END NATS USER JWT------\n\n************************* IMPORTANT *************************\n\n-----BEGIN USER NKEY SEED-----\n%s\n------END USER NKEY SEED------\n", jwt, seed)
}

func TestCheckCredsAndSeedFiles(t *testing.T) {
	user, err := nkeys.CreateUser()
	if err != nil {
		t.Fatal(err)
	}
	seed, err := user.Seed()
	if err != nil {
		t.Fatal(err)
	}
	const jwt = "eyJhbGciOiJlZDI1NTE5In0.eyJzdWIiOiJVQUJDIn0.c2ln"
	dir := t.TempDir()
	file := func(name, content string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	for _, tt := range []struct {
		name, content string
		creds, seed   string // "" when the check passes, else in the error
	}{
		{"a credentials file", credsText(jwt, seed), "", ""},
		{"a bare seed", string(seed) + "\n", "holds no user JWT", ""},
		{"garbage", "garbage", "holds no user JWT", "garbage"},
		{"empty", "", "holds no user JWT", "empty"},
		{"a JWT without its seed", credsText(jwt, nil), "holds no nkey seed", "without"},
		{"a seed cut short", credsText(jwt, seed[:len(seed)-4]), "holds no nkey seed", "short"},
		{"too large", strings.Repeat("x", maxCredsFile+1), "over 65536 bytes", "large"},
	} {
		p := file(strings.ReplaceAll(tt.name, " ", "-"), tt.content)
		err := CheckCredsFile(p)
		if tt.creds == "" && err != nil || tt.creds != "" && (err == nil || !strings.Contains(err.Error(), tt.creds)) {
			t.Errorf("%s: CheckCredsFile: %v, want %q", tt.name, err, tt.creds)
		}
		if err != nil && strings.Contains(err.Error(), string(seed[:12])) {
			t.Errorf("%s: the seed is in the error: %v", tt.name, err)
		}
		err = CheckSeedFile(p)
		if tt.seed == "" && err != nil || tt.seed != "" && (err == nil || !strings.Contains(err.Error(), p)) {
			t.Errorf("%s: CheckSeedFile: %v, want an error naming the file: %v", tt.name, err, tt.seed != "")
		}
	}
	if err := CheckCredsFile(filepath.Join(dir, "missing")); err == nil || !os.IsNotExist(err) {
		t.Errorf("a missing file: %v", err)
	}
}

func FuzzCheckCredsFile(f *testing.F) {
	f.Add([]byte(credsText("a.b.c", []byte("SUAIBDPBAUTWCWBKIO6XHQNINK5FWJW4OHLXC3HQ2KFE4PEJUA44CNHTC4"))))
	f.Add([]byte("-----BEGIN NATS USER JWT-----\n"))
	f.Add([]byte(""))
	dir := f.TempDir()
	f.Fuzz(func(t *testing.T, b []byte) {
		p := filepath.Join(dir, "creds")
		if err := os.WriteFile(p, b, 0o600); err != nil {
			t.Fatal(err)
		}
		if err := CheckCredsFile(p); err != nil && strings.Contains(err.Error(), "SUA") {
			t.Fatalf("a seed in the error: %v", err)
		}
		_ = CheckSeedFile(p) // any verdict; it must not panic
	})
}
