package natsrelay

import (
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nkeys"
)

// maxCredsFile bounds what CheckCredsFile reads: a credentials file is a
// user JWT and a seed, a few kilobytes.
const maxCredsFile = 64 << 10

// CheckCredsFile reports whether the file at path holds what a NATS
// credentials file (nats.creds_file) must: a user JWT and an nkey seed,
// so that a node does not start only to fail every connection attempt.
// The seed is parsed and dropped; nothing of it is in the error.
func CheckCredsFile(path string) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, maxCredsFile+1))
	if err != nil {
		return err
	}
	if len(b) > maxCredsFile {
		return fmt.Errorf("%s is over %d bytes: not a NATS credentials file", path, maxCredsFile)
	}
	defer clear(b)
	if jwt, err := nkeys.ParseDecoratedJWT(b); err != nil || !strings.Contains(jwt, ".") {
		return fmt.Errorf("%s holds no user JWT: not a NATS credentials file (nsc writes them)", path)
	}
	kp, err := nkeys.ParseDecoratedNKey(b)
	if err != nil {
		return fmt.Errorf("%s holds no nkey seed: not a NATS credentials file (nsc writes them)", path)
	}
	kp.Wipe()
	return nil
}

// CheckSeedFile reports whether the file at path holds an nkey seed
// (nats.nkey_seed_file), as connecting would read it.
func CheckSeedFile(path string) error {
	if _, err := nats.NkeyOptionFromSeed(path); err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	return nil
}
