package wire

import (
	"crypto/ed25519"
	"errors"
	"fmt"
	"sync"

	"github.com/meerkatd/meerkatd/identity"
)

// Limits of the decoder (docs/protocol.md, "Limits").
const (
	// MaxEnvelopeSize is the largest envelope accepted or produced, in
	// bytes: the protocol's maximum frame payload.
	MaxEnvelopeSize = 1 << 20
	// MaxDepth is the deepest nesting of arrays and maps accepted, counting
	// the envelope map itself as level 1 and its kind map as level 2.
	MaxDepth = 128
	// MaxItems is the most values (map keys included) one envelope may
	// hold. With the bound on reserved container slots it limits the
	// memory a decoded envelope takes (24 bytes per value, at most twice
	// MaxItems slots) whatever the input's shape.
	MaxItems = 1 << 17
)

// wireOverhead is how much longer an envelope's frame encoding is than its
// signable bytes: the map head, the five keys and the signature, minus the
// array head. The kind encodes to the same length either way.
const wireOverhead = 86

// Envelope is one signed protocol message. ID is a fresh UUID per envelope;
// From and To are the sender's and recipient's public keys; Sig signs the
// canonical CBOR of [ID, From, To, Kind] (see [Envelope.AppendSignable]).
//
// An Envelope is a plain value: safe to copy and to read concurrently.
type Envelope struct {
	ID   identity.UUID
	From identity.PeerID
	To   identity.PeerID
	Kind Kind
	Sig  [ed25519.SignatureSize]byte
	// AcksHint is the unsigned top-level member "acks": 1. A sender adds
	// it to say that it takes acks kinds (several ids in one signed
	// ack) on the connection the envelope came on. It is not signed:
	// removing it only means one ack per envelope, as for a peer that
	// never sends it. Decode sets it; AppendBinary writes it.
	AcksHint bool
}

// acksHintKey is the top-level key of [Envelope.AcksHint], and
// acksHintVersion its value.
const (
	acksHintKey     = "acks"
	acksHintVersion = 1
)

// scratch holds buffers for signable bytes, so sealing and opening do not
// allocate them each time. Buffers that grew large are not kept.
var scratch = sync.Pool{New: func() any { b := make([]byte, 0, 2048); return &b }}

const maxPooledBuffer = 64 << 10

func getScratch() *[]byte { return scratch.Get().(*[]byte) }

func putScratch(bp *[]byte, b []byte) {
	if cap(b) <= maxPooledBuffer {
		*bp = b[:0]
		scratch.Put(bp)
	}
}

// Seal builds an envelope from kp to to with the given id and kind, and
// signs it. It checks the kind (required fields, JSON params and results,
// valid UTF-8, finite floats, nesting) and the encoded size, so whatever
// Seal returns encodes and decodes.
func Seal(kp *identity.Keypair, id identity.UUID, to identity.PeerID, kind Kind) (Envelope, error) {
	return seal(kp, id, to, kind, false)
}

// SealPrepared is [Seal] signing with [identity.Keypair.SignIntoPrepared]:
// a valid signature, made faster on the caller's way, but not the
// deterministic bytes Seal makes.
func SealPrepared(kp *identity.Keypair, id identity.UUID, to identity.PeerID, kind Kind) (Envelope, error) {
	return seal(kp, id, to, kind, true)
}

func seal(kp *identity.Keypair, id identity.UUID, to identity.PeerID, kind Kind, prepared bool) (Envelope, error) {
	if field, err := checkKind(kind.v, !kind.checked); err != nil {
		if field != "" {
			return Envelope{}, fmt.Errorf("wire: seal: kind.%s: %w", field, err)
		}
		return Envelope{}, fmt.Errorf("wire: seal: kind: %w", err)
	}
	e := Envelope{ID: id, From: kp.ID(), To: to, Kind: kind}
	bp := getScratch()
	buf, err := e.AppendSignable((*bp)[:0])
	if err == nil && len(buf)+wireOverhead > MaxEnvelopeSize {
		err = ErrTooLarge
	}
	if err != nil {
		putScratch(bp, buf)
		return Envelope{}, fmt.Errorf("wire: seal: %w", err)
	}
	if prepared {
		kp.SignIntoPrepared(&e.Sig, buf)
	} else {
		kp.SignInto(&e.Sig, buf)
	}
	putScratch(bp, buf)
	e.Kind.checked = true // the canonical encoding above checked every value
	return e, nil
}

