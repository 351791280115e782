package wire

import (
	"github.com/meerkatd/meerkatd/identity"
)

// Kind types the protocol defines (docs/protocol.md, "Kinds").
const (
	TypeMessage  = "message"
	TypeRequest  = "request"
	TypeResponse = "response"
	TypeAck      = "ack"
	// TypeMEUP carries one MEUP envelope of a space: {"type": "meup",
	// "space": TEXT, "envelope": MAP}. The envelope holds JSON values only
	// (docs/meup.md). The Rust reference does not know this type.
	TypeMEUP = "meup"
	// TypeSealed carries another envelope encrypted to the recipient:
	// {"type": "sealed", "box": BYTES}. Nodes send it only through the
	// relay; the box is opened with package comms/seal, and wire does not
	// look inside it. The Rust reference does not know this type.
	TypeSealed = "sealed"
	// TypeAcks acknowledges several envelopes at once: {"type": "acks",
	// "ids": BYTES}, the ids one after another, 16 bytes each. Each id is
	// acknowledged with the meaning of an ack kind. A node sends it only on
	// a connection whose peer said it takes it (see [Envelope.AcksHint]);
	// the Rust reference does not know this type.
	TypeAcks = "acks"
)

// MaxAckIDs bounds the ids one acks kind may hold.
const MaxAckIDs = 4096

// maxBoxLen bounds the box of a sealed kind, in bytes: the protocol's
// maximum frame payload. (An envelope holding a box that large would itself
// be too large; the bound keeps a kind's check independent of its
// envelope.)
const maxBoxLen = MaxEnvelopeSize

// MaxSpaceLen bounds the space name of a meup kind, in bytes.
const MaxSpaceLen = 256

// Status is the status of a response.
type Status string

// The response statuses.
const (
	StatusAccepted  Status = "accepted"
	StatusCompleted Status = "completed"
	StatusFailed    Status = "failed"
)

// Valid reports whether s is one of the three statuses.
func (s Status) Valid() bool {
	return s == StatusAccepted || s == StatusCompleted || s == StatusFailed
}

// Kind is the signed content of an envelope: a map with a "type" member
// and that type's fields. It is kept as a generic [Value] tree, so fields
// this implementation does not model (handling_mode, content_taint,
// objective_id, blocks, …) are signed, verified, preserved when the envelope
// is re-encoded, and readable with [Kind.Field]. Kinds of unknown types are
// carried the same way.
//
// A Kind is immutable. The zero Kind is invalid; build one with [Message],
// [Request], [Response], [Ack], [SealedKind] or [NewKind].
type Kind struct {
	v Value
	// checked records that every text in v is UTF-8 and every float
	// finite (set by Decode and Seal), so encoders need not look again.
	checked bool
}

// declared lists, per known type, the fields in the order the Rust reference
// declares them (after "type"). The wire encoder emits present fields in
// this order and any others after them, bytewise sorted. The order only
// shapes frames; signatures use canonical order.
var declared = map[string][]string{
	TypeMessage:                  {"body", "blocks", "content_taint", "handling_mode", "objective_id"},
	"incarnation_fenced_message": {"body", "blocks", "content_taint", "handling_mode", "objective_id", "expected_recipient"},
	TypeRequest:                  {"intent", "params", "blocks", "reply_endpoint", "content_taint", "handling_mode", "objective_id"},
	"lifecycle":                  {"kind", "params"},
	TypeResponse:                 {"in_reply_to", "status", "result", "blocks", "content_taint", "handling_mode", "objective_id"},
	TypeAck:                      {"in_reply_to"},
	TypeMEUP:                     {"space", "envelope"},
	TypeSealed:                   {"box"},
	TypeAcks:                     {"ids"},
}

// Message returns a message kind with the given body.
func Message(body string) Kind {
	return Kind{v: itemsValue(TypeMap, []Value{Text("body"), Text(body), Text("type"), Text(TypeMessage)})}
}

// Request returns a request kind. params should be in the JSON data model
// (no byte strings); Seal checks.
func Request(intent string, params Value) Kind {
	return Kind{v: itemsValue(TypeMap, []Value{Text("type"), Text(TypeRequest), Text("intent"), Text(intent), Text("params"), params})}
}

