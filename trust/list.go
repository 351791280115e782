package trust

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"unicode/utf8"

	"github.com/meerkatd/meerkatd/identity"
	"github.com/meerkatd/meerkatd/transport"
)

// MaxFileSize bounds a trust file (4 MiB, some tens of thousands of peers).
// [Load] and [Parse] refuse larger input and [List.Save] refuses to write
// it, so whatever Save writes, Load reads.
const MaxFileSize = 4 << 20

// MaxNameLen is the longest peer name allowed, in bytes.
const MaxNameLen = 64

// maxReported bounds how many row problems one error lists; the rest are
// counted.
const maxReported = 20

// nameHint ends every bad-name error, so users see the rule.
const nameHint = `use 1-64 ASCII letters, digits, '.', '_' or '-', starting with a letter or digit (e.g. "bob" or "build-01.lab")`

// Peer is one trusted peer: a human name, its public key and where to reach
// it. Meta is an optional JSON object kept for tools and humans; meerkatd
// itself does not interpret it. The JSON tags give the trust-file form
// ({"name", "pubkey", "addr", "meta"?}).
//
// A Peer returned by a [List] is a copy, Meta included; changing it does not
// change the list.
type Peer struct {
	Name string          `json:"name"`
	ID   identity.PeerID `json:"pubkey"`
	Addr transport.Addr  `json:"addr"`
	// NATS marks a peer with a direct Addr that is also reachable through
	// the node's NATS connection: when its direct address cannot be
	// connected to, envelopes go through NATS. A peer whose Addr is
	// nats: is reached only that way and leaves it false.
	NATS bool            `json:"nats,omitempty"`
	Meta json.RawMessage `json:"meta,omitempty"`
}

// clone returns p with its own copy of Meta.
func (p Peer) clone() Peer {
	p.Meta = bytes.Clone(p.Meta)
	return p
}

func (p Peer) equal(q Peer) bool {
	return p.Name == q.Name && p.ID == q.ID && p.Addr == q.Addr && p.NATS == q.NATS && bytes.Equal(p.Meta, q.Meta)
}

// List is an immutable, validated snapshot of the trusted peers: names are
// valid and unique ignoring case, keys are valid and unique, addresses are
// canonical, meta values are compact JSON objects. Lookups are O(1).
//
// A List never changes after it is built; [List.With] and [List.Without]
// return new lists. It is safe for concurrent use; callers that change
// their trust list swap *List values (for example in an atomic.Pointer).
//
// A nil *List and the zero List are usable and empty.
type List struct {
	peers  []Peer // in file (or insertion) order; Save keeps it
	byID   map[identity.PeerID]int
	byFold map[string]int // strings.ToLower(name) -> index; names are ASCII
}

// New returns a list of the given peers, validated as if they were rows of a
// file: it returns every problem, joined, as [*RowError] values whose Index
// is the position in peers. New() is a non-nil empty list.
func New(peers ...Peer) (*List, error) {
	b := newBuilder("", len(peers))
	for i, p := range peers {
		p, errs := checkPeer(p)
		b.add(i, p, errs)
	}
	return b.finish()
}

// Parse decodes and validates trust-file data: a JSON object
// {"peers": [...]} whose rows are {"name", "pubkey", "addr", "meta"?}.
// It reports every bad row at once, as [*RowError] values joined with
// errors.Join; problems with the overall shape wrap [ErrFormat] and
// oversized input wraps [ErrTooLarge]. The rules are in the package doc.
func Parse(data []byte) (*List, error) {
	return parse("", data)
}

