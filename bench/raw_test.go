package bench

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/meerkatd/meerkatd/identity"
	"github.com/meerkatd/meerkatd/transport"
)

// newKeypair is a fresh identity.Keypair, the node's signing key.
func newKeypair(t testing.TB) *identity.Keypair {
	t.Helper()
	kp, err := identity.GenerateKeypair()
	if err != nil {
		t.Fatal(err)
	}
	return kp
}

func TestRawFrames(t *testing.T) {
	kp := newKeypair(t)
	pub, otherPub := kp.ID(), newKeypair(t).ID()
	msg := []byte("the signing input of an envelope")
	frame, err := rawSigned(nil, kp, msg)
	if err != nil {
		t.Fatal(err)
	}
	payload, err := transport.ReadFrame(bytes.NewReader(frame), 0)
	if err != nil {
		t.Fatal(err)
	}
	corrupt := bytes.Clone(payload)
	corrupt[3] ^= 1
	for _, tc := range []struct {
		name    string
		pub     identity.PeerID
		payload []byte
		ok      bool
	}{
		{"genuine", pub, payload, true},
		{"corrupted signature", pub, corrupt, false},
		{"another key", otherPub, payload, false},
		{"message changed", pub, append(bytes.Clone(payload), 'x'), false},
		{"signature only", pub, payload[:sigSize], false},
		{"too short", pub, payload[:10], false},
		{"empty", pub, nil, false},
	} {
		got, err := rawOpen(tc.pub, tc.payload)
		if tc.ok != (err == nil) {
			t.Errorf("%s: rawOpen error %v, want ok=%v", tc.name, err, tc.ok)
		}
		if tc.ok && !bytes.Equal(got, msg) {
			t.Errorf("%s: rawOpen = %q, want %q", tc.name, got, msg)
		}
	}
	for _, tc := range []struct {
		in  string
		key string
		ok  bool
	}{
		{string(rawHello) + "KEY", "KEY", true},
		{string(rawHello), "", true},
		{"meerkatd-bench-raw/2 KEY", "", false},
		{"", "", false},
		{"ping", "", false},
	} {
		key, ok := isRawHello([]byte(tc.in))
		if ok != tc.ok || (ok && string(key) != tc.key) {
			t.Errorf("isRawHello(%q) = %q, %v; want %q, %v", tc.in, key, ok, tc.key, tc.ok)
		}
	}
}

func FuzzRawOpen(f *testing.F) {
	kp := newKeypair(f)
	pub := kp.ID()
	frame, err := rawSigned(nil, kp, []byte("seed message"))
	if err != nil {
		f.Fatal(err)
	}
	f.Add(frame[transport.HeaderSize:])
	f.Add([]byte{})
	f.Add(make([]byte, sigSize))
	f.Fuzz(func(t *testing.T, payload []byte) {
		msg, err := rawOpen(pub, payload)
		if err != nil {
			return
		}
		// Accepted: it must be a valid signature over what it returns.
		if len(payload) < sigSize || !bytes.Equal(msg, payload[sigSize:]) ||
			!pub.Verify(msg, payload[:sigSize]) {
			t.Fatalf("rawOpen accepted %x", payload)
		}
	})
}

// startRawServer runs serve on the server end of a pipe and reads the key
// it announces from the client end; serve's result comes on served.
func startRawServer(t *testing.T, serve func(srv net.Conn) error) (cli net.Conn, key identity.PeerID, served chan error) {
	t.Helper()
	srv, cli := net.Pipe()
	t.Cleanup(func() { cli.Close() })
	served = make(chan error, 1)
	go func() {
		defer srv.Close()
		served <- serve(srv)
	}()
	cli.SetDeadline(time.Now().Add(10 * time.Second))
	keyBytes, err := transport.ReadFrame(cli, 0)
	if err != nil {
		t.Fatalf("server key: %v", err)
	}
	if key, err = identity.PeerIDFromBytes(keyBytes); err != nil {
		t.Fatalf("server key %x: %v", keyBytes, err)
	}
	return cli, key, served
}

