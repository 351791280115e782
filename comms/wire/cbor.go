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

// float16To64 widens half-precision bits to a float64 exactly.
func float16To64(h uint16) float64 {
	sign := uint64(h&0x8000) << 48
	exp := uint64(h>>10) & 0x1f
	mant := uint64(h & 0x3ff)
	switch exp {
	case 0: // zero or subnormal: mant × 2^-24
		return math.Copysign(float64(mant)/(1<<24), math.Float64frombits(sign|1))
	case 0x1f:
		if mant == 0 {
			return math.Float64frombits(sign | 0x7ff<<52)
		}
		return math.NaN()
	}
	return math.Float64frombits(sign | (exp+1023-15)<<52 | mant<<42)
}

// validText reports whether s is valid UTF-8. ASCII, by far the common
// case, is confirmed eight bytes at a time without a call; only strings
// with non-ASCII bytes go to the full check.
func validText(s string) bool {
	for len(s) >= 8 {
		w := uint64(s[0]) | uint64(s[1])<<8 | uint64(s[2])<<16 | uint64(s[3])<<24 |
			uint64(s[4])<<32 | uint64(s[5])<<40 | uint64(s[6])<<48 | uint64(s[7])<<56
		if w&0x8080808080808080 != 0 {
			return utf8.ValidString(s)
		}
		s = s[8:]
	}
	for i := 0; i < len(s); i++ {
		if s[i] >= utf8.RuneSelf {
			return utf8.ValidString(s)
		}
	}
	return true
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
// have; the encoder refuses what the decoder would refuse. With check false
// it trusts that texts are UTF-8 and floats finite: for trees that came from
// the decoder or passed a checked encoding before.
func appendValue(dst []byte, v *Value, ord mapOrder, depth int, check bool) ([]byte, error) {
	switch v.t {
	case TypeNull:
		return append(dst, 0xf6), nil
	case TypeBool:
		return append(dst, 0xf4+byte(v.n&1)), nil
	case TypeInt:
		if v.neg {
			return appendHead(dst, majorNegInt, v.n), nil
		}
		return appendHead(dst, majorUint, v.n), nil
	case TypeFloat:
		f := math.Float64frombits(v.n)
		if check && (math.IsNaN(f) || math.IsInf(f, 0)) {
			return dst, ErrUnsupported
		}
		return appendFloat(dst, f), nil
	case TypeText:
		s := v.str()
		if check && !validText(s) {
			return dst, ErrInvalidUTF8
		}
		return appendText(dst, s), nil
	case TypeBytes:
		s := v.str()
		return append(appendHead(dst, majorBytes, uint64(len(s))), s...), nil
	case TypeArray:
		if depth > MaxDepth {
			return dst, ErrTooDeep
		}
		a := v.items()
		dst = appendHead(dst, majorArray, uint64(len(a)))
		var err error
		for i := range a {
			if dst, err = appendValue(dst, &a[i], ord, depth+1, check); err != nil {
				return dst, err
			}
		}
		return dst, nil
	case TypeMap:
		if depth > MaxDepth {
			return dst, ErrTooDeep
		}
		if ord == orderBytewise {
			return appendMapBytewise(dst, v, nil, depth, check)
		}
		a := v.items()
		dst = appendHead(dst, majorMap, uint64(len(a)/2))
		var err error
		for i := 0; i < len(a); i += 2 {
			key := a[i].str()
			if check && !validText(key) {
				return dst, ErrInvalidUTF8
			}
			dst = appendText(dst, key)
			if dst, err = appendValue(dst, &a[i+1], ord, depth+1, check); err != nil {
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
func appendMapBytewise(dst []byte, v *Value, first []string, depth int, check bool) ([]byte, error) {
	a := v.items()
	n := len(a) / 2
	// The member order as pair indexes. Small maps sort on the stack; the
	// protocol's maps are small.
	var small [32]int32
	var idx []int32
	if n <= len(small) {
		idx = small[:0]
	} else {
		idx = make([]int32, 0, n)
	}
	for _, name := range first {
		for i := 0; i < n; i++ {
			if a[2*i].str() == name {
				idx = append(idx, int32(i))
				break
			}
		}
	}
	lead := len(idx)
	for i := 0; i < n; i++ {
		if lead == 0 || !slices.Contains(first, a[2*i].str()) {
			idx = append(idx, int32(i))
		}
	}
	rest := idx[lead:]
	if len(rest) <= len(small) {
		for i := 1; i < len(rest); i++ {
			for j := i; j > 0 && a[2*rest[j-1]].str() > a[2*rest[j]].str(); j-- {
				rest[j-1], rest[j] = rest[j], rest[j-1]
			}
		}
	} else {
		slices.SortFunc(rest, func(x, y int32) int { return strings.Compare(a[2*x].str(), a[2*y].str()) })
	}
	dst = appendHead(dst, majorMap, uint64(n))
	var err error
	for _, i := range idx {
		key := a[2*i].str()
		if check && !validText(key) {
			return dst, ErrInvalidUTF8
		}
		dst = appendText(dst, key)
		if dst, err = appendValue(dst, &a[2*i+1], orderBytewise, depth+1, check); err != nil {
			return dst, err
		}
	}
	return dst, nil
}

// ---- decoding ----

// decoder reads one CBOR item tree from src. Strings in the result are
// substrings of src, so decoding a whole envelope copies the input once.
type decoder struct {
	src      string
	off      int
	items    int     // values and keys seen, bounded by MaxItems
	field    string  // where we are, for errors
	arena    []Value // free space for container items; see alloc
	reserved int     // arena slots handed out, bounded by 2*MaxItems

	nestedBytes bool // a byte string was seen below a kind member
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
	if info < 24 {
		return major, info, uint64(info), nil
	}
	var n int
	switch {
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
		if major == majorText && !validText(s) {
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
			// Bytes nested inside a kind member: params and results
			// must then be checked for them (see checkKind).
			d.nestedBytes = d.nestedBytes || depth > 3
		}
		return strValue(t, s), nil
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
//
// Containers reserve their slots when their head is read, before their
// items arrive, so the declared sizes of nested containers could together
// claim far more than the input holds. The total reserved is therefore
// bounded: honest input fills every reserved slot with one of at most
// MaxItems values, and indefinite containers at most double that.
func (d *decoder) alloc(n int) ([]Value, error) {
	d.reserved += n
	if d.reserved > 2*MaxItems {
		return nil, d.fail(ErrTooManyItems)
	}
	if n > cap(d.arena)-len(d.arena) {
		size := max(n, min((len(d.src)-d.off)/6, 1024), 16)
		d.arena = make([]Value, 0, size)
	}
	i := len(d.arena)
	d.arena = d.arena[:i+n]
	return d.arena[i : i+n : i+n], nil
}

// growIndefinite moves the items decoded so far into a larger arena slice.
func (d *decoder) growIndefinite(a []Value) ([]Value, error) {
	b, err := d.alloc(max(2*len(a), 8))
	if err != nil {
		return nil, err
	}
	copy(b, a)
	return b[:len(a)], nil
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
				if a, err = d.growIndefinite(a); err != nil {
					return Value{}, err
				}
			}
			a = append(a, item)
		}
	} else {
		// Every item takes at least one byte, which bounds the allocation
		// by the input left.
		if arg > uint64(len(d.src)-d.off) {
			return Value{}, d.fail(ErrTruncated)
		}
		var err error
		if a, err = d.alloc(int(arg)); err != nil {
			return Value{}, err
		}
		for i := range a {
			item, err := d.value(depth + 1)
			if err != nil {
				return Value{}, err
			}
			a[i] = item
		}
	}
	return itemsValue(TypeArray, a), nil
}

func (d *decoder) mapValue(info byte, arg uint64, depth int) (Value, error) {
	var a []Value
	indefinite := info == infoIndefinite
	if !indefinite {
		if arg > uint64(len(d.src)-d.off)/2 {
			return Value{}, d.fail(ErrTruncated)
		}
		var err error
		if a, err = d.alloc(2 * int(arg)); err != nil {
			return Value{}, err
		}
		a = a[:0]
	}
	start := d.off
	if !indefinite && arg <= smallMap {
		return d.smallMap(int(arg), depth, a[:2*arg], start)
	}
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
			if a, err = d.growIndefinite(a); err != nil {
				return Value{}, err
			}
		}
		a = append(a, strValue(TypeText, key), val)
	}
	if err := sortMembers(a); err != nil {
		return Value{}, &DecodeError{Field: d.field, Offset: start, Err: err}
	}
	return itemsValue(TypeMap, a), nil
}

// smallMap is the largest map decoded through stack buffers.
const smallMap = 8

// smallMap decodes a definite map of n ≤ smallMap members into buffers on
// the stack, orders the members by a permutation of their keys and writes
// each into dst (its arena slots) once, in canonical order: sorting in the
// arena itself would move every value several times, each move paying a
// GC write barrier while a collection runs.
func (d *decoder) smallMap(n, depth int, dst []Value, start int) (Value, error) {
	var (
		keys  [smallMap]string
		vals  [smallMap]Value
		order [smallMap]uint8
	)
	for i := 0; i < n; i++ {
		key, err := d.text()
		if err != nil {
			return Value{}, err
		}
		keys[i] = key
		if vals[i], err = d.value(depth + 1); err != nil {
			return Value{}, err
		}
		order[i] = uint8(i)
		for j := i; j > 0 && compareKeys(keys[order[j-1]], key) > 0; j-- {
			order[j-1], order[j] = order[j], order[j-1]
		}
	}
	for k := 1; k < n; k++ {
		if keys[order[k-1]] == keys[order[k]] {
			return Value{}, &DecodeError{Field: d.field, Offset: start, Err: ErrDuplicateKey}
		}
	}
	for k := 0; k < n; k++ {
		o := order[k]
		dst[2*k] = strValue(TypeText, keys[o])
		dst[2*k+1] = vals[o]
	}
	return itemsValue(TypeMap, dst), nil
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
