package identity

import (
	"bytes"
	"crypto/ed25519"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"unsafe"

	"github.com/meerkatd/meerkatd/internal/atomicfile"
	"github.com/meerkatd/meerkatd/internal/filemode"
)

// File names inside a node's home directory.
const (
	KeyFile = "identity.key" // raw 32-byte Ed25519 seed, mode 0600
	PubFile = "identity.pub" // raw 32-byte Ed25519 public key
)

// Keypair is a node's signing key. It is immutable and safe for concurrent
// use; the zero value is not usable (use [GenerateKeypair],
// [KeypairFromSeed] or [LoadKeypair]).
type Keypair struct {
	id PeerID
	// priv points to the key's secret (sign.go). It is an unsafe.Pointer
	// because fmt prints those as bare addresses: no formatting of a
	// Keypair — inside an unexported field fmt cannot call Format on,
	// with any verb — can print the seed. (An ordinary pointer to a
	// struct is printed as &{…} with its contents.)
	priv unsafe.Pointer
}

func (kp *Keypair) secret() *secret         { return (*secret)(kp.priv) }
func (kp *Keypair) key() ed25519.PrivateKey { return kp.secret().key }

// GenerateKeypair returns a new random keypair.
func GenerateKeypair() (*Keypair, error) {
	seed := make([]byte, ed25519.SeedSize)
	if _, err := rand.Read(seed); err != nil {
		return nil, fmt.Errorf("identity: generate key: %w", err)
	}
	return KeypairFromSeed(seed)
}

// KeypairFromSeed returns the keypair for a 32-byte RFC 8032 seed.
func KeypairFromSeed(seed []byte) (*Keypair, error) {
	if len(seed) != ed25519.SeedSize {
		return nil, ErrBadLength
	}
	priv := ed25519.NewKeyFromSeed(seed)
	kp := &Keypair{priv: unsafe.Pointer(newSecret(priv))}
	copy(kp.id[:], priv[ed25519.SeedSize:])
	return kp, nil
}

// ID returns the public key.
func (kp *Keypair) ID() PeerID { return kp.id }

// Sign returns the Ed25519 signature of msg (RFC 8032, deterministic: the
// same bytes crypto/ed25519 makes).
func (kp *Keypair) Sign(msg []byte) []byte {
	sig := new([ed25519.SignatureSize]byte)
	kp.SignInto(sig, msg)
	return sig[:]
}

// SignInto writes the Ed25519 signature of msg into sig. Signatures asked
// for at the same time from several goroutines are made as one batch,
// cheaper per signature, with the same bytes.
func (kp *Keypair) SignInto(sig *[ed25519.SignatureSize]byte, msg []byte) {
	kp.secret().signInto(sig, msg)
}

// SignIntoPrepared writes an Ed25519 signature of msg into sig, made
// with a nonce [Keypair.PrepareNonce] made before msg came, when one is
// ready: valid for every verifier, under the same rules, but not the
// bytes of SignInto's deterministic signature (RFC 8032), and different
// each time. It costs about a tenth of SignInto. Under a burst of
// signatures, or when no nonce is ready, it is SignInto.
func (kp *Keypair) SignIntoPrepared(sig *[ed25519.SignatureSize]byte, msg []byte) {
	kp.secret().signIntoPrepared(sig, msg)
}

// PrepareNonce makes a nonce for a later SignIntoPrepared, on the
// caller's goroutine (about the cost of a signature), unless a few are
// ready already or signatures come in a burst; it reports whether it
// made one. Call it where a goroutine would otherwise wait: before a
// signature is needed, not on its way.
func (kp *Keypair) PrepareNonce() bool { return kp.secret().prepareNonce() }

// Seed returns a copy of the 32-byte private seed. Handle it as a secret.
func (kp *Keypair) Seed() []byte { return bytes.Clone(kp.key().Seed()) }

// String prints the public half only, so a Keypair in a log line or %v never
// leaks the seed.
func (kp *Keypair) String() string { return "Keypair(" + kp.id.String() + ")" }

// GoString is like String, for %#v.
func (kp *Keypair) GoString() string { return kp.String() }

// Format makes every fmt verb print [Keypair.String], for a *Keypair and a
// copied Keypair value alike; without it %v of a value, or %x or %d of
// either, would print the seed bytes.
func (kp Keypair) Format(f fmt.State, verb rune) {
	if verb == 'v' {
		verb = 's' // %v, %+v and %#v all print String; flags and width still apply
	}
	fmt.Fprintf(f, fmt.FormatString(f, verb), kp.String())
}

