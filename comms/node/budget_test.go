package node

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/meerkatd/meerkatd/comms/wire"
)

// A peer's kind text counts toward a Receive batch's budget, as its JSON
// is written (escapes included): a thousand items of an unknown kind with
// a 4 KiB type name, full of characters JSON escapes, make a batch that
// stays within MaxBatchBytes, however many items the limit allows.
func TestReceiveBudgetCountsKindText(t *testing.T) {
	m, bob := mcpTestNode(t)
	ctx := context.Background()
	kindText := strings.Repeat("<&>\x01", 1024) // 4 KiB, about 24 KiB as JSON
	v, err := wire.Map(wire.Member{Key: "type", Value: wire.Text(kindText)})
	if err != nil {
		t.Fatal(err)
	}
	k, err := wire.NewKind(v)
	if err != nil {
		t.Fatal(err)
	}
	const items = 400 // about 19 MB of JSON in all
	for range items {
		arrive(t, m, bob, k)
	}
	var largest int
	seen := 0
	for after := uint64(0); ; {
		b, err := m.Receive(ctx, Query{After: after, Limit: MaxBatchItems})
		if err != nil {
			t.Fatal(err)
		}
		out, err := json.Marshal(b.Messages)
		if err != nil {
			t.Fatal(err)
		}
		one, _ := json.Marshal(b.Messages[0])
		largest = max(largest, len(one))
		if len(out) > MaxBatchBytes {
			t.Fatalf("a batch of %d items is %d bytes of JSON, over MaxBatchBytes (%d)", len(b.Messages), len(out), MaxBatchBytes)
		}
		for _, msg := range b.Messages {
			if msg.Kind != kindText || !msg.Untrusted {
				t.Fatalf("item %d: kind of %d bytes, untrusted %v", msg.Seq, len(msg.Kind), msg.Untrusted)
			}
		}
		seen += len(b.Messages)
		after = b.Cursor
		if !b.More {
			break
		}
	}
	if seen != items {
		t.Fatalf("paged through %d items, want %d", seen, items)
	}
	if largest < 20<<10 {
		t.Fatalf("an item is only %d bytes of JSON: the test does not exercise escaping", largest)
	}
}

// itemSize is at least the size of a message's JSON, whatever its fields
// hold.
func TestItemSizeBoundsJSON(t *testing.T) {
	nasty := "\"\\<>&\x00\n\u2028\u2029\xff é 漢"
	raw := json.RawMessage(`{"a":"<>&\u2028` + "\u2028" + `","b":[1,2.5e3,null]}`)
	for _, m := range []Message{
		{},
		{Kind: nasty, Body: nasty, Intent: nasty, Status: nasty, Peer: "bob", From: "ed25519:x", Untrusted: true},
		{Kind: "response", RequestID: "00000000-0000-4000-8000-000000000000", Result: raw, Params: raw, Fields: raw},
		{Kind: "meup", MEUP: &MEUPItem{Space: "s", ID: nasty, Kind: nasty, Participant: nasty, To: []string{nasty, nasty}, Context: nasty, Envelope: raw}},
	} {
		out, err := json.Marshal(m)
		if err != nil {
			t.Fatal(err)
		}
		if got := itemSize(m); got < len(out) {
			t.Errorf("itemSize %d < %d bytes of JSON: %s", got, len(out), out)
		}
	}
}
