package identity_test

import (
	"bytes"
	"crypto/ed25519"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/meerkatd/meerkatd/identity"
)

// secretForms returns the ways a secret could plausibly end up in text:
// raw, hex (both cases), the four base64 alphabets, and fmt's decimal
// byte-slice form (without the closing bracket, so a prefix also matches).
func secretForms(secret []byte) []string {
	dec := strings.TrimSuffix(fmt.Sprint(secret[:min(len(secret), 8)]), "]")
	dec = strings.TrimPrefix(dec, "[")
	hx := hex.EncodeToString(secret)
	return []string{
		string(secret),
		hx,
		strings.ToUpper(hx),
		hx[:min(len(hx), 16)], // a 8-byte prefix is enough to count as leaked
		base64.StdEncoding.EncodeToString(secret),
		base64.RawStdEncoding.EncodeToString(secret),
		base64.URLEncoding.EncodeToString(secret),
		base64.RawURLEncoding.EncodeToString(secret),
		dec,
		fmt.Sprintf("%#v", secret[:min(len(secret), 4)])[len("[]byte{"):],
	}
}

// assertNoSecret fails if text contains secret in any of [secretForms].
func assertNoSecret(t *testing.T, what, text string, secret []byte) {
	t.Helper()
	if len(secret) == 0 {
		return
	}
	for _, form := range secretForms(secret) {
		if len(form) >= 6 && strings.Contains(text, form) {
			t.Errorf("%s contains the secret as %q: %s", what, form, text)
		}
	}
}

func rfcKeypair(t testing.TB) *identity.Keypair {
	t.Helper()
	kp, err := identity.KeypairFromSeed(unhex(t, rfcSeedA))
	if err != nil {
		t.Fatal(err)
	}
	return kp
}

func mustSave(t *testing.T, kp *identity.Keypair, dir string) {
	t.Helper()
	if err := kp.Save(dir); err != nil {
		t.Fatalf("Save(%s): %v", dir, err)
	}
}

func writeFile(t *testing.T, path string, data []byte, mode fs.FileMode) {
	t.Helper()
	if err := os.WriteFile(path, data, mode); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(path, mode); err != nil { // defeat the umask
		t.Fatal(err)
	}
}

func TestKeypairFromSeedRFC8032(t *testing.T) {
	kp := rfcKeypair(t)
	if got := hex.EncodeToString(idBytes(kp.ID())); got != rfcPubA {
		t.Errorf("public key = %s, want %s", got, rfcPubA)
	}
	if got := kp.ID().String(); got != rfcTextA {
		t.Errorf("ID().String() = %s, want %s", got, rfcTextA)
	}
	if got := hex.EncodeToString(kp.Sign(nil)); got != rfcSigA {
		t.Errorf("Sign(empty) = %s, want %s", got, rfcSigA)
	}
	if got := hex.EncodeToString(kp.Sign([]byte{})); got != rfcSigA {
		t.Errorf("Sign([]byte{}) = %s, want %s", got, rfcSigA)
	}
	if got := hex.EncodeToString(kp.Seed()); got != rfcSeedA {
		t.Errorf("Seed() = %s, want %s", got, rfcSeedA)
	}

	// RFC 8032 TEST 2: the public key for the second seed.
	kpB, err := identity.KeypairFromSeed(unhex(t, rfcSeedB))
	if err != nil {
		t.Fatal(err)
	}
	if got := hex.EncodeToString(idBytes(kpB.ID())); got != rfcPubB {
		t.Errorf("public key B = %s, want %s", got, rfcPubB)
	}
}

func TestKeypairFromSeedBadLength(t *testing.T) {
	for _, n := range []int{0, 31, 33, ed25519.PrivateKeySize} {
		seed := bytes.Repeat([]byte{0x42}, n)
		kp, err := identity.KeypairFromSeed(seed)
		if !errors.Is(err, identity.ErrBadLength) || kp != nil {
			t.Errorf("KeypairFromSeed(%d bytes) = %v, %v; want nil, ErrBadLength", n, kp, err)
		}
		if err != nil {
			assertNoSecret(t, "error", err.Error(), seed)
		}
	}
}