// Save writes identity.key (mode 0600) and identity.pub into dir, creating
// dir with mode 0700 if needed (and restricting an existing dir to 0700).
// Each file is replaced with [atomicfile.WriteFile] (a synced temporary
// file renamed over it, then a directory sync), so a crash leaves either the
// old file or the new one.
// The old public file is removed first: a crash part-way leaves a seed
// without a public file (which loads) rather than a mismatched pair.
func (kp *Keypair) Save(dir string) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("identity: create %s: %w", dir, err)
	}
	// A home that already existed with looser permissions is tightened:
	// it holds the node's secret.
	if st, err := os.Stat(dir); err == nil && st.Mode().Perm()&0o077 != 0 {
		if err := os.Chmod(dir, 0o700); err != nil {
			return fmt.Errorf("identity: make %s private: %w", dir, err)
		}
	}
	if err := os.Remove(filepath.Join(dir, PubFile)); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("identity: replace %s: %w", filepath.Join(dir, PubFile), err)
	}
	if err := atomicfile.WriteFile(filepath.Join(dir, KeyFile), kp.key().Seed(), 0o600); err != nil {
		return fmt.Errorf("identity: %w", err)
	}
	if err := atomicfile.WriteFile(filepath.Join(dir, PubFile), kp.id[:], 0o644); err != nil {
		return fmt.Errorf("identity: %w", err)
	}
	return nil
}

// LoadKeypair reads the keypair saved in dir. It refuses a seed file that is
// not exactly 32 bytes, that other users can read or write, that another
// user owns or that is a symbolic link (internal/filemode), or whose public
// file (if present) holds a different key. The errors wrap [ErrKeyFile] (or
// fs.ErrNotExist when there is no key file) and say how to fix the file.
func LoadKeypair(dir string) (*Keypair, error) {
	keyPath := filepath.Join(dir, KeyFile)
	seed, mode, err := readSmallFile(keyPath, ed25519.SeedSize)
	if err != nil {
		return nil, err
	}
	if mode.Perm()&0o077 != 0 {
		return nil, fmt.Errorf("%w: %s is readable or writable by other users (mode %#o); fix with: chmod 600 %s",
			ErrKeyFile, keyPath, mode.Perm(), keyPath)
	}
	// Another user's file, or a link to one, is not this node's identity.
	if err := filemode.File(keyPath); err != nil {
		clear(seed)
		return nil, fmt.Errorf("%w: %w", ErrKeyFile, err)
	}
	if len(seed) != ed25519.SeedSize {
		return nil, fmt.Errorf("%w: %s must hold exactly %d bytes, found %s; restore it from a backup or move it away and generate a new identity",
			ErrKeyFile, keyPath, ed25519.SeedSize, sizeWords(len(seed), ed25519.SeedSize))
	}
	kp, err := KeypairFromSeed(seed)
	clear(seed)
	if err != nil {
		return nil, err
	}
	pubPath := filepath.Join(dir, PubFile)
	pub, _, err := readSmallFile(pubPath, len(PeerID{}))
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return kp, nil // the seed is the source of truth; the public file is a convenience
	case err != nil:
		return nil, err
	case !bytes.Equal(pub, kp.id[:]):
		return nil, fmt.Errorf("%w: %s does not match the public key of %s; delete %s (it is only a copy; the seed is the identity)",
			ErrKeyFile, pubPath, keyPath, pubPath)
	}
	return kp, nil
}

// readSmallFile reads at most limit+1 bytes of path, so an oversized file
// is detected without reading it all. What is not a regular file is
// refused before it is opened: opening a FIFO would wait for a writer.
func readSmallFile(path string, limit int) ([]byte, fs.FileMode, error) {
	if st, err := os.Stat(path); err == nil && !st.Mode().IsRegular() {
		return nil, 0, fmt.Errorf("%w: %s is not a regular file; move it out of the way", ErrKeyFile, path)
	}
	f, err := os.Open(path)
	if err != nil {
		return nil, 0, fmt.Errorf("identity: %w", err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, 0, fmt.Errorf("identity: %w", err)
	}
	if !st.Mode().IsRegular() {
		return nil, 0, fmt.Errorf("%w: %s is not a regular file; move it out of the way", ErrKeyFile, path)
	}
	b, err := io.ReadAll(io.LimitReader(f, int64(limit)+1))
	if err != nil {
		return nil, 0, fmt.Errorf("identity: read %s: %w", path, err)
	}
	return b, st.Mode(), nil
}

func sizeWords(n, limit int) string {
	if n > limit {
		return "more"
	}
	return fmt.Sprintf("%d", n)
}
