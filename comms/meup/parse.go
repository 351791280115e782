package meup

import (
	"bytes"
	"encoding/json"
	"errors"
	"strings"
	"time"
)

// envelopeFields are the top-level fields of an envelope; Parse refuses
// any other (fail closed: a field this package does not understand
// could change the meaning of the envelope for another reader).
var envelopeFields = map[string]bool{
	"protocol": true, "id": true, "ts": true, "from": true, "to": true,
	"kind": true, "correlation_id": true, "context": true, "payload": true,
}

// Parse decodes one envelope from its JSON text, bounded by the limits
// above: it refuses anything malformed, over a bound or outside the JSON
// data model, accepts the protocols listed above, normalises kinds
// (meup/v0.1 dotted names to slashes), translates mcpx/v0.1 and checks
// the rules of the envelope's kind. Errors are *Error.
func Parse(data []byte) (Envelope, error) {
	if len(data) > MaxEnvelopeBytes {
		return Envelope{}, tooLarge("", "envelope larger than %d bytes", MaxEnvelopeBytes)
	}
	tree, rawPayload, err := decodeStrictMember(data, MaxDepth+1, "payload")
	if err != nil {
		if errors.Is(err, errDepth) {
			return Envelope{}, invalid("payload", "nested deeper than %d", MaxDepth)
		}
		if errors.As(err, new(inMemberError)) {
			return Envelope{}, invalid("payload", "%v", err)
		}
		return Envelope{}, invalid("", "%v", err)
	}
	top, ok := tree.(map[string]any)
	if !ok {
		return Envelope{}, invalid("", "not a JSON object")
	}
	for k := range top {
		if !envelopeFields[k] {
			return Envelope{}, invalid(quoteShort(k), "unknown envelope field")
		}
	}

	var e Envelope
	proto, ok := top["protocol"].(string)
	if !ok {
		return Envelope{}, invalid("protocol", "missing or not a string")
	}
	if !accepted(proto) {
		return Envelope{}, &Error{Reason: ReasonUnsupportedProtocol, Field: "protocol", Msg: quoteShort(proto) + " is not accepted"}
	}
	e.Protocol = proto

	if e.ID, err = stringField(top, "id", true); err != nil {
		return Envelope{}, err
	}
	if e.TS, err = stringField(top, "ts", false); err != nil {
		return Envelope{}, err
	}
	if e.From, err = stringField(top, "from", true); err != nil {
		return Envelope{}, err
	}
	if e.Context, err = stringField(top, "context", false); err != nil {
		return Envelope{}, err
	}
	if v, ok := top["to"]; ok {
		if e.To, err = stringList(v, "to", false); err != nil {
			return Envelope{}, err
		}
	}
	if v, ok := top["correlation_id"]; ok {
		// mcpx/v0.1 and meup/v0.1 wrote a single correlation id as a string.
		single := proto == ProtocolMCPx01 || proto == ProtocolMEUP01
		if e.CorrelationID, err = stringList(v, "correlation_id", single); err != nil {
			return Envelope{}, err
		}
	}
	kind, ok := top["kind"].(string)
	if !ok {
		return Envelope{}, invalid("kind", "missing or not a string")
	}
	var method string
	if e.Kind, method, err = normaliseKind(proto, kind); err != nil {
		return Envelope{}, err
	}

	var payload map[string]any
	pv, hasPayload := top["payload"]
	if hasPayload {
		if payload, ok = pv.(map[string]any); !ok {
			return Envelope{}, invalid("payload", "not a JSON object")
		}
		var b bytes.Buffer
		if err := json.Compact(&b, rawPayload); err != nil {
			return Envelope{}, invalid("payload", "%v", err)
		}
		e.Payload = b.Bytes()
	}
	if proto == ProtocolMCPx01 {
		if method != "" {
			if m, _ := payload["method"].(string); m != method {
				return Envelope{}, invalid("payload.method", "differs from the method the mcpx kind names")
			}
		}
		if changed, err := translateMCPxCapabilities(e.Kind, payload); err != nil {
			return Envelope{}, err
		} else if changed {
			if e.Payload, err = marshalTree(payload); err != nil {
				return Envelope{}, invalid("payload", "%v", err)
			}
		}
	}
	if err := e.check(payload, hasPayload, len(e.Payload)); err != nil { // e.Payload is compact
		return Envelope{}, err
	}
	return e, nil
}

// translateMCPxCapabilities rewrites, in place, the string capabilities
// of an mcpx/v0.1 grant, revoke or invite into capability objects.
func translateMCPxCapabilities(kind string, p map[string]any) (bool, error) {
	if kind != KindCapabilityGrant && kind != KindCapabilityRevoke && kind != KindSpaceInvite {
		return false, nil
	}
	a, ok := p["capabilities"].([]any)
	if !ok {
		return false, nil
	}
	changed := false
	for i, c := range a {
		s, ok := c.(string)
		if !ok {
			continue
		}
		obj, err := capabilityTreeFromString(s)
		if err != nil {
			return false, withField(err, "payload.capabilities")
		}
		a[i] = obj
		changed = true
	}
	return changed, nil
}

// stringField returns top[key] as a string ("" when absent and not
// required). Its bounds are checked later, by check.
func stringField(top map[string]any, key string, required bool) (string, error) {
	v, ok := top[key]
	if !ok {
		if required {
			return "", invalid(key, "missing")
		}
		return "", nil
	}
	s, ok := v.(string)
	if !ok {
		return "", invalid(key, "not a string")
	}
	return s, nil
}

