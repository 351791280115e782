package transport

import (
	"bytes"
	"encoding/hex"
	"encoding/json"
	"errors"
	"io"
	"os"
	"runtime"
	"strings"
	"testing"
	"testing/iotest"
)

func hdr(n uint32) string {
	return string([]byte{byte(n >> 24), byte(n >> 16), byte(n >> 8), byte(n)})
}

func TestReadFrame(t *testing.T) {
	tests := []struct {
		name    string
		in      string
		max     int
		want    []string // payloads read before the final error
		wantErr error
	}{
		{name: "one frame then EOF", in: hdr(3) + "abc", want: []string{"abc"}, wantErr: io.EOF},
		{name: "two frames", in: hdr(1) + "a" + hdr(2) + "bc", want: []string{"a", "bc"}, wantErr: io.EOF},
		{name: "empty stream", in: "", wantErr: io.EOF},
		{name: "zero-length frame", in: hdr(0), wantErr: ErrEmptyFrame},
		{name: "zero-length after a good frame", in: hdr(1) + "a" + hdr(0), want: []string{"a"}, wantErr: ErrEmptyFrame},
		{name: "header cut short", in: "\x00\x00", wantErr: ErrTruncatedFrame},
		{name: "payload cut short", in: hdr(5) + "ab", wantErr: ErrTruncatedFrame},
		{name: "EOF right after header", in: hdr(5), wantErr: ErrTruncatedFrame},
		{name: "over protocol max", in: hdr(MaxFrameSize + 1), wantErr: ErrFrameTooLarge},
		{name: "huge declared length", in: hdr(0xffffffff), wantErr: ErrFrameTooLarge},
		{name: "over configured max", in: hdr(11) + strings.Repeat("x", 11), max: 10, wantErr: ErrFrameTooLarge},
		{name: "exactly configured max", in: hdr(10) + strings.Repeat("x", 10), max: 10, want: []string{strings.Repeat("x", 10)}, wantErr: io.EOF},
		{name: "exactly protocol max", in: hdr(MaxFrameSize) + strings.Repeat("y", MaxFrameSize), want: []string{strings.Repeat("y", MaxFrameSize)}, wantErr: io.EOF},
		{name: "large payload cut short", in: hdr(200000) + strings.Repeat("z", 150000), wantErr: ErrTruncatedFrame},
	}
	readers := map[string]func(io.Reader) io.Reader{
		"plain":    func(r io.Reader) io.Reader { return r },
		"one byte": iotest.OneByteReader,
		"half":     iotest.HalfReader,
	}
	for _, tc := range tests {
		for rname, wrap := range readers {
			t.Run(tc.name+"/"+rname, func(t *testing.T) {
				fr := NewReader(wrap(strings.NewReader(tc.in)), tc.max)
				var got []string
				var err error
				for {
					var p []byte
					if p, err = fr.ReadFrame(); err != nil {
						break
					}
					got = append(got, string(p))
				}
				if !errors.Is(err, tc.wantErr) {
					t.Fatalf("error %v, want %v", err, tc.wantErr)
				}
				if len(got) != len(tc.want) {
					t.Fatalf("read %d frames, want %d", len(got), len(tc.want))
				}
				for i := range got {
					if got[i] != tc.want[i] {
						t.Errorf("frame %d differs (len %d, want %d)", i, len(got[i]), len(tc.want[i]))
					}
				}
			})
		}
	}
}

func TestTruncatedMatchesUnexpectedEOF(t *testing.T) {
	_, err := ReadFrame(strings.NewReader(hdr(4)+"ab"), 0)
	if !errors.Is(err, ErrTruncatedFrame) || !errors.Is(err, io.ErrUnexpectedEOF) {
		t.Fatalf("got %v, want ErrTruncatedFrame matching io.ErrUnexpectedEOF", err)
	}
}

