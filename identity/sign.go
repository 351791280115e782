package identity

import (
	"crypto/ed25519"
	"crypto/sha512"
	"encoding/binary"
	"reflect"
	"runtime"
	"sync"
	"sync/atomic"
	"unsafe"

	"filippo.io/edwards25519/field"
	"github.com/oasisprotocol/curve25519-voi/curve"
	"github.com/oasisprotocol/curve25519-voi/curve/scalar"
)

// Signing.
//
// An Ed25519 signature (RFC 8032) of msg is R || S with r = SHA-512(prefix
// || msg) mod L, R = [r]B encoded, k = SHA-512(R || A || msg) mod L and
// S = r + k·a mod L, where a and prefix come from the seed. Encoding R
// takes one field inversion (about a third of the signature's cost): R is
// computed as (X : Y : Z) and its encoding is Y/Z with the sign of X/Z.
//
// Signatures made at the same time with one key are made together: the
// goroutine that finds nobody signing signs its own envelope and then, as
// one batch, those of the goroutines that came while it did, and hands
// the next batch to one of the goroutines still waiting. A batch inverts
// all its Z at the cost of one inversion and three multiplications each
// (Montgomery's trick). The bytes are exactly those a signature made
// alone has: only the way to the same R changes. Alone, a signature
// costs what it did; under load, about a quarter less.
//
// The (X : Y : Z) of [r]B is read from curve25519-voi's EdwardsPoint, whose
// fields are not exported. batchLayout checks their names, types and
// offsets, and a batch against signatures made alone, once, before the
// first batch (not at init: a process that never batches never pays for
// it); where they are not what this code reads (another version of the
// library, a 32-bit build), every signature is made alone.

// maxSignBatch bounds a batch, and so what one goroutine signs for others
// before it hands the work on.
const maxSignBatch = 32

// secret is what a Keypair keeps behind its pointer: the key, what
// signing derives from it, and the batching of concurrent signatures.
type secret struct {
	key    ed25519.PrivateKey
	a      scalar.Scalar // the secret scalar
	prefix [32]byte      // the nonce's key

	mu      sync.Mutex
	signers int        // goroutines signing a batch, at most GOMAXPROCS
	queue   []*signJob // waiting to be signed, in arrival order
	// alone counts the batches of one signature in a row, up to
	// gatherUntil. Below that, signatures come in bursts, and a goroutine
	// that starts a batch yields first, so that those about to ask join
	// it; signing alone, one never waits for that.
	alone atomic.Int32

	// Nonces made ahead for SignIntoPrepared (prepared.go).
	pmu       sync.Mutex
	prepared  [preparedNonces]preparedNonce
	nPrepared int
	nonces    atomic.Uint64 // nonces made, for makeNonce's count
}

// gatherUntil is how many batches of one in a row end a burst.
const gatherUntil = 16

func newSecret(key ed25519.PrivateKey) *secret {
	h := sha512.Sum512(key.Seed())
	s := &secret{key: key}
	s.alone.Store(gatherUntil) // no burst yet
	// Clamped as RFC 8032 says: the low 3 bits and bit 255 clear, bit
	// 254 set. SetBits fails only on a length other than 32.
	h[0] &= 248
	h[31] &= 127
	h[31] |= 64
	if _, err := s.a.SetBits(h[:32]); err != nil {
		panic("identity: " + err.Error())
	}
	copy(s.prefix[:], h[32:])
	clear(h[:])
	return s
}

// signJob is one signature asked for. Its goroutine waits on wake for
// what became of it.
type signJob struct {
	msg  []byte
	sig  *[ed25519.SignatureSize]byte
	wake chan wakeReason
}

// wakeReason is what a waiting goroutine is woken for.
type wakeReason uint8

const (
	wakeSigned wakeReason = iota // its signature is written
	wakeLead                     // it is to sign the next batch
	wakeFailed                   // signing its batch panicked
)

// testHookBatch, if not nil, is called with the size of every batch.
var testHookBatch func(n int)

var signJobs = sync.Pool{New: func() any { return &signJob{wake: make(chan wakeReason, 1)} }}

// signInto writes the signature of msg into sig, in a batch with those
// asked for meanwhile by other goroutines.
func (s *secret) signInto(sig *[ed25519.SignatureSize]byte, msg []byte) {
	if sig == nil {
		panic("identity: SignInto into a nil signature") // here, not in the goroutine signing the batch
	}
	j := signJobs.Get().(*signJob)
	j.msg, j.sig = msg, sig
	defer func() {
		j.msg, j.sig = nil, nil
		signJobs.Put(j)
	}()
	s.mu.Lock()
	if s.signers > 0 {
		// Another goroutine is signing now: a burst, whose next
		// signatures wait to be batched. Without this a key out of
		// burst mode would stay out whenever each signer has a core of
		// its own: nobody would ever queue.
		s.alone.Store(0)
	}
	if s.signers >= max(1, runtime.GOMAXPROCS(0)) {
		s.queue = append(s.queue, j)
		s.mu.Unlock()
		switch <-j.wake {
		case wakeSigned:
			return
		case wakeFailed:
			panic("identity: signing failed in the goroutine that signed this signature's batch")
		}
		// This goroutine signs the next batch, in the place of the one
		// that woke it (s.signers counts it already).
	} else {
		s.signers++
		s.mu.Unlock()
	}
	if s.alone.Load() < gatherUntil {
		// Signatures come in bursts: goroutines ready to run here that
		// are about to sign too get to ask first, and join this batch.
		runtime.Gosched()
	}
	var batch [maxSignBatch]*signJob
	batch[0] = j
	s.mu.Lock()
	n := 1 + copy(batch[1:], s.queue)
	s.dequeue(n - 1)
	s.mu.Unlock()
	s.lead(batch[:n])
}

