package identity

import (
	"crypto/ed25519"
	"fmt"
	"testing"
	"time"

	"github.com/hdevalence/ed25519consensus"
	voi "github.com/oasisprotocol/curve25519-voi/primitives/ed25519"
)

// The benchmarks below compare the Ed25519 implementations this package
// could use, on signing inputs of the size an envelope's signable bytes
// usually have. BenchmarkEd25519Ratios is the one the choice rests on: it
// runs all candidates in alternating blocks of one loop, so a noisy
// neighbour slows them alike, and reports µs per signature and ratios to
// crypto/ed25519. Take medians over several runs:
//
//	go test -run '^$' -bench Ed25519Ratios -count 8 ./identity/
//
// The other benchmarks measure each candidate on its own (with allocation
// counts); BenchmarkEd25519Batch reports ns/sig, the cost of one signature
// inside a batch of n (adding it and the batch's share of the check).

const benchMsgSize = 150

type benchEntry struct {
	priv ed25519.PrivateKey
	pub  ed25519.PublicKey
	exp  *voi.ExpandedPublicKey
	msg  []byte
	sig  []byte
}

// benchEntriesOneKey returns n entries with distinct messages signed by
// one key, as the envelopes of one connection are.
func benchEntriesOneKey(tb testing.TB, n int) []benchEntry {
	tb.Helper()
	es := benchEntries(tb, n)
	for i := range es {
		es[i].priv, es[i].pub, es[i].exp = es[0].priv, es[0].pub, es[0].exp
		es[i].sig = ed25519.Sign(es[0].priv, es[i].msg)
	}
	return es
}

// benchEntries returns n entries with distinct keys and messages, signed.
func benchEntries(tb testing.TB, n int) []benchEntry {
	tb.Helper()
	es := make([]benchEntry, n)
	for i := range es {
		seed := make([]byte, ed25519.SeedSize)
		seed[0], seed[1] = byte(i), byte(i>>8)
		seed[31] = 0x5a
		priv := ed25519.NewKeyFromSeed(seed)
		msg := make([]byte, benchMsgSize)
		for j := range msg {
			msg[j] = byte(i*7 + j)
		}
		exp, err := voi.NewExpandedPublicKey(voi.PublicKey(priv[32:]))
		if err != nil {
			tb.Fatal(err)
		}
		es[i] = benchEntry{priv: priv, pub: ed25519.PublicKey(priv[32:]), exp: exp, msg: msg, sig: ed25519.Sign(priv, msg)}
	}
	return es
}

func BenchmarkEd25519Sign(b *testing.B) {
	e := benchEntries(b, 1)[0]
	vpriv := voi.PrivateKey(e.priv)
	b.Run("stdlib", func(b *testing.B) {
		for b.Loop() {
			ed25519.Sign(e.priv, e.msg)
		}
	})
	b.Run("voi", func(b *testing.B) {
		for b.Loop() {
			voi.Sign(vpriv, e.msg)
		}
	})
	// This package's signer, as wire.Seal calls it.
	kp, err := KeypairFromSeed(e.priv.Seed())
	if err != nil {
		b.Fatal(err)
	}
	b.Run("identity", func(b *testing.B) {
		var sig [ed25519.SignatureSize]byte
		for b.Loop() {
			kp.SignInto(&sig, e.msg)
		}
	})
	// Many goroutines signing at once, as a pipelined link's senders
	// do: each alone with voi, and batched by identity (ns/op is per
	// signature with all cores busy).
	b.Run("voi-concurrent", func(b *testing.B) {
		b.SetParallelism(64)
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				voi.Sign(vpriv, e.msg)
			}
		})
	})
	b.Run("identity-concurrent", func(b *testing.B) {
		b.SetParallelism(64)
		b.RunParallel(func(pb *testing.PB) {
			var sig [ed25519.SignatureSize]byte
			for pb.Next() {
				kp.SignInto(&sig, e.msg)
			}
		})
	})
	// One batch of 16, per signature.
	b.Run("batch-16", func(b *testing.B) {
		s := kp.secret()
		jobs := make([]*signJob, 16)
		for i := range jobs {
			jobs[i] = &signJob{msg: e.msg, sig: new([ed25519.SignatureSize]byte)}
		}
		for b.Loop() {
			s.signBatch(jobs, batchLayout())
		}
		b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(16*b.N), "ns/sig")
	})
}