// Response returns a response kind answering the request with id inReplyTo.
func Response(inReplyTo identity.UUID, status Status, result Value) Kind {
	return Kind{v: itemsValue(TypeMap, []Value{
		Text("type"), Text(TypeResponse), Text("result"), result,
		Text("status"), Text(string(status)), Text("in_reply_to"), Bytes(inReplyTo[:]),
	})}
}

// Ack returns an ack kind for the envelope with id inReplyTo.
func Ack(inReplyTo identity.UUID) Kind {
	return Kind{v: itemsValue(TypeMap, []Value{Text("type"), Text(TypeAck), Text("in_reply_to"), Bytes(inReplyTo[:])})}
}

// Acks returns an acks kind for the envelopes with the given ids (at most
// [MaxAckIDs]; [Seal] refuses an empty or longer list).
func Acks(ids []identity.UUID) Kind {
	b := make([]byte, 0, len(ids)*len(identity.UUID{}))
	for _, id := range ids {
		b = append(b, id[:]...)
	}
	// Members in canonical key order, as Get expects: "ids" before "type".
	return Kind{v: itemsValue(TypeMap, []Value{Text("ids"), Bytes(b), Text("type"), Text(TypeAcks)})}
}

// SealedKind returns a sealed kind holding box, the output of
// seal.Seal (package comms/seal): the encrypted inner envelope. The box is
// copied. [Seal] refuses the kind if box is empty or longer than
// [MaxEnvelopeSize].
func SealedKind(box []byte) Kind {
	// Members in canonical key order, as Get expects: "box" sorts before "type".
	return Kind{v: itemsValue(TypeMap, []Value{Text("box"), Bytes(box), Text("type"), Text(TypeSealed)})}
}

// NewKind checks that m is a valid kind (a map with a text "type" and, for
// the known types, their required fields with the right types) and
// returns it. Use it with [Value.With] to add fields such as handling_mode.
func NewKind(m Value) (Kind, error) {
	if _, err := checkKind(m, true); err != nil {
		return Kind{}, err
	}
	return Kind{v: m}, nil
}

// With returns a copy of k with field name set to v, checked like NewKind.
func (k Kind) With(name string, v Value) (Kind, error) {
	m, err := k.v.With(name, v)
	if err != nil {
		return Kind{}, err
	}
	return NewKind(m)
}

// Value returns the whole kind as a map value.
func (k Kind) Value() Value { return k.v }

// Type returns the kind's type, for example "message".
func (k Kind) Type() string { return k.text("type") }

// Field returns the member name and whether it is present.
func (k Kind) Field(name string) (Value, bool) { return k.v.Get(name) }

// Body returns the body of a message ("" if absent).
func (k Kind) Body() string { return k.text("body") }

// Intent returns the intent of a request ("" if absent).
func (k Kind) Intent() string { return k.text("intent") }

// Params returns the params of a request (null if absent).
func (k Kind) Params() Value { v, _ := k.v.Get("params"); return v }

// Result returns the result of a response (null if absent).
func (k Kind) Result() Value { v, _ := k.v.Get("result"); return v }

// Status returns the status of a response ("" if absent).
func (k Kind) Status() Status { return Status(k.text("status")) }

// InReplyTo returns the id a response or ack refers to, if it has one.
func (k Kind) InReplyTo() (identity.UUID, bool) {
	v, ok := k.v.Get("in_reply_to")
	if !ok || v.t != TypeBytes || len(v.str()) != len(identity.UUID{}) {
		return identity.UUID{}, false
	}
	var u identity.UUID
	copy(u[:], v.str())
	return u, true
}

// AckedIDs appends to dst the ids an ack or acks kind acknowledges (none
// for other kinds) and returns it.
func (k Kind) AckedIDs(dst []identity.UUID) []identity.UUID {
	switch k.Type() {
	case TypeAck:
		if id, ok := k.InReplyTo(); ok {
			dst = append(dst, id)
		}
	case TypeAcks:
		v, _ := k.v.Get("ids")
		s := v.str()
		if v.t != TypeBytes || len(s)%len(identity.UUID{}) != 0 {
			return dst
		}
		for ; len(s) > 0; s = s[len(identity.UUID{}):] {
			var id identity.UUID
			copy(id[:], s)
			dst = append(dst, id)
		}
	}
	return dst
}

