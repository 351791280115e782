package node

import (
	"context"
	"log/slog"
	"path/filepath"
	"runtime"
	"testing"

	"github.com/meerkatd/meerkatd/comms/wire"
	"github.com/meerkatd/meerkatd/identity"
	"github.com/meerkatd/meerkatd/inbox/store"
)

// A restart finds the requests still waiting in a durable inbox without
// reading their bytes or decoding them: twenty requests whose params are
// 100,000 small numbers each (about 2 MB of values decoded, 100 KB on the
// wire) cost well under one of them, and every one can still be answered.
func TestRestoredRequestsNotDecoded(t *testing.T) {
	st, err := store.Open(filepath.Join(t.TempDir(), "i.db"), store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	alice, _ := identity.GenerateKeypair()
	bob, _ := identity.GenerateKeypair()
	nums := make([]wire.Value, 100_000)
	for i := range nums {
		nums[i] = wire.Int(int64(i % 20))
	}
	params := wire.Array(nums...)
	const n = 20
	var ids []identity.UUID
	for range n {
		e, err := wire.Seal(alice, identity.NewUUID(), bob.ID(), wire.Request("big", params))
		if err != nil {
			t.Fatal(err)
		}
		payload, err := e.MarshalBinary()
		if err != nil {
			t.Fatal(err)
		}
		if _, err := st.Admit(context.Background(), store.Record{Sender: e.From, ID: e.ID, Kind: wire.TypeRequest, Peer: "alice", Payload: payload}); err != nil {
			t.Fatal(err)
		}
		ids = append(ids, e.ID)
	}
	log := slog.New(slog.DiscardHandler)
	rec := newRecordingInbox(nil)
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	rec.trackStoredRequests(&durableMail{st: st, log: log}, log)
	runtime.ReadMemStats(&after)
	if got := after.TotalAlloc - before.TotalAlloc; got > 1<<20 {
		t.Errorf("finding %d stored requests allocated %d bytes: their payloads were read or decoded", n, got)
	}
	for _, id := range ids {
		if _, err := rec.checkAnswer(id, alice.ID(), false); err != nil {
			t.Fatalf("request %s not found again: %v", id, err)
		}
	}
}
