package wire

import (
	"math"
	"slices"
	"sort"
	"strings"
	"unsafe"
)

// Type is the type of a [Value].
type Type uint8

// The types a [Value] can hold: the JSON data model plus byte strings (which
// the protocol uses for ids and which JSON has no room for).
const (
	TypeNull  Type = iota // null; the zero Value
	TypeBool              // true or false
	TypeInt               // an integer in [-2^63, 2^64-1]
	TypeFloat             // a finite IEEE 754 double, never merged with integers
	TypeText              // a UTF-8 string
	TypeBytes             // a byte string
	TypeArray             // an ordered list of values
	TypeMap               // text keys to values, keys unique
)

var typeNames = [...]string{"null", "bool", "integer", "float", "text", "bytes", "array", "map"}

func (t Type) String() string {
	if int(t) < len(typeNames) {
		return typeNames[t]
	}
	return "invalid"
}

// Value is an immutable CBOR value in the JSON data model (plus byte
// strings). It keeps integers and floats apart, so 1 and 1.0 encode
// differently, as the signature requires. Maps keep their members sorted in
// canonical order (shorter key first, then bytewise) with no duplicate
// keys, which makes canonical encoding a straight walk.
//
// The zero Value is null. Values are safe for concurrent reads; build them
// with the constructors ([Null], [Bool], [Int], [Uint], [Float], [Text],
// [Bytes], [Array], [Map]) or by decoding.
type Value struct {
	t   Type
	neg bool           // TypeInt: the value is -1 - n
	n   uint64         // TypeBool: 0/1; TypeInt: magnitude as CBOR encodes it; TypeFloat: bits; otherwise the length of p
	p   unsafe.Pointer // TypeText, TypeBytes: string data; TypeArray: items; TypeMap: key, value, key, value… (keys TypeText)
}

// A Value is three words: strings and item slices share one pointer and
// keep their length in n. Decoded trees hold hundreds of values, and a
// small, single-pointer Value halves the memory, copying and GC scanning
// they cost (docs/protocol.md, "Performance").

func strValue(t Type, s string) Value {
	return Value{t: t, n: uint64(len(s)), p: unsafe.Pointer(unsafe.StringData(s))}
}

func itemsValue(t Type, a []Value) Value {
	return Value{t: t, n: uint64(len(a)), p: unsafe.Pointer(unsafe.SliceData(a))}
}

// str returns the string of a text or byte-string value.
func (v *Value) str() string {
	if v.t != TypeText && v.t != TypeBytes {
		return ""
	}
	return unsafe.String((*byte)(v.p), int(v.n))
}

// items returns the items of an array, or the key/value pairs of a map. The
// slice aliases the value: callers never write to it.
func (v *Value) items() []Value {
	if v.t != TypeArray && v.t != TypeMap {
		return nil
	}
	return unsafe.Slice((*Value)(v.p), int(v.n))
}

// Member is one key/value pair of a map.
type Member struct {
	Key   string
	Value Value
}

// Null returns the null value (the zero Value).
func Null() Value { return Value{} }

// Bool returns a boolean value.
func Bool(b bool) Value {
	v := Value{t: TypeBool}
	if b {
		v.n = 1
	}
	return v
}

// Int returns an integer value.
func Int(i int64) Value {
	if i < 0 {
		return Value{t: TypeInt, neg: true, n: uint64(-(i + 1))}
	}
	return Value{t: TypeInt, n: uint64(i)}
}

// Uint returns a non-negative integer value; all of uint64 is allowed.
func Uint(u uint64) Value { return Value{t: TypeInt, n: u} }

// Float returns a floating-point value. NaN and infinities are outside the
// JSON data model: encoding a Value that holds one fails with
// [ErrUnsupported].
func Float(f float64) Value { return Value{t: TypeFloat, n: math.Float64bits(f)} }

// Text returns a text value. It must be valid UTF-8 to be encoded.
func Text(s string) Value { return strValue(TypeText, s) }

// Bytes returns a byte-string value holding a copy of b.
func Bytes(b []byte) Value { return strValue(TypeBytes, string(b)) }

// Array returns an array of the given items.
func Array(items ...Value) Value {
	return itemsValue(TypeArray, append([]Value(nil), items...))
}

// Map returns a map of the given members. A repeated key is an error
// ([ErrDuplicateKey]), as it is on the wire.
func Map(members ...Member) (Value, error) {
	a := make([]Value, 0, 2*len(members))
	for _, m := range members {
		a = append(a, Text(m.Key), m.Value)
	}
	if err := sortMembers(a); err != nil {
		return Value{}, err
	}
	return itemsValue(TypeMap, a), nil
}

// Type returns the value's type.
func (v Value) Type() Type { return v.t }

// IsNull reports whether v is null.
func (v Value) IsNull() bool { return v.t == TypeNull }

// Bool returns the boolean and whether v is one.
func (v Value) Bool() (b, ok bool) { return v.n == 1, v.t == TypeBool }

// Int returns the integer and whether v is an integer that fits int64.
func (v Value) Int() (int64, bool) {
	if v.t != TypeInt || v.n > math.MaxInt64 {
		return 0, false
	}
	if v.neg {
		return -1 - int64(v.n), true
	}
	return int64(v.n), true
}

// Uint returns the integer and whether v is a non-negative integer.
func (v Value) Uint() (uint64, bool) { return v.n, v.t == TypeInt && !v.neg }

// Float returns the float and whether v is a float. Integers are not floats.
func (v Value) Float() (float64, bool) {
	if v.t != TypeFloat {
		return 0, false
	}
	return math.Float64frombits(v.n), true
}

// Text returns the string and whether v is text.
func (v Value) Text() (string, bool) {
	if v.t != TypeText {
		return "", false
	}
	return v.str(), true
}

