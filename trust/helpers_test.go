package trust

import (
	"strings"
	"testing"

	"github.com/meerkatd/meerkatd/identity"
	"github.com/meerkatd/meerkatd/transport"
)

// testKey returns a valid, distinct PeerID for each n > 0.
func testKey(n byte) identity.PeerID {
	var id identity.PeerID
	for i := range id {
		id[i] = n ^ byte(i)
	}
	id[0] = n
	return id
}

// withKeys replaces "@1" … "@9" in s with the text of testKey(1) … (9).
func withKeys(s string) string {
	for n := byte(1); n <= 9; n++ {
		s = strings.ReplaceAll(s, "@"+string('0'+rune(n)), testKey(n).String())
	}
	return s
}

func mustAddr(t testing.TB, s string) transport.Addr {
	t.Helper()
	a, err := transport.ParseAddr(s)
	if err != nil {
		t.Fatalf("ParseAddr(%q): %v", s, err)
	}
	return a
}

func peer(t testing.TB, name string, key byte, addr string, meta string) Peer {
	t.Helper()
	p := Peer{Name: name, ID: testKey(key), Addr: mustAddr(t, addr)}
	if meta != "" {
		p.Meta = []byte(meta)
	}
	return p
}

func mustNew(t testing.TB, peers ...Peer) *List {
	t.Helper()
	l, err := New(peers...)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	return l
}

// rowErrors flattens err (and any errors.Join inside it) into its
// RowErrors.
func rowErrors(err error) []*RowError {
	var out []*RowError
	var walk func(error)
	walk = func(e error) {
		if re, ok := e.(*RowError); ok {
			out = append(out, re)
			return
		}
		if j, ok := e.(interface{ Unwrap() []error }); ok {
			for _, x := range j.Unwrap() {
				walk(x)
			}
		}
	}
	walk(err)
	return out
}