// lead signs batch, whose first job is this goroutine's own, wakes the
// others and hands the next batch on, also if signing panics (the others
// then panic too, in their own goroutines, rather than wait for ever).
func (s *secret) lead(batch []*signJob) {
	outcome := wakeFailed
	defer func() {
		for _, o := range batch[1:] {
			o.wake <- outcome
		}
		s.mu.Lock()
		if len(batch) > 1 || len(s.queue) > 0 {
			s.alone.Store(0)
		} else if s.alone.Load() < gatherUntil {
			s.alone.Add(1)
		}
		if len(s.queue) > 0 {
			next := s.queue[0]
			s.dequeue(1)
			next.wake <- wakeLead
		} else {
			s.signers--
		}
		s.mu.Unlock()
	}()
	s.signBatch(batch, len(batch) > 1 && batchLayout())
	outcome = wakeSigned
}

// dequeue removes the first n jobs of s.queue. s.mu is held.
func (s *secret) dequeue(n int) {
	rest := copy(s.queue, s.queue[n:])
	clear(s.queue[rest:])
	s.queue = s.queue[:rest]
}

// signBatch signs each job's message, together (one inversion) if
// together, else each alone.
func (s *secret) signBatch(jobs []*signJob, together bool) {
	if testHookBatch != nil {
		testHookBatch(len(jobs))
	}
	if len(jobs) == 1 || !together {
		for _, j := range jobs {
			s.signAlone(j.sig, j.msg)
		}
		return
	}
	b := scratches.Get().(*batchScratch)
	n := len(jobs)
	defer func() {
		// The nonces are as secret as the key, and the coordinates of
		// [r]B tell of them: nothing of a batch stays in the pool.
		clear(b.r[:n])
		clear(b.p[:n])
		clear(b.x[:n])
		clear(b.y[:n])
		clear(b.z[:n])
		clear(b.acc[:n])
		scratches.Put(b)
	}()
	for i, j := range jobs {
		s.nonce(&b.r[i], j.msg)
		b.p[i].MulBasepoint(curve.ED25519_BASEPOINT_TABLE, &b.r[i])
		c := (*pointLimbs)(unsafe.Pointer(&b.p[i]))
		c.elem(xOffset, &b.x[i])
		c.elem(yOffset, &b.y[i])
		c.elem(zOffset, &b.z[i])
	}
	// Montgomery's trick: b.acc[i] = z[0]·…·z[i-1]; one inversion of the
	// product, then each 1/z[i] from it walking back.
	var run, inv field.Element
	run.One()
	for i := range n {
		b.acc[i].Set(&run)
		run.Multiply(&run, &b.z[i])
	}
	run.Invert(&run)
	for i := n - 1; i >= 0; i-- {
		inv.Multiply(&run, &b.acc[i]) // 1/z[i]
		run.Multiply(&run, &b.z[i])   // 1/(z[0]·…·z[i-1])
		b.x[i].Multiply(&b.x[i], &inv)
		b.y[i].Multiply(&b.y[i], &inv)
		R := jobs[i].sig[:32]
		copy(R, b.y[i].Bytes())
		R[31] |= byte(b.x[i].IsNegative()) << 7
		s.finish(jobs[i].sig, &b.r[i], jobs[i].msg)
	}
}

// signAlone writes the signature of msg into sig, encoding R with an
// inversion of its own.
func (s *secret) signAlone(sig *[ed25519.SignatureSize]byte, msg []byte) {
	var (
		r scalar.Scalar
		R curve.EdwardsPoint
		c curve.CompressedEdwardsY
	)
	s.nonce(&r, msg)
	c.SetEdwardsPoint(R.MulBasepoint(curve.ED25519_BASEPOINT_TABLE, &r))
	copy(sig[:32], c[:])
	s.finish(sig, &r, msg)
	r.Zero()
}

// nonce sets r to SHA-512(prefix || msg) mod L.
func (s *secret) nonce(r *scalar.Scalar, msg []byte) {
	var digest [sha512.Size]byte
	h := sha512.New()
	h.Write(s.prefix[:])
	h.Write(msg)
	h.Sum(digest[:0])
	if _, err := r.SetBytesModOrderWide(digest[:]); err != nil {
		panic("identity: " + err.Error()) // only on a length other than 64
	}
	clear(digest[:])
}

