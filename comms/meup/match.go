package meup

import (
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"regexp/syntax"
	"strings"

	"github.com/bmatcuk/doublestar/v4"
	"github.com/theory/jsonpath"
)

// Matcher is a compiled set of capabilities: a participant may send an
// envelope when any of them matches it. It is immutable and safe for
// concurrent use. The zero Matcher (and a nil one) allows nothing.
type Matcher struct {
	caps []compiledCap
}

type compiledCap struct {
	anyKind    bool      // kind "*" or "**": every kind
	kind       []pattern // one-of
	kindTree   any       // the kind as decoded, for Covers
	payload    *objectPattern
	payloadSrc map[string]any // the payload pattern as decoded, nil if none
}

// pattern matches one decoded JSON value.
type pattern interface {
	// match reports whether the pattern matches v, spending from w. Its
	// answer means nothing once w is out.
	match(v any, w *work) bool
}

type (
	literalPattern string // a string without '*' or '?': equality
	globPattern    string // doublestar glob; never matches ""
	regexPattern   struct{ re *regexp.Regexp }
	notPattern     struct{ p pattern } // a string not matched by p
	oneOfPattern   []pattern
	numberPattern  string // numKey of the number
	boolPattern    bool
	nullPattern    struct{}
	objectPattern  struct{ fields []fieldPattern }
)

// fieldPattern is one key of an object pattern.
type fieldPattern struct {
	key   string
	mode  int // fieldExact, fieldGlob, fieldDeep, fieldPath
	path  *jsonpath.Path
	cost  int64 // fieldPath: the work one Select is charged per node of the payload (0: a singular query)
	value pattern
}

const (
	fieldExact = iota // the key itself
	fieldGlob         // some key matching the glob
	fieldDeep         // "**": some value at any depth
	fieldPath         // "$…": some node the JSONPath query selects
)

// Matching is bounded: one decision ([Matcher.Allows], [AllowsAny])
// may do at most maxMatchWork units of work, a unit being about a
// nanosecond of matching. A decision that runs out denies (fails closed),
// whatever the patterns would have said. Without the bound, a pattern
// of a few kilobytes ("**" nested in "**", a "**" with thousands of
// alternatives, hundreds of globs or JSONPath keys, in each of
// MaxCapabilities capabilities) against a payload of MaxPayloadBytes
// takes seconds to hours, with the space engine's lock held.
const maxMatchWork = 1 << 26

// The work charged, in those units.
const (
	workStep     = 8   // a pattern applied to one value
	workVisit    = 40  // an object pattern applied to one value, or "**" looking into one object or array
	workByte     = 32  // a byte of a string (or key) a glob or a regular expression scans
	workPathByte = 300 // a byte of a JSONPath query that is not singular, per node of the payload
)

// work is what one decision may still spend, and the payload it matches.
type work struct {
	left      int64
	used      int64 // what was spent
	exhausted bool  // a charge could not be paid: the decision is a denial
	root      any   // the decoded payload
	nodes     int64 // the payload's values (objects, arrays, scalars), once counted; 0: not yet
}

func newWork(limit int64, root any) *work { return &work{left: limit, root: root} }

// spend pays n units before the work they stand for is done, and
// reports whether it could: once it could not, nothing more is paid and
// the work must not be done.
func (w *work) spend(n int64) bool {
	if w.exhausted || n > w.left {
		w.exhausted = true
		return false
	}
	w.left -= n
	w.used += n
	return true
}

// out reports whether the budget ran out: the decision is a denial.
func (w *work) out() bool { return w.exhausted }

// payloadNodes counts the payload's values once (and pays for it).
func (w *work) payloadNodes() int64 {
	if w.nodes == 0 {
		w.nodes = countNodes(w.root)
		w.spend(w.nodes * workStep)
	}
	return w.nodes
}

func countNodes(v any) int64 {
	n := int64(1)
	switch x := v.(type) {
	case map[string]any:
		for _, y := range x {
			n += countNodes(y)
		}
	case []any:
		for _, y := range x {
			n += countNodes(y)
		}
	}
	return n
}