func BenchmarkEd25519Verify(b *testing.B) {
	e := benchEntries(b, 1)[0]
	check := func(b *testing.B, ok bool) {
		if !ok {
			b.Fatal("signature does not verify")
		}
	}
	zip215 := &voi.Options{Verify: voi.VerifyOptionsZIP_215}
	b.Run("stdlib", func(b *testing.B) {
		for b.Loop() {
			check(b, ed25519.Verify(e.pub, e.msg, e.sig))
		}
	})
	b.Run("voi", func(b *testing.B) {
		for b.Loop() {
			check(b, voi.VerifyWithOptions(voi.PublicKey(e.pub), e.msg, e.sig, zip215))
		}
	})
	b.Run("voi-expanded", func(b *testing.B) {
		for b.Loop() {
			check(b, voi.VerifyExpandedWithOptions(e.exp, e.msg, e.sig, zip215))
		}
	})
	b.Run("consensus", func(b *testing.B) {
		for b.Loop() {
			check(b, ed25519consensus.Verify(e.pub, e.msg, e.sig))
		}
	})
	b.Run("identity", func(b *testing.B) {
		id := PeerID(e.pub)
		for b.Loop() {
			check(b, id.Verify(e.msg, e.sig))
		}
	})
	// The cost of expanding one key, paid once per peer with a cache.
	b.Run("voi-expand-key", func(b *testing.B) {
		for b.Loop() {
			if _, err := voi.NewExpandedPublicKey(voi.PublicKey(e.pub)); err != nil {
				b.Fatal(err)
			}
		}
	})
}

var batchSizes = []int{1, 4, 16, 64, 128}

func BenchmarkEd25519Batch(b *testing.B) {
	es := benchEntries(b, batchSizes[len(batchSizes)-1])
	oneKey := benchEntriesOneKey(b, batchSizes[len(batchSizes)-1])
	zip215 := &voi.Options{Verify: voi.VerifyOptionsZIP_215}
	perSig := func(b *testing.B, n int) {
		b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*n), "ns/sig")
	}
	for _, n := range batchSizes {
		b.Run(fmt.Sprintf("voi/n=%d", n), func(b *testing.B) {
			v := voi.NewBatchVerifierWithCapacity(n)
			for b.Loop() {
				v.Reset()
				for _, e := range es[:n] {
					v.AddWithOptions(voi.PublicKey(e.pub), e.msg, e.sig, zip215)
				}
				if !v.VerifyBatchOnly(nil) {
					b.Fatal("batch does not verify")
				}
			}
			perSig(b, n)
		})
		// The library's batch and this package's (reused, its key cache
		// warm), on entries by distinct keys and by one key.
		for _, keys := range []struct {
			name string
			es   []benchEntry
		}{{"", es}, {"-onekey", oneKey}} {
			b.Run(fmt.Sprintf("voi-expanded%s/n=%d", keys.name, n), func(b *testing.B) {
				v := voi.NewBatchVerifierWithCapacity(n)
				for b.Loop() {
					v.Reset()
					for _, e := range keys.es[:n] {
						v.AddExpandedWithOptions(e.exp, e.msg, e.sig, verifyOptions)
					}
					if !v.VerifyBatchOnly(nil) {
						b.Fatal("batch does not verify")
					}
				}
				perSig(b, n)
			})
			b.Run(fmt.Sprintf("identity%s/n=%d", keys.name, n), func(b *testing.B) {
				var bv Batch
				ok := make([]bool, n)
				for b.Loop() {
					bv.Reset()
					for _, e := range keys.es[:n] {
						bv.Add(PeerID(e.pub), e.msg, e.sig)
					}
					if !bv.Verify(ok) {
						b.Fatal("batch does not verify")
					}
				}
				perSig(b, n)
			})
		}
		b.Run(fmt.Sprintf("consensus/n=%d", n), func(b *testing.B) {
			for b.Loop() {
				// The library has no Reset: a batch is made per use.
				v := ed25519consensus.NewPreallocatedBatchVerifier(n)
				for _, e := range es[:n] {
					v.Add(e.pub, e.msg, e.sig)
				}
				if !v.Verify() {
					b.Fatal("batch does not verify")
				}
			}
			perSig(b, n)
		})
	}
}

