package identity

import (
	"bytes"
	"crypto/ed25519"
	"encoding/binary"
	"fmt"
	"math/big"
	"math/rand/v2"
	"runtime"
	"slices"
	"sync"
	"testing"
	"time"

	"filippo.io/edwards25519/field"
)

// On the architectures where curve25519-voi uses its 64-bit field, batches
// must be in use: a library upgrade that moves the coordinates turns them
// off silently otherwise.
func TestBatchLayout(t *testing.T) {
	switch runtime.GOARCH {
	case "amd64", "arm64", "ppc64le", "ppc64", "s390x":
		if !batchLayout() {
			t.Fatal("signatures are not batched: curve.EdwardsPoint is not laid out as sign.go reads it")
		}
	default:
		t.Logf("GOARCH %s: batched signing is %v", runtime.GOARCH, batchLayout())
	}
}

// A batch's signatures (where batches are in use) are byte for byte
// crypto/ed25519's, for batches of
// every size, messages of many lengths (empty, one byte, the sizes around
// SHA-512's blocks, large) and several keys.
func TestSignBatchMatchesRFC8032(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	lengths := []int{0, 1, 55, 56, 63, 64, 111, 112, 127, 128, 129, 300, 4096}
	for k := range 6 {
		var seed [ed25519.SeedSize]byte
		for i := range seed {
			seed[i] = byte(rng.Uint32())
		}
		if k == 0 {
			seed = [ed25519.SeedSize]byte{} // the all-zero seed too
		}
		priv := ed25519.NewKeyFromSeed(seed[:])
		s := newSecret(priv)
		for n := 1; n <= maxSignBatch; n++ {
			jobs := make([]*signJob, n)
			for i := range jobs {
				msg := make([]byte, lengths[(i+n)%len(lengths)])
				for j := range msg {
					msg[j] = byte(rng.Uint32())
				}
				jobs[i] = &signJob{msg: msg, sig: new([ed25519.SignatureSize]byte)}
			}
			for _, together := range []bool{batchLayout(), false} {
				s.signBatch(jobs, together)
				for i, j := range jobs {
					if want := ed25519.Sign(priv, j.msg); !bytes.Equal(j.sig[:], want) {
						t.Fatalf("key %d, batch of %d (together %v), entry %d (%d bytes): %x, want %x", k, n, together, i, len(j.msg), j.sig[:], want)
					}
					*j.sig = [ed25519.SignatureSize]byte{}
				}
			}
		}
	}
}

// Goroutines that ask for signatures while one is signing are signed in
// one batch by one of them, and each gets its own signature.
func TestWaitingSignaturesAreOneBatch(t *testing.T) {
	const waiters = 10
	kp := mustKeypair(t)
	var (
		mu    sync.Mutex
		sizes []int
	)
	testHookBatch = func(n int) { mu.Lock(); sizes = append(sizes, n); mu.Unlock() }
	defer func() { testHookBatch = nil }()
	sigs := make([][ed25519.SignatureSize]byte, waiters)
	release, _ := queueWaiters(t, kp, waiters, func(i int) { kp.SignInto(&sigs[i], fmt.Appendf(nil, "message %d", i)) })
	release()
	if !slices.Equal(sizes, []int{waiters}) {
		t.Fatalf("batches %v, want one of %d", sizes, waiters)
	}
	for i := range sigs {
		if want := ed25519.Sign(kp.key(), fmt.Appendf(nil, "message %d", i)); !bytes.Equal(sigs[i][:], want) {
			t.Fatalf("signature %d is %x, want %x", i, sigs[i], want)
		}
	}
	s := kp.secret()
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.signers != 0 || len(s.queue) != 0 {
		t.Fatalf("after the batch: signers %d, %d queued", s.signers, len(s.queue))
	}
}

// More waiting than a batch holds: each batch is at most maxSignBatch, the
// work is handed on until nobody waits, and every signature is right.
func TestSignaturesUnderLoad(t *testing.T) {
	const goroutines, each = 3 * maxSignBatch, 20
	kp := mustKeypair(t)
	var (
		mu      sync.Mutex
		largest int
	)
	testHookBatch = func(n int) { mu.Lock(); largest = max(largest, n); mu.Unlock() }
	defer func() { testHookBatch = nil }()
	var wg sync.WaitGroup
	errs := make(chan string, goroutines)
	for g := range goroutines {
		wg.Go(func() {
			for i := range each {
				msg := fmt.Appendf(nil, "goroutine %d message %d", g, i)
				if got, want := kp.Sign(msg), ed25519.Sign(kp.key(), msg); !bytes.Equal(got, want) {
					errs <- fmt.Sprintf("%q: %x, want %x", msg, got, want)
					return
				}
			}
		})
	}
	waitOrFail(t, &wg)
	close(errs)
	for e := range errs {
		t.Error(e)
	}
	if largest > maxSignBatch {
		t.Errorf("a batch of %d, above %d", largest, maxSignBatch)
	}
	s := kp.secret()
	if s.signers != 0 || len(s.queue) != 0 {
		t.Fatalf("after the load: signers %d, %d queued", s.signers, len(s.queue))
	}
}