// stringWork is the charge for a glob or regular expression scanning s.
func stringWork(s string) int64 { return workStep + workByte*int64(len(s)) }

// numberWork is the charge for comparing number n (its text, which may
// be long, is made canonical).
func numberWork(n string) int64 { return workStep + int64(len(n)) }

func (p literalPattern) match(v any, w *work) bool {
	s, ok := v.(string)
	return w.spend(workStep) && ok && s == string(p)
}

func (p globPattern) match(v any, w *work) bool {
	s, ok := v.(string)
	if !ok {
		w.spend(workStep)
		return false
	}
	return w.spend(stringWork(s)) && s != "" && doublestar.MatchUnvalidated(string(p), s)
}

func (p regexPattern) match(v any, w *work) bool {
	s, ok := v.(string)
	if !ok {
		w.spend(workStep)
		return false
	}
	return w.spend(stringWork(s)) && p.re.MatchString(s)
}

func (p notPattern) match(v any, w *work) bool {
	s, ok := v.(string)
	if !ok {
		w.spend(workStep)
		return false
	}
	// A spent budget makes p's answer meaningless (and its negation
	// true): the caller denies when w is out.
	return !p.p.match(s, w) && !w.out()
}

func (p oneOfPattern) match(v any, w *work) bool {
	for _, q := range p {
		if q.match(v, w) {
			return true
		}
		if w.out() {
			return false
		}
	}
	return false
}

func (p numberPattern) match(v any, w *work) bool {
	n, ok := v.(json.Number)
	if !ok {
		w.spend(workStep)
		return false
	}
	return w.spend(numberWork(string(n))) && numKey(string(n)) == string(p)
}

func (p boolPattern) match(v any, w *work) bool {
	b, ok := v.(bool)
	return w.spend(workStep) && ok && b == bool(p)
}

func (nullPattern) match(v any, w *work) bool { return w.spend(workStep) && v == nil }

func (p *objectPattern) match(v any, w *work) bool {
	m, ok := v.(map[string]any)
	if !w.spend(workVisit) || !ok {
		return false
	}
	for _, f := range p.fields {
		if !f.match(m, w) {
			return false
		}
	}
	return true
}

func (f *fieldPattern) match(m map[string]any, w *work) bool {
	switch f.mode {
	case fieldExact:
		v, ok := m[f.key]
		return ok && f.value.match(v, w)
	case fieldGlob:
		for k, v := range m {
			if !w.spend(stringWork(k)) {
				return false
			}
			if k != "" && doublestar.MatchUnvalidated(f.key, k) && f.value.match(v, w) {
				return true
			}
		}
		return false
	case fieldDeep:
		return deepMatch(f.value, m, w)
	case fieldPath:
		// The query runs in the JSONPath library, which cannot be
		// stopped: it is paid for before it runs, as if it visited the
		// whole payload once per byte of the query.
		cost := int64(workStep)
		if f.cost > 0 {
			cost = f.cost * w.payloadNodes()
		}
		if !w.spend(cost) {
			return false
		}
		for _, v := range f.path.Select(m) {
			if f.value.match(v, w) {
				return true
			}
			if w.out() {
				return false
			}
		}
		return false
	}
	return false
}

// deepMatch reports whether p matches v or any value nested in v.
func deepMatch(p pattern, v any, w *work) bool {
	if p.match(v, w) {
		return true
	}
	switch x := v.(type) {
	case map[string]any:
		if !w.spend(workVisit) {
			return false
		}
		for _, y := range x {
			if deepMatch(p, y, w) {
				return true
			}
			if w.out() {
				return false
			}
		}
	case []any:
		if !w.spend(workVisit) {
			return false
		}
		for _, y := range x {
			if deepMatch(p, y, w) {
				return true
			}
			if w.out() {
				return false
			}
		}
	}
	return false
}

// Compile compiles caps once (globs, regexes, JSONPath keys). Anything
// malformed fails the whole set: the caller keeps nothing (fail closed).
func Compile(caps []Capability) (*Matcher, error) {
	if len(caps) > MaxCapabilities {
		return nil, invalid("capabilities", "more than %d capabilities", MaxCapabilities)
	}
	m := &Matcher{caps: make([]compiledCap, 0, len(caps))}
	for i, c := range caps {
		cc, err := compileCap(c)
		if err != nil {
			return nil, withField(err, fmt.Sprintf("capabilities[%d]", i))
		}
		m.caps = append(m.caps, cc)
	}
	return m, nil
}