func TestKeypairDoesNotAliasSeed(t *testing.T) {
	seed := unhex(t, rfcSeedA)
	kp, err := identity.KeypairFromSeed(seed)
	if err != nil {
		t.Fatal(err)
	}
	clear(seed)
	if got := hex.EncodeToString(idBytes(kp.ID())); got != rfcPubA {
		t.Errorf("after clearing the input seed, public key = %s", got)
	}
	if got := hex.EncodeToString(kp.Sign(nil)); got != rfcSigA {
		t.Errorf("after clearing the input seed, Sign(empty) = %s", got)
	}
	s := kp.Seed()
	clear(s)
	if got := hex.EncodeToString(kp.Seed()); got != rfcSeedA {
		t.Errorf("Seed() returned the internal slice: after clearing it, Seed() = %s", got)
	}
}

func TestSignIntoMatchesSign(t *testing.T) {
	kp := rfcKeypair(t)
	for _, msg := range [][]byte{nil, {}, {0x72}, []byte("hello"), bytes.Repeat([]byte{0xaa}, 1000)} {
		var sig [ed25519.SignatureSize]byte
		for i := range sig {
			sig[i] = 0xee // must be fully overwritten
		}
		kp.SignInto(&sig, msg)
		if want := kp.Sign(msg); !bytes.Equal(sig[:], want) {
			t.Errorf("SignInto(%q) = %x, Sign = %x", msg, sig, want)
		}
		if !kp.ID().Verify(msg, sig[:]) {
			t.Errorf("SignInto(%q) does not verify", msg)
		}
	}
	var sig [ed25519.SignatureSize]byte
	kp.SignInto(&sig, nil)
	if got := hex.EncodeToString(sig[:]); got != rfcSigA {
		t.Errorf("SignInto(empty) = %s, want %s", got, rfcSigA)
	}
}

func TestGenerateKeypair(t *testing.T) {
	a, err := identity.GenerateKeypair()
	if err != nil {
		t.Fatal(err)
	}
	b, err := identity.GenerateKeypair()
	if err != nil {
		t.Fatal(err)
	}
	if a.ID() == b.ID() || bytes.Equal(a.Seed(), b.Seed()) {
		t.Error("two generated keypairs are equal")
	}
	if a.ID().IsZero() {
		t.Error("generated key is zero")
	}
	again, err := identity.KeypairFromSeed(a.Seed())
	if err != nil || again.ID() != a.ID() {
		t.Errorf("KeypairFromSeed(a.Seed()) = %v, %v; want %v", again, err, a)
	}
	msg := []byte("x")
	if !a.ID().Verify(msg, a.Sign(msg)) || b.ID().Verify(msg, a.Sign(msg)) {
		t.Error("generated keys sign/verify wrongly")
	}
}

func TestKeypairConcurrentUse(t *testing.T) {
	kp := rfcKeypair(t)
	want := kp.Sign([]byte("m"))
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for range 50 {
				var sig [ed25519.SignatureSize]byte
				kp.SignInto(&sig, []byte("m"))
				if !bytes.Equal(sig[:], want) || !bytes.Equal(kp.Sign([]byte("m")), want) || kp.ID().String() != rfcTextA {
					t.Error("concurrent signature differs")
					return
				}
			}
		})
	}
	wg.Wait()
}

