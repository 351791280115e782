package store

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"fmt"
	"slices"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/meerkatd/meerkatd/identity"
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

// BenchmarkAdmitPipelined admits from one goroutine keeping inFlight
// admissions queued (AdmitAsync), like one pipelined connection, with
// time-ordered ids (as meerkatd sends messages) and one sender. cpu-µs/admit is the
// process CPU time per admission, steadier than admits/s on a busy
// machine.
func BenchmarkAdmitPipelined(b *testing.B) { benchAdmitPipelined(b, false, identity.NewTimeUUID) }

// BenchmarkAdmitPipelinedRandomIDs is BenchmarkAdmitPipelined with
// random (version 4) envelope ids, as peers other than meerkatd send:
// each key of the duplicate filter lands at a random place in its
// B-tree, where meerkatd's time-ordered ids land at its end.
func BenchmarkAdmitPipelinedRandomIDs(b *testing.B) {
	benchAdmitPipelined(b, false, identity.NewUUID)
}

// BenchmarkAdmitPipelinedSearchable is BenchmarkAdmitPipelined with a
// text of 40 words per item to index: the indexing (in the background,
// and what is left at the end) is in the time and CPU measured.
func BenchmarkAdmitPipelinedSearchable(b *testing.B) {
	benchAdmitPipelined(b, true, identity.NewTimeUUID)
}

func benchAdmitPipelined(b *testing.B, searchable bool, newID func() identity.UUID) {
	const inFlight = 128
	opts := Options{MaxItems: b.N + 1}
	if searchable {
		opts.SearchText = payloadText
	}
	s, _ := openStore(b, opts)
	var sender [32]byte
	rand.Read(sender[:])
	payload := make([]byte, 300)
	window := make([]*Pending, 0, inFlight)
	started := make([]time.Time, 0, inFlight) // window's admissions, when each was queued
	waits := make([]time.Duration, 0, b.N)    // from queued to answered, of those answered in the loop
	b.ReportAllocs()
	cpu0 := processCPU()
	b.ResetTimer()
	for i := range b.N {
		if len(window) == inFlight {
			if _, err := window[0].Wait(); err != nil {
				b.Fatal(err)
			}
			waits = append(waits, time.Since(started[0]))
			window = append(window[:0], window[1:]...)
			started = append(started[:0], started[1:]...)
		}
		r := Record{Sender: sender, Kind: "message", Peer: "bench", Payload: payload}
		if searchable {
			r.Payload = searchPayload(i)
		}
		r.ID = newID()
		started = append(started, time.Now())
		window = append(window, s.AdmitAsync(r, queueWait))
	}
	for _, p := range window {
		if _, err := p.Wait(); err != nil {
			b.Fatal(err)
		}
	}
	if err := s.catchUp(context.Background()); err != nil {
		b.Fatal(err)
	}
	b.StopTimer()
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "admits/s")
	b.ReportMetric(float64((processCPU()-cpu0).Microseconds())/float64(b.N), "cpu-µs/admit")
	if txns := s.txns.Load(); txns > 0 {
		b.ReportMetric(float64(b.N)/float64(txns), "admits/txn")
	}
	// How long admissions wait, with inFlight queued: a long merge or
	// index page holds every admission behind it up, and shows in the
	// tail.
	if len(waits) > 0 {
		slices.Sort(waits)
		b.ReportMetric(float64(waits[len(waits)*99/100].Microseconds()), "p99-µs")
		b.ReportMetric(float64(waits[len(waits)-1].Microseconds()), "max-µs")
	}
}

// searchPayload is item i's text of 40 words drawn from 2,000, padded
// to 300 bytes.
func searchPayload(i int) []byte {
	var text []byte
	for w := range 40 {
		text = fmt.Appendf(text, "w%d ", (i*7919+w*104729)%2000)
	}
	return fmt.Appendf(nil, "%-300s", text)
}

// processCPU returns the user and system CPU time the process used.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkSearch10k searches a 10,000-item history (95% acknowledged,
// texts of 40 words drawn from 2,000) for pages of 20 hits with snippets:
// a word present in five items; a common word (in about 200 items), its
// first page and the next one (the cursor); and a prefix matching most
// items.
func BenchmarkSearch10k(b *testing.B) {
	s, _ := openStore(b, Options{MaxItems: 20000, HistoryMaxBytes: -1, SearchText: payloadText})
	ctx := context.Background()
	const items = 10000
	var text []byte
	pending := make([]*Pending, 0, items)
	for i := range items {
		text = text[:0]
		for w := range 40 {
			text = fmt.Appendf(text, "w%d ", (i*7919+w*104729)%2000)
		}
		if i%2000 == 1000 {
			text = append(text, "needle"...)
		}
		r := Record{Kind: "message", Peer: "bench", Payload: fmt.Appendf(nil, "%-300s", text)} // the text (payloadText), 300 bytes
		binary.BigEndian.PutUint64(r.ID[:], uint64(i+1))
		pending = append(pending, s.AdmitAsync(r, queueWait))
	}
	for _, p := range pending {
		if _, err := p.Wait(); err != nil {
			b.Fatal(err)
		}
	}
	seqs := make([]uint64, 0, items)
	for i := range uint64(items * 95 / 100) {
		seqs = append(seqs, i+1)
	}
	if n, err := s.Ack(seqs...); err != nil || n != len(seqs) {
		b.Fatalf("ack: %d, %v", n, err)
	}
	search := func(b *testing.B, query string, before uint64, want int) []Hit {
		terms, err := ParseSearch(query)
		if err != nil {
			b.Fatal(err)
		}
		hits, err := s.Search(ctx, Search{Terms: terms, Limit: 20, Before: before})
		if err != nil || len(hits) != want {
			b.Fatalf("%q before %d: %d hits, %v; want %d", query, before, len(hits), err, want)
		}
		return hits
	}
	// The first search catches the index up (what the committer did not
	// index in the background yet): setup, not what is measured.
	search(b, "needle", 0, 5)
	page1 := search(b, "w7", 0, 20)
	for _, c := range []struct {
		name, query string
		before      uint64
		want        int
	}{
		{"rare", "needle", 0, 5},
		{"common", "w7", 0, 20},
		{"common_page2", "w7", page1[len(page1)-1].Seq, 20},
		{"prefix", "w1*", 0, 20},
	} {
		b.Run(c.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				search(b, c.query, c.before, c.want)
			}
		})
	}
}