func parse(file string, data []byte) (*List, error) {
	if len(data) > MaxFileSize {
		return nil, fmt.Errorf("%w: %s%d bytes, the limit is %d (4 MiB)", ErrTooLarge, filePrefix(file), len(data), MaxFileSize)
	}
	if !utf8.Valid(data) {
		return nil, formatError(file, "not valid UTF-8")
	}
	if !json.Valid(data) {
		var v any
		err := json.Unmarshal(data, &v)
		if se, ok := err.(*json.SyntaxError); ok {
			line, col := position(data, se.Offset)
			return nil, formatError(file, "line %d, column %d: %v", line, col, se)
		}
		return nil, formatError(file, "not valid JSON: %v", err)
	}
	fields, ok := objectFields(data)
	if !ok {
		return nil, formatError(file, `the file must be a JSON object like {"peers": [...]}`)
	}
	var rawPeers json.RawMessage
	for _, f := range fields {
		switch {
		case f.key != "peers":
			return nil, fmt.Errorf(`%w: %s%s at the top level (the file holds only "peers")`, ErrUnknownField, filePrefix(file), quoteShort(f.key))
		case rawPeers != nil:
			return nil, formatError(file, `"peers" given more than once`)
		case f.value[0] != '[':
			return nil, formatError(file, `"peers" must be an array: {"peers": [...]}`)
		}
		rawPeers = f.value
	}
	if rawPeers == nil {
		return nil, formatError(file, `missing "peers" array: {"peers": [...]}`)
	}
	var rows []json.RawMessage
	if err := json.Unmarshal(rawPeers, &rows); err != nil {
		return nil, formatError(file, "peers: %v", err) // cannot happen: the data is valid JSON
	}
	b := newBuilder(file, len(rows))
	for i, row := range rows {
		p, errs := parseRow(row)
		b.add(i, p, errs)
	}
	return b.finish()
}

// fieldError is a problem with one field of a row, before the row is named.
type fieldError struct {
	field string
	err   error
}

// parseRow decodes one row. It returns the peer as far as it could be read
// (p.Name is set whenever the name was a string) and every problem found.
func parseRow(row json.RawMessage) (Peer, []fieldError) {
	var p Peer
	fields, ok := objectFields(row)
	if !ok {
		return p, []fieldError{{"", fmt.Errorf(`%w: a row must be a JSON object like {"name": "bob", "pubkey": "ed25519:…", "addr": "tcp://host:4200"}`, ErrFormat)}}
	}
	var errs []fieldError
	bad := func(field string, err error) { errs = append(errs, fieldError{field, err}) }
	// strs holds the string fields that decoded; seen every field met, so
	// a field of the wrong type is not also reported as missing.
	strs := make(map[string]string, 3)
	seen := make(map[string]bool, len(fields))
	for _, f := range fields {
		if seen[f.key] {
			bad(f.key, fmt.Errorf("%w: field given more than once", ErrFormat))
			continue
		}
		seen[f.key] = true
		switch f.key {
		case "name", "pubkey", "addr":
			var s string
			if f.value[0] != '"' || json.Unmarshal(f.value, &s) != nil {
				bad(f.key, fmt.Errorf("%w: must be a JSON string", ErrFormat))
				continue
			}
			strs[f.key] = s
		case "nats":
			switch string(f.value) {
			case "true":
				p.NATS = true
			case "false":
			default:
				bad("nats", fmt.Errorf("%w: must be true or false", ErrFormat))
			}
		case "meta":
			if f.value[0] != '{' {
				bad("meta", fmt.Errorf(`%w (like {"team": "ops"}) or left out`, ErrBadMeta))
				continue
			}
			var buf bytes.Buffer
			if err := json.Compact(&buf, f.value); err != nil {
				bad("meta", fmt.Errorf("%w: %v", ErrBadMeta, err)) // cannot happen: valid JSON
				continue
			}
			p.Meta = buf.Bytes()
		default:
			bad(f.key, fmt.Errorf("%w (a row has only name, pubkey, addr, nats and meta)", ErrUnknownField))
		}
	}
	for _, key := range [...]string{"name", "pubkey", "addr"} {
		if !seen[key] {
			bad(key, ErrMissingField)
		}
	}
	if s, ok := strs["name"]; ok {
		p.Name = s
		if err := checkName(s); err != nil {
			bad("name", err)
		}
	}
	if s, ok := strs["pubkey"]; ok {
		id, err := identity.ParsePeerID(s)
		if err != nil {
			bad("pubkey", err)
		}
		p.ID = id
	}
	if s, ok := strs["addr"]; ok {
		a, err := transport.ParseAddr(s)
		if err != nil {
			bad("addr", err)
		}
		p.Addr = a
		if err == nil {
			if err := checkNATS(p); err != nil {
				bad("nats", err)
			}
		}
	}
	return p, errs
}

