package identity

import "errors"

// Errors returned by this package. Callers branch on them with errors.Is.
var (
	// ErrBadPrefix means a key string does not start with "ed25519:".
	ErrBadPrefix = errors.New(`identity: key string must start with "ed25519:"`)
	// ErrBadLength means a key string is not 44 base64 characters after the
	// prefix, or a raw key is not 32 bytes.
	ErrBadLength = errors.New("identity: key must be 32 bytes (44 base64 characters)")
	// ErrBadBase64 means the key string is not canonical standard padded
	// base64 (bad characters, bad padding or non-zero trailing bits).
	ErrBadBase64 = errors.New("identity: key is not canonical padded base64")
	// ErrZeroKey means the key is all zero bytes, which is never a real key.
	ErrZeroKey = errors.New("identity: all-zero key")
	// ErrWeakKey means the key is not the canonical encoding of a point of
	// large order: no signature by it is ever accepted ([PeerID.Check]).
	ErrWeakKey = errors.New("identity: key is a small-order point or not canonically encoded, so no signature by it is accepted")
	// ErrBadUUID means a UUID string is not in the hyphenated 8-4-4-4-12 form.
	ErrBadUUID = errors.New("identity: malformed UUID")
	// ErrKeyFile means an identity file is missing, malformed, mismatched or
	// unsafe; the wrapping error names the file and the fix.
	ErrKeyFile = errors.New("identity: bad key file")
)