// Open decodes an envelope (see [Decode]) and verifies its signature
// against its From key. It returns a [*DecodeError] for bad bytes and
// [ErrBadSignature] for a signature that does not verify. Open does not
// check To or whether From is trusted: that is the receiver's business.
func Open(payload []byte) (Envelope, error) {
	e, err := Decode(payload)
	if err != nil {
		return Envelope{}, err
	}
	if err := e.Verify(); err != nil {
		return Envelope{}, err
	}
	return e, nil
}

// Verify checks the signature over the envelope's signable bytes. It
// returns nil or [ErrBadSignature].
func (e *Envelope) Verify() error { return e.VerifyWith(nil) }

// VerifyWith is [Envelope.Verify] through v, which keeps the senders'
// keys expanded (nil: no cache). It accepts exactly what Verify accepts.
func (e *Envelope) VerifyWith(v *identity.Verifier) error {
	bp := getScratch()
	buf, err := e.AppendSignable((*bp)[:0])
	var ok bool
	switch {
	case err != nil:
	case v != nil:
		ok = v.Verify(e.From, buf, e.Sig[:])
	default:
		ok = e.From.Verify(buf, e.Sig[:])
	}
	putScratch(bp, buf)
	if !ok {
		return ErrBadSignature
	}
	return nil
}

// VerifyBatchPrefix checks the signatures of envs as one batch, by the
// same rule as [Envelope.Verify] (see package identity, "Signatures"), and
// returns how many, from the first, verified: len(envs) if all did,
// otherwise the index of the first that did not ([identity.Batch.VerifyPrefix]:
// nothing after it is checked). It resets b and adds every envelope's
// signable bytes (computed once, into one reused buffer); an envelope
// whose signable bytes cannot be computed is refused. A single envelope is
// checked on its own, which is cheaper. Reusing one b across calls reuses
// its memory and its cache of senders' keys; b is not safe for concurrent
// use, so neither is VerifyBatchPrefix with a shared b.
func VerifyBatchPrefix(b *identity.Batch, envs []*Envelope) int {
	b.Reset()
	if len(envs) == 1 {
		// A batch of one costs more than checking it alone.
		if envs[0].Verify() != nil {
			return 0
		}
		return 1
	}
	bp := getScratch()
	buf := (*bp)[:0]
	var err error
	for _, e := range envs {
		buf, err = e.AppendSignable(buf[:0])
		if err != nil {
			// An entry that cannot verify, so that b's entries stay in
			// step with envs.
			b.Add(e.From, nil, nil)
			continue
		}
		b.Add(e.From, buf, e.Sig[:])
	}
	putScratch(bp, buf)
	return b.VerifyPrefix()
}

// AppendSignable appends the bytes the signature covers: the canonical CBOR
// of the array [id, from, to, kind], with definite lengths, shortest
// integer and float forms and every map sorted shorter key first, then
// bytewise. There is no prefix or label.
func (e *Envelope) AppendSignable(dst []byte) ([]byte, error) {
	if e.Kind.v.t != TypeMap {
		return dst, ErrType
	}
	dst = append(dst, 0x84)
	dst = appendByteString(dst, e.ID[:])
	dst = appendByteString(dst, e.From[:])
	dst = appendByteString(dst, e.To[:])
	return appendValue(dst, &e.Kind.v, orderCanonical, 2, !e.Kind.checked)
}

// firstFields lists, per known kind type, "type" and then its declared
// fields: the leading members of a kind in the Rust sender's order.
var firstFields = func() map[string][]string {
	m := make(map[string][]string, len(declared))
	for typ, fields := range declared {
		m[typ] = append([]string{"type"}, fields...)
	}
	return m
}()