// checkPeer validates a Peer built in Go (for New and With) and returns it
// in the form a List holds: canonical address, compact meta in a buffer of
// its own.
func checkPeer(p Peer) (Peer, []fieldError) {
	var errs []fieldError
	if err := checkName(p.Name); err != nil {
		errs = append(errs, fieldError{"name", err})
	}
	if p.ID.IsZero() {
		errs = append(errs, fieldError{"pubkey", identity.ErrZeroKey})
	}
	a, err := canonicalAddr(p.Addr)
	if err != nil {
		errs = append(errs, fieldError{"addr", err})
	} else if err := checkNATS(p); err != nil {
		errs = append(errs, fieldError{"nats", err})
	}
	meta, err := compactMeta(p.Meta)
	if err != nil {
		errs = append(errs, fieldError{"meta", err})
	}
	p.Addr, p.Meta = a, meta
	return p, errs
}

// checkNATS refuses "nats": true on a peer whose address is nats:
// already: it is the second way to a peer with a direct address.
func checkNATS(p Peer) error {
	if p.NATS && p.Addr.Scheme == transport.SchemeNATS {
		return fmt.Errorf("%w: \"nats\": true is for a peer with a direct addr that is also reachable through NATS; this addr is nats: already", ErrFormat)
	}
	return nil
}

// canonicalAddr re-parses a's text form, so an Addr built by hand (say with
// a relative socket path) is held to the same rules as one read from a
// file.
func canonicalAddr(a transport.Addr) (transport.Addr, error) {
	if a.Scheme == "" {
		return transport.Addr{}, fmt.Errorf("%w: empty address", transport.ErrBadAddr)
	}
	c, err := transport.ParseAddr(a.String())
	if err != nil {
		return transport.Addr{}, err
	}
	return c, nil
}

// compactMeta returns meta compacted, or nil when it is empty.
func compactMeta(meta json.RawMessage) (json.RawMessage, error) {
	if len(meta) == 0 {
		return nil, nil
	}
	if !utf8.Valid(meta) {
		return nil, fmt.Errorf("%w: not valid UTF-8", ErrBadMeta)
	}
	var buf bytes.Buffer
	if err := json.Compact(&buf, meta); err != nil { // Compact validates
		return nil, fmt.Errorf("%w: not valid JSON: %v", ErrBadMeta, err)
	}
	if buf.Bytes()[0] != '{' {
		return nil, ErrBadMeta
	}
	return buf.Bytes(), nil
}

// CheckName reports whether name follows the rule of trust-list names:
// 1 to MaxNameLen bytes of [A-Za-z0-9._-], starting with a letter or
// digit. The error wraps ErrBadName and says how to fix it.
func CheckName(name string) error { return checkName(name) }

// checkName enforces the name rule: 1 to MaxNameLen bytes of
// [A-Za-z0-9._-], starting with a letter or digit.
func checkName(name string) error {
	if name == "" {
		return fmt.Errorf("%w: empty; %s", ErrBadName, nameHint)
	}
	if len(name) > MaxNameLen {
		return fmt.Errorf("%w: %d bytes long; %s", ErrBadName, len(name), nameHint)
	}
	if !isAlnum(name[0]) {
		return fmt.Errorf("%w: %s starts with %q; %s", ErrBadName, quoteShort(name), name[0], nameHint)
	}
	for i := 0; i < len(name); i++ {
		if c := name[i]; !isAlnum(c) && c != '.' && c != '_' && c != '-' {
			return fmt.Errorf("%w: %s contains %q; %s", ErrBadName, quoteShort(name), rune(c), nameHint)
		}
	}
	return nil
}