func TestKeypairFormattingHidesSeed(t *testing.T) {
	kp := rfcKeypair(t)
	seed := unhex(t, rfcSeedA)
	want := "Keypair(" + rfcTextA + ")"
	if got := kp.String(); got != want {
		t.Errorf("String() = %q, want %q", got, want)
	}
	if got := kp.GoString(); got != want {
		t.Errorf("GoString() = %q, want %q", got, want)
	}
	for _, verb := range []string{"%v", "%+v", "%#v", "%s", "%q", "%x", "%X", "%d", "%o", "%b", "%10v"} {
		type hidden struct{ k identity.Keypair } // fmt cannot call Format on an unexported field
		for _, arg := range []any{kp, *kp, []*identity.Keypair{kp}, struct{ K *identity.Keypair }{kp}, struct{ K identity.Keypair }{*kp}, hidden{*kp}, []identity.Keypair{*kp}} {
			got := fmt.Sprintf(verb, arg)
			assertNoSecret(t, fmt.Sprintf("Sprintf(%s, %T)", verb, arg), got, seed)
		}
	}
	for _, verb := range []string{"%v", "%+v", "%#v", "%s"} {
		for _, arg := range []any{kp, *kp} {
			if got := fmt.Sprintf(verb, arg); !strings.Contains(got, rfcTextA) {
				t.Errorf("Sprintf(%s, %T) = %q: want the public key in it", verb, arg, got)
			}
		}
	}

	for _, c := range []struct{ verb, want string }{
		{"%v", want}, {"%+v", want}, {"%#v", want}, {"%s", want},
		{"%q", `"` + want + `"`},
		{"%-70v|", want + strings.Repeat(" ", 70-len(want)) + "|"},
	} {
		for _, arg := range []any{kp, *kp} {
			if got := fmt.Sprintf(c.verb, arg); got != c.want {
				t.Errorf("Sprintf(%s, %T) = %q, want %q", c.verb, arg, got, c.want)
			}
		}
	}

	var buf bytes.Buffer
	slog.New(slog.NewTextHandler(&buf, nil)).Info("k", "kp", kp, "val", *kp)
	slog.New(slog.NewJSONHandler(&buf, nil)).Info("k", "kp", kp, "val", *kp)
	assertNoSecret(t, "log output", buf.String(), seed)
}

func TestSaveLoad(t *testing.T) {
	kp := rfcKeypair(t)
	dir := filepath.Join(t.TempDir(), "home", "node")
	mustSave(t, kp, dir)

	st, err := os.Stat(dir)
	if err != nil {
		t.Fatal(err)
	}
	if got := st.Mode().Perm(); got != 0o700 {
		t.Errorf("created directory mode %#o, want 0700", got)
	}
	if st, err := os.Stat(filepath.Dir(dir)); err != nil || st.Mode().Perm() != 0o700 {
		t.Errorf("created parent directory: %v, %v; want mode 0700", st.Mode(), err)
	}
	st, err = os.Stat(filepath.Join(dir, identity.KeyFile))
	if err != nil {
		t.Fatal(err)
	}
	if got := st.Mode(); got != 0o600 {
		t.Errorf("%s mode %v, want -rw-------", identity.KeyFile, got)
	}
	key, err := os.ReadFile(filepath.Join(dir, identity.KeyFile))
	if err != nil {
		t.Fatal(err)
	}
	if got := hex.EncodeToString(key); got != rfcSeedA {
		t.Errorf("%s holds %d bytes %x, want the 32-byte seed", identity.KeyFile, len(key), key)
	}
	pubPath := filepath.Join(dir, identity.PubFile)
	pub, err := os.ReadFile(pubPath)
	if err != nil {
		t.Fatal(err)
	}
	if got := hex.EncodeToString(pub); got != rfcPubA {
		t.Errorf("%s holds %x, want the 32 raw public bytes %s", identity.PubFile, pub, rfcPubA)
	}
	if st, err := os.Stat(pubPath); err != nil || !st.Mode().IsRegular() || st.Mode().Perm()&0o022 != 0 {
		t.Errorf("%s mode %v, %v: want a regular file nobody else can write", identity.PubFile, st.Mode(), err)
	}
	assertDirHolds(t, dir, identity.KeyFile, identity.PubFile)

	got, err := identity.LoadKeypair(dir)
	if err != nil {
		t.Fatal(err)
	}
	if got.ID() != kp.ID() {
		t.Errorf("loaded ID %v, want %v", got.ID(), kp.ID())
	}
	msg := []byte("same signatures")
	if !bytes.Equal(got.Sign(msg), kp.Sign(msg)) {
		t.Error("loaded keypair signs differently")
	}
	if !bytes.Equal(got.Sign(nil), unhex(t, rfcSigA)) {
		t.Error("loaded keypair does not give the RFC 8032 signature")
	}
}

