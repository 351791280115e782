package pair

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/base32"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"

	"github.com/meerkatd/meerkatd/transport"
)

// CodeSize is the pairing code's length in bytes: 128 random bits.
const CodeSize = 16

// Code is a one-time pairing code.
type Code [CodeSize]byte

// linePrefix starts every code line; the version lets a later protocol
// change the format.
const linePrefix = "meerkat-pair/1"

// maxLineLen bounds a code line (an address is at most a few hundred bytes).
const maxLineLen = 1024

// codeAlphabet is RFC 4648 base32 without padding: letters and 2–7, no
// 0/1/8/9, so a person reading it aloud meets no O/0 or I/1 pairs.
var codeEncoding = base32.StdEncoding.WithPadding(base32.NoPadding)

// ErrBadLine is wrapped by every code-line parse error.
var ErrBadLine = errors.New("pair: not a pairing code line")

// NewCode returns a fresh random code.
func NewCode() (Code, error) {
	var c Code
	if _, err := rand.Read(c[:]); err != nil {
		return c, err
	}
	return c, nil
}

// String writes c as groups of four base32 characters: ABCD-EFGH-…-XY.
func (c Code) String() string {
	s := codeEncoding.EncodeToString(c[:])
	var b strings.Builder
	for i := 0; i < len(s); i += 4 {
		if i > 0 {
			b.WriteByte('-')
		}
		b.WriteString(s[i:min(i+4, len(s))])
	}
	return b.String()
}

// ParseCode reads a code as String writes it; case, dashes and spaces are
// forgiven.
func ParseCode(s string) (Code, error) {
	var c Code
	clean := strings.Map(func(r rune) rune {
		switch {
		case r == '-' || r == ' ':
			return -1
		case r >= 'a' && r <= 'z':
			return r - 'a' + 'A'
		}
		return r
	}, s)
	if len(clean) != codeEncoding.EncodedLen(CodeSize) {
		return c, fmt.Errorf("%w: the code has %d characters, want %d", ErrBadLine, len(clean), codeEncoding.EncodedLen(CodeSize))
	}
	b, err := codeEncoding.DecodeString(clean)
	if err != nil || len(b) != CodeSize {
		return c, fmt.Errorf("%w: the code is not base32 (A–Z, 2–7)", ErrBadLine)
	}
	// The last character carries only 3 of its 5 bits; refuse other
	// spellings of the same code, so a code has one written form.
	if codeEncoding.EncodeToString(b) != clean {
		return c, fmt.Errorf("%w: the code's last character cannot end a pairing code (a typo? copy the line again)", ErrBadLine)
	}
	copy(c[:], b)
	return c, nil
}

// id is what identifies the offer on the wire: derived from the code, so
// a connection that names it knows the code or guessed 128 bits — and
// the code itself never travels.
func (c Code) id() [16]byte {
	h := sha256.New()
	h.Write([]byte("meerkat pair offer id v1"))
	h.Write(c[:])
	var out [16]byte
	copy(out[:], h.Sum(nil))
	return out
}

// Line is what the offering node hands to the other: its code and where
// to reach it.
type Line struct {
	Code Code
	Addr transport.Addr
}

// String writes the single line a person passes on:
// "meerkat-pair/1 ABCD-…-XY uds:///path/meerkat.sock".
func (l Line) String() string {
	return linePrefix + " " + l.Code.String() + " " + l.Addr.String()
}

// OfferID is the hex form of the id the offer is known by on the wire:
// derived from the code by a one-way hash, so it can be shown (as the
// NATS subject a pairing through NATS is answered on) without giving the
// code away.
func (l Line) OfferID() string {
	id := l.Code.id()
	return hex.EncodeToString(id[:])
}

// ParseLine reads a line as [Line.String] writes it. Surrounding space is
// ignored; anything else wrong is an error wrapping ErrBadLine that says
// what.
func ParseLine(s string) (Line, error) {
	var l Line
	if len(s) > maxLineLen {
		return l, fmt.Errorf("%w: longer than %d bytes", ErrBadLine, maxLineLen)
	}
	f := strings.Fields(s)
	if len(f) == 0 || f[0] != linePrefix {
		return l, fmt.Errorf("%w: it must start with %q", ErrBadLine, linePrefix)
	}
	if len(f) != 3 {
		return l, fmt.Errorf("%w: want %q, a code and an address", ErrBadLine, linePrefix)
	}
	code, err := ParseCode(f[1])
	if err != nil {
		return l, err
	}
	addr, err := transport.ParseAddr(f[2])
	if err != nil {
		return l, fmt.Errorf("%w: address: %v", ErrBadLine, err)
	}
	return Line{Code: code, Addr: addr}, nil
}
