package wire

import (
	"crypto/ed25519"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/meerkatd/meerkatd/identity"
)

// benchCase is one envelope shape the benchmarks measure.
type benchCase struct {
	name string
	kind Kind
}

func benchCases(tb testing.TB) []benchCase {
	// About 1 KB of request params: a realistic mix of text, numbers and
	// nesting.
	var params strings.Builder
	params.WriteString(`{"repo":"meerkatd","pr":4217,"files":[`)
	for i := range 12 {
		if i > 0 {
			params.WriteByte(',')
		}
		fmt.Fprintf(&params, `{"path":"comms/wire/file%02d.go","added":%d,"removed":%d,"score":%g}`, i, i*7, i*3, float64(i)/8)
	}
	params.WriteString(`],"draft":false}`)
	req := mustJSON(tb, params.String())
	return []benchCase{
		{"message100", Message(strings.Repeat("m", 100))},
		{"request1k", Request("review-pr", req)},
		{"ack", Ack(id2)},
	}
}

func sealed(tb testing.TB, c benchCase) (Envelope, []byte, []byte) {
	e, err := Seal(keyA, id1, keyB.ID(), c.kind)
	if err != nil {
		tb.Fatal(err)
	}
	payload, err := e.MarshalBinary()
	if err != nil {
		tb.Fatal(err)
	}
	signable, err := e.AppendSignable(nil)
	if err != nil {
		tb.Fatal(err)
	}
	return e, payload, signable
}