// UsableName turns a name another node offered for itself (when pairing)
// into one the name rule accepts: each byte outside [A-Za-z0-9._-]
// becomes '-', what comes before the first letter or digit is dropped,
// and the rest is cut to MaxNameLen bytes; a name with no letter or digit
// at all becomes "peer". A name the rule accepts is returned as it is.
func UsableName(name string) string {
	if checkName(name) == nil {
		return name
	}
	b := []byte(name)
	for i, c := range b {
		if !isAlnum(c) && c != '.' && c != '_' && c != '-' {
			b[i] = '-'
		}
	}
	start := 0
	for start < len(b) && !isAlnum(b[start]) {
		start++
	}
	b = b[start:]
	if len(b) == 0 {
		return "peer"
	}
	return string(b[:min(len(b), MaxNameLen)])
}

func isAlnum(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9'
}

// fold is the key under which names are unique.
func fold(name string) string { return strings.ToLower(name) }

// builder assembles a List from rows, checking uniqueness and collecting
// problems.
type builder struct {
	file   string
	l      *List
	names  []string // row index -> name as written, for duplicate messages
	errs   []error
	hidden int // problems beyond maxReported

	// Every valid name (folded) and key seen so far, kept row or not, by
	// row index: a bad row still claims its good name, so a later row
	// with the same name is reported too.
	claimedNames map[string]int
	claimedKeys  map[identity.PeerID]int
}

func newBuilder(file string, n int) *builder {
	return &builder{
		file:         file,
		names:        make([]string, 0, n),
		claimedNames: make(map[string]int, n),
		claimedKeys:  make(map[identity.PeerID]int, n),
		l: &List{
			peers:  make([]Peer, 0, n),
			byID:   make(map[identity.PeerID]int, n),
			byFold: make(map[string]int, n),
		},
	}
}

// add records row i, which must be the next row: p as checkPeer or
// parseRow returned it, and errs its own problems. The row is kept only if
// it has none and clashes with no earlier row.
func (b *builder) add(i int, p Peer, errs []fieldError) {
	b.names = append(b.names, p.Name)
	ok := len(errs) == 0
	nameOK, keyOK := true, true
	for _, e := range errs {
		b.fail(i, p.Name, e.field, e.err)
		nameOK = nameOK && e.field != "name"
		keyOK = keyOK && e.field != "pubkey"
	}
	if nameOK && p.Name != "" {
		k := fold(p.Name)
		if j, dup := b.claimedNames[k]; dup {
			b.fail(i, p.Name, "name", dupNameError(p.Name, j, b.names[j]))
			ok = false
		} else {
			b.claimedNames[k] = i
		}
	}
	if keyOK && !p.ID.IsZero() {
		if j, dup := b.claimedKeys[p.ID]; dup {
			b.fail(i, p.Name, "pubkey", dupKeyError(j, b.names[j]))
			ok = false
		} else {
			b.claimedKeys[p.ID] = i
		}
	}
	if ok {
		b.l.insert(p)
	}
}

func (b *builder) fail(i int, name, field string, err error) {
	if len(b.errs) >= maxReported {
		b.hidden++
		return
	}
	b.errs = append(b.errs, &RowError{File: b.file, Index: i, Name: name, Field: field, Err: err})
}

// finish returns the list, or every problem joined.
func (b *builder) finish() (*List, error) {
	if len(b.errs) == 0 {
		return b.l, nil
	}
	if b.hidden > 0 {
		b.errs = append(b.errs, fmt.Errorf("trust: %s%d more problems not shown", filePrefix(b.file), b.hidden))
	}
	return nil, errors.Join(b.errs...)
}

// dupNameError and dupKeyError describe a clash with the peer called
// other: row j of a file, or a peer already in the list if j < 0.
func dupNameError(name string, j int, other string) error {
	switch {
	case j < 0 && name == other:
		return fmt.Errorf("%w: %s is already in the list", ErrDuplicateName, quoteShort(name))
	case j < 0:
		return fmt.Errorf("%w: %s clashes with %s in the list; names are unique ignoring case", ErrDuplicateName, quoteShort(name), quoteShort(other))
	case name == other:
		return fmt.Errorf("%w: %s is also the name of peers[%d]", ErrDuplicateName, quoteShort(name), j)
	}
	return fmt.Errorf("%w: %s clashes with %s; names are unique ignoring case", ErrDuplicateName, quoteShort(name), rowRef(j, other))
}