// TestServeRawCrypto: the echo process's crypto side answers each frame
// signed with the key it announced, and drops a connection whose frame
// does not verify under the client's key.
func TestServeRawCrypto(t *testing.T) {
	client, stranger := newKeypair(t), newKeypair(t)
	clientPub := client.ID()
	for _, tc := range []struct {
		name   string
		signer *identity.Keypair
		ok     bool
	}{{"client's key", client, true}, {"another key", stranger, false}} {
		t.Run(tc.name, func(t *testing.T) {
			cli, key, served := startRawServer(t, func(srv net.Conn) error {
				return serveRawCrypto(srv, bufio.NewReader(srv), clientPub[:])
			})
			msg := []byte("exchange")
			for i := range 3 {
				frame, err := rawSigned(nil, tc.signer, msg)
				if err != nil {
					t.Fatal(err)
				}
				if _, err := cli.Write(frame); err != nil {
					if tc.ok {
						t.Fatalf("write %d: %v", i, err)
					}
					break
				}
				answer, err := transport.ReadFrame(cli, 0)
				if !tc.ok {
					if err == nil {
						t.Fatalf("answer to a frame signed by another key: %x", answer)
					}
					break
				}
				if err != nil {
					t.Fatalf("answer %d: %v", i, err)
				}
				if got, err := rawOpen(key, answer); err != nil || !bytes.Equal(got, msg) {
					t.Fatalf("answer %d: %q, %v", i, got, err)
				}
			}
			cli.Close()
			err := <-served
			if tc.ok && err != nil {
				t.Errorf("serveRawCrypto: %v", err)
			}
			if !tc.ok && (err == nil || errors.Is(err, net.ErrClosed)) {
				t.Errorf("serveRawCrypto: %v, want the bad signature", err)
			}
		})
	}
}

// rawIDs is what a batched answer signs for msgs: their count, then the
// first rawIDSize bytes of each.
func rawIDs(msgs ...[]byte) []byte {
	out := []byte{byte(len(msgs) >> 8), byte(len(msgs))}
	for _, m := range msgs {
		out = append(out, m[:rawIDSize]...)
	}
	return out
}

// TestServeRawBatched: the echo process's batched side verifies the
// frames that arrive together in batches of at most rawBatchMax (split in
// two from rawSplit, a lone frame alone) and answers each batch with one
// frame, signed with the key it announced, naming its messages in order.
// A frame that does not verify under the client's key, wherever it is in
// its batch, or is too short to name, ends the connection with that
// error.
func TestServeRawBatched(t *testing.T) {
	client, stranger := newKeypair(t), newKeypair(t)
	clientPub := client.ID()
	type write struct {
		n     int // frames, written at once
		bad   int // index of the one signed by another key, or -1
		short bool
	}
	for _, tc := range []struct {
		name    string
		writes  []write
		wantErr string // from the last write
	}{
		{"all the client's", []write{{100, -1, false}, {5, -1, false}, {1, -1, false}, {1, -1, false}}, ""},
		{"bad in the first batch's first half", []write{{100, 10, false}}, "bad signature"},
		{"bad in the first batch's second half", []write{{100, 50, false}}, "bad signature"},
		{"bad in the second batch", []write{{100, 90, false}}, "bad signature"},
		{"bad in a small batch after a good one", []write{{100, -1, false}, {5, 3, false}}, "bad signature"},
		{"a lone bad one after a good batch", []write{{100, -1, false}, {1, 0, false}}, "bad signature"},
		{"too short", []write{{3, -1, true}}, "too short"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cli, key, served := startRawServer(t, func(srv net.Conn) error {
				return serveRawBatched(srv, srv, clientPub[:])
			})
			seq := 0
			for wi, w := range tc.writes {
				var (
					all  []byte
					msgs [][]byte
					err  error
				)
				for i := range w.n {
					signer := client
					if i == w.bad {
						signer = stranger
					}
					m := fmt.Appendf(nil, "message %04d, signed by the client", seq)
					seq++
					msgs = append(msgs, m)
					if all, err = rawSigned(all, signer, m); err != nil {
						t.Fatal(err)
					}
				}
				if w.short {
					if all, err = transport.AppendFrame(all, make([]byte, sigSize+rawIDSize-1)); err != nil {
						t.Fatal(err)
					}
				}
				go cli.Write(all)
				if last := wi == len(tc.writes)-1; last && tc.wantErr != "" {
					// The batches before the one with the bad frame (or
					// the one too short) are answered, that one is not.
					if w.bad >= rawBatchMax {
						readAnswer(t, cli, key, msgs[:rawBatchMax])
					}
					if answer, err := transport.ReadFrame(cli, 0); err == nil {
						t.Fatalf("answer to a batch with a bad frame: %x", answer)
					}
					break
				}
				// A batch per rawBatchMax frames, an answer per batch.
				for len(msgs) > 0 {
					k := min(len(msgs), rawBatchMax)
					readAnswer(t, cli, key, msgs[:k])
					msgs = msgs[k:]
				}
			}
			cli.Close()
			err := <-served
			if tc.wantErr == "" && err != nil {
				t.Errorf("serveRawBatched: %v", err)
			}
			if tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)) {
				t.Errorf("serveRawBatched: %v, want %q", err, tc.wantErr)
			}
		})
	}
}