// Bytes returns a copy of the byte string and whether v is one.
func (v Value) Bytes() ([]byte, bool) {
	if v.t != TypeBytes {
		return nil, false
	}
	return []byte(v.str()), true
}

// Footprint returns the bytes v's tree of values takes in memory beyond
// the text and byte strings it holds (those alias the decoded input):
// one Value per item, for each key and value of a map. A small payload
// can decode into a large tree (an array of many small integers), so a
// memory bound counts this as well as the payload's size. It walks the
// tree: at most MaxItems values for a decoded envelope.
func (v Value) Footprint() int {
	n := int(unsafe.Sizeof(v))
	for _, x := range v.items() {
		n += x.Footprint()
	}
	return n
}

// Len returns the number of items of an array or members of a map, else 0.
func (v Value) Len() int {
	switch v.t {
	case TypeArray:
		return len(v.items())
	case TypeMap:
		return len(v.items()) / 2
	}
	return 0
}

// Index returns item i of an array. It panics if v is not an array or i is
// out of range, like a slice index.
func (v Value) Index(i int) Value {
	if v.t != TypeArray {
		panic("wire: Index of non-array " + v.t.String())
	}
	return v.items()[i]
}

// Member returns member i of a map in canonical key order. It panics if v is
// not a map or i is out of range.
func (v Value) Member(i int) Member {
	if v.t != TypeMap {
		panic("wire: Member of non-map " + v.t.String())
	}
	return Member{Key: v.items()[2*i].str(), Value: v.items()[2*i+1]}
}

// Get returns the value stored under key and whether there is one. It
// returns false for anything but a map.
func (v Value) Get(key string) (Value, bool) {
	if v.t != TypeMap {
		return Value{}, false
	}
	n := len(v.items()) / 2
	i := sort.Search(n, func(i int) bool { return compareKeys(v.items()[2*i].str(), key) >= 0 })
	if i < n && v.items()[2*i].str() == key {
		return v.items()[2*i+1], true
	}
	return Value{}, false
}

// With returns a copy of map v with key set to val, replacing any value
// already stored under key. It returns [ErrType] if v is not a map.
func (v Value) With(key string, val Value) (Value, error) {
	if v.t != TypeMap {
		return Value{}, ErrType
	}
	a := make([]Value, 0, len(v.items())+2)
	inserted := false
	for i := 0; i < len(v.items()); i += 2 {
		c := compareKeys(v.items()[i].str(), key)
		if c == 0 {
			a = append(a, v.items()[i], val)
			inserted = true
			continue
		}
		if c > 0 && !inserted {
			a = append(a, Text(key), val)
			inserted = true
		}
		a = append(a, v.items()[i], v.items()[i+1])
	}
	if !inserted {
		a = append(a, Text(key), val)
	}
	return itemsValue(TypeMap, a), nil
}

// Equal reports whether v and w are the same value: same types, same
// contents. Floats compare by bit pattern, so 0.0 and -0.0 differ (they
// encode differently).
func (v Value) Equal(w Value) bool {
	if v.t != w.t || v.neg != w.neg || v.n != w.n {
		return false
	}
	switch v.t {
	case TypeText, TypeBytes:
		return v.str() == w.str()
	case TypeArray, TypeMap:
		a, b := v.items(), w.items()
		for i := range a {
			if !a[i].Equal(b[i]) {
				return false
			}
		}
	}
	return true
}

// compareKeys orders text map keys canonically (RFC 8949 §4.2.1 for text
// keys): shorter first, then bytewise.
func compareKeys(a, b string) int {
	if len(a) != len(b) {
		if len(a) < len(b) {
			return -1
		}
		return 1
	}
	return strings.Compare(a, b)
}

// sortMembers sorts a key/value pair slice canonically by key and reports
// [ErrDuplicateKey] if two keys are equal. It does not retain a, so callers
// may pass stack buffers.
func sortMembers(a []Value) error {
	n := len(a) / 2
	if n <= 16 {
		// Insertion sort on pairs: fast for the small maps the protocol
		// carries.
		for i := 1; i < n; i++ {
			for j := i; j > 0 && compareKeys(a[2*j-2].str(), a[2*j].str()) > 0; j-- {
				a[2*j-2], a[2*j] = a[2*j], a[2*j-2]
				a[2*j-1], a[2*j+1] = a[2*j+1], a[2*j-1]
			}
		}
	} else {
		sortLarge(a)
	}
	for i := 2; i < len(a); i += 2 {
		if a[i-2].str() == a[i].str() {
			return ErrDuplicateKey
		}
	}
	return nil
}

// sortLarge sorts the pairs of a big map through an index permutation.
func sortLarge(a []Value) {
	// Each key beside its index, sorted together: the comparisons read
	// the keys they move, not keys scattered through a.
	type keyAt struct {
		key string
		at  int
	}
	ks := make([]keyAt, len(a)/2)
	for i := range ks {
		ks[i] = keyAt{a[2*i].str(), i}
	}
	slices.SortFunc(ks, func(x, y keyAt) int { return compareKeys(x.key, y.key) })
	sorted := make([]Value, len(a))
	for to, k := range ks {
		sorted[2*to], sorted[2*to+1] = a[2*k.at], a[2*k.at+1]
	}
	copy(a, sorted)
}

// AppendCanonical appends the canonical CBOR encoding of v: definite
// lengths, shortest integer heads, the shortest float that holds the value
// exactly, maps sorted shorter key first then bytewise (RFC 8949 §4.2.1 for
// text keys). It fails for NaN or infinite floats, invalid UTF-8 and
// nesting deeper than MaxDepth.
func (v Value) AppendCanonical(dst []byte) ([]byte, error) {
	return appendValue(dst, &v, orderCanonical, 1, true)
}