func TestReadFrameUnderlyingError(t *testing.T) {
	boom := errors.New("boom")
	_, err := NewReader(iotest.ErrReader(boom), 0).ReadFrame()
	if !errors.Is(err, boom) {
		t.Fatalf("got %v, want the reader's error", err)
	}
	// An error in the middle of a payload is passed through too, not
	// disguised as truncation.
	r := io.MultiReader(strings.NewReader(hdr(10)+"abc"), iotest.ErrReader(boom))
	if _, err := NewReader(r, 0).ReadFrame(); !errors.Is(err, boom) {
		t.Fatalf("mid-payload: got %v, want the reader's error", err)
	}
}

// A one-shot ReadFrame must not consume bytes of the next frame.
func TestReadFrameOneShotReadsExactly(t *testing.T) {
	r := strings.NewReader(hdr(2) + "ab" + hdr(1) + "c")
	p, err := ReadFrame(r, 0)
	if err != nil || string(p) != "ab" {
		t.Fatalf("first frame %q, %v", p, err)
	}
	if r.Len() != 5 {
		t.Fatalf("one-shot read consumed %d bytes past its frame", 5-r.Len())
	}
	p, err = ReadFrame(r, 0)
	if err != nil || string(p) != "c" {
		t.Fatalf("second frame %q, %v", p, err)
	}
}

// countingReader serves a fixed header and then fails the test if anything
// more is read.
type headerOnly struct {
	t   *testing.T
	h   string
	off int
}

func (r *headerOnly) Read(p []byte) (int, error) {
	if r.off >= len(r.h) {
		r.t.Error("reader read past a rejected header")
		return 0, io.EOF
	}
	n := copy(p, r.h[r.off:])
	r.off += n
	return n, nil
}

// A declared length above the limit is refused before any payload byte is
// read or any payload buffer allocated.
func TestOversizeRejectedBeforeAllocation(t *testing.T) {
	const rounds = 200
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	for range rounds {
		_, err := ReadFrame(&headerOnly{t: t, h: hdr(0xfffffff0)}, 0)
		if !errors.Is(err, ErrFrameTooLarge) {
			t.Fatalf("got %v, want ErrFrameTooLarge", err)
		}
	}
	runtime.ReadMemStats(&after)
	// Each round allocates a Reader and an error message: a few hundred
	// bytes. A payload buffer would be megabytes.
	if perRound := (after.TotalAlloc - before.TotalAlloc) / rounds; perRound > 4096 {
		t.Fatalf("rejecting an oversize frame allocated %d bytes per frame", perRound)
	}
}

// A peer that declares a large frame and then stalls pins only eagerAlloc
// bytes of buffer, not the declared size.
func TestLargeFrameBufferGrowsWithData(t *testing.T) {
	const rounds = 20
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	for range rounds {
		fr := NewReader(strings.NewReader(hdr(MaxFrameSize)+strings.Repeat("q", 1000)), 0)
		if _, err := fr.ReadFrame(); !errors.Is(err, ErrTruncatedFrame) {
			t.Fatalf("got %v, want ErrTruncatedFrame", err)
		}
	}
	runtime.ReadMemStats(&after)
	// Per round: the read-ahead buffer and one eager payload buffer; a
	// buffer of the declared size would be 1 MiB.
	if perRound := (after.TotalAlloc - before.TotalAlloc) / rounds; perRound > readBufferSize+eagerAlloc+8192 {
		t.Fatalf("a stalled 1 MiB frame with 1000 bytes sent allocated %d bytes", perRound)
	}
}

