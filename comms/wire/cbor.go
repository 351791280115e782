package wire

import (
	"encoding/binary"
	"math"
	"slices"
	"strings"
	"unicode/utf8"
)

// This file is the CBOR (RFC 8949) codec for the subset the protocol uses.
// It is written here rather than taken from a general library because the
// protocol needs three things at once that a general codec gives only with
// reflection and per-value allocations: strict bounded decoding with a typed
// reason for every failure, two encodings of one tree (canonical for the
// signature, the Rust sender's field order for the frame), and an exchange
// that stays within a small allocation budget. Tests check it against
// github.com/fxamacker/cbor/v2 as an independent oracle.

// CBOR major types (RFC 8949 §3.1).
const (
	majorUint   = 0
	majorNegInt = 1
	majorBytes  = 2
	majorText   = 3
	majorArray  = 4
	majorMap    = 5
	majorTag    = 6
	majorSimple = 7
)

// Additional-information values with a fixed meaning.
const (
	infoFalse      = 20
	infoTrue       = 21
	infoNull       = 22
	infoFloat16    = 25
	infoFloat32    = 26
	infoFloat64    = 27
	infoIndefinite = 31
	breakByte      = 0xff
)

// ---- encoding ----

// appendHead appends the shortest head for major type m and argument n.
func appendHead(dst []byte, m byte, n uint64) []byte {
	m <<= 5
	switch {
	case n < 24:
		return append(dst, m|byte(n))
	case n <= math.MaxUint8:
		return append(dst, m|24, byte(n))
	case n <= math.MaxUint16:
		return binary.BigEndian.AppendUint16(append(dst, m|25), uint16(n))
	case n <= math.MaxUint32:
		return binary.BigEndian.AppendUint32(append(dst, m|26), uint32(n))
	default:
		return binary.BigEndian.AppendUint64(append(dst, m|27), n)
	}
}

func appendText(dst []byte, s string) []byte {
	return append(appendHead(dst, majorText, uint64(len(s))), s...)
}

func appendByteString(dst []byte, b []byte) []byte {
	return append(appendHead(dst, majorBytes, uint64(len(b))), b...)
}

// appendFloat appends f in the shortest of half, single and double
// precision that holds it exactly. f must be finite.
func appendFloat(dst []byte, f float64) []byte {
	f32 := float32(f)
	if float64(f32) != f {
		return binary.BigEndian.AppendUint64(append(dst, 0xfb), math.Float64bits(f))
	}
	if h, ok := float16Exact(math.Float32bits(f32)); ok {
		return binary.BigEndian.AppendUint16(append(dst, 0xf9), h)
	}
	return binary.BigEndian.AppendUint32(append(dst, 0xfa), math.Float32bits(f32))
}

// float16Exact converts the bits of a finite float32 to half precision if
// that loses nothing.
func float16Exact(b uint32) (uint16, bool) {
	sign := uint16(b>>16) & 0x8000
	exp := int(b>>23&0xff) - 127
	mant := b & 0x7fffff
	switch {
	case b&0x7fffffff == 0:
		return sign, true
	case exp >= -14 && exp <= 15: // normal half
		if mant&0x1fff != 0 {
			return 0, false
		}
		return sign | uint16(exp+15)<<10 | uint16(mant>>13), true
	case exp >= -24 && exp < -14: // subnormal half: value = m × 2^-24
		full := mant | 0x800000
		shift := uint(-(exp + 1))
		if full&(1<<shift-1) != 0 {
			return 0, false
		}
		return sign | uint16(full>>shift), true
	}
	return 0, false
}

// float16To64 widens half-precision bits to a float64.
func float16To64(h uint16) float64 {
	sign := 1.0
	if h&0x8000 != 0 {
		sign = -1
	}
	exp := int(h >> 10 & 0x1f)
	mant := float64(h & 0x3ff)
	switch exp {
	case 0:
		return sign * math.Ldexp(mant, -24)
	case 0x1f:
		if mant == 0 {
			return math.Inf(int(sign))
		}
		return math.NaN()
	}
	return sign * math.Ldexp(1024+mant, exp-25)
}

// mapOrder chooses how an encoder orders map members.
type mapOrder uint8

const (
	// orderCanonical sorts every map shorter key first, then bytewise: the
	// signed form.
	orderCanonical mapOrder = iota
	// orderBytewise sorts plain bytewise, as serde_json's maps do in the
	// Rust sender's frames.
	orderBytewise
)

