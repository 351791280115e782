package node

import (
	"testing"

	"github.com/meerkatd/meerkatd/comms"
	"github.com/meerkatd/meerkatd/comms/wire"
	"github.com/meerkatd/meerkatd/identity"
)

// The memory inbox counts what an item holds in memory: a payload of
// 131,000 one-byte integers decodes into 24 bytes each, and counts so,
// not as its 131 KB on the wire.
func TestMemSizeCountsTheDecodedTree(t *testing.T) {
	kp, err := identity.GenerateKeypair()
	if err != nil {
		t.Fatal(err)
	}
	zeros := make([]wire.Value, 131000)
	for i := range zeros {
		zeros[i] = wire.Int(0)
	}
	e, err := wire.Seal(kp, identity.NewUUID(), kp.ID(), wire.Request("x", wire.Array(zeros...)))
	if err != nil {
		t.Fatal(err)
	}
	b, err := e.MarshalBinary()
	if err != nil {
		t.Fatal(err)
	}
	d, err := wire.Decode(b)
	if err != nil {
		t.Fatal(err)
	}
	if n := memSize(comms.Item{Envelope: d, Size: len(b)}); n < len(b)+24*131000 {
		t.Fatalf("memSize %d for %d bytes on the wire decoding into 131,000 values", n, len(b))
	}
}