func compileCap(c Capability) (compiledCap, error) {
	var cc compiledCap
	if len(c.Kind)+len(c.Payload) > MaxCapabilityJSON {
		return cc, invalid("", "larger than %d bytes", MaxCapabilityJSON)
	}
	if len(c.Kind) == 0 {
		return cc, invalid("kind", "missing")
	}
	kt, err := decodeStrict(c.Kind, MaxDepth)
	if err != nil {
		return cc, invalid("kind", "%v", err)
	}
	if err := patternBounds(kt); err != nil {
		return cc, withField(err, "kind")
	}
	cc.kindTree = kt
	switch k := kt.(type) {
	case string:
		if k == "*" || k == "**" {
			cc.anyKind = true
		}
		if k == "" {
			return cc, invalid("kind", "an empty pattern allows nothing (no kind is empty)")
		}
		p, err := compileString(k)
		if err != nil {
			return cc, withField(err, "kind")
		}
		cc.kind = []pattern{p}
	case []any:
		if len(k) == 0 {
			return cc, invalid("kind", "an empty array allows nothing")
		}
		for _, x := range k {
			s, ok := x.(string)
			if !ok {
				return cc, invalid("kind", "not a string or an array of strings")
			}
			if s == "" {
				return cc, invalid("kind", "an empty pattern allows nothing (no kind is empty)")
			}
			if s == "*" || s == "**" {
				cc.anyKind = true
			}
			p, err := compileString(s)
			if err != nil {
				return cc, withField(err, "kind")
			}
			cc.kind = append(cc.kind, p)
		}
	default:
		return cc, invalid("kind", "not a string or an array of strings")
	}
	if len(c.Payload) > 0 {
		pt, err := decodeStrict(c.Payload, MaxDepth)
		if err != nil {
			return cc, invalid("payload", "%v", err)
		}
		if pt != nil { // "payload": null is no constraint
			obj, ok := pt.(map[string]any)
			if !ok {
				return cc, invalid("payload", "not a JSON object")
			}
			if err := patternBounds(obj); err != nil {
				return cc, withField(err, "payload")
			}
			if cc.payload, err = compileObject(obj); err != nil {
				return cc, withField(err, "payload")
			}
			cc.payloadSrc = obj
		}
	}
	return cc, nil
}

// compileString compiles a string pattern: "/re/" (RE2, unanchored),
// "!p" (a string p does not match; p a regular expression, a glob or a
// literal), a glob when it holds '*' or '?', else a literal.
func compileString(s string) (pattern, error) {
	if len(s) > MaxPatternLen {
		return nil, invalid("", "a pattern is longer than %d bytes", MaxPatternLen)
	}
	if isRegex(s) {
		return compileRegex(s)
	}
	if rest, ok := strings.CutPrefix(s, "!"); ok {
		// "!/re/" negates the regular expression: taken as a literal, it
		// would allow every string but itself (fail open).
		var p pattern
		var err error
		if isRegex(rest) {
			p, err = compileRegex(rest)
		} else {
			p, err = compileGlob(rest)
		}
		if err != nil {
			return nil, err
		}
		return notPattern{p}, nil
	}
	return compileGlob(s)
}

// isRegex reports whether string pattern s is a regular expression:
// "/re/".
func isRegex(s string) bool { return len(s) >= 2 && s[0] == '/' && s[len(s)-1] == '/' }

func compileRegex(s string) (pattern, error) {
	expr := s[1 : len(s)-1]
	if err := regexSmall(expr); err != nil {
		return nil, invalid("", "regular expression %s: %v", quoteShort(s), err)
	}
	re, err := regexp.Compile(expr)
	if err != nil {
		return nil, invalid("", "bad regular expression %s", quoteShort(s))
	}
	return regexPattern{re}, nil
}

func isGlob(s string) bool { return strings.ContainsAny(s, "*?") }

