package wire

import (
	"bytes"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"os"
	"strings"
	"testing"

	"github.com/meerkatd/meerkatd/identity"
)

// vectorFile is the spec's test-vector file, copied unchanged from the
// project's shared vectors. Spec vectors are never regenerated.
const vectorFile = "../../testdata/vectors/meerkat-wire.json"

type vectorKey struct {
	Seed         string `json:"seed"`
	Public       string `json:"public"`
	PubkeyString string `json:"pubkey_string"`
	PeerUUID     string `json:"peer_uuid"`
}

type vectors struct {
	Keys     map[string]vectorKey `json:"keys"`
	PeerUUID struct {
		Namespace string `json:"namespace"`
		Cases     []struct {
			Public       string `json:"public"`
			PeerUUID     string `json:"peer_uuid"`
			PubkeyString string `json:"pubkey_string"`
		} `json:"cases"`
	} `json:"peer_uuid"`
	Pinned []struct {
		Name          string          `json:"name"`
		ID            string          `json:"id"`
		From          string          `json:"from"`
		To            string          `json:"to"`
		Kind          json.RawMessage `json:"kind"`
		Signable      string          `json:"signable"`
		JSON          json.RawMessage `json:"json"`
		CanonicalCBOR string          `json:"canonical_cbor"`
	} `json:"pinned"`
	Derived []struct {
		Name            string          `json:"name"`
		FromKey         string          `json:"from_key"`
		ToKey           string          `json:"to_key"`
		ID              string          `json:"id"`
		Kind            json.RawMessage `json:"kind"`
		Signable        string          `json:"signable"`
		Sig             string          `json:"sig"`
		Frame           string          `json:"frame"`
		ParamsCanonical string          `json:"params_canonical"`
		ParamsWire      string          `json:"params_wire"`
	} `json:"derived"`
}

func loadVectors(t testing.TB) *vectors {
	t.Helper()
	b, err := os.ReadFile(vectorFile)
	if err != nil {
		t.Fatal(err)
	}
	var v vectors
	if err := json.Unmarshal(b, &v); err != nil {
		t.Fatal(err)
	}
	if len(v.Pinned) != 3 || len(v.Derived) != 5 {
		t.Fatalf("vector file has %d pinned and %d derived vectors, want 3 and 5", len(v.Pinned), len(v.Derived))
	}
	return &v
}

func unhex(t testing.TB, s string) []byte {
	t.Helper()
	b, err := hex.DecodeString(s)
	if err != nil {
		t.Fatalf("bad hex in vectors: %v", err)
	}
	return b
}

// vectorKind turns a vector's JSON kind into a Kind. In the vectors a text
// "uuid:<uuid>" stands for that UUID as a 16-byte byte string.
func vectorKind(t testing.TB, raw json.RawMessage) Kind {
	t.Helper()
	v, err := ParseJSON(raw)
	if err != nil {
		t.Fatal(err)
	}
	k, err := NewKind(uuidify(t, v))
	if err != nil {
		t.Fatal(err)
	}
	return k
}

func uuidify(t testing.TB, v Value) Value {
	switch v.Type() {
	case TypeText:
		s, _ := v.Text()
		if rest, ok := strings.CutPrefix(s, "uuid:"); ok {
			u, err := identity.ParseUUID(rest)
			if err != nil {
				t.Fatal(err)
			}
			return Bytes(u[:])
		}
	case TypeMap:
		var members []Member
		for i := range v.Len() {
			m := v.Member(i)
			members = append(members, Member{m.Key, uuidify(t, m.Value)})
		}
		out, err := Map(members...)
		if err != nil {
			t.Fatal(err)
		}
		return out
	}
	return v
}

func mustUUID(t testing.TB, s string) identity.UUID {
	t.Helper()
	u, err := identity.ParseUUID(s)
	if err != nil {
		t.Fatal(err)
	}
	return u
}

func vectorKeypair(t testing.TB, k vectorKey) *identity.Keypair {
	t.Helper()
	kp, err := identity.KeypairFromSeed(unhex(t, k.Seed))
	if err != nil {
		t.Fatal(err)
	}
	return kp
}

func frameOf(payload []byte) []byte {
	return append(binary.BigEndian.AppendUint32(nil, uint32(len(payload))), payload...)
}

func envelopesEqual(a, b Envelope) bool {
	return a.ID == b.ID && a.From == b.From && a.To == b.To && a.Sig == b.Sig && a.AcksHint == b.AcksHint && a.Kind.Value().Equal(b.Kind.Value())
}

