package store

import (
	"context"
	"encoding/binary"
	"sync/atomic"
	"testing"

	"github.com/meerkatd/meerkatd/inbox"
)

// benchParallelism multiplies GOMAXPROCS into the number of admitting
// goroutines: group commit only helps with concurrent receivers.
const benchParallelism = 16

// BenchmarkAdmit measures durable admission (each Admit waits for its
// group commit, synchronous=FULL) from many goroutines. Compare admits/s
// with BenchmarkMailboxPush from the same run.
func BenchmarkAdmit(b *testing.B) {
	s, _ := openStore(b, Options{MaxItems: b.N + 1})
	var next atomic.Uint64
	payload := make([]byte, 512)
	b.SetParallelism(benchParallelism)
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			r := Record{Kind: "message", Peer: "bench", Payload: payload}
			binary.BigEndian.PutUint64(r.ID[:], next.Add(1))
			if _, err := s.Admit(context.Background(), r); err != nil {
				b.Error(err)
				return
			}
		}
	})
	b.StopTimer()
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "admits/s")
	if txns := s.txns.Load(); txns > 0 {
		b.ReportMetric(float64(b.N)/float64(txns), "admits/txn")
	}
}

// BenchmarkMailboxPush is the in-memory baseline for BenchmarkAdmit, with
// the same parallelism and payload.
func BenchmarkMailboxPush(b *testing.B) {
	m := inbox.NewMailbox[Record](b.N + 1)
	var next atomic.Uint64
	payload := make([]byte, 512)
	b.SetParallelism(benchParallelism)
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			r := Record{Kind: "message", Peer: "bench", Payload: payload}
			binary.BigEndian.PutUint64(r.ID[:], next.Add(1))
			if err := m.Push(r); err != nil {
				b.Error(err)
				return
			}
		}
	})
	b.StopTimer()
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "admits/s")
}
