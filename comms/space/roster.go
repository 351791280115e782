package space

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"reflect"
	"slices"
	"strings"
	"unicode"

	"github.com/meerkatd/meerkatd/comms/meup"
	"github.com/meerkatd/meerkatd/identity"
	"github.com/meerkatd/meerkatd/internal/atomicfile"
	"github.com/meerkatd/meerkatd/internal/filemode"
)

// Bounds on a roster. A spaces.json beyond them is refused whole.
const (
	MaxSpaces      = 256     // spaces in one roster
	MaxMembers     = 256     // members of one space
	MaxSpaceName   = 64      // bytes of a space name
	MaxRosterBytes = 8 << 20 // the spaces.json file
)

// Delivery modes of a space.
const (
	DeliveryAll       = "all"       // every member receives every envelope (default)
	DeliveryAddressed = "addressed" // only the members named in "to" (all if "to" is empty)
)

// Member is one roster entry: a key, the participant id bound to it and
// the capabilities this node enforces for it.
type Member struct {
	Key          identity.PeerID   `json:"key"`
	ID           string            `json:"id"`
	Capabilities []meup.Capability `json:"capabilities"`
}

// Config is one space as spaces.json holds it.
type Config struct {
	Name     string   `json:"name"`
	Delivery string   `json:"delivery,omitempty"` // DeliveryAll ("") or DeliveryAddressed
	Members  []Member `json:"members"`
}

// Roster is the whole spaces.json file: the spaces this node takes part
// in. It is validated on load (names, ids and keys unique, capabilities
// compile) with errors naming the space and member at fault. A Roster is
// a plain value: the engine keeps its own copy and hands out copies.
type Roster struct {
	Spaces []Config `json:"spaces"`
}

// ParseRoster decodes and validates spaces.json. Unknown fields, trailing
// data and anything [Roster.Validate] refuses fail the whole file: no part
// of a roster that does not validate is used. Errors name the space and
// member at fault (1-based, with its name or id when it has one), or the
// line and column of a JSON syntax error.
func ParseRoster(data []byte) (*Roster, error) {
	if len(data) > MaxRosterBytes {
		return nil, fmt.Errorf("space: roster: %d bytes, over the limit of %d", len(data), MaxRosterBytes)
	}
	var top struct {
		Spaces []json.RawMessage `json:"spaces"`
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&top); err != nil {
		return nil, fmt.Errorf("space: roster: %s", jsonProblem(data, err))
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, errors.New("space: roster: data after the top-level object")
	}
	r := Roster{}
	if top.Spaces != nil {
		r.Spaces = make([]Config, len(top.Spaces))
	}
	for i, raw := range top.Spaces {
		if err := parseSpace(i, raw, &r.Spaces[i]); err != nil {
			return nil, fmt.Errorf("space: roster: %w", err)
		}
	}
	if err := r.Validate(); err != nil {
		return nil, err
	}
	return &r, nil
}

// parseSpace decodes space i (0-based) of spaces.json into c; its error
// names the space and the member at fault.
func parseSpace(i int, raw json.RawMessage, c *Config) error {
	var s struct {
		Name     string            `json:"name"`
		Delivery string            `json:"delivery"`
		Members  []json.RawMessage `json:"members"`
	}
	err := decodeStrict(raw, &s) // fills what it can even when it fails
	c.Name, c.Delivery = s.Name, s.Delivery
	if err != nil {
		return fmt.Errorf("%s: %s", spaceAt(i, c.Name), jsonProblem(raw, err))
	}
	if s.Members != nil {
		c.Members = make([]Member, len(s.Members))
	}
	for k, raw := range s.Members {
		var m struct {
			Key          *string           `json:"key"`
			ID           string            `json:"id"`
			Capabilities []meup.Capability `json:"capabilities"`
		}
		err := decodeStrict(raw, &m)
		c.Members[k].ID, c.Members[k].Capabilities = m.ID, m.Capabilities
		if err != nil {
			return fmt.Errorf("%s: %s", memberAt(i, c.Name, k, m.ID), jsonProblem(raw, err))
		}
		if m.Key != nil { // absent or null: Validate says the key is missing
			if c.Members[k].Key, err = identity.ParsePeerID(*m.Key); err != nil {
				return fmt.Errorf("%s: %w", memberAt(i, c.Name, k, m.ID), err)
			}
		}
	}
	return nil
}

