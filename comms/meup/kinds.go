package meup

import (
	"strings"
	"unicode"
)

// ValidKind reports whether kind is a kind in normalised form: one or
// more segments separated by single slashes, each segment a lowercase
// letter or digit followed by lowercase letters, digits, '.', '_' or
// '-', and at most [MaxKindLen] bytes in all. "chat", "mcp/request" and
// "capability/grant-ack" are valid; "", "/chat", "mcp//request",
// "MCP/request" and "mcp/request:tools/call" are not.
func ValidKind(kind string) bool {
	if len(kind) == 0 || len(kind) > MaxKindLen {
		return false
	}
	start := true // at the first byte of a segment
	for i := 0; i < len(kind); i++ {
		c := kind[i]
		switch {
		case c >= 'a' && c <= 'z', c >= '0' && c <= '9':
			start = false
		case c == '.' || c == '_' || c == '-':
			if start {
				return false
			}
		case c == '/':
			if start {
				return false
			}
			start = true
		default:
			return false
		}
	}
	return !start
}

// IsSystem reports whether kind is in the system/ namespace, whose
// envelopes come from a space's host and never from its members.
func IsSystem(kind string) bool {
	return kind == "system" || strings.HasPrefix(kind, "system/")
}

// validParticipant reports whether s is a usable participant id (also
// used for envelope and correlation ids): 1..MaxIDLen bytes of printable
// characters (U+0020 is the only space allowed).
func validParticipant(s string) bool {
	return len(s) > 0 && len(s) <= MaxIDLen && printable(s)
}

func printable(s string) bool {
	for _, r := range s {
		if !unicode.IsPrint(r) {
			return false
		}
	}
	return true
}

// payloadOptional lists the seed kinds whose payload may be absent.
var payloadOptional = map[string]bool{
	KindMCPWithdraw:        true,
	KindMCPReject:          true,
	KindCapabilityGrantAck: true,
}

// checkKind applies the rules of the envelope's kind. p is the decoded
// payload (nil when absent; Parse has already refused a payload that is
// not an object).
func checkKind(kind string, corr []string, p map[string]any, hasPayload bool) error {
	seed := isSeed(kind)
	if err := checkFieldCase(kind, p); err != nil {
		return err
	}
	if seed && !hasPayload && !payloadOptional[kind] {
		return invalid("payload", "kind %s needs a payload object", kind)
	}
	needCorr := func() error {
		if len(corr) == 0 {
			return invalid("correlation_id", "kind %s needs a correlation id", kind)
		}
		return nil
	}
	switch kind {
	case KindMCPRequest, KindMCPProposal:
		return needString(p, "method", true)
	case KindMCPResponse:
		if err := needCorr(); err != nil {
			return err
		}
		_, r := p["result"]
		_, e := p["error"]
		if !r && !e {
			return invalid("payload", "an MCP response needs a result or an error")
		}
	case KindMCPWithdraw:
		return needCorr()
	case KindMCPReject:
		if err := needCorr(); err != nil {
			return err
		}
		if v, ok := p["reason"]; ok {
			if _, ok := v.(string); !ok {
				return invalid("payload.reason", "not a string")
			}
		}
	case KindCapabilityGrant:
		if err := needParticipant(p, "recipient"); err != nil {
			return err
		}
		return needCapabilities(p, true)
	case KindCapabilityRevoke:
		if err := needParticipant(p, "recipient"); err != nil {
			return err
		}
		_, g := p["grant_id"]
		_, c := p["capabilities"]
		if !g && !c {
			return invalid("payload", "a revoke names a grant_id or capabilities")
		}
		if g {
			if err := needString(p, "grant_id", true); err != nil {
				return err
			}
		}
		if c {
			return needCapabilities(p, false)
		}
	case KindCapabilityGrantAck:
		return needCorr()
	case KindSpaceInvite:
		if err := needParticipant(p, "participant_id"); err != nil {
			return err
		}
		if err := needString(p, "key", true); err != nil {
			return err
		}
		if _, ok := p["capabilities"]; ok {
			return needCapabilities(p, false)
		}
	case KindSpaceKick:
		return needParticipant(p, "participant_id")
	case KindChat:
		return needString(p, "text", false)
	case KindSystemPresence:
		ev, _ := p["event"].(string)
		if ev != "join" && ev != "leave" && ev != "heartbeat" {
			return invalid("payload.event", "not one of join, leave, heartbeat")
		}
		return needMember(p, "participant")
	case KindSystemWelcome:
		return needMember(p, "you")
	case KindSystemError:
		return needString(p, "error", true)
	}
	return nil
}

