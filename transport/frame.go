package transport

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"sync/atomic"
)

// Frame sizes (docs/protocol.md, "Framing").
const (
	// HeaderSize is the length of the big-endian payload-length prefix.
	HeaderSize = 4
	// MaxFrameSize is the protocol's largest payload, in bytes.
	MaxFrameSize = 1 << 20
	// MinFrameLimit is the least a node's own frame limit may be: every
	// node takes a payload of this size. (An envelope's fixed members
	// alone take about 200 bytes.)
	MinFrameLimit = 1024
)

// Tunables of the frame reader.
const (
	// readBufferSize is the Reader's read-ahead buffer: big enough that a
	// pipelined stream of small frames costs one read call for many frames.
	readBufferSize = 16 << 10
	// eagerAlloc is how much payload buffer is allocated on the strength of
	// a declared length alone. Larger payloads grow their buffer only as
	// their bytes arrive, so a peer that declares a big frame and stalls
	// does not pin a big buffer.
	eagerAlloc = 64 << 10
)

// Budget is payload memory that several Readers share: a Reader given one
// ([Reader.SetBudget]) takes from it what a frame's buffer holds beyond
// its first eagerAlloc (64 KiB) bytes, and gives it back when it lets the
// buffer go. A receiver gives one to the connections that have not yet
// shown who they are, so that strangers who each declare a large frame,
// send most of it and stall hold at most the budget between them. The
// zero value has nothing to give; use [NewBudget]. It is safe for
// concurrent use.
type Budget struct{ free atomic.Int64 }

// NewBudget returns a Budget of the given number of bytes.
func NewBudget(bytes int64) *Budget {
	b := new(Budget)
	b.free.Store(bytes)
	return b
}

// Free returns the bytes the budget has left.
func (b *Budget) Free() int64 { return b.free.Load() }

// take takes n bytes from b, or nothing and false if it has fewer left.
func (b *Budget) take(n int64) bool {
	for {
		f := b.free.Load()
		if f < n {
			return false
		}
		if b.free.CompareAndSwap(f, f-n) {
			return true
		}
	}
}

// Errors returned by frame reading and writing.
var (
	// ErrFrameTooLarge means a frame's declared or actual length exceeds
	// the limit. Nothing was allocated for it; the stream cannot be
	// resynchronised and should be closed.
	ErrFrameTooLarge = errors.New("transport: frame too large")
	// ErrEmptyFrame means a frame declared a zero length, which the
	// protocol never sends.
	ErrEmptyFrame = errors.New("transport: zero-length frame")
	// ErrTruncatedFrame means the stream ended inside a frame (header or
	// payload). It matches io.ErrUnexpectedEOF too.
	ErrTruncatedFrame = &truncatedError{}
	// ErrOverBudget means a frame's payload needs more memory than the
	// Reader's [Budget] has left: other readers sharing it hold the rest.
	// The stream is inside the frame and should be closed.
	ErrOverBudget = errors.New("transport: the payload memory shared by connections not yet authenticated is in use")
)

type truncatedError struct{}

func (*truncatedError) Error() string        { return "transport: stream ended inside a frame" }
func (*truncatedError) Is(target error) bool { return target == io.ErrUnexpectedEOF }

// Reader reads frames from a stream through a read-ahead buffer. The zero
// value is not usable; call [NewReader]. A Reader is not safe for concurrent
// use.
type Reader struct {
	r      io.Reader     // br, or the raw stream for a one-shot read
	br     *bufio.Reader // nil for a one-shot read
	max    int
	buf    []byte
	budget *Budget // charged for buf beyond eagerAlloc; nil: nothing is
	held   int64   // what buf holds of budget
}

// SetBudget makes the Reader take the payload memory of its frames beyond
// their first 64 KiB from b from now on, or from no budget (nil). What it
// holds of the budget it had is given back; a buffer it keeps is not
// charged to b.
func (fr *Reader) SetBudget(b *Budget) {
	fr.giveBack()
	fr.budget = b
}

// Release lets the Reader's payload buffer go and gives back what it
// holds of its budget: call it when done with a Reader that has one. The
// Reader may still be used; its next frame starts a new buffer.
func (fr *Reader) Release() {
	fr.giveBack()
	fr.buf = nil
}