// decodeStrict decodes one JSON value into v, refusing unknown fields.
func decodeStrict(data []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	return dec.Decode(v)
}

// spaceAt names space i (0-based) of a roster in errors: its number,
// and its name if it has one.
func spaceAt(i int, name string) string {
	if name == "" {
		return fmt.Sprintf("space %d", i+1)
	}
	return fmt.Sprintf("space %d (%q)", i+1, name)
}

// memberAt names member k (0-based) of space i in errors: the space, the
// member's number and its participant id if it has one.
func memberAt(i int, space string, k int, id string) string {
	if id == "" {
		return fmt.Sprintf("%s, member %d", spaceAt(i, space), k+1)
	}
	return fmt.Sprintf("%s, member %d (%q)", spaceAt(i, space), k+1, id)
}

// jsonProblem says what is wrong with the JSON text data, which err,
// from decoding it, reports: without the json package's Go names, and
// with the line and column of a syntax error.
func jsonProblem(data []byte, err error) string {
	var syn *json.SyntaxError
	var typ *json.UnmarshalTypeError
	switch {
	case errors.As(err, &syn):
		before := data[:min(max(syn.Offset, 0), int64(len(data)))]
		line := bytes.Count(before, []byte("\n")) + 1
		col := len(before) - bytes.LastIndexByte(before, '\n') - 1 // before ends with the bad byte
		return fmt.Sprintf("line %d, column %d: %v", line, col, syn)
	case errors.Is(err, io.EOF):
		return `no JSON text (a roster with no spaces is {"spaces": []})`
	case errors.Is(err, io.ErrUnexpectedEOF):
		end := bytes.TrimRight(data, " \t\r\n")
		line := bytes.Count(end, []byte("\n")) + 1
		col := len(end) - bytes.LastIndexByte(end, '\n') - 1 // end's last byte
		return fmt.Sprintf("the JSON text ends too soon, after line %d, column %d (an object, array or string is not closed)", line, col)
	case errors.As(err, &typ):
		want := "a string"
		switch typ.Type.Kind() {
		case reflect.Slice, reflect.Array:
			want = "an array"
		case reflect.Struct, reflect.Map:
			want = "an object"
		case reflect.Bool:
			want = "true or false"
		case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64, reflect.Uint, reflect.Uint8,
			reflect.Uint16, reflect.Uint32, reflect.Uint64, reflect.Float32, reflect.Float64:
			want = "a number"
		}
		if typ.Field == "" {
			return fmt.Sprintf("a JSON %s, not %s", typ.Value, want)
		}
		return fmt.Sprintf("%s: a JSON %s, not %s", typ.Field, typ.Value, want)
	}
	return strings.TrimPrefix(err.Error(), "json: ")
}

// LoadRoster reads path; a missing file is an empty roster. It refuses a
// symbolic link, a file another user owns and one that group or others
// may write (internal/filemode; the error wraps filemode.ErrUnsafe and
// gives the fix): whoever can write spaces.json decides who may act in
// this node's spaces.
func LoadRoster(path string) (*Roster, error) {
	data, err := ReadRosterFile(path)
	if err != nil || data == nil {
		return &Roster{}, err
	}
	return ParseRosterFile(path, data)
}

// ParseRosterFile is ParseRoster of data read from path: its errors name
// the file.
func ParseRosterFile(path string, data []byte) (*Roster, error) {
	r, err := ParseRoster(data)
	if err != nil {
		return nil, fmt.Errorf("%w (in %s)", err, path)
	}
	return r, nil
}