// Readers sharing a Budget: a frame over 64 KiB takes what its buffer
// holds beyond them once they have arrived, and fails with ErrOverBudget
// when the others hold the rest; the charge comes back at the next small
// frame, at Trim, at Release and at SetBudget(nil). A large frame's buffer is its
// declared size, allocated once.
func TestBudget(t *testing.T) {
	const size = 200 << 10 // charges size - eagerAlloc
	charge := int64(size - eagerAlloc)
	big := mustFrame(t, strings.Repeat("b", size))
	small := mustFrame(t, "s")
	b := NewBudget(charge + charge/2) // room for one such frame, not two
	reader := func(frames ...[]byte) *Reader {
		fr := NewReader(bytes.NewReader(bytes.Join(frames, nil)), 0)
		fr.SetBudget(b)
		return fr
	}
	one, two := reader(big, small, big, big), reader(big)
	if p, err := one.ReadFrame(); err != nil || len(p) != size || cap(p) != size {
		t.Fatalf("first large frame: %d bytes (cap %d), %v", len(p), cap(p), err)
	}
	if b.Free() != charge/2 {
		t.Fatalf("budget left %d, want %d", b.Free(), charge/2)
	}
	if _, err := two.ReadFrame(); !errors.Is(err, ErrOverBudget) {
		t.Fatalf("second reader's large frame while the first holds its buffer: %v, want ErrOverBudget", err)
	}
	if b.Free() != charge/2 {
		t.Fatalf("a refused frame changed the budget: %d left", b.Free())
	}
	if p, err := one.ReadFrame(); err != nil || string(p) != "s" || b.Free() != charge+charge/2 {
		t.Fatalf("small frame: %q, %v; budget left %d, want all of it", p, err, b.Free())
	}
	if p, err := one.ReadFrame(); err != nil || len(p) != size || b.Free() != charge/2 {
		t.Fatalf("large frame again: %d bytes, %v; budget left %d", len(p), err, b.Free())
	}
	one.Trim()
	if b.Free() != charge+charge/2 {
		t.Fatalf("after Trim: %d left, want all", b.Free())
	}
	// Trim keeps a buffer of the first 64 KiB or less: nothing to give.
	if p, err := one.ReadFrame(); err != nil || len(p) != size || b.Free() != charge/2 {
		t.Fatalf("large frame after Trim: %d bytes, %v; budget left %d", len(p), err, b.Free())
	}
	one.Release()
	if b.Free() != charge+charge/2 {
		t.Fatalf("after Release: %d left, want all", b.Free())
	}
	small2 := reader(small, small)
	if _, err := small2.ReadFrame(); err != nil {
		t.Fatal(err)
	}
	kept := cap(small2.buf)
	small2.Trim()
	if cap(small2.buf) != kept || kept == 0 {
		t.Fatalf("Trim of a small buffer: cap %d, want %d kept", cap(small2.buf), kept)
	}
	// Shown who it is: its frames are no longer charged, and what it held
	// comes back.
	three := reader(big, big)
	if _, err := three.ReadFrame(); err != nil || b.Free() != charge/2 {
		t.Fatalf("third reader: %v, %d left", err, b.Free())
	}
	three.SetBudget(nil)
	if b.Free() != charge+charge/2 {
		t.Fatalf("after SetBudget(nil): %d left, want all", b.Free())
	}
	if p, err := three.ReadFrame(); err != nil || len(p) != size || b.Free() != charge+charge/2 {
		t.Fatalf("unbudgeted large frame: %d bytes, %v; %d left", len(p), err, b.Free())
	}
	// A stream cut inside a large frame keeps its charge until Release.
	cut := reader(big[:len(big)-10])
	if _, err := cut.ReadFrame(); !errors.Is(err, ErrTruncatedFrame) || b.Free() != charge/2 {
		t.Fatalf("cut frame: %v, %d left", err, b.Free())
	}
	cut.Release()
	if b.Free() != charge+charge/2 {
		t.Fatalf("after the cut reader's Release: %d left", b.Free())
	}
}

func TestFrameWriting(t *testing.T) {
	var b bytes.Buffer
	if err := WriteFrame(&b, []byte("hello")); err != nil {
		t.Fatal(err)
	}
	if got, want := b.String(), hdr(5)+"hello"; got != want {
		t.Fatalf("WriteFrame wrote %q, want %q", got, want)
	}
	if err := WriteFrame(&b, nil); !errors.Is(err, ErrEmptyFrame) {
		t.Fatalf("empty payload: %v, want ErrEmptyFrame", err)
	}
	if err := WriteFrame(&b, make([]byte, MaxFrameSize+1)); !errors.Is(err, ErrFrameTooLarge) {
		t.Fatalf("oversize payload: %v, want ErrFrameTooLarge", err)
	}
	// In-place building: header placeholder, payload appended, length set.
	buf, start := StartFrame([]byte("prefix"))
	buf = append(buf, "xyz"...)
	if err := FinishFrame(buf, start); err != nil {
		t.Fatal(err)
	}
	if got, want := string(buf), "prefix"+hdr(3)+"xyz"; got != want {
		t.Fatalf("StartFrame/FinishFrame built %q, want %q", got, want)
	}
	out, err := AppendFrame([]byte("keep"), nil)
	if !errors.Is(err, ErrEmptyFrame) || string(out) != "keep" {
		t.Fatalf("AppendFrame(empty) = %q, %v; want dst unchanged and ErrEmptyFrame", out, err)
	}
}