// A signature asked for while another is being signed starts a burst:
// the key leaves the mode in which a lone signer never waits for others
// to join it. Without that a key stays out of it for good whenever each
// signer has a core of its own (two signers on two cores never queue).
func TestOverlappingSignerStartsABurst(t *testing.T) {
	kp := mustKeypair(t)
	s := kp.secret()
	if s.alone.Load() < gatherUntil {
		t.Fatalf("a new key in burst mode (%d batches of one)", s.alone.Load())
	}
	var sig [ed25519.SignatureSize]byte
	kp.SignInto(&sig, []byte("alone"))
	if s.alone.Load() < gatherUntil {
		t.Fatalf("a lone signature started a burst (%d)", s.alone.Load())
	}
	s.mu.Lock()
	s.signers++ // the test stands in for a goroutine signing now
	s.mu.Unlock()
	kp.SignInto(&sig, []byte("while another signs"))
	s.mu.Lock()
	s.signers--
	s.mu.Unlock()
	if got := s.alone.Load(); got >= gatherUntil {
		t.Fatalf("a signature asked for while another was signed left the key out of burst mode (%d)", got)
	}
	if want := ed25519.Sign(kp.key(), []byte("while another signs")); !bytes.Equal(sig[:], want) {
		t.Fatalf("signature %x, want %x", sig, want)
	}
}

// queueWaiters has waiters goroutines ask kp for signatures while every
// signer is taken (the test stands in for them), and returns once all
// wait. release hands the next batch to the first of them and, once it
// is over, gives back the places the test took.
func queueWaiters(t *testing.T, kp *Keypair, waiters int, sign func(i int)) (release func(), wg *sync.WaitGroup) {
	t.Helper()
	s := kp.secret()
	s.mu.Lock()
	s.signers = runtime.GOMAXPROCS(0)
	s.mu.Unlock()
	wg = new(sync.WaitGroup)
	for i := range waiters {
		wg.Go(func() { sign(i) })
	}
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(time.Millisecond) {
		s.mu.Lock()
		queued := len(s.queue)
		s.mu.Unlock()
		if queued == waiters {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d goroutines waiting after 10s", queued, waiters)
		}
	}
	return func() {
		s.mu.Lock()
		next := s.queue[0]
		s.dequeue(1)
		next.wake <- wakeLead
		s.mu.Unlock()
		waitOrFail(t, wg)
		s.mu.Lock()
		s.signers -= runtime.GOMAXPROCS(0) - 1
		s.mu.Unlock()
	}, wg
}

// waitOrFail waits for wg, failing the test (not hanging it) after 10s.
func waitOrFail(t *testing.T, wg *sync.WaitGroup) {
	t.Helper()
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("goroutines still signing after 10s")
	}
}

// A batch whose signing panics leaves nobody waiting: every goroutine of
// the batch panics in its own goroutine, the signer's place is given
// back, and signing works afterwards.
func TestSigningPanicStrandsNobody(t *testing.T) {
	const waiters = 5
	kp := mustKeypair(t)
	testHookBatch = func(n int) {
		if n > 1 {
			panic("test: signing fails")
		}
	}
	defer func() { testHookBatch = nil }()
	panics := make([]any, waiters)
	var sigs [waiters][ed25519.SignatureSize]byte
	release, _ := queueWaiters(t, kp, waiters, func(i int) {
		defer func() { panics[i] = recover() }()
		kp.SignInto(&sigs[i], []byte{byte(i)})
	})
	release()
	for i, p := range panics {
		if p == nil {
			t.Errorf("goroutine %d returned from a batch that failed, with signature %x", i, sigs[i])
		}
	}
	s := kp.secret()
	if s.signers != 0 || len(s.queue) != 0 {
		t.Fatalf("after the failed batch: signers %d, %d queued", s.signers, len(s.queue))
	}
	testHookBatch = nil
	if got, want := kp.Sign([]byte("after")), ed25519.Sign(kp.key(), []byte("after")); !bytes.Equal(got, want) {
		t.Fatalf("signing after the failure: %x, want %x", got, want)
	}
}