// appendValue encodes v. depth is the nesting level v's container would
// have; the encoder refuses what the decoder would refuse.
func appendValue(dst []byte, v Value, ord mapOrder, depth int) ([]byte, error) {
	switch v.t {
	case TypeNull:
		return append(dst, 0xf6), nil
	case TypeBool:
		if v.n == 1 {
			return append(dst, 0xf5), nil
		}
		return append(dst, 0xf4), nil
	case TypeInt:
		if v.neg {
			return appendHead(dst, majorNegInt, v.n), nil
		}
		return appendHead(dst, majorUint, v.n), nil
	case TypeFloat:
		f := math.Float64frombits(v.n)
		if math.IsNaN(f) || math.IsInf(f, 0) {
			return dst, ErrUnsupported
		}
		return appendFloat(dst, f), nil
	case TypeText:
		if !utf8.ValidString(v.s) {
			return dst, ErrInvalidUTF8
		}
		return appendText(dst, v.s), nil
	case TypeBytes:
		return append(appendHead(dst, majorBytes, uint64(len(v.s))), v.s...), nil
	case TypeArray:
		if depth > MaxDepth {
			return dst, ErrTooDeep
		}
		dst = appendHead(dst, majorArray, uint64(len(v.a)))
		var err error
		for _, item := range v.a {
			if dst, err = appendValue(dst, item, ord, depth+1); err != nil {
				return dst, err
			}
		}
		return dst, nil
	case TypeMap:
		if depth > MaxDepth {
			return dst, ErrTooDeep
		}
		if ord == orderBytewise {
			return appendMapBytewise(dst, v, nil, depth)
		}
		dst = appendHead(dst, majorMap, uint64(len(v.a)/2))
		var err error
		for i := 0; i < len(v.a); i += 2 {
			if !utf8.ValidString(v.a[i].s) {
				return dst, ErrInvalidUTF8
			}
			dst = appendText(dst, v.a[i].s)
			if dst, err = appendValue(dst, v.a[i+1], ord, depth+1); err != nil {
				return dst, err
			}
		}
		return dst, nil
	}
	return dst, ErrType
}

// appendMapBytewise encodes map v with the keys in first (in that order,
// those present) ahead of the rest, which follow bytewise sorted. Nested
// maps are bytewise sorted throughout.
func appendMapBytewise(dst []byte, v Value, first []string, depth int) ([]byte, error) {
	n := len(v.a) / 2
	// The member order as indexes into v's pairs. Small maps sort on the
	// stack; the protocol's maps are small.
	var small [32]int32
	var idx []int32
	if n <= len(small) {
		idx = small[:0]
	} else {
		idx = make([]int32, 0, n)
	}
	for _, name := range first {
		if i := v.memberIndex(name); i >= 0 {
			idx = append(idx, int32(i))
		}
	}
	lead := len(idx)
	for i := 0; i < n; i++ {
		if !slices.Contains(first, v.a[2*i].s) {
			idx = append(idx, int32(i))
		}
	}
	rest := idx[lead:]
	if len(rest) <= len(small) {
		for i := 1; i < len(rest); i++ {
			for j := i; j > 0 && v.a[2*rest[j-1]].s > v.a[2*rest[j]].s; j-- {
				rest[j-1], rest[j] = rest[j], rest[j-1]
			}
		}
	} else {
		slices.SortFunc(rest, func(a, b int32) int { return strings.Compare(v.a[2*a].s, v.a[2*b].s) })
	}
	dst = appendHead(dst, majorMap, uint64(n))
	var err error
	for _, i := range idx {
		key := v.a[2*i].s
		if !utf8.ValidString(key) {
			return dst, ErrInvalidUTF8
		}
		dst = appendText(dst, key)
		if dst, err = appendValue(dst, v.a[2*i+1], orderBytewise, depth+1); err != nil {
			return dst, err
		}
	}
	return dst, nil
}

// memberIndex returns the pair index of key in map v, or -1.
func (v Value) memberIndex(key string) int {
	for i := 0; i < len(v.a); i += 2 {
		if v.a[i].s == key {
			return i / 2
		}
	}
	return -1
}

// ---- decoding ----

// decoder reads one CBOR item tree from src. Strings in the result are
// substrings of src, so decoding a whole envelope copies the input once.
type decoder struct {
	src   string
	off   int
	items int     // values and keys seen, bounded by MaxItems
	field string  // where we are, for errors
	arena []Value // free space for container items; see alloc
}

func (d *decoder) fail(err error) error {
	return &DecodeError{Field: d.field, Offset: d.off, Err: err}
}

