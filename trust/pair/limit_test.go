package pair

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/meerkatd/meerkatd/transport"
)

func TestSourceKey(t *testing.T) {
	for _, c := range []struct{ in, want string }{
		{"198.51.100.7", "198.51.100.7"},
		{"::ffff:198.51.100.7", "198.51.100.7"}, // IPv4-mapped: the IPv4 address
		{"2001:db8:1:2::1", "2001:db8:1:2::/64"},
		{"2001:db8:1:2:ffff:ffff:ffff:ffff", "2001:db8:1:2::/64"},
		{"2001:db8:1:3::1", "2001:db8:1:3::/64"},
		{"fe80::1%eth0", "fe80::/64"},
		{"::1", "::/64"},
		{LocalSource, LocalSource},
		{LocalSource + ":1000", LocalSource + ":1000"},
		{"not an address", "not an address"}, // looks like nothing: as it is
	} {
		if got := SourceKey(c.in); got != c.want {
			t.Errorf("SourceKey(%q) = %q, want %q", c.in, got, c.want)
		}
	}
}

// ipv4 returns the i-th address of 10.0.0.0/8.
func ipv4(i int) string { return fmt.Sprintf("10.%d.%d.%d", i>>16&0xff, i>>8&0xff, i&0xff) }

// A spray from many more addresses than the table holds, all within one
// window, does not stop a fresh source from trying the right code, and
// keeps the table bounded.
func TestLimiterSprayDoesNotExhaust(t *testing.T) {
	r := NewResponder(mustKP(t), "alice", nil)
	now := time.Now()
	r.now = func() time.Time { return now }
	for i := range 8 * maxSources {
		for range maxAttempts + 2 { // each address uses up its tries and more
			r.attempt(ipv4(i))
		}
		now = now.Add(time.Millisecond) // 8k addresses within well under a minute
	}
	if !r.attempt("192.0.2.1") {
		t.Fatal("a fresh source is refused after a spray from many addresses")
	}
	if !r.attempt(LocalSource + ":1000") {
		t.Fatal("a local user is refused after a spray from many addresses")
	}
	if n := len(r.attempts.tat); n > maxSources {
		t.Fatalf("the limiter remembers %d sources, more than %d", n, maxSources)
	}
}

// Eviction is fair: a spray of new addresses neither locks out a source
// that has tries left nor gives a source that used up its tries new ones.
func TestLimiterEvictionFair(t *testing.T) {
	var l limiter
	now := time.Now()
	for range maxAttempts {
		if !l.allow("198.51.100.66", now) {
			t.Fatal("the guesser's first tries are refused")
		}
	}
	if !l.allow("198.51.100.1", now) { // a good source: one try
		t.Fatal("the good source is refused")
	}
	for i := range 10 * maxSources {
		l.allow(ipv4(i), now)
	}
	if l.allow("198.51.100.66", now) {
		t.Fatal("a spray of new addresses gave a source that used up its tries a new one")
	}
	if !l.allow("198.51.100.1", now) {
		t.Fatal("a spray of new addresses locked out a source with tries left")
	}
	// The guesser gets one try back per refill, not a new bucket.
	later := now.Add(attemptWindow/maxAttempts + time.Millisecond)
	if !l.allow("198.51.100.66", later) || l.allow("198.51.100.66", later) {
		t.Fatal("want exactly one try back after one refill interval")
	}
}

// Addresses in one IPv6 /64 share one bucket; the next /64 has its own.
func TestLimiterIPv6Per64(t *testing.T) {
	r := NewResponder(mustKP(t), "alice", nil)
	now := time.Now()
	r.now = func() time.Time { return now }
	for i := range maxAttempts {
		if !r.attempt(fmt.Sprintf("2001:db8:1:2::%x", i+1)) {
			t.Fatalf("try %d refused", i)
		}
	}
	if r.attempt("2001:db8:1:2:ffff:1234:5678:9abc") {
		t.Fatal("another address in the same /64 got a try of its own")
	}
	if !r.attempt("2001:db8:1:3::1") {
		t.Fatal("the next /64 is refused")
	}
}

// Refused attempts cost nothing: a source that keeps knocking gets its
// tries back at the refill rate, so the legitimate user behind a shared
// address waits at most one refill for a try.
func TestLimiterRefusedAttemptsFree(t *testing.T) {
	var l limiter
	now := time.Now()
	for range maxAttempts {
		l.allow("198.51.100.9", now)
	}
	for i := range 1000 {
		if l.allow("198.51.100.9", now.Add(time.Duration(i)*time.Millisecond)) {
			t.Fatal("allowed with no tries left")
		}
	}
	if !l.allow("198.51.100.9", now.Add(attemptWindow/maxAttempts)) {
		t.Fatal("refused attempts extended the wait")
	}
}

// At most maxOffers offers are open at once; one more is refused with
// ErrTooManyOffers until one closes.
func TestTooManyOffers(t *testing.T) {
	r := NewResponder(mustKP(t), "alice", nil)
	addr := transport.Addr{Scheme: transport.SchemeUDS, Path: "/tmp/alice.sock"}
	var first *Offer
	for i := range maxOffers {
		o, err := r.Open(addr, time.Minute, "")
		if err != nil {
			t.Fatalf("offer %d: %v", i, err)
		}
		if first == nil {
			first = o
		}
	}
	if _, err := r.Open(addr, time.Minute, ""); !errors.Is(err, ErrTooManyOffers) {
		t.Fatalf("offer %d: %v, want ErrTooManyOffers", maxOffers+1, err)
	}
	r.Close(first)
	if _, err := r.Open(addr, time.Minute, ""); err != nil {
		t.Fatalf("once one closed: %v", err)
	}
}