func TestSaveIntoExistingDir(t *testing.T) {
	dir := t.TempDir()
	kp, err := identity.GenerateKeypair()
	if err != nil {
		t.Fatal(err)
	}
	mustSave(t, kp, dir)
	got, err := identity.LoadKeypair(dir)
	if err != nil {
		t.Fatal(err)
	}
	if got.ID() != kp.ID() || !bytes.Equal(got.Seed(), kp.Seed()) {
		t.Errorf("loaded %v, want %v", got, kp)
	}
}

func assertDirHolds(t *testing.T, dir string, names ...string) {
	t.Helper()
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, e := range ents {
		got = append(got, e.Name())
	}
	slices.Sort(got)
	slices.Sort(names)
	if !slices.Equal(got, names) {
		t.Errorf("directory holds %q, want %q (leftover temporary files?)", got, names)
	}
}

func TestSaveReplacesAtomically(t *testing.T) {
	dir := t.TempDir()
	old := rfcKeypair(t)
	mustSave(t, old, dir)
	keyPath := filepath.Join(dir, identity.KeyFile)
	oldSt, err := os.Stat(keyPath)
	if err != nil {
		t.Fatal(err)
	}
	// A reader that opened the old file keeps seeing the old seed: the new
	// file is renamed into place, not written over the old one.
	f, err := os.Open(keyPath)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()

	kpB, err := identity.KeypairFromSeed(unhex(t, rfcSeedB))
	if err != nil {
		t.Fatal(err)
	}
	mustSave(t, kpB, dir)

	oldData, err := io.ReadAll(f)
	if err != nil {
		t.Fatal(err)
	}
	if hex.EncodeToString(oldData) != rfcSeedA {
		t.Errorf("the old key file was overwritten in place: an open handle now reads %d bytes", len(oldData))
	}
	newSt, err := os.Stat(keyPath)
	if err != nil {
		t.Fatal(err)
	}
	if os.SameFile(oldSt, newSt) {
		t.Error("Save rewrote identity.key in place instead of renaming a new file over it")
	}
	if newSt.Mode() != 0o600 {
		t.Errorf("replaced %s mode %v, want -rw-------", identity.KeyFile, newSt.Mode())
	}
	assertDirHolds(t, dir, identity.KeyFile, identity.PubFile)

	got, err := identity.LoadKeypair(dir)
	if err != nil {
		t.Fatal(err)
	}
	if got.ID() != kpB.ID() {
		t.Errorf("after replacing, loaded %v, want %v", got.ID(), kpB.ID())
	}
}

func TestSaveErrors(t *testing.T) {
	kp := rfcKeypair(t)
	parent := t.TempDir()
	file := filepath.Join(parent, "file")
	writeFile(t, file, []byte("x"), 0o600)
	for _, dir := range []string{file, filepath.Join(file, "sub")} {
		err := kp.Save(dir)
		if err == nil {
			t.Errorf("Save(%s) under a regular file succeeded", dir)
			continue
		}
		if !strings.Contains(err.Error(), dir) && !strings.Contains(err.Error(), file) {
			t.Errorf("Save error %q does not name the path", err)
		}
		assertNoSecret(t, "Save error", err.Error(), unhex(t, rfcSeedA))
	}
	assertDirHolds(t, parent, "file")
}

func TestLoadKeypairMissingPubIsFine(t *testing.T) {
	dir := t.TempDir()
	kp := rfcKeypair(t)
	mustSave(t, kp, dir)
	if err := os.Remove(filepath.Join(dir, identity.PubFile)); err != nil {
		t.Fatal(err)
	}
	got, err := identity.LoadKeypair(dir)
	if err != nil {
		t.Fatalf("LoadKeypair without %s: %v", identity.PubFile, err)
	}
	if got.ID() != kp.ID() {
		t.Errorf("loaded %v, want %v", got.ID(), kp.ID())
	}
}

