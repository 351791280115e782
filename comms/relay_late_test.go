package comms

import (
	"bytes"
	"errors"
	"testing"
	"time"

	"github.com/meerkatd/meerkatd/comms/wire"
	"github.com/meerkatd/meerkatd/identity"
	"github.com/meerkatd/meerkatd/transport"
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

// Sealing adds less than sealSlack to an envelope, whatever its size, so
// CheckSealable's fast path never passes one that does not fit; a payload
// that does not fit once sealed is ErrTooLarge, one that does is not.
func TestSealSlack(t *testing.T) {
	a, b := pair(t, "uds", Options{})
	to := b.kp.ID()
	for _, n := range []int{1, 1000, 100_000, transport.MaxFrameSize - sealSlack} {
		inner := bytes.Repeat([]byte{0x61}, n)
		sealed, err := a.r.sealFor(to, identity.NewUUID(), inner)
		if err != nil {
			t.Fatalf("sealing %d bytes: %v", n, err)
		}
		if over := len(sealed) - n; over >= sealSlack {
			t.Fatalf("sealing %d bytes added %d, sealSlack is %d", n, over, sealSlack)
		}
	}
	fits := bytes.Repeat([]byte{0x61}, transport.MaxFrameSize-sealSlack/2) // checked by sealing
	if err := a.r.CheckSealable(to, identity.NewUUID(), fits[:transport.MaxFrameSize-sealSlack]); err != nil {
		t.Fatalf("a payload within the slack: %v", err)
	}
	tooBig := bytes.Repeat([]byte{0x61}, transport.MaxFrameSize-10)
	if err := a.r.CheckSealable(to, identity.NewUUID(), tooBig); !errors.Is(err, wire.ErrTooLarge) {
		t.Fatalf("a payload too large once sealed: %v, want wire.ErrTooLarge", err)
	}
	_, err := a.r.sealFor(to, identity.NewUUID(), fits)
	if err2 := a.r.CheckSealable(to, identity.NewUUID(), fits); (err == nil) != (err2 == nil) {
		t.Fatalf("CheckSealable %v, sealing %v", err2, err)
	}
}