var typeOnly = []string{"type"}

// AppendBinary appends the envelope's CBOR encoding as the Rust reference
// sends it: a map with keys id, from, to, kind, sig in that order; inside
// kind, "type" first, then the type's declared fields, then any others;
// maps inside fields sorted bytewise. It implements encoding.BinaryAppender.
func (e *Envelope) AppendBinary(dst []byte) ([]byte, error) {
	if e.Kind.v.t != TypeMap {
		return dst, ErrType
	}
	if e.AcksHint {
		dst = append(dst, 0xa6)
	} else {
		dst = append(dst, 0xa5)
	}
	dst = appendText(dst, "id")
	dst = appendByteString(dst, e.ID[:])
	dst = appendText(dst, "from")
	dst = appendByteString(dst, e.From[:])
	dst = appendText(dst, "to")
	dst = appendByteString(dst, e.To[:])
	dst = appendText(dst, "kind")
	first, ok := firstFields[e.Kind.Type()]
	if !ok {
		first = typeOnly
	}
	dst, err := appendMapBytewise(dst, &e.Kind.v, first, 2, !e.Kind.checked)
	if err != nil {
		return dst, err
	}
	dst = appendText(dst, "sig")
	dst = appendByteString(dst, e.Sig[:])
	if e.AcksHint {
		dst = appendText(dst, acksHintKey)
		dst = appendHead(dst, majorUint, acksHintVersion)
	}
	return dst, nil
}

// AppendHinted appends payload, an envelope encoding [Envelope.AppendBinary]
// made without the hint, with [Envelope.AcksHint] added, without decoding
// it. It reports false, appending nothing, if payload is not such an
// encoding or the hint would make it longer than [MaxEnvelopeSize].
func AppendHinted(dst, payload []byte) ([]byte, bool) {
	if len(payload) == 0 || payload[0] != 0xa5 || len(payload)+len(hintSuffix) > MaxEnvelopeSize {
		return dst, false
	}
	dst = append(dst, 0xa6)
	dst = append(dst, payload[1:]...)
	return append(dst, hintSuffix...), true
}

// HintedLen is the length of an n-byte envelope encoding once
// [AppendHinted] added the hint.
func HintedLen(n int) int { return n + len(hintSuffix) }

// hintSuffix is the encoded member of [Envelope.AcksHint].
var hintSuffix = appendHead(appendText(nil, acksHintKey), majorUint, acksHintVersion)

// MarshalBinary returns [Envelope.AppendBinary] into a new slice.
func (e *Envelope) MarshalBinary() ([]byte, error) {
	return e.AppendBinary(make([]byte, 0, 256))
}

// Decode parses an envelope without verifying its signature. It accepts
// members in any order, definite or indefinite lengths, any float width and
// non-shortest integer heads, and ignores top-level keys it does not know
// (they are not signed). It rejects, with a [*DecodeError]: more than
// [MaxEnvelopeSize] bytes, nesting deeper than [MaxDepth], more than
// [MaxItems] values, malformed or truncated CBOR, duplicate keys in the
// envelope map and anywhere in the kind, wrong types or byte lengths,
// missing fields, invalid kinds, items outside the data model, and trailing
// bytes. Values of ignored top-level keys are checked for well-formedness
// only.
//
// The returned envelope does not alias payload.
func Decode(payload []byte) (Envelope, error) { return DecodeFor(payload, nil) }

// ErrNotAccepted is DecodeFor's error for an envelope whose sender and
// recipient its accept function refused.
var ErrNotAccepted = errors.New("wire: sender or recipient not accepted")