func TestVectorsPinnedSignable(t *testing.T) {
	vs := loadVectors(t)
	for _, v := range vs.Pinned {
		t.Run(v.Name, func(t *testing.T) {
			if v.JSON != nil {
				val, err := ParseJSON(v.JSON)
				if err != nil {
					t.Fatal(err)
				}
				got, err := val.AppendCanonical(nil)
				if err != nil {
					t.Fatal(err)
				}
				if want := unhex(t, v.CanonicalCBOR); !bytes.Equal(got, want) {
					t.Fatalf("canonical CBOR\n got %x\nwant %x", got, want)
				}
				return
			}
			e := Envelope{ID: mustUUID(t, v.ID), Kind: vectorKind(t, v.Kind)}
			copy(e.From[:], unhex(t, v.From))
			copy(e.To[:], unhex(t, v.To))
			got, err := e.AppendSignable(nil)
			if err != nil {
				t.Fatal(err)
			}
			if want := unhex(t, v.Signable); !bytes.Equal(got, want) {
				t.Fatalf("signable\n got %x\nwant %x", got, want)
			}
		})
	}
}

func TestVectorsDerived(t *testing.T) {
	vs := loadVectors(t)
	for _, v := range vs.Derived {
		t.Run(v.Name, func(t *testing.T) {
			from := vectorKeypair(t, vs.Keys[v.FromKey])
			to := vectorKeypair(t, vs.Keys[v.ToKey]).ID()
			e, err := Seal(from, mustUUID(t, v.ID), to, vectorKind(t, v.Kind))
			if err != nil {
				t.Fatal(err)
			}
			signable, err := e.AppendSignable(nil)
			if err != nil {
				t.Fatal(err)
			}
			if want := unhex(t, v.Signable); !bytes.Equal(signable, want) {
				t.Fatalf("signable\n got %x\nwant %x", signable, want)
			}
			if want := unhex(t, v.Sig); !bytes.Equal(e.Sig[:], want) {
				t.Fatalf("signature\n got %x\nwant %x", e.Sig, want)
			}
			if err := e.Verify(); err != nil {
				t.Fatalf("Verify: %v", err)
			}
			payload, err := e.MarshalBinary()
			if err != nil {
				t.Fatal(err)
			}
			if len(payload)-len(signable) != wireOverhead {
				t.Errorf("frame is %d bytes longer than signable bytes, wireOverhead says %d", len(payload)-len(signable), wireOverhead)
			}
			if v.Frame != "" {
				want := unhex(t, v.Frame)
				if got := frameOf(payload); !bytes.Equal(got, want) {
					t.Fatalf("frame\n got %x\nwant %x", got, want)
				}
				opened, err := Open(want[4:])
				if err != nil {
					t.Fatalf("Open(vector frame): %v", err)
				}
				if !envelopesEqual(opened, e) {
					t.Fatalf("Open(vector frame) = %+v, want %+v", opened, e)
				}
			}
			if v.ParamsCanonical != "" {
				params := e.Kind.Params()
				got, err := params.AppendCanonical(nil)
				if err != nil {
					t.Fatal(err)
				}
				if want := unhex(t, v.ParamsCanonical); !bytes.Equal(got, want) {
					t.Errorf("params canonical\n got %x\nwant %x", got, want)
				}
				got, err = appendValue(nil, &params, orderBytewise, 1, true)
				if err != nil {
					t.Fatal(err)
				}
				if want := unhex(t, v.ParamsWire); !bytes.Equal(got, want) {
					t.Errorf("params wire order\n got %x\nwant %x", got, want)
				}
				if !bytes.Contains(payload, unhex(t, v.ParamsWire)) {
					t.Errorf("frame %x does not carry params in wire order", payload)
				}
			}
		})
	}
}

func TestVectorsKeys(t *testing.T) {
	vs := loadVectors(t)
	check := func(t *testing.T, public, keyString, peerUUID string) {
		id, err := identity.PeerIDFromBytes(unhex(t, public))
		if err != nil {
			t.Fatal(err)
		}
		if got := id.String(); got != keyString {
			t.Errorf("key string %s, want %s", got, keyString)
		}
		if got := id.UUID().String(); got != peerUUID {
			t.Errorf("peer UUID %s, want %s", got, peerUUID)
		}
		parsed, err := identity.ParsePeerID(keyString)
		if err != nil || parsed != id {
			t.Errorf("ParsePeerID(%s) = %v, %v", keyString, parsed, err)
		}
	}
	for name, k := range vs.Keys {
		t.Run("key "+name, func(t *testing.T) {
			check(t, k.Public, k.PubkeyString, k.PeerUUID)
			if id := vectorKeypair(t, k).ID(); !bytes.Equal(id[:], unhex(t, k.Public)) {
				t.Errorf("seed gives public key %x, want %s", id, k.Public)
			}
		})
	}
	for _, c := range vs.PeerUUID.Cases {
		t.Run("uuid "+c.PeerUUID, func(t *testing.T) { check(t, c.Public, c.PubkeyString, c.PeerUUID) })
	}
}