// readAnswer reads one answer of a batched connection and checks that it
// names msgs.
func readAnswer(t *testing.T, cli net.Conn, key identity.PeerID, msgs [][]byte) {
	t.Helper()
	answer, err := transport.ReadFrame(cli, 0)
	if err != nil {
		t.Fatalf("answer naming %d messages: %v", len(msgs), err)
	}
	if got, err := rawOpen(key, answer); err != nil || !bytes.Equal(got, rawIDs(msgs...)) {
		t.Fatalf("answer: %x, %v; want %x", got, err, rawIDs(msgs...))
	}
	if n, err := rawBatchAnswer(key, answer); err != nil || n != len(msgs) {
		t.Fatalf("rawBatchAnswer: %d, %v; want %d", n, err, len(msgs))
	}
}

func TestRawBatchAnswer(t *testing.T) {
	kp := newKeypair(t)
	pub, otherPub := kp.ID(), newKeypair(t).ID()
	id := bytes.Repeat([]byte{7}, rawIDSize)
	signed := func(msg []byte) []byte {
		t.Helper()
		frame, err := rawSigned(nil, kp, msg)
		if err != nil {
			t.Fatal(err)
		}
		return frame[transport.HeaderSize:]
	}
	ids := func(count int, n int) []byte {
		out := []byte{byte(count >> 8), byte(count)}
		for range n {
			out = append(out, id...)
		}
		return out
	}
	for _, tc := range []struct {
		name    string
		pub     identity.PeerID
		payload []byte
		want    int // 0: refused
	}{
		{"one", pub, signed(ids(1, 1)), 1},
		{"the most", pub, signed(ids(rawAnswerMax, rawAnswerMax)), rawAnswerMax},
		{"more than an answer", pub, signed(ids(rawAnswerMax+1, rawAnswerMax+1)), 0},
		{"none", pub, signed(ids(0, 0)), 0},
		{"count above the ids", pub, signed(ids(3, 2)), 0},
		{"count below the ids", pub, signed(ids(2, 3)), 0},
		{"a byte over", pub, signed(append(ids(1, 1), 0)), 0},
		{"no count", pub, signed([]byte{1}), 0},
		{"empty message", pub, signed(nil), 0},
		{"another key", otherPub, signed(ids(1, 1)), 0},
		{"no signature", pub, ids(1, 1), 0},
	} {
		n, err := rawBatchAnswer(tc.pub, tc.payload)
		if (err == nil) != (tc.want > 0) || n != tc.want {
			t.Errorf("%s: rawBatchAnswer = %d, %v; want %d", tc.name, n, err, tc.want)
		}
	}
}

func FuzzRawBatchAnswer(f *testing.F) {
	kp := newKeypair(f)
	pub := kp.ID()
	for _, msg := range [][]byte{rawIDs(make([]byte, rawIDSize)), {0, 2}, nil} {
		frame, err := rawSigned(nil, kp, msg)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(frame[transport.HeaderSize:])
	}
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, payload []byte) {
		n, err := rawBatchAnswer(pub, payload)
		if err != nil {
			if n != 0 {
				t.Fatalf("refused with a count: %d", n)
			}
			return
		}
		// Accepted: a valid signature over a count that its ids match.
		msg, err := rawOpen(pub, payload)
		if err != nil || n < 1 || n > rawAnswerMax || len(msg) != 2+n*rawIDSize || int(msg[0])<<8|int(msg[1]) != n {
			t.Fatalf("rawBatchAnswer accepted %x as %d", payload, n)
		}
	})
}

