package audit

import (
	"bytes"
	"encoding/json"
	"testing"
	"time"
)

// BenchmarkRecord measures the caller's cost of Record with the writer
// running against a file in a temp dir: a time stamp and a channel send.
// drops/op is the share of records the writer could not keep up with
// (counted, reported in the file).
func BenchmarkRecord(b *testing.B) {
	for _, bc := range []struct {
		name     string
		parallel bool
	}{{"serial", false}, {"parallel", true}} {
		b.Run(bc.name, func(b *testing.B) {
			l, _ := openTemp(b, Options{})
			r := rec(1) // Time set: Record keeps it
			b.ReportAllocs()
			b.ResetTimer()
			if bc.parallel {
				b.RunParallel(func(pb *testing.PB) {
					for pb.Next() {
						l.Record(r)
					}
				})
			} else {
				for b.Loop() {
					l.Record(r)
				}
			}
			b.StopTimer()
			l.Close()
			b.ReportMetric(float64(l.Stats().Dropped)/float64(b.N), "drops/op")
		})
	}
}

// BenchmarkRecordAccepted isolates the path of a record the queue
// accepts (in BenchmarkRecord most are dropped: the caller outruns any
// disk writer): no writer runs; the queue is emptied with the timer
// stopped whenever it fills.
func BenchmarkRecordAccepted(b *testing.B) {
	l := &Log{q: make(chan Record, DefaultQueueLen)}
	r := rec(1)
	b.ReportAllocs()
	for b.Loop() {
		if len(l.q) == cap(l.q) {
			b.StopTimer()
			for len(l.q) > 0 {
				<-l.q
			}
			b.StartTimer()
		}
		l.Record(r)
	}
	if d := l.Stats().Dropped; d != 0 {
		b.Fatalf("%d dropped", d)
	}
}

// BenchmarkWriter is the writer goroutine's cost per row: clamp, encode,
// and its share of 64 KiB writes to a file in a temp dir. Its inverse is
// the sustained rate beyond which records are dropped.
func BenchmarkWriter(b *testing.B) {
	l, _ := openTemp(b, Options{})
	l.Close()
	path := b.TempDir() + "/" + FileName
	f, size, err := openLog(path)
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()
	w := &writer{l: l, path: path, opts: Options{MaxBytes: 1 << 40, FlushInterval: DefaultFlushInterval}}
	w.setFile(f, size)
	r := rec(1)
	b.ReportAllocs()
	for b.Loop() {
		rr := r
		w.write(&rr)
		if len(w.buf) >= flushSize {
			w.flush()
		}
	}
	w.flush()
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "rows/s")
	if w.l.dropped.Load() != 0 {
		b.Fatal("rows dropped")
	}
}

// BenchmarkRecordZeroTime adds the time.Now that Record does for a zero
// Time, the usual call.
func BenchmarkRecordZeroTime(b *testing.B) {
	l, _ := openTemp(b, Options{})
	r := rec(1)
	r.Time = time.Time{}
	b.ReportAllocs()
	for b.Loop() {
		l.Record(r)
	}
	b.StopTimer()
	l.Close()
	b.ReportMetric(float64(l.Stats().Dropped)/float64(b.N), "drops/op")
}

// BenchmarkEncode compares the writer's hand-rolled encoder with
// encoding/json for the same line (appendRecord is checked to match it
// byte for byte).
func BenchmarkEncode(b *testing.B) {
	r := rec(1)
	r.Dir, r.Event, r.CorrID, r.Reason, r.Attempt = DirIn, EventRefused, "00000000-0000-4000-8000-000000000000", "signature does not verify", 3
	b.Run("append", func(b *testing.B) {
		buf := make([]byte, 0, 4096)
		b.ReportAllocs()
		for b.Loop() {
			buf = appendRecord(buf[:0], &r)
		}
		b.SetBytes(int64(len(buf)))
	})
	b.Run("encoding-json", func(b *testing.B) {
		var buf bytes.Buffer
		enc := json.NewEncoder(&buf)
		enc.SetEscapeHTML(false)
		b.ReportAllocs()
		for b.Loop() {
			buf.Reset()
			if err := enc.Encode(&r); err != nil {
				b.Fatal(err)
			}
		}
		b.SetBytes(int64(buf.Len()))
	})
}

// BenchmarkParseLine is the reader's cost per line (meerkatd audit).
func BenchmarkParseLine(b *testing.B) {
	r := rec(1)
	line := appendRecord(nil, &r)
	b.SetBytes(int64(len(line)))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := ParseLine(line); err != nil {
			b.Fatal(err)
		}
	}
}