func TestLoadKeypairMissingKey(t *testing.T) {
	for _, tc := range []struct {
		name string
		dir  func(t *testing.T) string
	}{
		{"empty dir", func(t *testing.T) string { return t.TempDir() }},
		{"no dir", func(t *testing.T) string { return filepath.Join(t.TempDir(), "nope") }},
		{"only pub", func(t *testing.T) string {
			dir := t.TempDir()
			mustSave(t, rfcKeypair(t), dir)
			if err := os.Remove(filepath.Join(dir, identity.KeyFile)); err != nil {
				t.Fatal(err)
			}
			return dir
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := tc.dir(t)
			kp, err := identity.LoadKeypair(dir)
			if !errors.Is(err, fs.ErrNotExist) || kp != nil {
				t.Fatalf("LoadKeypair = %v, %v; want nil, fs.ErrNotExist", kp, err)
			}
			if !strings.Contains(err.Error(), filepath.Join(dir, identity.KeyFile)) {
				t.Errorf("error %q does not name the key file", err)
			}
		})
	}
}

func TestLoadKeypairErrors(t *testing.T) {
	seed := unhex(t, rfcSeedA)
	seedB := unhex(t, rfcSeedB)
	for _, tc := range []struct {
		name  string
		setup func(t *testing.T, dir string)
		file  string // the file the error must name
		hint  string // the fix the error must suggest
	}{
		{"key 31 bytes", func(t *testing.T, dir string) {
			writeFile(t, filepath.Join(dir, identity.KeyFile), seed[:31], 0o600)
		}, identity.KeyFile, "restore it from a backup"},
		{"key 33 bytes", func(t *testing.T, dir string) {
			writeFile(t, filepath.Join(dir, identity.KeyFile), append(bytes.Clone(seed), 0), 0o600)
		}, identity.KeyFile, "restore it from a backup"},
		{"key 64 bytes (a full private key)", func(t *testing.T, dir string) {
			writeFile(t, filepath.Join(dir, identity.KeyFile), ed25519.NewKeyFromSeed(seed), 0o600)
		}, identity.KeyFile, "restore it from a backup"},
		{"key as hex text", func(t *testing.T, dir string) {
			writeFile(t, filepath.Join(dir, identity.KeyFile), []byte(rfcSeedA+"\n"), 0o600)
		}, identity.KeyFile, "restore it from a backup"},
		{"key empty", func(t *testing.T, dir string) {
			writeFile(t, filepath.Join(dir, identity.KeyFile), nil, 0o600)
		}, identity.KeyFile, "restore it from a backup"},
		{"key mode 0644", func(t *testing.T, dir string) {
			mustSave(t, rfcKeypair(t), dir)
			chmod(t, filepath.Join(dir, identity.KeyFile), 0o644)
		}, identity.KeyFile, "chmod 600 " + identity.KeyFile},
		{"key mode 0640", func(t *testing.T, dir string) {
			mustSave(t, rfcKeypair(t), dir)
			chmod(t, filepath.Join(dir, identity.KeyFile), 0o640)
		}, identity.KeyFile, "chmod 600 " + identity.KeyFile},
		{"key mode 0604", func(t *testing.T, dir string) {
			mustSave(t, rfcKeypair(t), dir)
			chmod(t, filepath.Join(dir, identity.KeyFile), 0o604)
		}, identity.KeyFile, "chmod 600 " + identity.KeyFile},
		{"key mode 0620 (group writable)", func(t *testing.T, dir string) {
			mustSave(t, rfcKeypair(t), dir)
			chmod(t, filepath.Join(dir, identity.KeyFile), 0o620)
		}, identity.KeyFile, "chmod 600 " + identity.KeyFile},
		{"key mode 0644 and wrong size", func(t *testing.T, dir string) {
			writeFile(t, filepath.Join(dir, identity.KeyFile), seed[:31], 0o644)
		}, identity.KeyFile, "chmod 600 " + identity.KeyFile},
		{"pub holds another key", func(t *testing.T, dir string) {
			mustSave(t, rfcKeypair(t), dir)
			writeFile(t, filepath.Join(dir, identity.PubFile), unhex(t, rfcPubB), 0o644)
		}, identity.PubFile, "delete " + identity.PubFile},
		{"pub 31 bytes", func(t *testing.T, dir string) {
			mustSave(t, rfcKeypair(t), dir)
			writeFile(t, filepath.Join(dir, identity.PubFile), unhex(t, rfcPubA)[:31], 0o644)
		}, identity.PubFile, "delete " + identity.PubFile},
		{"pub 33 bytes", func(t *testing.T, dir string) {
			mustSave(t, rfcKeypair(t), dir)
			writeFile(t, filepath.Join(dir, identity.PubFile), append(unhex(t, rfcPubA), '\n'), 0o644)
		}, identity.PubFile, "delete " + identity.PubFile},
		{"pub empty", func(t *testing.T, dir string) {
			mustSave(t, rfcKeypair(t), dir)
			writeFile(t, filepath.Join(dir, identity.PubFile), nil, 0o644)
		}, identity.PubFile, "delete " + identity.PubFile},
		{"pub as text", func(t *testing.T, dir string) {
			mustSave(t, rfcKeypair(t), dir)
			writeFile(t, filepath.Join(dir, identity.PubFile), []byte(rfcTextA), 0o644)
		}, identity.PubFile, "delete " + identity.PubFile},
		{"key path is a directory", func(t *testing.T, dir string) {
			if err := os.Mkdir(filepath.Join(dir, identity.KeyFile), 0o700); err != nil {
				t.Fatal(err)
			}
		}, identity.KeyFile, "move it out of the way"},
		{"pub path is a directory", func(t *testing.T, dir string) {
			writeFile(t, filepath.Join(dir, identity.KeyFile), seed, 0o600)
			if err := os.Mkdir(filepath.Join(dir, identity.PubFile), 0o700); err != nil {
				t.Fatal(err)
			}
		}, identity.PubFile, "move it out of the way"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			tc.setup(t, dir)
			kp, err := identity.LoadKeypair(dir)
			if !errors.Is(err, identity.ErrKeyFile) || kp != nil {
				t.Fatalf("LoadKeypair = %v, %v; want nil, ErrKeyFile", kp, err)
			}
			msg := err.Error()
			if path := filepath.Join(dir, tc.file); !strings.Contains(msg, path) {
				t.Errorf("error %q does not name %s", msg, path)
			}
			hint := strings.ReplaceAll(tc.hint, tc.file, filepath.Join(dir, tc.file))
			if !strings.Contains(msg, hint) {
				t.Errorf("error %q does not contain the fix %q", msg, hint)
			}
			if errors.Is(err, fs.ErrNotExist) {
				t.Errorf("error %q matches fs.ErrNotExist", msg)
			}
			assertNoSecret(t, "error", msg, seed)
			assertNoSecret(t, "error", msg, seedB)
			if b, err := os.ReadFile(filepath.Join(dir, identity.KeyFile)); err == nil {
				assertNoSecret(t, "error", msg, b) // whatever the bad file held
			}
		})
	}
}

func chmod(t *testing.T, path string, mode fs.FileMode) {
	t.Helper()
	if err := os.Chmod(path, mode); err != nil {
		t.Fatal(err)
	}
}

func idBytes(id identity.PeerID) []byte { return id[:] }

func TestSaveTightensExistingDir(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "open")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(dir, 0o755); err != nil { // umask-independent
		t.Fatal(err)
	}
	mustSave(t, rfcKeypair(t), dir)
	st, err := os.Stat(dir)
	if err != nil {
		t.Fatal(err)
	}
	if st.Mode().Perm() != 0o700 {
		t.Fatalf("home mode %v after Save, want 0700", st.Mode().Perm())
	}
}