func dupKeyError(j int, other string) error {
	if j < 0 {
		return fmt.Errorf("%w: same pubkey as %s", ErrDuplicateKey, quoteShort(other))
	}
	return fmt.Errorf("%w: same pubkey as %s", ErrDuplicateKey, rowRef(j, other))
}

// rowRef names row j as peers[j], with its name if it has one.
func rowRef(j int, name string) string {
	if name == "" {
		return fmt.Sprintf("peers[%d]", j)
	}
	return fmt.Sprintf("peers[%d] (%s)", j, quoteShort(name))
}

// insert appends p to a list under construction.
func (l *List) insert(p Peer) {
	n := len(l.peers)
	l.peers = append(l.peers, p)
	l.byID[p.ID] = n
	l.byFold[fold(p.Name)] = n
}

// Len returns the number of peers.
func (l *List) Len() int {
	if l == nil {
		return 0
	}
	return len(l.peers)
}

// Lookup returns the peer with public key id.
func (l *List) Lookup(id identity.PeerID) (Peer, bool) {
	if l == nil {
		return Peer{}, false
	}
	i, ok := l.byID[id]
	if !ok {
		return Peer{}, false
	}
	return l.peers[i].clone(), true
}

// ByName returns the peer called name. Names match exactly (case
// sensitive), although no two peers' names differ only in case.
func (l *List) ByName(name string) (Peer, bool) {
	i, ok := l.indexOf(name)
	if !ok {
		return Peer{}, false
	}
	return l.peers[i].clone(), true
}

// Resolve returns the peer ref names: its name, in any letter case (no
// two names differ only in case), its key (ed25519:…) or its peer UUID.
func (l *List) Resolve(ref string) (Peer, bool) {
	if l == nil {
		return Peer{}, false
	}
	if i, ok := l.byFold[fold(ref)]; ok {
		return l.peers[i].clone(), true
	}
	if id, err := identity.ParsePeerID(ref); err == nil {
		return l.Lookup(id)
	}
	if u, err := identity.ParseUUID(ref); err == nil {
		for _, p := range l.peers {
			if p.ID.UUID() == u {
				return p.clone(), true
			}
		}
	}
	return Peer{}, false
}

func (l *List) indexOf(name string) (int, bool) {
	if l == nil {
		return 0, false
	}
	i, ok := l.byFold[fold(name)]
	if !ok || l.peers[i].Name != name {
		return 0, false
	}
	return i, true
}

// Peers returns a copy of the peers, sorted by name.
func (l *List) Peers() []Peer {
	if l == nil {
		return []Peer{}
	}
	out := make([]Peer, len(l.peers))
	for i, p := range l.peers {
		out[i] = p.clone()
	}
	slices.SortFunc(out, func(a, b Peer) int { return strings.Compare(a.Name, b.Name) })
	return out
}