// DecodeFor is [Decode] for a receiver that takes envelopes only from some
// senders to some recipients: once from and to are read, on reaching the
// next key (the kind, whose decoding and checks are by far the largest
// part of the work for a kind of many members, or a key outside the
// protocol, whose duplicates cost a set to find), accept is asked about
// them. If it refuses, DecodeFor returns ErrNotAccepted with an envelope
// that has only From, To and, if it was read before accept was asked (as
// in the canonical and the reference's key order, where it comes first),
// ID set (its kind is not read; the payload is well-formed CBOR up to
// the end of what was read). Keys outside the protocol are stepped over,
// and checked for duplicates once the map is through and accept agreed.
// A nil accept accepts all. The kind is decoded once either way: when it
// comes after from and to, accept is asked on reaching it; when it comes
// before them, it is stepped over (its items counted, nothing built) and
// decoded once accept has agreed.
func DecodeFor(payload []byte, accept func(from, to identity.PeerID) bool) (Envelope, error) {
	if len(payload) > MaxEnvelopeSize {
		return Envelope{}, &DecodeError{Err: ErrTooLarge}
	}
	d := decoder{src: string(payload)}
	var e Envelope
	if err := d.envelope(&e, accept); err != nil {
		if errors.Is(err, ErrNotAccepted) {
			return Envelope{ID: e.ID, From: e.From, To: e.To}, err
		}
		return Envelope{}, err
	}
	return e, nil
}

// Top-level fields, as bits of a seen-set.
const (
	hasID = 1 << iota
	hasFrom
	hasTo
	hasKind
	hasSig
	hasAll = hasID | hasFrom | hasTo | hasKind | hasSig
)

var fieldBits = []struct {
	name string
	bit  uint8
}{{"id", hasID}, {"from", hasFrom}, {"to", hasTo}, {"kind", hasKind}, {"sig", hasSig}}

// fieldBit is the bit of a top-level key, 0 for a key outside the
// protocol.
func fieldBit(key string) uint8 {
	for _, f := range fieldBits {
		if f.name == key {
			return f.bit
		}
	}
	return 0
}

// envelope decodes the envelope map into e, asking accept (nil: accept
// all) about its route before its kind is decoded (DecodeFor).
func (d *decoder) envelope(e *Envelope, accept func(from, to identity.PeerID) bool) error {
	if err := d.count(); err != nil {
		return err
	}
	major, info, arg, err := d.head()
	if err != nil {
		return err
	}
	if major != majorMap {
		d.off = 0
		return d.fail(ErrType)
	}
	indefinite := info == infoIndefinite
	if !indefinite && arg > uint64(len(d.src)-d.off)/2 {
		return d.fail(ErrTruncated)
	}
	mapAt := d.off // the first key
	var seen uint8
	kindLater, kindItems := -1, 0 // where a kind stepped over starts, and its items
	// Keys outside the protocol are stepped over and counted; two or more
	// are read again once the map is through, for duplicates
	// (unknownTwice): never for a sender accept refuses, wherever it puts
	// them, and never for the one hint a meerkatd sender adds.
	unknown := 0
	// asked: accept has agreed to from and to. It is asked once both are
	// read, on reaching the kind or a key outside the protocol, so that
	// neither a large kind nor many unknown keys cost a refused sender
	// more than stepping over bytes.
	asked := accept == nil
	ask := func() bool {
		if !asked && seen&(hasFrom|hasTo) == hasFrom|hasTo {
			if !accept(e.From, e.To) {
				return false
			}
			asked = true
		}
		return true
	}
	for i := uint64(0); indefinite || i < arg; i++ {
		d.field = ""
		key, keyAt, done, err := d.mapKey(indefinite)
		if err != nil {
			return err
		}
		if done {
			break
		}
		bit := fieldBit(key)
		if bit == 0 {
			if !ask() {
				return ErrNotAccepted
			}
			if key == acksHintKey {
				// Version 1: the unsigned integer, in any length of
				// head (as everywhere on input); anything else is a
				// hint this node does not know. The value is read
				// again below, as any unknown key's.
				at := d.off
				major, _, arg, err := d.head()
				e.AcksHint = err == nil && major == majorUint && arg == acksHintVersion
				d.off = at
			}
			unknown++
			if err := d.skip(2); err != nil {
				return err
			}
			continue
		}
		d.field = key
		if seen&bit != 0 {
			return &DecodeError{Field: key, Offset: keyAt, Err: ErrDuplicateKey}
		}
		seen |= bit
		switch bit {
		case hasID:
			err = d.fixedBytes(e.ID[:])
		case hasFrom:
			err = d.fixedBytes(e.From[:])
		case hasTo:
			err = d.fixedBytes(e.To[:])
		case hasSig:
			err = d.fixedBytes(e.Sig[:])
		case hasKind:
			if !ask() {
				return ErrNotAccepted
			}
			switch {
			case asked:
				err = d.kind(&e.Kind)
			default: // from or to still to come: step over it for now
				kindAt, items := d.off, d.items
				err = d.skip(2)
				kindLater, kindItems = kindAt, d.items-items
			}
		}
		if err != nil {
			return err
		}
	}
	d.field = ""
	if seen != hasAll {
		for _, f := range fieldBits {
			if seen&f.bit == 0 {
				return &DecodeError{Field: f.name, Offset: d.off, Err: ErrMissingField}
			}
		}
	}
	if d.off != len(d.src) {
		return d.fail(ErrTrailingBytes)
	}
	if kindLater >= 0 {
		if !ask() {
			return ErrNotAccepted
		}
		// Counted once: the items the step over counted are counted
		// again as they are decoded.
		d.off, d.items, d.field = kindLater, d.items-kindItems, "kind"
		if err := d.kind(&e.Kind); err != nil {
			return err
		}
		d.off, d.field = len(d.src), ""
	}
	if unknown > 1 {
		if !ask() {
			return ErrNotAccepted
		}
		return d.unknownTwice(mapAt, arg, indefinite)
	}
	return nil
}

