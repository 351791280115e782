// Package meup is the MEUP envelope model: parsing and validation of
// envelopes, the protocol ids meerkatd reads and writes, and the
// capability matcher that decides what a participant of a space may
// send.
//
// It is a leaf: it knows nothing of keys, peers, spaces or transports.
// The space engine (comms/space) uses it to check what members send;
// the Meerkat wire carries envelopes as JSON text inside signed messages.
//
// # Envelopes
//
// [Parse] reads one envelope from its JSON text. Everything a peer sends
// is held to the limits ([MaxEnvelopeBytes], [MaxPayloadBytes],
// [MaxDepth], [MaxIDLen], [MaxKindLen], [MaxContextLen], [MaxTo],
// [MaxCorrelation]); the text must be valid UTF-8 holding a single JSON
// object, with no duplicate keys, no escaped lone surrogates, no unknown
// top-level fields and nothing after it. The payload, when present, is a
// JSON object. Each seed kind (the Kind… constants and reasoning/*) has
// rules of its own; any other kind in the grammar of [ValidKind] gets the
// generic checks only. A refusal is an [*Error] carrying a Reason… code
// and the field at fault.
//
// Parse accepts meup/v0.1, meup/v0.2, mew/v0.3, mew/v0.4 and mcpx/v0.1
// and returns the envelope in one normalised form: kinds with slashes
// (meup/v0.1's "mcp.request" becomes "mcp/request"), correlation ids as
// a list (meup/v0.1 and mcpx/v0.1 may write a single one as a string),
// mcpx/v0.1 method kinds ("mcp/request:tools/call") split into
// kind and payload.method (which must agree) and mcpx capability strings
// turned into capability objects. [Envelope.Protocol] keeps the id the
// envelope arrived with. [Envelope.Encode] writes the normalised form
// for any meup/ or mew/ id; mcpx/v0.1 is read, never written.
//
// # Capabilities
//
// A capability is a kind pattern and an optional payload pattern; a
// participant may send an envelope when any capability it holds
// matches it. [Compile] turns a set into a [Matcher] once; [Matcher.Allows]
// is then cheap and safe to call from many goroutines.
//
// String patterns (for kinds, and for payload values):
//
//   - "/re/": an RE2 regular expression, unanchored (write ^ and $ to
//     anchor it);
//   - "!p": any string that p (a regex "/re/", a glob or a literal) does
//     not match — the key must still be present and hold a string;
//   - a string holding '*' or '?': a glob ('*' within one /-separated
//     segment, '**' across segments, '?' one character; doublestar
//     syntax, so [...] classes and \ escapes work too). A glob never
//     matches the empty string. Brace alternation ({a,b}) is refused
//     (an array says the same), and so are globs with more than 16
//     wildcards: both would let a pattern make matching slow;
//   - anything else: the string itself.
//
// The kind "*" (and "**") matches every kind. A kind pattern may be an
// array of string patterns: one of them must match.
//
// A payload pattern is an object whose keys the payload must have,
// with values matching (other payload keys are ignored), recursively.
// A key "**" matches when its value pattern matches some value at any
// depth; a key starting with "$" is an RFC 9535 JSONPath query that
// must select at least one node, some node matching the value pattern;
// a key holding '*' or '?' is a glob over the payload's keys. A JSONPath
// query may hold one descendant segment ("..") and not inside a filter,
// the root "$" only at its start, and neither match() nor search(): the
// others can take time that grows faster than the payload. Values:
// string patterns match strings only; numbers match numbers equal in
// value (5 matches 5.0 and 50e-1); true, false and null match
// themselves; an array is one-of; an object is a nested payload pattern.
//
// Everything malformed in a capability — a bad regex, glob or JSONPath
// query, a kind that is not a string or an array of strings, a pattern
// longer than [MaxPatternLen], more than [MaxCapabilities] — makes
// Compile fail for the whole set (fail closed). [Matcher.Covers] is the
// conservative test a granter's set must pass before it hands a
// capability on.
//
// Matching is bounded: [Matcher.Allows] and [AllowsAny] count the work
// they do (values looked at, bytes a glob or regex scans, JSONPath
// queries by the payload's size) and deny an envelope whose check would
// take more than a fixed amount, whatever the patterns would say. A few
// kilobytes of pattern ("**" nested in "**", thousands of alternatives)
// against a large payload would otherwise take minutes.
//
// # Concurrency
//
// Functions are pure; a [Matcher] is immutable and safe for concurrent
// use. [Envelope] and [Capability] are plain values.
package meup