// BenchmarkSeal measures Seal: check the kind, build the signable bytes,
// sign. Encoding the frame is in BenchmarkCodec and BenchmarkExchange.
func BenchmarkSeal(b *testing.B) {
	for _, c := range benchCases(b) {
		b.Run(c.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, err := Seal(keyA, id1, keyB.ID(), c.kind); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkOpen measures a receiver's cost: decode and verify.
func BenchmarkOpen(b *testing.B) {
	for _, c := range benchCases(b) {
		_, payload, _ := sealed(b, c)
		b.Run(c.name, func(b *testing.B) {
			b.ReportAllocs()
			b.SetBytes(int64(len(payload)))
			for b.Loop() {
				if _, err := Open(payload); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkCodec measures encoding and decoding without cryptography:
// the wire encoding, the canonical signable bytes, and a decode.
func BenchmarkCodec(b *testing.B) {
	for _, c := range benchCases(b) {
		e, payload, _ := sealed(b, c)
		b.Run(c.name, func(b *testing.B) {
			buf := make([]byte, 0, 4096)
			b.ReportAllocs()
			b.SetBytes(int64(len(payload)))
			for b.Loop() {
				var err error
				if buf, err = e.AppendBinary(buf[:0]); err != nil {
					b.Fatal(err)
				}
				if buf, err = e.AppendSignable(buf[:0]); err != nil {
					b.Fatal(err)
				}
				if _, err = Decode(payload); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkSign and BenchmarkVerify are the anchors: ed25519 alone on the
// real signing input of each case.
func BenchmarkSign(b *testing.B) {
	priv := ed25519.NewKeyFromSeed(keyA.Seed())
	for _, c := range benchCases(b) {
		_, _, signable := sealed(b, c)
		b.Run(c.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				ed25519.Sign(priv, signable)
			}
		})
	}
}

func BenchmarkVerify(b *testing.B) {
	for _, c := range benchCases(b) {
		e, _, signable := sealed(b, c)
		b.Run(c.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if !ed25519.Verify(e.From[:], signable, e.Sig[:]) {
					b.Fatal("does not verify")
				}
			}
		})
	}
}

// exchange is one delivered message: the sender seals it, the receiver
// opens it and seals an ack, the sender opens the ack.
func exchange(tb testing.TB, msg Kind, buf []byte) []byte {
	e, err := Seal(keyA, identity.NewUUID(), keyB.ID(), msg)
	if err != nil {
		tb.Fatal(err)
	}
	if buf, err = e.AppendBinary(buf[:0]); err != nil {
		tb.Fatal(err)
	}
	got, err := Open(buf)
	if err != nil {
		tb.Fatal(err)
	}
	ack, err := Seal(keyB, identity.NewUUID(), got.From, Ack(got.ID))
	if err != nil {
		tb.Fatal(err)
	}
	if buf, err = ack.AppendBinary(buf[:0]); err != nil {
		tb.Fatal(err)
	}
	if _, err := Open(buf); err != nil {
		tb.Fatal(err)
	}
	return buf
}

// BenchmarkExchange measures a full exchange of a 100-byte message.
func BenchmarkExchange(b *testing.B) {
	msg := Message(strings.Repeat("m", 100))
	buf := make([]byte, 0, 4096)
	b.ReportAllocs()
	for b.Loop() {
		buf = exchange(b, msg, buf)
	}
}

// BenchmarkRatios measures each operation against its cryptographic anchor
// in alternating blocks within one run, so machine noise hits both sides
// alike, and reports the ratios the performance targets are stated in:
// seal/sign, open/verify, and exchange/(2 sign + 2 verify). seal+encode/sign
// adds the frame encoding a sender also pays.
func BenchmarkRatios(b *testing.B) {
	const block = 32
	priv := ed25519.NewKeyFromSeed(keyA.Seed())
	for _, c := range benchCases(b) {
		e, payload, signable := sealed(b, c)
		b.Run(c.name, func(b *testing.B) {
			var tSeal, tEncode, tSign, tOpen, tVerify time.Duration
			buf := make([]byte, 0, 4096)
			for i := 0; i < b.N; i += block {
				t0 := time.Now()
				for range block {
					Seal(keyA, id1, keyB.ID(), c.kind)
				}
				tE := time.Now()
				for range block {
					buf, _ = e.AppendBinary(buf[:0])
				}
				tEncode += time.Since(tE)
				t1 := time.Now()
				for range block {
					ed25519.Sign(priv, signable)
				}
				t2 := time.Now()
				for range block {
					if _, err := Open(payload); err != nil {
						b.Fatal(err)
					}
				}
				t3 := time.Now()
				for range block {
					ed25519.Verify(e.From[:], signable, e.Sig[:])
				}
				t4 := time.Now()
				tSeal, tSign, tOpen, tVerify = tSeal+tE.Sub(t0), tSign+t2.Sub(t1), tOpen+t3.Sub(t2), tVerify+t4.Sub(t3)
			}
			b.ReportMetric(float64(tSeal)/float64(tSign), "seal/sign")
			b.ReportMetric(float64(tSeal+tEncode)/float64(tSign), "seal+encode/sign")
			b.ReportMetric(float64(tOpen)/float64(tVerify), "open/verify")
		})
	}
	b.Run("exchange", func(b *testing.B) {
		msg := Message(strings.Repeat("m", 100))
		_, _, signable := sealed(b, benchCase{"m", msg})
		ack, _ := Seal(keyB, id2, keyA.ID(), Ack(id1))
		ackSignable, _ := ack.AppendSignable(nil)
		sig := ed25519.Sign(priv, signable)
		ackSig := ed25519.Sign(ed25519.NewKeyFromSeed(keyB.Seed()), ackSignable)
		pubA, pubB := keyA.ID(), keyB.ID()
		var tX, tCrypto time.Duration
		buf := make([]byte, 0, 4096)
		for i := 0; i < b.N; i += block {
			t0 := time.Now()
			for range block {
				buf = exchange(b, msg, buf)
			}
			t1 := time.Now()
			for range block {
				ed25519.Sign(priv, signable)
				ed25519.Verify(pubA[:], signable, sig)
				ed25519.Sign(priv, ackSignable)
				ed25519.Verify(pubB[:], ackSignable, ackSig)
			}
			tX, tCrypto = tX+t1.Sub(t0), tCrypto+time.Since(t1)
		}
		b.ReportMetric(float64(tX)/float64(tCrypto), "exchange/crypto")
	})
}

// BenchmarkDecodeStranger measures what an envelope built to be costly to
// decode (a kind whose params hold 60,000 members of mixed lengths in no
// order, about 600 KB) costs a receiver: decoded whole, and refused by DecodeFor for
// its sender before the kind is decoded, with the kind in canonical place
// (after from and to) and before them (stepped over).
func BenchmarkDecodeStranger(b *testing.B) {
	const members = 60000
	var items [][]byte
	for i := members - 1; i >= 0; i-- {
		// Keys of mixed lengths in no order (a multiplicative hash of i).
		items = append(items, tx(fmt.Sprintf("k%d", uint32(i)*2654435761%1000003)), un(1))
	}
	params := cat(appendHead(nil, majorMap, members), cat(items...))
	kind := mapOf(tx("type"), tx("request"), tx("intent"), tx("x"), tx("params"), params)
	e := Envelope{ID: id1, From: keyA.ID(), To: keyB.ID()}
	refuse := func(identity.PeerID, identity.PeerID) bool { return false }
	for _, c := range []struct {
		name   string
		order  []string
		accept func(identity.PeerID, identity.PeerID) bool
	}{
		{"decoded", []string{"id", "to", "sig", "from", "kind"}, nil},
		{"refused", []string{"id", "to", "sig", "from", "kind"}, refuse},
		{"refused-kind-first", []string{"kind", "id", "to", "sig", "from"}, refuse},
	} {
		in := envBytes(e, kind, c.order...)
		b.Run(c.name, func(b *testing.B) {
			b.SetBytes(int64(len(in)))
			b.ReportAllocs()
			for b.Loop() {
				if _, err := DecodeFor(in, c.accept); (err != nil) != (c.accept != nil) {
					b.Fatal(err)
				}
			}
		})
	}
}