// The vector frames read back to their payloads, and framing the payloads
// gives the vector frames.
func TestVectorFrames(t *testing.T) {
	raw, err := os.ReadFile("../testdata/vectors/meerkat-wire.json")
	if err != nil {
		t.Fatal(err)
	}
	var vs struct {
		Derived []struct {
			Name  string `json:"name"`
			Frame string `json:"frame"`
		} `json:"derived"`
	}
	if err := json.Unmarshal(raw, &vs); err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, v := range vs.Derived {
		if v.Frame == "" {
			continue
		}
		n++
		frame, err := hex.DecodeString(v.Frame)
		if err != nil {
			t.Fatal(err)
		}
		payload, err := ReadFrame(bytes.NewReader(frame), 0)
		if err != nil {
			t.Fatalf("%s: %v", v.Name, err)
		}
		if len(payload) != len(frame)-HeaderSize {
			t.Fatalf("%s: payload %d bytes, frame %d", v.Name, len(payload), len(frame))
		}
		again, err := AppendFrame(nil, payload)
		if err != nil || !bytes.Equal(again, frame) {
			t.Fatalf("%s: re-framing gives %x, %v", v.Name, again, err)
		}
	}
	if n != 4 {
		t.Fatalf("found %d vector frames, want 4", n)
	}
}

func FuzzReadFrame(f *testing.F) {
	big := hdr(eagerAlloc+5000) + strings.Repeat("b", eagerAlloc+5000) // charges 5000 bytes
	f.Add([]byte(hdr(3)+"abc"), uint16(0), uint32(0))
	f.Add([]byte(hdr(1)+"a"+hdr(2)+"bc"+hdr(0)), uint16(2), uint32(0))
	f.Add([]byte(hdr(0xffffffff)), uint16(0), uint32(0))
	f.Add([]byte("\x00\x00\x01"), uint16(0), uint32(0))
	f.Add([]byte(big+hdr(1)+"s"+big), uint16(0), uint32(5000)) // enough
	f.Add([]byte(big), uint16(0), uint32(4999))                // not enough
	f.Fuzz(func(t *testing.T, in []byte, max uint16, budget uint32) {
		limit := int(max)
		fr := NewReader(bytes.NewReader(in), limit)
		b := NewBudget(int64(budget))
		fr.SetBudget(b)
		defer func() {
			fr.Release()
			if b.Free() != int64(budget) {
				t.Fatalf("budget left %d after Release, want %d", b.Free(), budget)
			}
		}()
		if limit <= 0 {
			limit = MaxFrameSize
		}
		var rebuilt []byte
		for {
			p, err := fr.ReadFrame()
			if err != nil {
				known := []error{io.EOF, ErrTruncatedFrame, ErrEmptyFrame, ErrFrameTooLarge, ErrOverBudget}
				ok := false
				for _, k := range known {
					ok = ok || errors.Is(err, k)
				}
				if !ok {
					t.Fatalf("unexpected error %v", err)
				}
				if err == io.EOF && !bytes.Equal(rebuilt, in) {
					t.Fatalf("clean EOF but frames rebuild to %x, input %x", rebuilt, in)
				}
				return
			}
			if len(p) == 0 || len(p) > limit {
				t.Fatalf("frame of %d bytes with limit %d", len(p), limit)
			}
			if free := b.Free(); free < 0 || free > int64(budget) || len(p) > eagerAlloc && int64(budget)-free < int64(len(p)-eagerAlloc) {
				t.Fatalf("after a frame of %d bytes, %d of a budget of %d left", len(p), free, budget)
			}
			if rebuilt, err = AppendFrame(rebuilt, p); err != nil {
				t.Fatal(err)
			}
			if !bytes.HasPrefix(in, rebuilt) {
				t.Fatalf("frames rebuild to %x, not a prefix of the input", rebuilt)
			}
		}
	})
}