// A nil signature panics in the goroutine that passed it, before it
// joins any batch.
func TestSignIntoNilPanicsInCaller(t *testing.T) {
	kp := mustKeypair(t)
	func() {
		defer func() {
			if recover() == nil {
				t.Error("SignInto(nil) did not panic")
			}
		}()
		kp.SignInto(nil, []byte("m"))
	}()
	if s := kp.secret(); s.signers != 0 || len(s.queue) != 0 {
		t.Fatalf("after SignInto(nil): signers %d, %d queued", s.signers, len(s.queue))
	}
}

func mustKeypair(t *testing.T) *Keypair {
	t.Helper()
	kp, err := GenerateKeypair()
	if err != nil {
		t.Fatal(err)
	}
	return kp
}

// fieldP is 2^255 - 19.
var fieldP = new(big.Int).Sub(new(big.Int).Lsh(big.NewInt(1), 255), big.NewInt(19))

// limbValue is Σ l[i]·2^(51·i) mod p.
func limbValue(l [5]uint64) *big.Int {
	v := new(big.Int)
	for i := 4; i >= 0; i-- {
		v.Lsh(v, 51)
		v.Add(v, new(big.Int).SetUint64(l[i]))
	}
	return v.Mod(v, fieldP)
}

// elemValue is e's value, from its canonical little-endian bytes.
func elemValue(e *field.Element) *big.Int {
	b := e.Bytes()
	slices.Reverse(b)
	return new(big.Int).SetBytes(b)
}

// checkElem reads limbs l as pointLimbs.elem does and compares the value
// with limbValue.
func checkElem(t *testing.T, l [5]uint64) {
	t.Helper()
	var p pointLimbs
	for i, v := range l {
		binary.NativeEndian.PutUint64(p[8*i:], v)
	}
	var e field.Element
	p.elem(0, &e)
	if got, want := elemValue(&e), limbValue(l); got.Cmp(want) != 0 {
		t.Fatalf("limbs %#x: %v, want %v", l, got, want)
	}
}

// The limbs of a field element, reduced or carrying bits over, are read as
// the value they stand for.
func TestElemFromLimbs(t *testing.T) {
	const m51, m54 = 1<<51 - 1, 1<<54 - 1
	for _, l := range [][5]uint64{
		{},
		{1},
		{m51, m51, m51, m51, m51},      // 2^255 - 1
		{m51 - 18, m51, m51, m51, m51}, // p itself: 0
		{m51 - 19, m51, m51, m51, m51}, // p - 1
		{m51 - 17, m51, m51, m51, m51}, // p + 1
		{m54, m54, m54, m54, m54},      // every limb carrying 3 bits
		{m54, 0, 0, 0, m54},            // carries that wrap around twice
		{1 << 51, 1 << 51, 1 << 51, 1 << 51, 1 << 51},
		{19, 0, 0, 0, 1 << 51},
	} {
		checkElem(t, l)
	}
}

// Limbs up to 2^62 each (well above what curve25519-voi leaves between
// operations) are read as the value they stand for.
func FuzzElemFromLimbs(f *testing.F) {
	f.Add(uint64(0), uint64(0), uint64(0), uint64(0), uint64(0))
	f.Add(uint64(1<<51-19), uint64(1<<51-1), uint64(1<<51-1), uint64(1<<51-1), uint64(1<<51-1))
	f.Add(uint64(1<<54-1), uint64(1<<54-1), uint64(1<<54-1), uint64(1<<54-1), uint64(1<<54-1))
	f.Fuzz(func(t *testing.T, a, b, c, d, e uint64) {
		const m62 = 1<<62 - 1
		checkElem(t, [5]uint64{a & m62, b & m62, c & m62, d & m62, e & m62})
	})
}

// A batch of any messages under any seed signs as crypto/ed25519 does.
func FuzzSignBatch(f *testing.F) {
	f.Add(make([]byte, 32), []byte("a\x00bc\x00"))
	f.Add([]byte("0123456789abcdef0123456789abcdef"), []byte{})
	f.Fuzz(func(t *testing.T, seed, msgs []byte) {
		if len(seed) != ed25519.SeedSize {
			return
		}
		priv := ed25519.NewKeyFromSeed(seed)
		s := newSecret(priv)
		var jobs []*signJob
		for m := range bytes.SplitSeq(msgs, []byte{0}) {
			if len(jobs) == maxSignBatch {
				break
			}
			jobs = append(jobs, &signJob{msg: m, sig: new([ed25519.SignatureSize]byte)})
		}
		s.signBatch(jobs, batchLayout())
		for i, j := range jobs {
			if want := ed25519.Sign(priv, j.msg); !bytes.Equal(j.sig[:], want) {
				t.Fatalf("entry %d (%q): %x, want %x", i, j.msg, j.sig[:], want)
			}
		}
	})
}