func compileGlob(s string) (pattern, error) {
	if !isGlob(s) {
		return literalPattern(s), nil
	}
	if err := validGlob(s); err != nil {
		return nil, err
	}
	return globPattern(s), nil
}

// maxGlobWildcards bounds the wildcards ('*' runs and '?') in one glob.
// Matching backtracks over them: with 16, a glob against a value of
// MaxPayloadBytes takes milliseconds; with a few hundred, seconds.
const maxGlobWildcards = 16

// maxRegexInsts bounds the compiled size of a regular expression. RE2
// matches in time proportional to the input times the program, so a
// short pattern with counted repetitions ("[\pL]{1000}") over a payload
// of MaxPayloadBytes would take seconds; with this bound, milliseconds.
const maxRegexInsts = 256

// regexSmall reports an error for a regular expression whose compiled
// program is larger than maxRegexInsts (or that does not parse).
func regexSmall(expr string) error {
	re, err := syntax.Parse(expr, syntax.Perl)
	if err != nil {
		return errors.New("does not parse")
	}
	prog, err := syntax.Compile(re.Simplify())
	if err != nil {
		return errors.New("does not compile")
	}
	if len(prog.Inst) > maxRegexInsts {
		return fmt.Errorf("compiles to %d instructions, more than %d", len(prog.Inst), maxRegexInsts)
	}
	return nil
}

// pathRegexFuncs are the JSONPath functions that compile a regular
// expression (from the query or, worse, from the payload) for every node
// they visit: refused in capabilities.
var pathRegexFuncs = []string{"match(", "search("}

// maxPathDescendants bounds the descendant segments ("..") in one
// JSONPath key, and none may be inside a filter ("[?…]"). Each one nested
// in a filter, or following another, multiplies the work by the
// payload's size or depth: "$..[?count(@..*) > 0]" takes seconds on a
// payload of MaxPayloadBytes. Likewise the root ("$") may only start the
// query: "$.a[?count($.a[*]) < 0]" runs the inner query once per element,
// tens of seconds. (Both are checked in the query text, so ".." or "$"
// inside a quoted name counts too: fail closed.)
const maxPathDescendants = 1

// pathSmall refuses the JSONPath queries whose work can grow faster
// than the payload: see maxPathDescendants and pathRegexFuncs.
func pathSmall(k string) error {
	if strings.Count(k, "..") > maxPathDescendants {
		return invalid(quoteShort(k), "more than %d descendant segment (..) in a JSONPath query", maxPathDescendants)
	}
	if i := strings.IndexByte(k, '?'); i >= 0 && strings.Contains(k[i:], "..") {
		return invalid(quoteShort(k), "a descendant segment (..) in a JSONPath filter")
	}
	if strings.Contains(k[1:], "$") {
		return invalid(quoteShort(k), "the root ($) inside a JSONPath query (filters use @)")
	}
	for _, f := range pathRegexFuncs {
		if strings.Contains(k, f) {
			return invalid(quoteShort(k), "the JSONPath functions match() and search() are not allowed in capabilities (use a /regex/ value pattern)")
		}
	}
	return nil
}

// validGlob checks a glob is well formed, free of brace alternation
// ("{a,b}": doublestar expands alternatives by backtracking, which a few
// hundred bytes of pattern can make take minutes; an array pattern says
// the same in linear time) and has at most maxGlobWildcards wildcards.
func validGlob(s string) error {
	if strings.ContainsAny(s, "{}") {
		return invalid("", "brace alternation in glob %s (use an array of patterns)", quoteShort(s))
	}
	n := 0
	for i := 0; i < len(s); i++ {
		if s[i] == '?' || (s[i] == '*' && (i == 0 || s[i-1] != '*')) {
			n++
		}
	}
	if n > maxGlobWildcards {
		return invalid("", "more than %d wildcards in glob %s", maxGlobWildcards, quoteShort(s))
	}
	if !doublestar.ValidatePattern(s) {
		return invalid("", "bad glob %s", quoteShort(s))
	}
	return nil
}