// chunkReader returns its chunks one per Read, so a test decides what a
// Reader has read ahead.
type chunkReader struct{ chunks [][]byte }

func (c *chunkReader) Read(p []byte) (int, error) {
	if len(c.chunks) == 0 {
		return 0, io.EOF
	}
	n := copy(p, c.chunks[0])
	c.chunks[0] = c.chunks[0][n:]
	if len(c.chunks[0]) == 0 {
		c.chunks = c.chunks[1:]
	}
	return n, nil
}

// mustFrame returns payload framed.
func mustFrame(t *testing.T, payload string) []byte {
	t.Helper()
	f, err := AppendFrame(nil, []byte(payload))
	if err != nil {
		t.Fatal(err)
	}
	return f
}

func TestFrameBuffered(t *testing.T) {
	frame := func(payload string) []byte { return mustFrame(t, payload) }
	two := append(frame("first"), frame("second")...)
	for _, tc := range []struct {
		name   string
		chunk  []byte // what the first Read returns (after one Peek)
		max    int
		before bool // FrameBuffered after the Peek
		after  bool // after reading one frame
	}{
		{"nothing", nil, 0, false, false},
		{"half a header", two[:2], 0, false, false},
		{"header only", two[:HeaderSize], 0, false, false},
		{"one byte short", two[:len(frame("first"))-1], 0, false, false},
		{"exactly one", frame("first"), 0, true, false},
		{"one and half the next", two[:len(frame("first"))+6], 0, true, false},
		{"two", two, 0, true, true},
		{"empty frame", []byte{0, 0, 0, 0}, 0, true, false},
		{"too large declared", []byte{0, 0, 1, 0, 'x'}, 16, true, false},
	} {
		var chunks [][]byte
		if tc.chunk != nil {
			chunks = [][]byte{bytes.Clone(tc.chunk)}
		}
		fr := NewReader(&chunkReader{chunks: chunks}, tc.max)
		fr.Peek() // fills the read-ahead with the first chunk
		if got := fr.FrameBuffered(); got != tc.before {
			t.Errorf("%s: FrameBuffered = %v, want %v", tc.name, got, tc.before)
		}
		if !tc.before {
			continue
		}
		_, err := fr.ReadFrame()
		if err != nil {
			continue // a length error: the stream is out of step anyway
		}
		if got := fr.FrameBuffered(); got != tc.after {
			t.Errorf("%s: after one frame, FrameBuffered = %v, want %v", tc.name, got, tc.after)
		}
	}
}

