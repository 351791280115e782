package wire

import (
	"bytes"
	"encoding/hex"
	"testing"

	"github.com/meerkatd/meerkatd/identity"
)

// A tiny CBOR builder for hand-made test inputs. It writes shortest heads
// and definite lengths unless told otherwise; tests that need odd encodings
// splice raw bytes in with h().

func h(s string) []byte {
	b, err := hex.DecodeString(s)
	if err != nil {
		panic("bad hex in test: " + s)
	}
	return b
}

func cat(parts ...[]byte) []byte { return bytes.Join(parts, nil) }

func tx(s string) []byte { return appendText(nil, s) }
func bs(b []byte) []byte { return appendByteString(nil, b) }
func un(n uint64) []byte { return appendHead(nil, majorUint, n) }
func fill(n int) []byte  { return bytes.Repeat([]byte{0x42}, n) }
func mapOf(pairs ...[]byte) []byte {
	return cat(appendHead(nil, majorMap, uint64(len(pairs)/2)), cat(pairs...))
}
func arrOf(items ...[]byte) []byte {
	return cat(appendHead(nil, majorArray, uint64(len(items))), cat(items...))
}

// Keys and ids used across tests: the RFC 8032 test keys of the vectors.
var (
	keyA = mustKeypair("9d61b19deffd5a60ba844af492ec2cc44449c5697b326919703bac031cae7f60")
	keyB = mustKeypair("4ccd089b28ff96da9db6c346ec114e0f5b8a319f35aba624da8cf6ed4fb8a6fb")
	id1  = identity.UUID{0x55, 0x0e, 0x84, 0x00, 0xe2, 0x9b, 0x41, 0xd4, 0xa7, 0x16, 0x44, 0x66, 0x55, 0x44, 0x00, 0x00}
	id2  = identity.UUID{0x01, 0x8f, 0x6f, 0x79, 0x7a, 0x82, 0x7c, 0x4e, 0xa5, 0x52, 0xa3, 0xb8, 0x6f, 0x96, 0x30, 0xf1}
)

func mustKeypair(seed string) *identity.Keypair {
	kp, err := identity.KeypairFromSeed(h(seed))
	if err != nil {
		panic(err)
	}
	return kp
}

// envBytes builds an envelope map from the given kind bytes and the ids and
// keys of e, in the given key order (nil: id, from, to, kind, sig).
func envBytes(e Envelope, kind []byte, order ...string) []byte {
	if order == nil {
		order = []string{"id", "from", "to", "kind", "sig"}
	}
	fields := map[string][]byte{
		"id": bs(e.ID[:]), "from": bs(e.From[:]), "to": bs(e.To[:]), "kind": kind, "sig": bs(e.Sig[:]),
	}
	var pairs [][]byte
	for _, k := range order {
		pairs = append(pairs, tx(k), fields[k])
	}
	return mapOf(pairs...)
}

func mustSeal(t testing.TB, kind Kind) Envelope {
	t.Helper()
	e, err := Seal(keyA, id1, keyB.ID(), kind)
	if err != nil {
		t.Fatal(err)
	}
	return e
}

func mustJSON(t testing.TB, s string) Value {
	t.Helper()
	v, err := ParseJSON([]byte(s))
	if err != nil {
		t.Fatal(err)
	}
	return v
}

func mustMarshal(t testing.TB, e Envelope) []byte {
	t.Helper()
	b, err := e.MarshalBinary()
	if err != nil {
		t.Fatal(err)
	}
	return b
}