// Trim lets a payload buffer over 64 KiB go, and what it holds of the
// budget with it, keeping a smaller one for the next frame. A receiver
// whose frames are charged calls it once it is done with a batch, so
// that a connection holds the shared memory only while it reads and
// handles a large frame, not while it waits for the next one.
func (fr *Reader) Trim() {
	if cap(fr.buf) > eagerAlloc {
		fr.Release()
	}
}

// giveBack returns what the Reader holds to its budget.
func (fr *Reader) giveBack() {
	if fr.held > 0 {
		fr.budget.free.Add(fr.held)
	}
	fr.held = 0
}

// reserve makes room for a payload buffer of capacity c: what c holds
// beyond eagerAlloc is taken from the budget, if the Reader has one,
// less what its buffer holds already.
func (fr *Reader) reserve(c int) error {
	if fr.budget == nil {
		return nil
	}
	need := int64(c-eagerAlloc) - fr.held
	if need <= 0 {
		return nil
	}
	if !fr.budget.take(need) {
		return ErrOverBudget
	}
	fr.held += need
	return nil
}

// NewReader returns a Reader that refuses frames longer than max bytes
// (max <= 0 or above [MaxFrameSize] means MaxFrameSize).
func NewReader(r io.Reader, max int) *Reader {
	if max <= 0 || max > MaxFrameSize {
		max = MaxFrameSize
	}
	br := bufio.NewReaderSize(r, readBufferSize)
	return &Reader{r: br, br: br, max: max}
}

// Buffered reports how many bytes are read ahead and not yet returned.
func (fr *Reader) Buffered() int { return fr.br.Buffered() }

// PeekByte waits for the next byte and returns it without consuming it.
func (fr *Reader) PeekByte() (byte, error) {
	b, err := fr.br.Peek(1)
	if err != nil {
		return 0, err
	}
	return b[0], nil
}

// FrameBuffered reports whether the next frame is wholly read ahead, so
// that ReadFrame returns it (or its length error) without reading the
// stream, hence without blocking.
func (fr *Reader) FrameBuffered() bool {
	if fr.br == nil || fr.br.Buffered() < HeaderSize {
		return false
	}
	hdr, _ := fr.br.Peek(HeaderSize) // buffered: no read
	n := uint64(binary.BigEndian.Uint32(hdr))
	return n == 0 || n > uint64(fr.max) || uint64(fr.br.Buffered()-HeaderSize) >= n
}

// PeekFrame waits until the next frame is wholly read ahead, consuming
// nothing, so that a read deadline cutting it short leaves the stream in
// step: call it again, or ReadFrame, later. A frame too large for the
// read-ahead buffer is not waited for (ReadFrame reads it from the
// stream), nor one whose declared length is an error. At a clean end of
// stream it returns io.EOF, inside a frame ErrTruncatedFrame.
func (fr *Reader) PeekFrame() error {
	hdr, err := fr.br.Peek(HeaderSize)
	if err != nil {
		if len(hdr) > 0 && errors.Is(err, io.EOF) {
			return ErrTruncatedFrame
		}
		return err
	}
	n := uint64(binary.BigEndian.Uint32(hdr))
	if n == 0 || n > uint64(fr.max) || n > uint64(fr.br.Size()-HeaderSize) {
		return nil
	}
	if _, err := fr.br.Peek(HeaderSize + int(n)); err != nil {
		if errors.Is(err, io.EOF) {
			return ErrTruncatedFrame
		}
		return err
	}
	return nil
}

// Stream returns the stream as the Reader sees it: the bytes read ahead,
// then the rest. A connection that turns out to speak something else than
// frames is handed on with it, so nothing read ahead is lost.
func (fr *Reader) Stream() io.Reader { return fr.br }

// Peek waits until at least one byte of the next frame is available,
// without consuming it. Receivers use it to start a frame's deadline at the
// frame's first byte. At a clean end of stream it returns io.EOF.
func (fr *Reader) Peek() error {
	_, err := fr.br.Peek(1)
	return err
}

// ReadMore reads the stream once more into the read-ahead, consuming
// nothing, and reports whether that added anything; false also when the
// read-ahead is full. Under a read deadline already passed it takes only
// what the stream returns without waiting: a TLS connection returns one
// record per read, so a receiver calls it to see whether the next record
// has arrived whole before it ends a batch of frames. An error of a read
// that returned nothing (a deadline's included) is not kept: the next
// read tries again. One that came with data (the end of the stream, say)
// is the next read's.
func (fr *Reader) ReadMore() bool {
	if fr.br == nil {
		return false
	}
	n := fr.br.Buffered()
	if n >= fr.br.Size() {
		return false
	}
	got, _ := fr.br.Peek(n + 1)
	return len(got) > n
}

