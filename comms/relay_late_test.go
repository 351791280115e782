package comms

import (
	"testing"
	"time"

	"github.com/meerkatd/meerkatd/identity"
)

// lateKey is a distinct key for i.
func lateKey(i int) dedupKey {
	var k dedupKey
	k.id[0], k.id[1], k.id[2] = byte(i), byte(i>>8), byte(i>>16)
	return k
}

// Acks nobody waited for are kept up to maxLateAcks, the oldest forgotten
// first; those older than lateAckTTL go too; one taken and kept again is
// kept from its new time; the order list stays within a bound of what is
// kept however many are taken.
func TestLateAcksKeepTheNewest(t *testing.T) {
	rs := relayState{late: map[dedupKey]time.Time{}}
	t0 := time.Now()
	const over = 100
	for i := range maxLateAcks + over {
		rs.keepLate(lateKey(i), t0)
		if len(rs.late) > maxLateAcks {
			t.Fatalf("after %d acks %d are kept, more than %d", i+1, len(rs.late), maxLateAcks)
		}
	}
	for i := range maxLateAcks + over {
		_, kept := rs.late[lateKey(i)]
		if want := i >= over; kept != want {
			t.Fatalf("ack %d kept: %v, want %v (the %d oldest forgotten)", i, kept, want, over)
		}
	}

	// Taken (an attempt found it) and kept again later: the later time
	// counts, not the earlier place in the order.
	k := lateKey(over)
	delete(rs.late, k)
	rs.keepLate(k, t0.Add(time.Second))
	rs.keepLate(lateKey(-1), t0.Add(time.Second)) // full: the oldest goes
	if _, ok := rs.late[k]; !ok {
		t.Fatal("an ack kept again was forgotten at its earlier place in the order")
	}
	if _, ok := rs.late[lateKey(over+1)]; ok {
		t.Fatal("the oldest ack was kept past the bound")
	}

	// Past the time-to-live every old one goes at the next arrival.
	rs.keepLate(lateKey(-2), t0.Add(lateAckTTL+2*time.Second))
	if len(rs.late) != 1 {
		t.Fatalf("%d acks kept after the time-to-live, want only the new one", len(rs.late))
	}

	// Acks taken as fast as they come keep the order list small.
	rs = relayState{late: map[dedupKey]time.Time{}}
	for i := range 10 * maxLateAcks {
		rs.keepLate(lateKey(i), t0)
		delete(rs.late, lateKey(i))
	}
	if n := len(rs.lateQ); n > 1024+1 {
		t.Fatalf("the order list holds %d entries for %d acks kept", n, len(rs.late))
	}
}

// BenchmarkLateAcksFull keeps acks nobody waits for once maxLateAcks are
// kept: each one costs the same as when few are (ns/op per ack).
func BenchmarkLateAcksFull(b *testing.B) {
	rs := relayState{late: map[dedupKey]time.Time{}}
	now := time.Now()
	for i := range maxLateAcks {
		rs.keepLate(lateKey(i), now)
	}
	var k dedupKey
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		k.id = identity.UUID{}
		k.id[0], k.id[1], k.id[2], k.id[3] = byte(i), byte(i>>8), byte(i>>16), 1
		rs.keepLate(k, now)
	}
}