// TestGroupWriter: frames written at once from many goroutines arrive
// whole, each goroutine's in its order, however the writes are grouped.
func TestGroupWriter(t *testing.T) {
	const writers, each = 8, 200
	srv, cli := net.Pipe()
	defer srv.Close()
	w := &groupWriter{c: cli}
	got := make(chan error, 1)
	srv.SetReadDeadline(time.Now().Add(10 * time.Second)) // a frame left unwritten fails the test
	go func() {
		fr := transport.NewReader(srv, 0)
		next := make([]int, writers)
		for range writers * each {
			p, err := fr.ReadFrame()
			if err != nil {
				got <- err
				srv.Close()
				return
			}
			var g, i int
			if _, err := fmt.Sscanf(string(p), "writer %d frame %d", &g, &i); err != nil || g < 0 || g >= writers || i != next[g] {
				got <- fmt.Errorf("frame %q out of order or garbled (want frame %d of its writer)", p, next[min(max(g, 0), writers-1)])
				srv.Close() // the writers fail rather than wait for a reader
				return
			}
			next[g]++
		}
		got <- nil
	}()
	var wg sync.WaitGroup
	for g := range writers {
		wg.Go(func() {
			for i := range each {
				frame, err := transport.AppendFrame(nil, fmt.Appendf(nil, "writer %d frame %d", g, i))
				if err == nil {
					err = w.write(frame)
				}
				if err != nil {
					t.Errorf("writer %d: %v", g, err)
					return
				}
			}
		})
	}
	wg.Wait()
	if err := <-got; err != nil {
		t.Fatal(err)
	}
	cli.Close()
	frame, _ := transport.AppendFrame(nil, []byte("after close"))
	if err := w.write(frame); err == nil {
		t.Fatal("a write on a closed connection succeeded")
	}
}

// gatedConn holds its first Write until release is closed, and records
// what is written.
type gatedConn struct {
	net.Conn
	entered, release chan struct{}
	mu               sync.Mutex
	got              []byte
	calls            int
}

func (g *gatedConn) Write(p []byte) (int, error) {
	g.mu.Lock()
	g.calls++
	first := g.calls == 1
	g.mu.Unlock()
	if first {
		close(g.entered)
		<-g.release
	}
	g.mu.Lock()
	g.got = append(g.got, p...)
	g.mu.Unlock()
	return len(p), nil
}

// TestGroupWriterTakesWaiting: a frame that comes while a write is under
// way returns at once, and the goroutine writing writes it next.
func TestGroupWriterTakesWaiting(t *testing.T) {
	g := &gatedConn{entered: make(chan struct{}), release: make(chan struct{})}
	w := &groupWriter{c: g}
	first := make(chan error, 1)
	go func() { first <- w.write([]byte("first ")) }()
	<-g.entered
	queued := make(chan error, 1)
	go func() { // must not wait for the first write
		err := w.write([]byte("second "))
		if err == nil {
			err = w.write([]byte("third"))
		}
		queued <- err
	}()
	select {
	case err := <-queued:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		close(g.release)
		t.Fatal("a write waited for the one under way")
	}
	close(g.release)
	if err := <-first; err != nil {
		t.Fatal(err)
	}
	if string(g.got) != "first second third" || g.calls != 2 {
		t.Fatalf("wrote %q in %d writes, want %q in 2", g.got, g.calls, "first second third")
	}
}

// TestRawMessagesDistinct: a raw connection signs rawMsgs distinct
// signing inputs in turn (verification runs in variable time, so one
// input repeated would flatter the anchors), each taken as often as the
// others however many goroutines take them.
func TestRawMessagesDistinct(t *testing.T) {
	kp := newKeypair(t)
	msgs, err := rawSignables(kp, newKeypair(t).ID(), rawMsgs)
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]int{}
	for i, m := range msgs {
		if j, dup := seen[string(m)]; dup {
			t.Fatalf("signing inputs %d and %d are the same", j, i)
		}
		seen[string(m)] = i
	}
	rc := &rawConn{msgs: msgs}
	const takers, rounds = 4, 3
	var (
		mu    sync.Mutex
		taken = map[string]int{}
		wg    sync.WaitGroup
	)
	for range takers {
		wg.Go(func() {
			for range rounds * rawMsgs / takers {
				m := rc.nextMsg()
				mu.Lock()
				taken[string(m)]++
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	if len(taken) != rawMsgs {
		t.Fatalf("%d distinct inputs taken, want %d", len(taken), rawMsgs)
	}
	for m, n := range taken {
		if n != rounds {
			t.Fatalf("input %d taken %d times, want %d", seen[m], n, rounds)
		}
	}
}
