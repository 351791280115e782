package identity

import (
	"crypto/sha1"
	"encoding/base64"
	"fmt"
	"log/slog"
	"strings"
)

// PeerIDPrefix starts the text form of every [PeerID].
const PeerIDPrefix = "ed25519:"

// peerIDTextLen is the length of the base64 part of a PeerID's text form:
// 32 bytes in padded standard base64.
const peerIDTextLen = 44

// peerUUIDNamespace is the UUIDv5 namespace the Rust reference uses to turn a
// public key into its PeerId UUID ("meerkatPeerId0" + 0x0001 in ASCII).
var peerUUIDNamespace = UUID{0x6d, 0x65, 0x65, 0x72, 0x6b, 0x61, 0x74, 0x50, 0x65, 0x65, 0x72, 0x49, 0x64, 0x30, 0x00, 0x01}

var strictBase64 = base64.StdEncoding.Strict()

// PeerID is a node's raw Ed25519 public key. It is comparable and usable as a
// map key. The zero value is not a valid key.
type PeerID [32]byte

// PeerIDFromBytes returns the PeerID for a raw 32-byte public key.
func PeerIDFromBytes(b []byte) (PeerID, error) {
	var id PeerID
	if len(b) != len(id) {
		return PeerID{}, ErrBadLength
	}
	copy(id[:], b)
	if id.IsZero() {
		return PeerID{}, ErrZeroKey
	}
	return id, nil
}

// ParsePeerID parses the canonical text form "ed25519:" + 44 characters of
// standard padded base64. Each kind of mistake gives a distinct error:
// [ErrBadPrefix], [ErrBadLength], [ErrBadBase64] or [ErrZeroKey]. Errors do
// not repeat the input.
func ParsePeerID(s string) (PeerID, error) {
	rest, ok := strings.CutPrefix(s, PeerIDPrefix)
	if !ok {
		return PeerID{}, ErrBadPrefix
	}
	if len(rest) != peerIDTextLen {
		return PeerID{}, ErrBadLength
	}
	// The decoder skips '\r' and '\n', so without this check a key with
	// line breaks in it would be reported as the wrong length.
	if strings.ContainsAny(rest, "\r\n") {
		return PeerID{}, ErrBadBase64
	}
	var id PeerID
	// 44 padded characters decode to at most 33 bytes; a 33-byte buffer
	// lets us see over-long decodings without allocating.
	var buf [33]byte
	n, err := strictBase64.Decode(buf[:], []byte(rest))
	if err != nil {
		return PeerID{}, ErrBadBase64
	}
	if n != len(id) {
		return PeerID{}, ErrBadLength
	}
	copy(id[:], buf[:n])
	if id.IsZero() {
		return PeerID{}, ErrZeroKey
	}
	return id, nil
}

// IsZero reports whether id is the all-zero key (the zero value).
func (id PeerID) IsZero() bool { return id == PeerID{} }

// String returns the canonical text form, "ed25519:" + padded base64.
func (id PeerID) String() string {
	var buf [len(PeerIDPrefix) + peerIDTextLen]byte
	copy(buf[:], PeerIDPrefix)
	strictBase64.Encode(buf[len(PeerIDPrefix):], id[:])
	return string(buf[:])
}

// Short returns an abbreviated form for logs: the prefix and the first eight
// base64 characters. It is not unique and never parses.
func (id PeerID) Short() string {
	return id.String()[:len(PeerIDPrefix)+8]
}

// LogValue makes slog print the short form.
func (id PeerID) LogValue() slog.Value { return slog.StringValue(id.Short()) }

// MarshalText implements encoding.TextMarshaler with the canonical form.
func (id PeerID) MarshalText() ([]byte, error) {
	if id.IsZero() {
		return nil, ErrZeroKey
	}
	return []byte(id.String()), nil
}

// UnmarshalText implements encoding.TextUnmarshaler with [ParsePeerID].
func (id *PeerID) UnmarshalText(b []byte) error {
	p, err := ParsePeerID(string(b))
	if err != nil {
		return err
	}
	*id = p
	return nil
}

// UUID returns the Rust reference's PeerId UUID for this key: a version 5
// UUID in namespace 6d656572-6b61-7450-6565-724964300001 over the 32 raw key
// bytes. Users of Rust nodes see peers by this value.
func (id PeerID) UUID() UUID {
	h := sha1.New()
	h.Write(peerUUIDNamespace[:])
	h.Write(id[:])
	var sum [sha1.Size]byte
	h.Sum(sum[:0])
	var u UUID
	copy(u[:], sum[:16])
	u[6] = u[6]&0x0f | 0x50 // version 5
	u[8] = u[8]&0x3f | 0x80 // RFC 4122 variant
	return u
}

// GoString keeps %#v output readable and free of raw byte dumps.
func (id PeerID) GoString() string { return fmt.Sprintf("identity.PeerID(%q)", id.String()) }