// compileValue compiles the pattern a payload key maps to.
func compileValue(v any) (pattern, error) {
	switch x := v.(type) {
	case string:
		return compileString(x)
	case json.Number:
		return numberPattern(numKey(string(x))), nil
	case bool:
		return boolPattern(x), nil
	case nil:
		return nullPattern{}, nil
	case []any:
		p := make(oneOfPattern, 0, len(x))
		for _, y := range x {
			q, err := compileValue(y)
			if err != nil {
				return nil, err
			}
			p = append(p, q)
		}
		return p, nil
	case map[string]any:
		return compileObject(x)
	}
	return nil, invalid("", "not a JSON value")
}

func compileObject(obj map[string]any) (*objectPattern, error) {
	p := &objectPattern{fields: make([]fieldPattern, 0, len(obj))}
	for k, v := range obj {
		f := fieldPattern{key: k}
		switch {
		case k == "**":
			f.mode = fieldDeep
		case strings.HasPrefix(k, "$"):
			if err := pathSmall(k); err != nil {
				return nil, err
			}
			path, err := jsonpath.Parse(k)
			if err != nil {
				return nil, invalid(quoteShort(k), "bad JSONPath query")
			}
			f.mode, f.path = fieldPath, path
			if path.Query().Singular() == nil {
				f.cost = workPathByte * int64(len(k))
			}
		case isGlob(k):
			if err := validGlob(k); err != nil {
				return nil, withField(err, quoteShort(k))
			}
			f.mode = fieldGlob
		}
		value, err := compileValue(v)
		if err != nil {
			if isIndex(k) {
				k = quoteShort(k) // a key "[0]", not an index
			}
			return nil, withField(err, k)
		}
		f.value = value
		p.fields = append(p.fields, f)
	}
	return p, nil
}

// Allows reports whether some capability matches the envelope's kind and
// payload. A match that would take more than a bounded amount of work is
// a denial (see maxMatchWork).
func (m *Matcher) Allows(e Envelope) bool {
	return AllowsAny(e, m)
}

// AllowsAny reports whether some capability of one of ms matches the
// envelope: Allows over several sets (a roster entry and grants), with
// the payload decoded once and one bound on the work for them all.
func AllowsAny(e Envelope, ms ...*Matcher) bool {
	ok, _ := allowsWithin(e, maxMatchWork, ms)
	return ok
}

// allowsWithin is AllowsAny with a work limit; it also returns the work
// spent.
func allowsWithin(e Envelope, limit int64, ms []*Matcher) (bool, int64) {
	w := newWork(limit, nil)
	return allowsWork(e, ms, w), w.used
}

func allowsWork(e Envelope, ms []*Matcher, w *work) bool {
	decoded, bad := false, false
	for _, m := range ms {
		if m == nil {
			continue
		}
		for i := range m.caps {
			c := &m.caps[i]
			kind := c.matchKind(e.Kind, w)
			if w.out() {
				return false // fail closed
			}
			if !kind {
				continue
			}
			if c.payload == nil {
				return true
			}
			if !decoded {
				decoded = true
				w.root, bad = decodePayload(e.Payload)
			}
			if bad {
				continue
			}
			ok := c.payload.match(w.root, w)
			if w.out() {
				return false // fail closed
			}
			if ok {
				return true
			}
		}
	}
	return false
}

// decodePayload decodes an envelope's payload for matching. An absent or
// non-object payload is matched as an empty object; one that does not
// decode (Parse and Validate refuse it), or holds an object with two keys
// that differ only in letter case (foldClash), matches no payload
// pattern.
func decodePayload(raw json.RawMessage) (any, bool) {
	if len(raw) == 0 {
		return map[string]any{}, false
	}
	v, err := decodeStrict(raw, MaxDepth)
	if err != nil || foldClash(v) {
		// Two keys that differ only in letter case: which one a reader
		// takes is unclear, so no payload pattern is trusted to have
		// checked it (a capability of the kind alone still matches).
		return nil, true
	}
	if _, ok := v.(map[string]any); !ok {
		return map[string]any{}, false
	}
	return v, false
}

func (c *compiledCap) matchKind(kind string, w *work) bool {
	if c.anyKind {
		return true
	}
	for _, p := range c.kind {
		if p.match(kind, w) {
			return true
		}
	}
	return false
}