// stringList returns v as a list of ids; a single string when single.
func stringList(v any, field string, single bool) ([]string, error) {
	if s, ok := v.(string); ok && single {
		return []string{s}, nil
	}
	a, ok := v.([]any)
	if !ok {
		return nil, invalid(field, "not an array of strings")
	}
	if len(a) == 0 {
		return nil, nil
	}
	out := make([]string, len(a))
	for i, x := range a {
		s, ok := x.(string)
		if !ok {
			return nil, invalid(field, "not an array of strings")
		}
		out[i] = s
	}
	return out, nil
}

// Validate checks an envelope built locally against the same bounds and
// kind rules Parse applies. The kind must be in normalised form and the
// protocol, when set, one Parse accepts.
func (e Envelope) Validate() error {
	_, err := e.validate()
	return err
}

// validate is Validate, also returning the payload compacted (nil when
// there is none).
func (e Envelope) validate() ([]byte, error) {
	if e.Protocol != "" && !accepted(e.Protocol) {
		return nil, &Error{Reason: ReasonUnsupportedProtocol, Field: "protocol", Msg: quoteShort(e.Protocol) + " is not accepted"}
	}
	if !ValidKind(e.Kind) {
		return nil, invalid("kind", "%s is not a valid kind", quoteShort(e.Kind))
	}
	var payload map[string]any
	var compact bytes.Buffer
	hasPayload := len(e.Payload) > 0
	if hasPayload {
		if len(e.Payload) > MaxEnvelopeBytes { // before decoding; the compact size is checked below
			return nil, tooLarge("payload", "larger than %d bytes", MaxPayloadBytes)
		}
		tree, err := decodeStrict(e.Payload, MaxDepth)
		if err != nil {
			if errors.Is(err, errDepth) {
				return nil, invalid("payload", "nested deeper than %d", MaxDepth)
			}
			return nil, invalid("payload", "%v", err)
		}
		var ok bool
		if payload, ok = tree.(map[string]any); !ok {
			return nil, invalid("payload", "not a JSON object")
		}
		if err := json.Compact(&compact, e.Payload); err != nil {
			return nil, invalid("payload", "%v", err) // not reached: decodeStrict accepted it
		}
	}
	if err := e.check(payload, hasPayload, compact.Len()); err != nil {
		return nil, err
	}
	if !hasPayload {
		return nil, nil
	}
	return compact.Bytes(), nil
}

// check applies the bounds on every field and the rules of the kind. The
// payload has been decoded (and found an object) by the caller, which
// gives its compacted size.
func (e *Envelope) check(payload map[string]any, hasPayload bool, compactLen int) error {
	if !validParticipant(e.ID) {
		return invalid("id", "not 1..%d printable bytes", MaxIDLen)
	}
	if e.TS != "" {
		if _, err := time.Parse(time.RFC3339Nano, e.TS); err != nil || len(e.TS) > 64 {
			return invalid("ts", "not an RFC 3339 timestamp")
		}
	}
	if !validParticipant(e.From) {
		return invalid("from", "not a participant id (1..%d printable bytes)", MaxIDLen)
	}
	if len(e.To) > MaxTo {
		return invalid("to", "more than %d addressees", MaxTo)
	}
	for _, t := range e.To {
		if !validParticipant(t) {
			return invalid("to", "not a participant id (1..%d printable bytes)", MaxIDLen)
		}
	}
	if len(e.CorrelationID) > MaxCorrelation {
		return invalid("correlation_id", "more than %d ids", MaxCorrelation)
	}
	for _, c := range e.CorrelationID {
		if !validParticipant(c) {
			return invalid("correlation_id", "not 1..%d printable bytes", MaxIDLen)
		}
	}
	if len(e.Context) > MaxContextLen || !printable(e.Context) {
		return invalid("context", "not at most %d printable bytes", MaxContextLen)
	}
	if hasPayload && compactLen > MaxPayloadBytes {
		return tooLarge("payload", "larger than %d bytes", MaxPayloadBytes)
	}
	return checkKind(e.Kind, e.CorrelationID, payload, hasPayload)
}

// Encode returns the envelope's JSON text as the given protocol writes it
// (one of the meup/ and mew/ ids; mcpx/v0.1 is never emitted). Kinds
// are written with slashes, correlation_id as a list, empty optional
// fields are left out and the payload is compacted. A kind with dots and
// no slash cannot be written as meup/v0.1 (it would read back as a
// different kind) and is refused.
func (e Envelope) Encode(protocol string) ([]byte, error) {
	if !emitted(protocol) {
		return nil, &Error{Reason: ReasonUnsupportedProtocol, Field: "protocol", Msg: quoteShort(protocol) + " is not emitted"}
	}
	e.Protocol = protocol
	compact, err := e.validate()
	if err != nil {
		return nil, err
	}
	if protocol == ProtocolMEUP01 && !strings.Contains(e.Kind, "/") && strings.Contains(e.Kind, ".") {
		return nil, invalid("kind", "%s cannot be written as %s", quoteShort(e.Kind), protocol)
	}
	e.Payload = compact
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(e); err != nil {
		return nil, invalid("", "%v", err)
	}
	out := bytes.TrimSuffix(b.Bytes(), []byte("\n"))
	if len(out) > MaxEnvelopeBytes {
		return nil, tooLarge("", "envelope larger than %d bytes", MaxEnvelopeBytes)
	}
	return out, nil
}
