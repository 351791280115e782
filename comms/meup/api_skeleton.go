package meup

// THE FUNCTIONS BELOW ARE THE AGREED SIGNATURES; their bodies are being
// written. This file is replaced by the real implementation.

import "errors"

var errTODO = errors.New("meup: not built yet")

// Parse decodes one envelope from its JSON text, bounded by the limits
// above: it refuses anything malformed, over a bound or outside the JSON
// data model, accepts the protocols listed above, normalises kinds
// (meup/v0.1 dotted names to slashes), translates mcpx/v0.1 and checks
// the rules of the envelope's kind. Errors are *Error.
func Parse(data []byte) (Envelope, error) { return Envelope{}, errTODO }

// Validate checks an envelope built locally against the same bounds and
// kind rules Parse applies.
func (e Envelope) Validate() error { return errTODO }

// Encode returns the envelope's JSON text as the given protocol writes it
// (one of the meup/ and mew/ ids; mcpx/v0.1 is never emitted).
func (e Envelope) Encode(protocol string) ([]byte, error) { return nil, errTODO }

// ParseCapabilities decodes a JSON array of capabilities (objects, or the
// strings of mcpx/v0.1), bounded by MaxCapabilities and MaxPatternLen.
func ParseCapabilities(data []byte) ([]Capability, error) { return nil, errTODO }

// Matcher is a compiled set of capabilities: a participant may send an
// envelope when any of them matches it. It is immutable and safe for
// concurrent use. The zero Matcher (and a nil one) allows nothing.
type Matcher struct{}

// Compile compiles caps once (globs, regexes, JSONPath keys). Anything
// malformed fails the whole set: the caller keeps nothing (fail closed).
func Compile(caps []Capability) (*Matcher, error) { return nil, errTODO }

// Allows reports whether some capability matches the envelope's kind and
// payload.
func (m *Matcher) Allows(e Envelope) bool { return false }

// Covers reports whether every envelope c can match is certainly matched
// by this set too (a conservative test: false when unsure). A grant may
// only pass on capabilities its granter's set covers.
func (m *Matcher) Covers(c Capability) bool { return false }