// ReadMore reads once, adds what that read returned to the read-ahead
// without consuming it, and reports whether it added anything.
func TestReadMore(t *testing.T) {
	one, two := mustFrame(t, "first"), mustFrame(t, "second")
	for _, tc := range []struct {
		name     string
		chunks   [][]byte
		max      int
		want     []bool // ReadMore's answers, in turn
		buffered bool   // FrameBuffered after them
		frames   int    // frames then read whole
	}{
		{"nothing", nil, 0, []bool{false}, false, 0},
		{"one chunk", [][]byte{one}, 0, []bool{true, false}, true, 1},
		{"a frame in two chunks", [][]byte{one[:3], one[3:]}, 0, []bool{true, true, false}, true, 1},
		{"two frames, a chunk each", [][]byte{one, two}, 0, []bool{true, true}, true, 2},
		{"only the first of two chunks", [][]byte{one, two}, 0, []bool{true}, true, 1},
	} {
		var chunks [][]byte
		for _, c := range tc.chunks {
			chunks = append(chunks, bytes.Clone(c))
		}
		cr := &countingReader{r: &chunkReader{chunks: chunks}}
		fr := NewReader(cr, tc.max)
		for i, want := range tc.want {
			if got := fr.ReadMore(); got != want {
				t.Errorf("%s: ReadMore #%d = %v, want %v", tc.name, i+1, got, want)
			}
		}
		if cr.reads != len(tc.want) {
			t.Errorf("%s: %d reads for %d calls: ReadMore must read exactly once", tc.name, cr.reads, len(tc.want))
		}
		if got := fr.FrameBuffered(); got != tc.buffered {
			t.Errorf("%s: FrameBuffered = %v, want %v", tc.name, got, tc.buffered)
		}
		for i := range tc.frames {
			if _, err := fr.ReadFrame(); err != nil {
				t.Errorf("%s: frame %d: %v", tc.name, i+1, err)
			}
		}
	}
	// A full read-ahead reads nothing more.
	big := mustFrame(t, strings.Repeat("x", 64<<10))
	cr := &countingReader{r: bytes.NewReader(big)}
	fr := NewReader(cr, 0)
	for fr.ReadMore() {
	}
	reads := cr.reads
	if fr.ReadMore() || cr.reads != reads {
		t.Errorf("ReadMore with the read-ahead full read again (%d reads, then %d)", reads, cr.reads)
	}
	// A read that fails with nothing (as under a passed deadline) is not
	// kept: the next ReadMore reads again and gets what has come since.
	er := &errThenData{err: os.ErrDeadlineExceeded, data: bytes.Clone(one)}
	fr = NewReader(er, 0)
	if fr.ReadMore() {
		t.Error("ReadMore after a failed read = true")
	}
	if !fr.ReadMore() || !fr.FrameBuffered() {
		t.Error("ReadMore after a failed read did not read again")
	}
	// A one-shot Reader has no read-ahead.
	if (&Reader{r: bytes.NewReader(one), max: MaxFrameSize}).ReadMore() {
		t.Error("ReadMore on a one-shot Reader = true")
	}
}

// errThenData fails its first Read with err, then returns data.
type errThenData struct {
	err  error
	data []byte
}

func (r *errThenData) Read(p []byte) (int, error) {
	if r.err != nil {
		err := r.err
		r.err = nil
		return 0, err
	}
	if len(r.data) == 0 {
		return 0, io.EOF
	}
	n := copy(p, r.data)
	r.data = r.data[n:]
	return n, nil
}

// countingReader counts the Reads that reach it.
type countingReader struct {
	r     io.Reader
	reads int
}

func (c *countingReader) Read(p []byte) (int, error) {
	c.reads++
	return c.r.Read(p)
}

// FuzzFrameBuffered: whenever FrameBuffered reports a whole frame read
// ahead, ReadFrame returns it (or a length error) without reading the
// stream.
func FuzzFrameBuffered(f *testing.F) {
	f.Add([]byte(hdr(3)+"abc"+hdr(1)+"d"), uint16(0), uint8(5))
	f.Add([]byte(hdr(2)+"ab"+hdr(0)), uint16(0), uint8(200))
	f.Add([]byte(hdr(9)+"abc"), uint16(4), uint8(3))
	f.Fuzz(func(t *testing.T, in []byte, max uint16, first uint8) {
		// The first Read returns at most `first` bytes, later ones the rest.
		cut := min(int(first), len(in))
		cr := &countingReader{r: &chunkReader{chunks: [][]byte{in[:cut], in[cut:]}}}
		fr := NewReader(cr, int(max))
		if fr.Peek() != nil {
			return
		}
		for fr.FrameBuffered() {
			before := cr.reads
			_, err := fr.ReadFrame()
			if cr.reads != before {
				t.Fatalf("ReadFrame read the stream after FrameBuffered (err %v)", err)
			}
			if err != nil {
				if !errors.Is(err, ErrEmptyFrame) && !errors.Is(err, ErrFrameTooLarge) {
					t.Fatalf("ReadFrame after FrameBuffered: %v", err)
				}
				return
			}
		}
	})
}

// scriptedReader returns its steps one per Read: data, or an error.
type scriptedReader struct {
	steps []scriptStep
}

type scriptStep struct {
	data []byte
	err  error
}