// head reads an item head. For major type 7, arg holds the raw bits of a
// float or the simple value. info is the additional information (31 means
// indefinite length, or break for major 7).
func (d *decoder) head() (major, info byte, arg uint64, err error) {
	if d.off >= len(d.src) {
		return 0, 0, 0, d.fail(ErrTruncated)
	}
	b := d.src[d.off]
	d.off++
	major, info = b>>5, b&0x1f
	var n int
	switch {
	case info < 24:
		return major, info, uint64(info), nil
	case info == 24:
		n = 1
	case info == 25:
		n = 2
	case info == 26:
		n = 4
	case info == 27:
		n = 8
	case info == infoIndefinite:
		if major == majorUint || major == majorNegInt || major == majorTag {
			d.off--
			return 0, 0, 0, d.fail(ErrMalformed)
		}
		return major, info, 0, nil
	default: // 28–30 are reserved
		d.off--
		return 0, 0, 0, d.fail(ErrMalformed)
	}
	if len(d.src)-d.off < n {
		return 0, 0, 0, d.fail(ErrTruncated)
	}
	for _, c := range []byte(d.src[d.off : d.off+n]) {
		arg = arg<<8 | uint64(c)
	}
	d.off += n
	if major == majorSimple && info == 24 && arg < 32 {
		return 0, 0, 0, d.fail(ErrMalformed) // two-byte form of a one-byte simple value
	}
	return major, info, arg, nil
}

// count charges one item against MaxItems.
func (d *decoder) count() error {
	d.items++
	if d.items > MaxItems {
		return d.fail(ErrTooManyItems)
	}
	return nil
}

// str reads the body of a byte or text string whose head was already read.
// Indefinite-length strings are concatenated from their definite chunks.
func (d *decoder) str(major, info byte, arg uint64) (string, error) {
	if info != infoIndefinite {
		if arg > uint64(len(d.src)-d.off) {
			return "", d.fail(ErrTruncated)
		}
		s := d.src[d.off : d.off+int(arg)]
		d.off += int(arg)
		if major == majorText && !utf8.ValidString(s) {
			return "", d.fail(ErrInvalidUTF8)
		}
		return s, nil
	}
	var b strings.Builder
	for {
		if d.off >= len(d.src) {
			return "", d.fail(ErrTruncated)
		}
		if d.src[d.off] == breakByte {
			d.off++
			return b.String(), nil
		}
		if err := d.count(); err != nil {
			return "", err
		}
		m, ci, n, err := d.head()
		if err != nil {
			return "", err
		}
		if m != major || ci == infoIndefinite {
			return "", d.fail(ErrMalformed) // chunks are definite strings of the same type
		}
		s, err := d.str(m, ci, n)
		if err != nil {
			return "", err
		}
		b.WriteString(s)
	}
}

// text reads a text string item (a map key).
func (d *decoder) text() (string, error) {
	if err := d.count(); err != nil {
		return "", err
	}
	start := d.off
	major, info, arg, err := d.head()
	if err != nil {
		return "", err
	}
	if major != majorText {
		d.off = start
		if major == majorSimple && info == infoIndefinite {
			return "", d.fail(ErrMalformed)
		}
		return "", d.fail(ErrUnsupported) // map keys are text in this protocol
	}
	return d.str(major, info, arg)
}

// atBreak consumes a break byte if one is next.
func (d *decoder) atBreak() (bool, error) {
	if d.off >= len(d.src) {
		return false, d.fail(ErrTruncated)
	}
	if d.src[d.off] == breakByte {
		d.off++
		return true, nil
	}
	return false, nil
}

// value decodes one item in the data model. depth is the nesting level a
// container read here would have.
func (d *decoder) value(depth int) (Value, error) {
	if err := d.count(); err != nil {
		return Value{}, err
	}
	start := d.off
	major, info, arg, err := d.head()
	if err != nil {
		return Value{}, err
	}
	switch major {
	case majorUint:
		return Value{t: TypeInt, n: arg}, nil
	case majorNegInt:
		if arg > math.MaxInt64 {
			d.off = start
			return Value{}, d.fail(ErrUnsupported) // below -2^63: no JSON number holds it
		}
		return Value{t: TypeInt, neg: true, n: arg}, nil
	case majorBytes, majorText:
		s, err := d.str(major, info, arg)
		if err != nil {
			return Value{}, err
		}
		t := TypeText
		if major == majorBytes {
			t = TypeBytes
		}
		return Value{t: t, s: s}, nil
	case majorArray:
		if depth > MaxDepth {
			d.off = start
			return Value{}, d.fail(ErrTooDeep)
		}
		return d.array(info, arg, depth)
	case majorMap:
		if depth > MaxDepth {
			d.off = start
			return Value{}, d.fail(ErrTooDeep)
		}
		return d.mapValue(info, arg, depth)
	case majorTag:
		d.off = start
		return Value{}, d.fail(ErrUnsupported)
	}
	// major 7
	switch info {
	case infoFalse:
		return Value{t: TypeBool}, nil
	case infoTrue:
		return Value{t: TypeBool, n: 1}, nil
	case infoNull:
		return Value{}, nil
	case infoFloat16, infoFloat32, infoFloat64:
		var f float64
		switch info {
		case infoFloat16:
			f = float16To64(uint16(arg))
		case infoFloat32:
			f = float64(math.Float32frombits(uint32(arg)))
		default:
			f = math.Float64frombits(arg)
		}
		if math.IsNaN(f) || math.IsInf(f, 0) {
			d.off = start
			return Value{}, d.fail(ErrUnsupported)
		}
		return Float(f), nil
	case infoIndefinite:
		d.off = start
		return Value{}, d.fail(ErrMalformed) // a break outside an indefinite container
	}
	d.off = start
	return Value{}, d.fail(ErrUnsupported) // undefined and other simple values
}

