package trust

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// largeTrustFile returns a trust file of n peers, larger than
// cheapCompareSize for n in the hundreds.
func largeTrustFile(n int) []byte {
	var b bytes.Buffer
	b.WriteString(`{"peers": [`)
	for i := range n {
		if i > 0 {
			b.WriteString(",")
		}
		id := testKey(1)
		id[0], id[1], id[2] = 1, byte(i), byte(i>>8)
		fmt.Fprintf(&b, `{"name":"p%d","pubkey":"%s","addr":"tcp://h%d:1"}`, i, id.String(), i)
	}
	b.WriteString("]}\n")
	return b.Bytes()
}

// A large file caught half-written, then completed within the same mtime
// tick, is still picked up: a failed read is never trusted as "unchanged".
func TestWatcherRereadsAfterHalfWrittenLargeFile(t *testing.T) {
	p := filepath.Join(t.TempDir(), FileName)
	good := largeTrustFile(1000)
	if len(good) <= cheapCompareSize {
		t.Fatalf("test file of %d bytes is not large", len(good))
	}
	if err := os.WriteFile(p, good, 0o600); err != nil {
		t.Fatal(err)
	}
	var got []string
	w := NewWatcher(p, nil, time.Hour, func(l *List, err error) {
		if err != nil {
			got = append(got, "error")
			return
		}
		first, _ := l.ByName("q0")
		got = append(got, fmt.Sprintf("%d q0=%v", l.Len(), first.Name == "q0"))
	})
	w.check(false)
	// A same-size in-place rewrite, polled while half done.
	good2 := bytes.Replace(good, []byte(`"p0"`), []byte(`"q0"`), 1)
	f, err := os.OpenFile(p, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	f.WriteAt(bytes.Repeat([]byte{' '}, len(good2)/2), 0)
	mt := time.Now().Add(-time.Hour) // an old tick: racyWindow alone would not force a read
	os.Chtimes(p, mt, mt)
	w.check(false)
	f.WriteAt(good2, 0)
	os.Chtimes(p, mt, mt) // same mtime tick, same size
	w.check(false)
	want := "1000 q0=true"
	if len(got) < 3 || got[len(got)-1] != want {
		t.Fatalf("reports %s; want the completed file (%s) last", strings.Join(got, ", "), want)
	}
}

// Concurrent Updates each add a peer; none is lost.
func TestUpdateConcurrentNoLostChanges(t *testing.T) {
	p := filepath.Join(t.TempDir(), FileName)
	const n = 12
	errs := make(chan error, n)
	for i := range n {
		go func() {
			id := testKey(1)
			id[0], id[1] = 7, byte(i)
			peer := Peer{Name: fmt.Sprintf("peer%d", i), ID: id}
			peer.Addr.Scheme, peer.Addr.Host, peer.Addr.Port = "tcp", "h", 1
			_, err := Update(p, func(l *List) (*List, error) { return l.With(peer) })
			errs <- err
		}()
	}
	for range n {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	l, err := Load(p)
	if err != nil {
		t.Fatal(err)
	}
	if l.Len() != n {
		t.Fatalf("%d peers after %d concurrent updates", l.Len(), n)
	}
}
