package identity

import (
	"crypto/ed25519"
	"crypto/rand"
	"crypto/sha512"
	"encoding/binary"
	"time"

	"github.com/oasisprotocol/curve25519-voi/curve"
	"github.com/oasisprotocol/curve25519-voi/curve/scalar"
)

// Prepared nonces.
//
// Nearly all of a signature's cost is R = [r]B: the base-point
// multiplication and the inversion that encodes R. Once R is known, what
// the message adds is two SHA-512s and a multiply-add modulo L. RFC 8032
// takes r from the message (deterministic signatures), so R waits for
// the message. A verifier cannot tell how r was chosen: any r that is
// uniform modulo L, secret and used once makes a signature every verifier
// accepts, under the same rules (verify.go).
//
// PrepareNonce makes a nonce before the message comes:
//
//	r = SHA-512(prefix || 32 random bytes || the key's nonce count) mod L
//
// with the key's secret prefix (so r stays secret even if the random
// bytes were known) and a count (so two nonces of one process differ even
// if the random bytes repeated), and encodes R. A node that is about to
// wait for its peer (after its ack went out, or its envelope) prepares
// the nonce of its next signature then, and SignIntoPrepared costs a
// tenth of a signature made the RFC's way, on the envelope's way. Each
// nonce is taken by one signature and wiped.
//
// Under a burst (signInto's batches) nonces are neither prepared nor
// taken: batched signatures cost less each. SignIntoPrepared then signs
// as SignInto does, the same bytes; likewise when no nonce is ready.
//
// A nonce is used within preparedFor of being made, or not at all: a
// process copied whole (a virtual machine's snapshot restored twice, a
// container checkpoint) would otherwise sign two messages with one
// nonce in its two copies, which gives the key away. The copies' clocks
// have moved on by then (a clock that went back counts too); a
// deterministic signature needs no such care.
const (
	preparedNonces = 4
	preparedFor    = 100 * time.Millisecond
)

// preparedClock is the clock nonces are dated by (tests replace it).
var preparedClock = time.Now

// preparedNonce is a nonce r, its encoded R = [r]B and when it was made.
type preparedNonce struct {
	r  scalar.Scalar
	R  [32]byte
	at time.Time
}

// fresh reports whether p may still be used at now: made less than
// preparedFor ago, by the monotonic clock and by the wall clock.
func (p *preparedNonce) fresh(now time.Time) bool {
	mono, wall := now.Sub(p.at), now.Round(0).Sub(p.at.Round(0))
	return mono >= 0 && mono < preparedFor && wall >= 0 && wall < preparedFor
}

// signIntoPrepared is SignIntoPrepared.
func (s *secret) signIntoPrepared(sig *[ed25519.SignatureSize]byte, msg []byte) {
	if sig == nil {
		panic("identity: SignIntoPrepared into a nil signature")
	}
	var p preparedNonce
	ok := false
	if s.alone.Load() >= gatherUntil { // not a burst
		s.pmu.Lock()
		s.dropStaleLocked()
		if s.nPrepared > 0 {
			s.nPrepared--
			p, ok = s.prepared[s.nPrepared], true
			s.prepared[s.nPrepared] = preparedNonce{}
		}
		s.pmu.Unlock()
	}
	if !ok {
		s.signInto(sig, msg)
		return
	}
	copy(sig[:32], p.R[:])
	s.finish(sig, &p.r, msg)
	p.r.Zero()
}

// dropStaleLocked wipes the prepared nonces if the newest is stale (so
// are the others). s.pmu is held.
func (s *secret) dropStaleLocked() {
	if s.nPrepared > 0 && !s.prepared[s.nPrepared-1].fresh(preparedClock()) {
		clear(s.prepared[:s.nPrepared])
		s.nPrepared = 0
	}
}

// prepareNonce is PrepareNonce.
func (s *secret) prepareNonce() bool {
	if s.alone.Load() < gatherUntil {
		return false // a burst
	}
	s.pmu.Lock()
	s.dropStaleLocked()
	full := s.nPrepared == preparedNonces
	s.pmu.Unlock()
	if full {
		return false
	}
	var p preparedNonce
	s.makeNonce(&p)
	s.pmu.Lock()
	made := s.nPrepared < preparedNonces // another goroutine may have filled it
	if made {
		s.prepared[s.nPrepared] = p
		s.nPrepared++
	}
	s.pmu.Unlock()
	p.r.Zero()
	return made
}

// makeNonce sets p to a new nonce and its R.
func (s *secret) makeNonce(p *preparedNonce) {
	var (
		in     [32 + 32 + 8]byte
		digest [sha512.Size]byte
		R      curve.EdwardsPoint
		c      curve.CompressedEdwardsY
	)
	copy(in[:32], s.prefix[:])
	rand.Read(in[32:64]) // never fails (crypto/rand)
	binary.LittleEndian.PutUint64(in[64:], s.nonces.Add(1))
	digest = sha512.Sum512(in[:])
	if _, err := p.r.SetBytesModOrderWide(digest[:]); err != nil {
		panic("identity: " + err.Error()) // only on a length other than 64
	}
	clear(in[:])
	clear(digest[:])
	c.SetEdwardsPoint(R.MulBasepoint(curve.ED25519_BASEPOINT_TABLE, &p.r))
	p.R = c
	p.at = preparedClock()
}