// mapKey reads the next key of the envelope map, where it starts, or
// done at the break of an indefinite-length map.
func (d *decoder) mapKey(indefinite bool) (key string, at int, done bool, err error) {
	if indefinite {
		if done, err = d.atBreak(); err != nil || done {
			return "", 0, done, err
		}
	}
	at = d.off
	key, err = d.text()
	return key, at, false, err
}

// unknownTwice reads again the keys of the envelope map whose first key
// is at at (arg entries, or up to its break if indefinite), which was
// decoded whole already, and reports a key outside the protocol given
// twice (in a set: many keys cost linear time). It leaves the decoder
// where it was.
func (d *decoder) unknownTwice(at int, arg uint64, indefinite bool) error {
	off, items := d.off, d.items
	defer func() { d.off, d.items, d.field = off, items, "" }()
	d.off, d.items = at, 0 // counted once already: not against MaxItems again
	seen := map[string]struct{}{}
	for i := uint64(0); indefinite || i < arg; i++ {
		key, keyAt, done, err := d.mapKey(indefinite)
		if err != nil {
			return err
		}
		if done {
			break
		}
		if fieldBit(key) == 0 {
			if _, dup := seen[key]; dup {
				return &DecodeError{Offset: keyAt, Err: ErrDuplicateKey}
			}
			seen[key] = struct{}{}
		}
		if err := d.skip(2); err != nil {
			return err
		}
	}
	return nil
}

// fixedBytes reads a byte string that must be exactly len(dst) long.
func (d *decoder) fixedBytes(dst []byte) error {
	if err := d.count(); err != nil {
		return err
	}
	start := d.off
	major, info, arg, err := d.head()
	if err != nil {
		return err
	}
	if major != majorBytes {
		d.off = start
		return d.fail(ErrType)
	}
	s, err := d.str(major, info, arg)
	if err != nil {
		return err
	}
	if len(s) != len(dst) {
		d.off = start
		return d.fail(ErrLength)
	}
	copy(dst, s)
	return nil
}

// kind reads and checks the kind map.
func (d *decoder) kind(k *Kind) error {
	start := d.off
	v, err := d.value(2)
	if err != nil {
		return err
	}
	if v.t != TypeMap {
		d.off = start
		return d.fail(ErrType)
	}
	if field, err := checkKind(v, d.nestedBytes); err != nil {
		return &DecodeError{Field: "kind." + field, Offset: start, Err: err}
	}
	*k = Kind{v: v, checked: true}
	return nil
}