// finish writes S = r + k·a, with k = SHA-512(R || A || msg) mod L and R
// already in sig[:32].
func (s *secret) finish(sig *[ed25519.SignatureSize]byte, r *scalar.Scalar, msg []byte) {
	var (
		digest [sha512.Size]byte
		k      scalar.Scalar
	)
	h := sha512.New()
	h.Write(sig[:32])
	h.Write(s.key[ed25519.SeedSize:])
	h.Write(msg)
	h.Sum(digest[:0])
	if _, err := k.SetBytesModOrderWide(digest[:]); err != nil {
		panic("identity: " + err.Error())
	}
	k.Mul(&k, &s.a)
	k.Add(&k, r)
	if err := k.ToBytes(sig[32:]); err != nil {
		panic("identity: " + err.Error()) // only on a length other than 32
	}
}

var scratches = sync.Pool{New: func() any { return new(batchScratch) }}

// batchScratch is the working space of a batch.
type batchScratch struct {
	r       [maxSignBatch]scalar.Scalar
	p       [maxSignBatch]curve.EdwardsPoint
	x, y, z [maxSignBatch]field.Element
	acc     [maxSignBatch]field.Element
}

// pointLimbs is the memory of a curve.EdwardsPoint, read at the offsets
// batchLayout found.
type pointLimbs [unsafe.Sizeof(curve.EdwardsPoint{})]byte

// elem sets e to the field element whose five 51-bit limbs (possibly
// carrying a few bits over, as the library keeps them between
// operations) start at off.
func (p *pointLimbs) elem(off uintptr, e *field.Element) {
	var l [5]uint64
	for i := range l {
		l[i] = binary.NativeEndian.Uint64(p[off+8*uintptr(i):])
	}
	// Three rounds of carries leave every limb below 2^51 (the value
	// modulo 2^255-19 unchanged: 2^255 ≡ 19).
	const mask = 1<<51 - 1
	for range 3 {
		for i := range 4 {
			l[i+1] += l[i] >> 51
			l[i] &= mask
		}
		c := l[4] >> 51
		l[4] &= mask
		l[0] += 19 * c
	}
	var b [32]byte
	binary.LittleEndian.PutUint64(b[0:], l[0]|l[1]<<51)
	binary.LittleEndian.PutUint64(b[8:], l[1]>>13|l[2]<<38)
	binary.LittleEndian.PutUint64(b[16:], l[2]>>26|l[3]<<25)
	binary.LittleEndian.PutUint64(b[24:], l[3]>>39|l[4]<<12)
	// Below 2^255, so always accepted (a value from 2^255-19 up is
	// taken modulo 2^255-19).
	if _, err := e.SetBytes(b[:]); err != nil {
		panic("identity: " + err.Error())
	}
}

// The offsets of X, Y and Z in a curve.EdwardsPoint, set by findLayout,
// and whether batches may read them there.
var (
	xOffset, yOffset, zOffset uintptr
	batchLayout               = sync.OnceValue(findLayout)
)

// findLayout checks that a curve.EdwardsPoint is, as this code reads it,
// a struct "inner" of field elements X, Y, Z, each a struct whose field
// "inner" is [5]uint64 (the library's 64-bit field, in the machine's byte
// order), records their offsets, and checks a batch against signatures
// made alone.
func findLayout() (ok bool) {
	defer func() {
		if recover() != nil { // the limbs were not what elem reads
			ok = false
		}
	}()
	pt := reflect.TypeFor[curve.EdwardsPoint]()
	inner, ok := pt.FieldByName("inner")
	if !ok || inner.Type.Kind() != reflect.Struct {
		return false
	}
	limbs := reflect.TypeFor[[5]uint64]()
	offset := func(name string) (uintptr, bool) {
		f, ok := inner.Type.FieldByName(name)
		if !ok || f.Type.Kind() != reflect.Struct {
			return 0, false
		}
		l, ok := f.Type.FieldByName("inner")
		if !ok || l.Type != limbs {
			return 0, false
		}
		return inner.Offset + f.Offset + l.Offset, true
	}
	var okX, okY, okZ bool
	xOffset, okX = offset("X")
	yOffset, okY = offset("Y")
	zOffset, okZ = offset("Z")
	if !okX || !okY || !okZ {
		return false
	}
	return batchAgrees()
}

// batchAgrees signs a few messages with a fixed key in one batch and alone
// and reports whether the signatures are the same.
func batchAgrees() bool {
	var seed [ed25519.SeedSize]byte
	for i := range seed {
		seed[i] = byte(i)
	}
	s := newSecret(ed25519.NewKeyFromSeed(seed[:]))
	jobs := make([]*signJob, 3)
	for i := range jobs {
		jobs[i] = &signJob{msg: []byte{byte(i), 'm'}, sig: new([ed25519.SignatureSize]byte)}
	}
	s.signBatch(jobs, true)
	for _, j := range jobs {
		var alone [ed25519.SignatureSize]byte
		s.signAlone(&alone, j.msg)
		if alone != *j.sig || !ed25519.Verify(s.key.Public().(ed25519.PublicKey), j.msg, j.sig[:]) {
			return false
		}
	}
	return true
}
