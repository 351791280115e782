package meup

import (
	"fmt"
	"strings"
)

// capabilityFields are the fields of a capability object; any other is
// refused (fail closed: an unknown field may be a constraint).
var capabilityFields = map[string]bool{"id": true, "kind": true, "payload": true}

// ParseCapabilities decodes a JSON array of capabilities (objects, or the
// strings of mcpx/v0.1), bounded by MaxCapabilities and MaxPatternLen.
// Each capability's JSON text is bounded by MaxCapabilityJSON, the array
// by MaxPayloadBytes; duplicate keys and unknown capability fields are
// refused. The patterns themselves are checked by [Compile].
func ParseCapabilities(data []byte) ([]Capability, error) {
	if len(data) > MaxPayloadBytes {
		return nil, invalid("capabilities", "larger than %d bytes", MaxPayloadBytes)
	}
	tree, err := decodeStrict(data, MaxDepth)
	if err != nil {
		return nil, invalid("capabilities", "%v", err)
	}
	a, ok := tree.([]any)
	if !ok {
		return nil, invalid("capabilities", "not a JSON array")
	}
	caps, err := capabilitiesFromTree(a, true)
	if err != nil {
		return nil, withField(err, "capabilities")
	}
	return caps, nil
}

// CapabilityFromString translates an mcpx/v0.1 capability string:
// "KIND" becomes {"kind":"KIND"} and "KIND:METHOD" becomes
// {"kind":"KIND","payload":{"method":"METHOD"}}, where a KIND of "mcp"
// means mcp/request. Both parts are patterns: "mcp/request:tools/*"
// allows every tools/ method.
func CapabilityFromString(s string) (Capability, error) {
	obj, err := capabilityTreeFromString(s)
	if err != nil {
		return Capability{}, err
	}
	caps, err := capabilitiesFromTree([]any{obj}, false)
	if err != nil {
		return Capability{}, err
	}
	return caps[0], nil
}

func capabilityTreeFromString(s string) (map[string]any, error) {
	if s == "" || len(s) > MaxPatternLen {
		return nil, invalid("", "capability string empty or longer than %d bytes", MaxPatternLen)
	}
	kind, method, ok := strings.Cut(s, ":")
	if kind == "mcp" {
		kind = KindMCPRequest
	}
	if kind == "" {
		return nil, invalid("", "capability string names no kind")
	}
	obj := map[string]any{"kind": kind}
	if ok {
		if method == "" {
			return nil, invalid("", "capability string names an empty method")
		}
		obj["payload"] = map[string]any{"method": method}
	}
	return obj, nil
}

// capabilitiesFromTree turns decoded capabilities into Capability
// values, applying the bounds. Strings are translated when allowStrings.
func capabilitiesFromTree(a []any, allowStrings bool) ([]Capability, error) {
	if len(a) > MaxCapabilities {
		return nil, invalid("", "more than %d capabilities", MaxCapabilities)
	}
	caps := make([]Capability, 0, len(a))
	for i, v := range a {
		c, err := capabilityFromTree(v, allowStrings)
		if err != nil {
			return nil, withField(err, fmt.Sprintf("[%d]", i))
		}
		caps = append(caps, c)
	}
	return caps, nil
}

// capabilityFromTree is one capability of capabilitiesFromTree.
func capabilityFromTree(v any, allowStrings bool) (Capability, error) {
	fail := func(err error) (Capability, error) { return Capability{}, err }
	if s, ok := v.(string); ok && allowStrings {
		obj, err := capabilityTreeFromString(s)
		if err != nil {
			return fail(err)
		}
		v = obj
	}
	obj, ok := v.(map[string]any)
	if !ok {
		return fail(invalid("", "a capability is not an object"))
	}
	for k := range obj {
		if !capabilityFields[k] {
			return fail(invalid("", "unknown capability field %s", quoteShort(k)))
		}
	}
	var c Capability
	if id, ok := obj["id"]; ok {
		s, ok := id.(string)
		if !ok || len(s) > MaxIDLen || !printable(s) {
			return fail(invalid("id", "not a string of at most %d printable bytes", MaxIDLen))
		}
		c.ID = s
	}
	kind, ok := obj["kind"]
	if !ok {
		return fail(invalid("kind", "missing"))
	}
	if err := patternBounds(kind); err != nil {
		return fail(err)
	}
	all, err := marshalTree(obj)
	if err != nil {
		return fail(invalid("", "%v", err))
	}
	if len(all) > MaxCapabilityJSON {
		return fail(invalid("", "a capability is larger than %d bytes", MaxCapabilityJSON))
	}
	if c.Kind, err = marshalTree(kind); err != nil {
		return fail(invalid("kind", "%v", err))
	}
	if p, ok := obj["payload"]; ok && p != nil {
		if err := patternBounds(p); err != nil {
			return fail(err)
		}
		if c.Payload, err = marshalTree(p); err != nil {
			return fail(invalid("payload", "%v", err))
		}
	}
	return c, nil
}

// patternBounds checks every string (and object key) in a decoded
// pattern is at most MaxPatternLen bytes.
func patternBounds(v any) error {
	switch x := v.(type) {
	case string:
		if len(x) > MaxPatternLen {
			return invalid("", "a pattern is longer than %d bytes", MaxPatternLen)
		}
	case []any:
		for _, y := range x {
			if err := patternBounds(y); err != nil {
				return err
			}
		}
	case map[string]any:
		for k, y := range x {
			if len(k) > MaxPatternLen {
				return invalid("", "a pattern key is longer than %d bytes", MaxPatternLen)
			}
			if err := patternBounds(y); err != nil {
				return err
			}
		}
	}
	return nil
}