// payloadFields lists, per seed kind, the payload members that nodes
// read (its rules, the space engine, the MCP call a proposal holds).
var payloadFields = map[string][]string{
	KindMCPRequest:       {"method", "params"},
	KindMCPProposal:      {"method", "params"},
	KindMCPResponse:      {"result", "error"},
	KindMCPReject:        {"reason"},
	KindCapabilityGrant:  {"recipient", "capabilities"},
	KindCapabilityRevoke: {"recipient", "grant_id", "capabilities"},
	KindSpaceInvite:      {"participant_id", "key", "capabilities"},
	KindSpaceKick:        {"participant_id"},
	KindChat:             {"text"},
	KindSystemPresence:   {"event", "participant"},
	KindSystemWelcome:    {"you"},
	KindSystemError:      {"error"},
}

// checkFieldCase refuses a payload member whose name is one of the
// kind's fields in other letter case ("Participant_ID", or with U+212A
// KELVIN SIGN for k): capabilities match member names exactly, and a
// reader that folds case (as Go's encoding/json does for struct fields)
// could take that member for the field, and so act on a value no
// capability was checked against.
func checkFieldCase(kind string, p map[string]any) error {
	fields := payloadFields[kind]
	for k := range p {
		for _, f := range fields {
			if k != f && strings.EqualFold(k, f) {
				return invalid("payload", "member %q differs from the field %q only in letter case (member names are case-sensitive)", k, f)
			}
		}
	}
	return nil
}

// isSeed reports whether kind has rules of its own: the constants above
// and every reasoning/ kind.
func isSeed(kind string) bool {
	switch kind {
	case KindMCPRequest, KindMCPResponse, KindMCPProposal, KindMCPWithdraw,
		KindMCPReject, KindCapabilityGrant, KindCapabilityRevoke,
		KindCapabilityGrantAck, KindSpaceInvite, KindSpaceKick, KindChat,
		KindSystemPresence, KindSystemWelcome, KindSystemError:
		return true
	}
	return strings.HasPrefix(kind, "reasoning/")
}

func needString(p map[string]any, key string, nonEmpty bool) error {
	s, ok := p[key].(string)
	if !ok {
		return invalid("payload."+key, "missing or not a string")
	}
	if nonEmpty && s == "" {
		return invalid("payload."+key, "empty")
	}
	return nil
}

func needParticipant(p map[string]any, key string) error {
	s, ok := p[key].(string)
	if !ok || !validParticipant(s) {
		return invalid("payload."+key, "missing or not a participant id")
	}
	return nil
}

// needMember checks p[key] is an object whose "id" is a participant id.
func needMember(p map[string]any, key string) error {
	m, ok := p[key].(map[string]any)
	if !ok {
		return invalid("payload."+key, "missing or not an object")
	}
	if s, ok := m["id"].(string); !ok || !validParticipant(s) {
		return invalid("payload."+key+".id", "missing or not a participant id")
	}
	return nil
}

// needCapabilities checks p["capabilities"] is an array of capability
// objects within the bounds of ParseCapabilities.
func needCapabilities(p map[string]any, nonEmpty bool) error {
	a, ok := p["capabilities"].([]any)
	if !ok {
		return invalid("payload.capabilities", "missing or not an array")
	}
	if nonEmpty && len(a) == 0 {
		return invalid("payload.capabilities", "empty")
	}
	if _, err := capabilitiesFromTree(a, false); err != nil {
		return withField(err, "payload.capabilities")
	}
	return nil
}