// Box returns a copy of the box of a sealed kind. It reports false unless
// the kind's type is sealed and its box a byte string.
func (k Kind) Box() ([]byte, bool) {
	if k.Type() != TypeSealed {
		return nil, false
	}
	v, _ := k.v.Get("box")
	return v.Bytes()
}

func (k Kind) text(name string) string {
	v, _ := k.v.Get(name)
	s, _ := v.Text()
	return s
}

// checkKind validates a kind tree. On failure it returns the offending
// field's name with the reason. With deep false the caller vouches that no
// byte string sits below the kind's members, so params and results are only
// checked at their top.
func checkKind(m Value, deep bool) (string, error) {
	if m.t != TypeMap {
		return "", ErrType
	}
	typ, ok := m.Get("type")
	if !ok {
		return "type", ErrMissingField
	}
	if typ.t != TypeText {
		return "type", ErrType
	}
	need := func(name string, t Type) (Value, string, error) {
		v, ok := m.Get(name)
		switch {
		case !ok:
			return v, name, ErrMissingField
		case t != TypeNull && v.t != t:
			return v, name, ErrType
		}
		return v, "", nil
	}
	switch typ.str() {
	case TypeMessage:
		if _, f, err := need("body", TypeText); err != nil {
			return f, err
		}
	case TypeRequest:
		if _, f, err := need("intent", TypeText); err != nil {
			return f, err
		}
		p, f, err := need("params", TypeNull)
		if err != nil {
			return f, err
		}
		if err := checkJSON(p, 3, deep); err != nil {
			return "params", err
		}
	case TypeResponse:
		if f, err := checkUUIDField(m); err != nil {
			return f, err
		}
		s, f, err := need("status", TypeText)
		if err != nil {
			return f, err
		}
		if !Status(s.str()).Valid() {
			return "status", ErrBadValue
		}
		r, f, err := need("result", TypeNull)
		if err != nil {
			return f, err
		}
		if err := checkJSON(r, 3, deep); err != nil {
			return "result", err
		}
	case TypeAck:
		if f, err := checkUUIDField(m); err != nil {
			return f, err
		}
	case TypeMEUP:
		s, f, err := need("space", TypeText)
		if err != nil {
			return f, err
		}
		if n := len(s.str()); n == 0 || n > MaxSpaceLen {
			return "space", ErrLength
		}
		env, f, err := need("envelope", TypeMap)
		if err != nil {
			return f, err
		}
		// The whole envelope is checked, whatever the decoder saw: it is
		// handed on as JSON.
		if err := checkJSON(env, 3, true); err != nil {
			return "envelope", err
		}
	case TypeAcks:
		b, f, err := need("ids", TypeBytes)
		if err != nil {
			return f, err
		}
		if n := len(b.str()); n == 0 || n%len(identity.UUID{}) != 0 || n > MaxAckIDs*len(identity.UUID{}) {
			return "ids", ErrLength
		}
	case TypeSealed:
		// Opaque ciphertext: a byte string, unlike the JSON fields of the
		// other kinds of meerkatd's own.
		b, f, err := need("box", TypeBytes)
		if err != nil {
			return f, err
		}
		if n := len(b.str()); n == 0 || n > maxBoxLen {
			return "box", ErrLength
		}
	}
	return "", nil
}

func checkUUIDField(m Value) (string, error) {
	v, ok := m.Get("in_reply_to")
	switch {
	case !ok:
		return "in_reply_to", ErrMissingField
	case v.t != TypeBytes:
		return "in_reply_to", ErrType
	case len(v.str()) != len(identity.UUID{}):
		return "in_reply_to", ErrLength
	}
	return "", nil
}

// checkJSON checks that v, found at nesting level depth, is in the JSON
// data model (no byte strings) and nests no deeper than MaxDepth. With deep
// false it checks only v itself.
func checkJSON(v Value, depth int, deep bool) error {
	switch v.t {
	case TypeBytes:
		return ErrType
	case TypeArray, TypeMap:
		if !deep {
			return nil
		}
		if depth > MaxDepth {
			return ErrTooDeep
		}
		for i, item := range v.items() {
			if v.t == TypeMap && i%2 == 0 {
				continue
			}
			if err := checkJSON(item, depth+1, true); err != nil {
				return err
			}
		}
	}
	return nil
}