// Covers reports whether every envelope c can match is certainly matched
// by this set too (a conservative test: false when unsure). A grant may
// only pass on capabilities its granter's set covers.
//
// A malformed c is never covered. Otherwise c is covered when one held
// capability h covers it on its own:
//
//   - kind: h's kind is "*" or "**"; or h's kind is the same pattern as
//     c's (same string, or same array); or c's kind is a literal kind (or
//     an array of literal kinds: no glob, regex or negation) that h's
//     kind pattern matches;
//   - payload: h has no payload pattern (or an empty one); or c has one
//     and every key of h's payload pattern is in c's with a deep-equal
//     value (numbers by value); or with a value that allows only values
//     it names (a literal that is no pattern, or a list of them), each of
//     which h's value pattern matches ("tools/*" covers "tools/call");
//     or, when both values are objects, with c's object covering h's by
//     this same rule, recursively.
//
// Two sets that allow the same envelopes in different words may thus not
// cover each other; that refuses a grant, never widens one.
func (m *Matcher) Covers(c Capability) bool {
	return CoversAny(c, m)
}

// CoversAny reports whether one of ms covers c on its own (see Covers),
// compiling c once.
func CoversAny(c Capability, ms ...*Matcher) bool {
	cc, err := compileCap(c)
	if err != nil {
		return false
	}
	for _, m := range ms {
		if m == nil {
			continue
		}
		for i := range m.caps {
			h := &m.caps[i]
			if h.coversKind(&cc) && (len(h.payloadSrc) == 0 || (cc.payloadSrc != nil && objectCovers(h.payloadSrc, cc.payloadSrc))) {
				return true
			}
		}
	}
	return false
}

func (h *compiledCap) coversKind(c *compiledCap) bool {
	if h.anyKind || jsonEqual(h.kindTree, c.kindTree) {
		return true
	}
	var kinds []string
	switch k := c.kindTree.(type) {
	case string:
		kinds = []string{k}
	case []any:
		for _, x := range k {
			s, _ := x.(string)
			kinds = append(kinds, s)
		}
	}
	for _, k := range kinds {
		if !ValidKind(k) || !h.matchKind(k, newWork(maxMatchWork, nil)) {
			return false // a pattern, or a kind h does not allow
		}
	}
	return len(kinds) > 0
}

// objectCovers reports whether payload pattern c is certainly at least
// as narrow as h: every constraint of h appears in c, with a value
// pattern that allows no value h's does not (valueCovers).
func objectCovers(h, c map[string]any) bool {
	for k, hv := range h {
		cv, ok := c[k]
		if !ok || !valueCovers(hv, cv) {
			return false
		}
	}
	return true
}

// valueCovers reports whether payload value pattern hv certainly allows
// every value cv allows: the same pattern, objects compared key by key,
// or a cv that allows only values it names (literals, or a list of them),
// each of which hv matches. Two patterns (a glob within a glob) are not
// compared: false.
func valueCovers(hv, cv any) bool {
	if jsonEqual(hv, cv) {
		return true
	}
	if ho, ok := hv.(map[string]any); ok {
		co, ok := cv.(map[string]any)
		return ok && objectCovers(ho, co)
	}
	vals, ok := literalValues(cv, nil)
	if !ok {
		return false
	}
	p, err := compileValue(hv)
	if err != nil {
		return false
	}
	for _, v := range vals {
		if !p.match(v, newWork(maxMatchWork, nil)) {
			return false // not matched, or out of work: not proven
		}
	}
	return true
}

// literalValues appends to out the values value pattern cv allows, when
// it names them all: a string that is no pattern, a number, a boolean,
// null, or a list of such.
func literalValues(cv any, out []any) ([]any, bool) {
	switch x := cv.(type) {
	case string:
		if isRegex(x) || strings.HasPrefix(x, "!") || isGlob(x) {
			return nil, false
		}
		return append(out, x), true
	case json.Number, bool, nil:
		return append(out, x), true
	case []any:
		for _, y := range x {
			var ok bool
			if out, ok = literalValues(y, out); !ok {
				return nil, false
			}
		}
		return out, true
	}
	return nil, false
}