// alloc returns n consecutive free Values from the decoder's arena, so a
// decoded tree costs a few allocations rather than one per container. The
// arena grows in chunks sized to the input: every value takes at least one
// input byte, and protocol CBOR averages several bytes per value.
func (d *decoder) alloc(n int) []Value {
	if n > cap(d.arena)-len(d.arena) {
		size := max(n, min((len(d.src)-d.off)/4, 1024), 16)
		d.arena = make([]Value, 0, size)
	}
	i := len(d.arena)
	d.arena = d.arena[:i+n]
	return d.arena[i : i+n : i+n]
}

// growIndefinite moves the items decoded so far into a larger arena slice.
func (d *decoder) growIndefinite(a []Value) []Value {
	b := d.alloc(max(2*len(a), 8))
	copy(b, a)
	return b[:len(a)]
}

func (d *decoder) array(info byte, arg uint64, depth int) (Value, error) {
	var a []Value
	if info == infoIndefinite {
		for {
			done, err := d.atBreak()
			if err != nil {
				return Value{}, err
			}
			if done {
				break
			}
			item, err := d.value(depth + 1)
			if err != nil {
				return Value{}, err
			}
			if len(a) == cap(a) {
				a = d.growIndefinite(a)
			}
			a = append(a, item)
		}
	} else {
		// Every item takes at least one byte, which bounds the allocation
		// by the input left.
		if arg > uint64(len(d.src)-d.off) {
			return Value{}, d.fail(ErrTruncated)
		}
		a = d.alloc(int(arg))
		for i := range a {
			item, err := d.value(depth + 1)
			if err != nil {
				return Value{}, err
			}
			a[i] = item
		}
	}
	return Value{t: TypeArray, a: a}, nil
}

func (d *decoder) mapValue(info byte, arg uint64, depth int) (Value, error) {
	var a []Value
	indefinite := info == infoIndefinite
	if !indefinite {
		if arg > uint64(len(d.src)-d.off)/2 {
			return Value{}, d.fail(ErrTruncated)
		}
		a = d.alloc(2 * int(arg))[:0]
	}
	start := d.off
	for i := uint64(0); indefinite || i < arg; i++ {
		if indefinite {
			done, err := d.atBreak()
			if err != nil {
				return Value{}, err
			}
			if done {
				break
			}
		}
		key, err := d.text()
		if err != nil {
			return Value{}, err
		}
		val, err := d.value(depth + 1)
		if err != nil {
			return Value{}, err
		}
		if len(a)+2 > cap(a) {
			a = d.growIndefinite(a)
		}
		a = append(a, Value{t: TypeText, s: key}, val)
	}
	if err := sortMembers(a); err != nil {
		return Value{}, &DecodeError{Field: d.field, Offset: start, Err: err}
	}
	return Value{t: TypeMap, a: a}, nil
}

// skip checks and steps over one well-formed item of any type (tags and
// simple values included) without building it: the values of top-level keys
// this implementation does not know, which are not signed.
func (d *decoder) skip(depth int) error {
	if err := d.count(); err != nil {
		return err
	}
	start := d.off
	major, info, arg, err := d.head()
	if err != nil {
		return err
	}
	switch major {
	case majorBytes, majorText:
		_, err := d.str(major, info, arg)
		return err
	case majorArray, majorMap:
		if depth > MaxDepth {
			d.off = start
			return d.fail(ErrTooDeep)
		}
		per := uint64(1)
		if major == majorMap {
			per = 2
		}
		if info == infoIndefinite {
			for {
				done, err := d.atBreak()
				if err != nil || done {
					return err
				}
				for range per {
					if err := d.skip(depth + 1); err != nil {
						return err
					}
				}
			}
		}
		if arg > uint64(len(d.src)-d.off)/per {
			return d.fail(ErrTruncated)
		}
		for range arg * per {
			if err := d.skip(depth + 1); err != nil {
				return err
			}
		}
		return nil
	case majorTag:
		if depth > MaxDepth {
			d.off = start
			return d.fail(ErrTooDeep)
		}
		return d.skip(depth + 1)
	case majorSimple:
		if info == infoIndefinite {
			d.off = start
			return d.fail(ErrMalformed)
		}
	}
	return nil
}