// ReadRosterFile reads path with LoadRoster's checks, without parsing
// it: nil data (and no error) when there is no file. At most
// MaxRosterBytes+1 bytes are read (ParseRoster refuses more).
func ReadRosterFile(path string) ([]byte, error) {
	err := filemode.File(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("space: %w", err)
	}
	f, err := os.Open(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("space: %w", err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("space: %w", err)
	}
	if err := filemode.Current().FileInfo(path, st); err != nil { // swapped since the check
		return nil, fmt.Errorf("space: %w", err)
	}
	data, err := io.ReadAll(io.LimitReader(f, MaxRosterBytes+1))
	if err != nil {
		return nil, fmt.Errorf("space: read %s: %w", path, err)
	}
	if data == nil {
		data = []byte{} // an empty file is there (and does not parse)
	}
	return data, nil
}

// Save writes the roster to path atomically with mode 0600. It refuses a
// roster that does not validate.
func (r *Roster) Save(path string) error {
	_, err := r.SaveData(path)
	return err
}

// SaveData is Save, and returns the bytes it wrote.
func (r *Roster) SaveData(path string) ([]byte, error) {
	if err := r.Validate(); err != nil {
		return nil, err
	}
	data, err := json.MarshalIndent(r.clone(), "", "  ")
	if err != nil {
		return nil, fmt.Errorf("space: roster: %w", err)
	}
	data = append(data, '\n')
	if err := atomicfile.WriteFile(path, data, 0o600); err != nil {
		return nil, fmt.Errorf("space: %w", err)
	}
	return data, nil
}

// Validate checks the rules ParseRoster applies: at most [MaxSpaces]
// spaces, names of 1 to [MaxSpaceName] letters, digits, '.', '_' or '-'
// that are unique ignoring case, a known delivery mode, at most
// [MaxMembers] members per space with keys and participant ids unique
// within the space, and capability sets that compile. Errors name the
// space and the member (1-based row) at fault.
func (r *Roster) Validate() error {
	if r == nil {
		return errors.New("space: roster: nil")
	}
	if len(r.Spaces) > MaxSpaces {
		return fmt.Errorf("space: roster: %d spaces, over the limit of %d", len(r.Spaces), MaxSpaces)
	}
	names := make(map[string]int, len(r.Spaces))
	for i, c := range r.Spaces {
		at := spaceAt(i, c.Name)
		if err := CheckName(c.Name); err != nil {
			return fmt.Errorf("space: roster: %s: name: %w", at, err)
		}
		lower := strings.ToLower(c.Name)
		if j, dup := names[lower]; dup {
			return fmt.Errorf("space: roster: %s: name already used by space %d (%q)", at, j+1, r.Spaces[j].Name)
		}
		names[lower] = i
		switch c.Delivery {
		case "", DeliveryAll, DeliveryAddressed:
		default:
			return fmt.Errorf("space: roster: %s: delivery %q is neither %q nor %q", at, c.Delivery, DeliveryAll, DeliveryAddressed)
		}
		if len(c.Members) > MaxMembers {
			return fmt.Errorf("space: roster: %s: %d members, over the limit of %d", at, len(c.Members), MaxMembers)
		}
		keys := make(map[identity.PeerID]int, len(c.Members))
		ids := make(map[string]int, len(c.Members))
		looks := make(map[string]int, len(c.Members)) // idSkeleton → member
		for k, m := range c.Members {
			mat := memberAt(i, c.Name, k, m.ID)
			if m.Key.IsZero() {
				return fmt.Errorf("space: roster: %s: key missing", mat)
			}
			if err := CheckParticipantID(m.ID); err != nil {
				return fmt.Errorf("space: roster: %s: id: %w", mat, err)
			}
			if j, dup := keys[m.Key]; dup {
				return fmt.Errorf("space: roster: %s: key already used by member %d (%q)", mat, j+1, c.Members[j].ID)
			}
			keys[m.Key] = k
			if j, dup := ids[m.ID]; dup {
				return fmt.Errorf("space: roster: %s: id already used by member %d", mat, j+1)
			}
			ids[m.ID] = k
			if j, dup := looks[idSkeleton(m.ID)]; dup {
				return fmt.Errorf("space: roster: %s: id reads the same as member %d's (%q): they differ only in joiners or variation selectors", mat, j+1, c.Members[j].ID)
			}
			looks[idSkeleton(m.ID)] = k
			if err := checkCapabilities(m.Capabilities); err != nil {
				return fmt.Errorf("space: roster: %s: capabilities: %w", mat, err)
			}
		}
	}
	return nil
}

// CheckName applies the space name grammar: 1 to MaxSpaceName of
// [A-Za-z0-9._-]. Its errors do not repeat the name.
func CheckName(name string) error {
	if name == "" {
		return errors.New("empty")
	}
	if len(name) > MaxSpaceName {
		return fmt.Errorf("%d bytes, over the limit of %d", len(name), MaxSpaceName)
	}
	for _, c := range name { // the character, not its first byte, in the message
		switch {
		case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9', c == '.', c == '_', c == '-':
		default:
			return fmt.Errorf("%q is not allowed (ASCII letters, digits, '.', '_' and '-' are)", c)
		}
	}
	return nil
}

// CheckParticipantID requires a participant id to be 1 to meup.MaxIDLen
// bytes of valid UTF-8 without spaces, control characters or invisible
// ones, so that it prints as one word and compares byte for byte. (A
// roster also refuses an id that reads as another member's.)
func CheckParticipantID(id string) error {
	if id == "" {
		return errors.New("empty")
	}
	if len(id) > meup.MaxIDLen {
		return fmt.Errorf("%d bytes, over the limit of %d", len(id), meup.MaxIDLen)
	}
	rs := []rune(id)
	for i, r := range rs {
		if r == unicode.ReplacementChar || unicode.IsControl(r) || unicode.IsSpace(r) || invisible(r) || !joinsHere(rs, i) {
			return errors.New("holds white space, a control character, an invisible one or invalid UTF-8")
		}
	}
	return nil
}

// joinsHere reports whether rs[i], if it is a joiner or a variation
// selector, has a visible effect where it stands; elsewhere it shows as
// nothing, and "w\u200dorker" would read as "worker". U+200D ZERO WIDTH
// JOINER joins two symbols (emoji: "👨‍💻", a variation selector or skin
// tone between) or two letters of a script whose letters join (the
// Indic half forms); U+200C ZERO WIDTH NON-JOINER two such letters; a
// Mongolian free variation selector follows a Mongolian letter; a
// variation selector follows a symbol or punctuation ("❤️", "‼️"), a
// digit, '#' or '*' of a keycap, or a Han ideograph. None follows
// another. What passes and still looks like another member's id is
// caught by comparing skeletons (idSkeleton).
func joinsHere(rs []rune, i int) bool {
	r := rs[i]
	at := func(j int) rune {
		if j < 0 || j >= len(rs) {
			return -1
		}
		return rs[j]
	}
	prev, next := at(i-1), at(i+1)
	switch {
	case r == 0x200D:
		base := prev
		if variationSelector(base) || emojiModifier(base) {
			base = at(i - 2) // "❤️‍🔥", "👩🏽‍🔬"
		}
		// After a virama it may end the word: the old Malayalam chillu, "ന്‍".
		return symbol(base) && symbol(next) || joiningLetter(prev) && (joiningLetter(next) || unicode.Is(unicode.Mn, prev))
	case r == 0x200C:
		return joiningLetter(prev) && joiningLetter(next)
	case 0x180B <= r && r <= 0x180D, r == 0x180F:
		return unicode.Is(unicode.Mongolian, prev) && unicode.IsLetter(prev)
	case variationSelector(r):
		switch {
		case prev < 0 || variationSelector(prev):
			return false
		case '0' <= prev && prev <= '9', prev == '#', prev == '*':
			return next == 0x20E3 // a keycap: "1️⃣"
		case unicode.Is(unicode.Han, prev):
			return true
		}
		return prev == 0x2139 || unicode.In(prev, unicode.S, unicode.P) && !emojiModifier(prev)
	}
	return true
}

// variationSelector reports whether r is one of the variation selectors
// (U+FE00–U+FE0F, U+E0100–U+E01EF).
func variationSelector(r rune) bool {
	return 0xFE00 <= r && r <= 0xFE0F || 0xE0100 <= r && r <= 0xE01EF
}

// emojiModifier reports whether r is one of the skin tones (U+1F3FB–U+1F3FF).
func emojiModifier(r rune) bool { return 0x1F3FB <= r && r <= 0x1F3FF }

// symbol reports whether r is a symbol a joiner joins: So (emoji are) or
// a skin tone; not the ASCII modifier letters ('^', '`').
func symbol(r rune) bool { return r >= 0 && (unicode.Is(unicode.So, r) || emojiModifier(r)) }

// joiningLetter reports whether r is a letter or mark of a script in
// which the joiners change how letters join.
func joiningLetter(r rune) bool {
	return r >= 0 && unicode.In(r, unicode.L, unicode.M) && unicode.In(r, unicode.Arabic, unicode.Syriac, unicode.Nko,
		unicode.Mongolian, unicode.Devanagari, unicode.Bengali, unicode.Gurmukhi, unicode.Gujarati, unicode.Oriya,
		unicode.Tamil, unicode.Telugu, unicode.Kannada, unicode.Malayalam, unicode.Sinhala)
}

// idSkeleton is id without the characters that may show as nothing
// (joiners, variation selectors): two ids with one skeleton read the
// same ("❤️" and "❤"), so a space refuses the second.
func idSkeleton(id string) string {
	return strings.Map(func(r rune) rune {
		if r == 0x200C || r == 0x200D || variationSelector(r) || 0x180B <= r && r <= 0x180F {
			return -1
		}
		return r
	}, id)
}

// invisible reports whether r shows as nothing, so that an id holding it
// would read as another member's: the bidirectional controls (U+202E
// RIGHT-TO-LEFT OVERRIDE…), the zero-width spaces and joiners that join
// nothing (U+200B, U+2060, U+FEFF…), the soft hyphen, the Hangul and
// Braille fillers, the combining grapheme joiner. U+200D ZERO WIDTH JOINER
// and the variation selectors are allowed where they show (joinsHere):
// emoji are made of them ("dev👨‍💻", "❤️").
func invisible(r rune) bool {
	switch r {
	case 0x00AD, 0x180E, 0x200B, 0x2060, 0x2061, 0x2062, 0x2063, 0x2064, 0xFEFF, 0x2800:
		return true
	}
	return unicode.Is(unicode.Bidi_Control, r) || unicode.Is(unicode.Other_Default_Ignorable_Code_Point, r)
}

// checkCapabilities bounds a capability set and compiles it.
func checkCapabilities(caps []meup.Capability) error {
	if len(caps) > meup.MaxCapabilities {
		return fmt.Errorf("%d capabilities, over the limit of %d", len(caps), meup.MaxCapabilities)
	}
	if _, err := meup.Compile(caps); err != nil {
		return err
	}
	return nil
}

// clone returns a deep copy whose capability slices are never nil, so
// that they marshal as [] rather than null.
func (r *Roster) clone() *Roster {
	if r == nil {
		return &Roster{}
	}
	out := &Roster{Spaces: make([]Config, len(r.Spaces))}
	for i, c := range r.Spaces {
		out.Spaces[i] = c.clone()
	}
	return out
}

func (c Config) clone() Config {
	c.Members = slices.Clone(c.Members)
	if c.Members == nil {
		c.Members = []Member{}
	}
	for i := range c.Members {
		c.Members[i].Capabilities = cloneCaps(c.Members[i].Capabilities)
	}
	return c
}

// cloneCaps deep-copies a capability set; the result is never nil.
func cloneCaps(caps []meup.Capability) []meup.Capability {
	out := make([]meup.Capability, len(caps))
	for i, c := range caps {
		out[i] = meup.Capability{ID: c.ID, Kind: bytes.Clone(c.Kind), Payload: bytes.Clone(c.Payload)}
	}
	return out
}