// BenchmarkEd25519Ratios runs the candidates in alternating blocks inside
// one loop, so that a noisy machine slows them alike, and reports each one's
// µs per signature and its ratio to crypto/ed25519 (sign to sign, verify and
// batch to single verify). These ratios are what the choice of library
// rests on.
func BenchmarkEd25519Ratios(b *testing.B) {
	const block = 8
	es := benchEntries(b, batchSizes[len(batchSizes)-1])
	oneKey := benchEntriesOneKey(b, batchSizes[len(batchSizes)-1])
	e := es[0]
	zip215 := &voi.Options{Verify: voi.VerifyOptionsZIP_215}
	kp, err := KeypairFromSeed(e.priv.Seed())
	if err != nil {
		b.Fatal(err)
	}
	report := func(b *testing.B, perOp float64, names []string, ts []time.Duration) {
		for i, name := range names {
			b.ReportMetric(float64(ts[i])/1e3/perOp, "µs/"+name)
			if i > 0 {
				b.ReportMetric(float64(ts[i])/float64(ts[0]), name+"/"+names[0])
			}
		}
	}
	// timeAll runs each candidate block times in turn, adding up its time.
	timeAll := func(ts []time.Duration, fs ...func()) {
		for i, f := range fs {
			t0 := time.Now()
			for range block {
				f()
			}
			ts[i] += time.Since(t0)
		}
	}
	b.Run("sign", func(b *testing.B) {
		var sig [ed25519.SignatureSize]byte
		vpriv := voi.PrivateKey(e.priv)
		ts := make([]time.Duration, 3)
		n := 0
		for b.Loop() {
			timeAll(ts,
				func() { ed25519.Sign(e.priv, e.msg) },
				func() { voi.Sign(vpriv, e.msg) },
				func() { kp.SignInto(&sig, e.msg) })
			n += block
		}
		report(b, float64(n), []string{"stdlib", "voi", "identity"}, ts)
	})
	b.Run("verify", func(b *testing.B) {
		id := PeerID(e.pub)
		ts := make([]time.Duration, 5)
		n := 0
		for b.Loop() {
			timeAll(ts,
				func() { ed25519.Verify(e.pub, e.msg, e.sig) },
				func() { voi.VerifyWithOptions(voi.PublicKey(e.pub), e.msg, e.sig, zip215) },
				func() { voi.VerifyExpandedWithOptions(e.exp, e.msg, e.sig, zip215) },
				func() { ed25519consensus.Verify(e.pub, e.msg, e.sig) },
				func() { id.Verify(e.msg, e.sig) })
			n += block
		}
		report(b, float64(n), []string{"stdlib", "voi", "voi_expanded", "consensus", "identity"}, ts)
	})
	for _, size := range batchSizes {
		b.Run(fmt.Sprintf("batch/n=%d", size), func(b *testing.B) {
			v := voi.NewBatchVerifierWithCapacity(size)
			var bv Batch
			ok := make([]bool, size)
			ts := make([]time.Duration, 6)
			n := 0
			for b.Loop() {
				timeAll(ts,
					func() {
						for _, e := range es[:size] {
							ed25519.Verify(e.pub, e.msg, e.sig)
						}
					},
					func() {
						v.Reset()
						for _, e := range es[:size] {
							v.AddWithOptions(voi.PublicKey(e.pub), e.msg, e.sig, zip215)
						}
						v.VerifyBatchOnly(nil)
					},
					func() {
						v.Reset()
						for _, e := range es[:size] {
							v.AddExpandedWithOptions(e.exp, e.msg, e.sig, zip215)
						}
						v.VerifyBatchOnly(nil)
					},
					func() {
						c := ed25519consensus.NewPreallocatedBatchVerifier(size)
						for _, e := range es[:size] {
							c.Add(e.pub, e.msg, e.sig)
						}
						c.Verify()
					},
					func() {
						bv.Reset()
						for _, e := range es[:size] {
							bv.Add(PeerID(e.pub), e.msg, e.sig)
						}
						bv.Verify(ok)
					},
					// One signer, as on one connection: the terms of
					// its key are summed into one.
					func() {
						bv.Reset()
						for _, e := range oneKey[:size] {
							bv.Add(PeerID(e.pub), e.msg, e.sig)
						}
						bv.Verify(ok)
					})
				n += block * size
			}
			report(b, float64(n), []string{"stdlib_single", "voi", "voi_expanded", "consensus", "identity", "identity_one_key"}, ts)
		})
	}
}