// With returns a new list with p added after the existing peers; l is
// unchanged. p is validated like a file row; a name that equals an
// existing one ignoring case gives [ErrDuplicateName], an existing key
// [ErrDuplicateKey]. Errors are [*RowError] values with Index -1. p.Addr is
// stored in canonical form and p.Meta compacted (and copied).
func (l *List) With(p Peer) (*List, error) {
	var errs []error
	p, fes := checkPeer(p)
	for _, e := range fes {
		errs = append(errs, &RowError{Index: -1, Name: p.Name, Field: e.field, Err: e.err})
	}
	if len(errs) == 0 {
		if i, dup := l.byFoldIndex(p.Name); dup {
			other := l.peers[i].Name
			errs = append(errs, &RowError{Index: -1, Name: p.Name, Field: "name", Err: dupNameError(p.Name, -1, other)})
		}
		if q, dup := l.Lookup(p.ID); dup {
			errs = append(errs, &RowError{Index: -1, Name: p.Name, Field: "pubkey", Err: dupKeyError(-1, q.Name)})
		}
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	nl := l.copyExcept(-1, 1)
	nl.insert(p)
	return nl, nil
}

func (l *List) byFoldIndex(name string) (int, bool) {
	if l == nil {
		return 0, false
	}
	i, ok := l.byFold[fold(name)]
	return i, ok
}

// Without returns a new list without the peer called name (matched
// exactly, like [List.ByName]); l is unchanged. It returns an error
// wrapping [ErrNotFound] if there is no such peer.
func (l *List) Without(name string) (*List, error) {
	i, ok := l.indexOf(name)
	if !ok {
		return nil, fmt.Errorf("%w: %s", ErrNotFound, quoteShort(name))
	}
	return l.copyExcept(i, 0), nil
}

// copyExcept returns a fresh list holding l's peers except index skip (-1
// for none), with room for extra more.
func (l *List) copyExcept(skip, extra int) *List {
	n := l.Len() + extra
	nl := &List{
		peers:  make([]Peer, 0, n),
		byID:   make(map[identity.PeerID]int, n),
		byFold: make(map[string]int, n),
	}
	if l != nil {
		for i, p := range l.peers {
			if i != skip {
				nl.insert(p) // Meta is never mutated, so sharing it is safe
			}
		}
	}
	return nl
}

// Equal reports whether l and o hold the same peers (same names, keys,
// addresses and meta), in any order. A nil list equals any empty list.
func (l *List) Equal(o *List) bool {
	if l.Len() != o.Len() {
		return false
	}
	if l == nil {
		return true
	}
	for _, p := range l.peers {
		i, ok := o.indexOf(p.Name)
		if !ok || !p.equal(o.peers[i]) {
			return false
		}
	}
	return true
}

// MarshalJSON encodes the list in the trust-file form, {"peers": [...]},
// with peers in file order. It does not escape HTML characters, so meta
// survives a round trip byte for byte.
func (l *List) MarshalJSON() ([]byte, error) {
	return l.encode("")
}

// encode writes the trust-file form, indented with indent if it is not
// empty, ending in a newline.
func (l *List) encode(indent string) ([]byte, error) {
	doc := struct {
		Peers []Peer `json:"peers"`
	}{Peers: []Peer{}}
	if l.Len() > 0 {
		doc.Peers = l.peers
	}
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if indent != "" {
		enc.SetIndent("", indent)
	}
	if err := enc.Encode(doc); err != nil {
		return nil, fmt.Errorf("trust: encode: %w", err)
	}
	return buf.Bytes(), nil
}

// field is one member of a JSON object, in order of appearance.
type field struct {
	key   string
	value json.RawMessage
}

// objectFields splits valid JSON data into its object members, keeping
// duplicates and order. It reports false if data is not an object.
func objectFields(data []byte) ([]field, bool) {
	dec := json.NewDecoder(bytes.NewReader(data))
	if tok, err := dec.Token(); err != nil || tok != json.Delim('{') {
		return nil, false
	}
	var out []field
	for dec.More() {
		tok, err := dec.Token()
		key, ok := tok.(string)
		if err != nil || !ok {
			return nil, false
		}
		var v json.RawMessage
		if err := dec.Decode(&v); err != nil || len(v) == 0 {
			return nil, false
		}
		out = append(out, field{key, v})
	}
	if tok, err := dec.Token(); err != nil || tok != json.Delim('}') {
		return nil, false
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, false
	}
	return out, true
}

// position turns a byte offset into a 1-based line and column.
func position(data []byte, off int64) (line, col int) {
	if off > int64(len(data)) {
		off = int64(len(data))
	}
	before := data[:off]
	line = bytes.Count(before, []byte("\n")) + 1
	col = int(off) - (bytes.LastIndexByte(before, '\n') + 1)
	return line, col
}
