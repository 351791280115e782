package identity

import (
	"crypto/rand"
	"encoding/hex"
	"time"
)

// UUID is a 16-byte RFC 4122 identifier: envelope ids on the wire and the
// Rust reference's peer UUIDs. The zero value is the nil UUID.
type UUID [16]byte

// NewUUID returns a fresh random (version 4) UUID.
func NewUUID() UUID {
	var u UUID
	// crypto/rand.Read never returns an error on supported platforms
	// (Go 1.24+ crashes the program rather than return short).
	_, _ = rand.Read(u[:])
	u[6] = u[6]&0x0f | 0x40
	u[8] = u[8]&0x3f | 0x80
	return u
}

// NewTimeUUID returns a fresh time-ordered (version 7, RFC 9562) UUID:
// the Unix time in milliseconds in its first 48 bits, then 74 random
// bits. Ids made one after the other sort roughly in the order they were
// made, so a receiver's index of them grows at its end instead of at
// random places; the random bits keep them unguessable.
func NewTimeUUID() UUID {
	u := NewUUID()
	ms := uint64(time.Now().UnixMilli())
	u[0], u[1], u[2], u[3], u[4], u[5] = byte(ms>>40), byte(ms>>32), byte(ms>>24), byte(ms>>16), byte(ms>>8), byte(ms)
	u[6] = u[6]&0x0f | 0x70
	return u
}

// UUIDFromBytes returns the UUID held in a 16-byte slice.
func UUIDFromBytes(b []byte) (UUID, error) {
	var u UUID
	if len(b) != len(u) {
		return UUID{}, ErrBadUUID
	}
	copy(u[:], b)
	return u, nil
}

// ParseUUID parses the hyphenated 8-4-4-4-12 hex form, in either case.
func ParseUUID(s string) (UUID, error) {
	var u UUID
	if len(s) != 36 || s[8] != '-' || s[13] != '-' || s[18] != '-' || s[23] != '-' {
		return UUID{}, ErrBadUUID
	}
	j := 0
	for _, group := range [5][2]int{{0, 8}, {9, 13}, {14, 18}, {19, 23}, {24, 36}} {
		n, err := hex.Decode(u[j:], []byte(s[group[0]:group[1]]))
		if err != nil {
			return UUID{}, ErrBadUUID
		}
		j += n
	}
	return u, nil
}

// IsZero reports whether u is the nil UUID.
func (u UUID) IsZero() bool { return u == UUID{} }

// String returns the lower-case hyphenated form.
func (u UUID) String() string {
	var buf [36]byte
	hex.Encode(buf[0:8], u[0:4])
	buf[8] = '-'
	hex.Encode(buf[9:13], u[4:6])
	buf[13] = '-'
	hex.Encode(buf[14:18], u[6:8])
	buf[18] = '-'
	hex.Encode(buf[19:23], u[8:10])
	buf[23] = '-'
	hex.Encode(buf[24:], u[10:])
	return string(buf[:])
}

// MarshalText implements encoding.TextMarshaler.
func (u UUID) MarshalText() ([]byte, error) { return []byte(u.String()), nil }

// UnmarshalText implements encoding.TextUnmarshaler with [ParseUUID].
func (u *UUID) UnmarshalText(b []byte) error {
	p, err := ParseUUID(string(b))
	if err != nil {
		return err
	}
	*u = p
	return nil
}