// ReadFrame returns the next frame's payload. The slice is valid until the
// next call. At a clean end of stream (no byte of a new frame) it returns
// io.EOF; inside a frame, [ErrTruncatedFrame]. A declared length of zero
// gives [ErrEmptyFrame] and one above the limit [ErrFrameTooLarge], before
// any payload is read or allocated; after either the stream is out of step
// and must be closed. A payload over 64 KiB gets a buffer of its declared
// size once its first 64 KiB have arrived, taken from the Reader's
// budget if it has one: [ErrOverBudget] when that is short, and the
// stream must be closed. Other errors are the underlying reader's.
func (fr *Reader) ReadFrame() ([]byte, error) {
	var hdr [HeaderSize]byte
	if n, err := io.ReadFull(fr.r, hdr[:]); err != nil {
		if err == io.ErrUnexpectedEOF || (err == io.EOF && n > 0) {
			return nil, ErrTruncatedFrame
		}
		return nil, err
	}
	n := binary.BigEndian.Uint32(hdr[:])
	switch {
	case n == 0:
		return nil, ErrEmptyFrame
	case uint64(n) > uint64(fr.max):
		return nil, fmt.Errorf("%w: %d bytes declared, limit %d", ErrFrameTooLarge, n, fr.max)
	}
	size := int(n)
	if cap(fr.buf) > eagerAlloc && size <= eagerAlloc {
		fr.Release() // let a one-off large buffer go
	}
	if cap(fr.buf) < min(size, eagerAlloc) {
		fr.buf = make([]byte, 0, min(size, eagerAlloc))
	}
	buf := fr.buf[:0]
	for len(buf) < size {
		if len(buf) == cap(buf) {
			// What arrived fills the buffer: one of the declared size
			// now, not a trail of ever larger copies.
			if err := fr.reserve(size); err != nil {
				return nil, err
			}
			buf = append(make([]byte, 0, size), buf...)
			fr.buf = buf // its charge is fr.held, whatever happens next
		}
		chunk := buf[len(buf):min(cap(buf), size)]
		m, err := io.ReadFull(fr.r, chunk)
		buf = buf[:len(buf)+m]
		if err != nil {
			if err == io.EOF || err == io.ErrUnexpectedEOF {
				return nil, ErrTruncatedFrame
			}
			return nil, err
		}
	}
	fr.buf = buf
	return buf, nil
}

// ReadFrame reads one frame from r into a new slice, reading nothing past
// the frame: for one-shot readers. Errors are as for [Reader.ReadFrame].
func ReadFrame(r io.Reader, max int) ([]byte, error) {
	fr := Reader{r: r, max: max}
	if max <= 0 || max > MaxFrameSize {
		fr.max = MaxFrameSize
	}
	return fr.ReadFrame()
}

// StartFrame appends a placeholder header to dst and returns the extended
// slice and the header's offset. Append the payload, then call
// [FinishFrame]: a frame is built in place, with no copy of the payload.
func StartFrame(dst []byte) ([]byte, int) {
	return append(dst, 0, 0, 0, 0), len(dst)
}

// FinishFrame fills in the header at offset start with the length of the
// payload that follows it. It refuses empty payloads and payloads over
// [MaxFrameSize].
func FinishFrame(frame []byte, start int) error {
	n := len(frame) - start - HeaderSize
	switch {
	case start < 0 || n < 0:
		return errors.New("transport: bug: FinishFrame without StartFrame")
	case n == 0:
		return ErrEmptyFrame
	case n > MaxFrameSize:
		return fmt.Errorf("%w: %d bytes, limit %d", ErrFrameTooLarge, n, MaxFrameSize)
	}
	binary.BigEndian.PutUint32(frame[start:], uint32(n))
	return nil
}

// AppendFrame appends header and payload to dst.
func AppendFrame(dst, payload []byte) ([]byte, error) {
	dst, start := StartFrame(dst)
	dst = append(dst, payload...)
	if err := FinishFrame(dst, start); err != nil {
		return dst[:start], err
	}
	return dst, nil
}

// WriteFrame writes one frame to w in a single Write call.
func WriteFrame(w io.Writer, payload []byte) error {
	buf, err := AppendFrame(make([]byte, 0, HeaderSize+len(payload)), payload)
	if err != nil {
		return err
	}
	_, err = w.Write(buf)
	return err
}