func (s *scriptedReader) Read(p []byte) (int, error) {
	if len(s.steps) == 0 {
		return 0, io.EOF
	}
	st := s.steps[0]
	s.steps = s.steps[1:]
	if st.err != nil {
		return 0, st.err
	}
	return copy(p, st.data), nil
}

var errTestTimeout = errors.New("test: deadline")

// TestPeekFrame: PeekFrame waits for a whole frame without consuming it,
// so an error halfway (a read deadline) leaves the stream in step.
func TestPeekFrame(t *testing.T) {
	whole := mustFrame(t, "the ack")
	big := mustFrame(t, strings.Repeat("x", readBufferSize)) // cannot fit the read-ahead
	for _, tc := range []struct {
		name   string
		steps  []scriptStep
		max    int
		errs   []error // PeekFrame's results, in turn; then ReadFrame
		frames []string
	}{
		{"whole at once", []scriptStep{{data: whole}}, 0, []error{nil}, []string{"the ack"}},
		{"cut in the header", []scriptStep{{data: whole[:2]}, {err: errTestTimeout}, {data: whole[2:]}}, 0,
			[]error{errTestTimeout, nil}, []string{"the ack"}},
		{"cut in the payload", []scriptStep{{data: whole[:6]}, {err: errTestTimeout}, {data: whole[6:]}}, 0,
			[]error{errTestTimeout, nil}, []string{"the ack"}},
		{"two cuts", []scriptStep{{data: whole[:5]}, {err: errTestTimeout}, {data: whole[5:7]}, {err: errTestTimeout}, {data: whole[7:]}}, 0,
			[]error{errTestTimeout, errTestTimeout, nil}, []string{"the ack"}},
		{"clean end", nil, 0, []error{io.EOF}, nil},
		{"end in the header", []scriptStep{{data: whole[:3]}}, 0, []error{ErrTruncatedFrame}, nil},
		{"end in the payload", []scriptStep{{data: whole[:8]}}, 0, []error{ErrTruncatedFrame}, nil},
		{"larger than the buffer: not waited for", []scriptStep{{data: big[:100]}, {data: big[100:]}}, 0,
			[]error{nil}, []string{strings.Repeat("x", readBufferSize)}},
		{"declared too large: left to ReadFrame", []scriptStep{{data: []byte{0, 0, 1, 0}}}, 16, []error{nil}, nil},
	} {
		fr := NewReader(&scriptedReader{steps: tc.steps}, tc.max)
		for i, want := range tc.errs {
			if err := fr.PeekFrame(); !errors.Is(err, want) {
				t.Errorf("%s: PeekFrame #%d = %v, want %v", tc.name, i, err, want)
			}
		}
		for _, want := range tc.frames {
			got, err := fr.ReadFrame()
			if err != nil || string(got) != want {
				t.Errorf("%s: ReadFrame = %.20q, %v; want %.20q", tc.name, got, err, want)
			}
		}
	}
}

// FuzzPeekFrame: peeking never changes what ReadFrame returns.
func FuzzPeekFrame(f *testing.F) {
	f.Add([]byte(hdr(3)+"abc"+hdr(1)+"d"), uint16(0))
	f.Add([]byte(hdr(9)+"abc"), uint16(4))
	f.Add([]byte{0, 0}, uint16(0))
	f.Fuzz(func(t *testing.T, in []byte, max uint16) {
		peeked := NewReader(bytes.NewReader(in), int(max))
		plain := NewReader(bytes.NewReader(in), int(max))
		for {
			perr := peeked.PeekFrame()
			a, aerr := peeked.ReadFrame()
			b, berr := plain.ReadFrame()
			if !bytes.Equal(a, b) || (aerr == nil) != (berr == nil) {
				t.Fatalf("after PeekFrame (%v): %x, %v; without: %x, %v", perr, a, aerr, b, berr)
			}
			if perr != nil && aerr == nil {
				t.Fatalf("PeekFrame failed (%v) but ReadFrame read %x", perr, a)
			}
			if aerr != nil {
				return
			}
		}
	})
}
