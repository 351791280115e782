package meup

import "strings"

// accepted reports whether Parse reads protocol id p.
func accepted(p string) bool {
	switch p {
	case ProtocolMEUP01, ProtocolMEUP02, ProtocolMEW03, ProtocolMEW04, ProtocolMCPx01:
		return true
	}
	return false
}

// emitted reports whether Encode writes protocol id p.
func emitted(p string) bool {
	return accepted(p) && p != ProtocolMCPx01
}

// normaliseKind turns a kind as protocol writes it into the normalised
// (slash) form, or reports why it cannot.
//
// meup/v0.1 named kinds with dots ("mcp.request"): a meup/v0.1 kind with
// no slash has every dot replaced by a slash; one with a slash is taken
// as already normalised. The other meup/ and mew/ ids use slashes only
// and are taken as they are.
//
// mcpx/v0.1 kinds that carry a method ("mcp:tools/call",
// "mcp/request:tools/call", "mcp/proposal:tools/call") become the kind
// before the colon ("mcp" meaning mcp/request) and the method is
// returned so the caller can hold it against payload.method.
func normaliseKind(protocol, kind string) (norm, method string, err error) {
	switch protocol {
	case ProtocolMEUP01:
		if !strings.Contains(kind, "/") {
			kind = strings.ReplaceAll(kind, ".", "/")
		}
	case ProtocolMCPx01:
		if base, m, ok := strings.Cut(kind, ":"); ok {
			switch base {
			case "mcp", KindMCPRequest:
				kind = KindMCPRequest
			case KindMCPProposal:
				kind = KindMCPProposal
			default:
				return "", "", invalid("kind", "mcpx/v0.1 kind %s carries a method but is no MCP request or proposal", quoteShort(base))
			}
			if m == "" {
				return "", "", invalid("kind", "mcpx/v0.1 kind names an empty method")
			}
			method = m
		}
	}
	if !ValidKind(kind) {
		return "", "", invalid("kind", "%s is not a valid kind", quoteShort(kind))
	}
	return kind, method, nil
}
