package store

import (
	"bytes"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/meerkatd/meerkatd/identity"
	"github.com/meerkatd/meerkatd/internal/testutil"
)

func sentRec(n byte, kind string) SentRecord {
	r := SentRecord{Peer: "bob", Kind: kind, State: SentQueued, Reliable: true,
		Created: time.Unix(1000+int64(n), 0), Updated: time.Unix(1000+int64(n), 0)}
	r.ID[15] = n
	r.To[0] = 7
	return r
}

func TestApplySent(t *testing.T) {
	at := time.Unix(2000, 0)
	var other identity.PeerID
	other[0] = 9
	var resp identity.UUID
	resp[0] = 1
	up := func(ev string) SentUpdate { return SentUpdate{Event: ev, At: at, Text: "why", Attempts: 2} }
	answer := func(status string, from identity.PeerID) SentUpdate {
		return SentUpdate{Event: SentEventResponse, At: at, From: from, ResponseID: resp, Status: status}
	}
	var to identity.PeerID
	to[0] = 7
	cases := []struct {
		name    string
		kind    string
		from    string
		u       SentUpdate
		changed bool
		want    string
	}{
		{"attempt from queued", "message", SentQueued, up(SentEventAttempt), true, SentInFlight},
		{"attempt twice", "message", SentInFlight, up(SentEventAttempt), false, SentInFlight},
		{"attempt of a revived dead letter", "message", SentDead, up(SentEventAttempt), true, SentInFlight},
		{"late attempt after ack", "message", SentAcked, up(SentEventAttempt), false, SentAcked},
		{"retry", "message", SentInFlight, up(SentEventRetry), true, SentQueued},
		{"retry after ack", "message", SentAcked, up(SentEventRetry), false, SentAcked},
		{"ack", "message", SentInFlight, up(SentEventAcked), true, SentAcked},
		{"stored in the broker", "message", SentInFlight, up(SentEventStored), true, SentStored},
		{"stored twice", "message", SentStored, up(SentEventStored), false, SentStored},
		{"stored after the ack", "message", SentAcked, up(SentEventStored), false, SentAcked},
		{"ack once stored", "message", SentStored, up(SentEventAcked), true, SentAcked},
		{"attempt again once stored", "message", SentStored, up(SentEventAttempt), true, SentInFlight},
		{"response written", "response", SentInFlight, up(SentEventAcked), true, SentWritten},
		{"ack of a revived dead letter", "request", SentDead, up(SentEventAcked), true, SentAcked},
		{"dead", "message", SentQueued, up(SentEventDead), true, SentDead},
		{"dead after ack", "message", SentAcked, up(SentEventDead), false, SentAcked},
		{"failed", "message", SentInFlight, up(SentEventFailed), true, SentFailed},
		{"final answer", "request", SentAcked, answer("completed", to), true, SentAnswered},
		{"failed answer", "request", SentAcked, answer("failed", to), true, SentAnswered},
		{"answer before the ack", "request", SentInFlight, answer("completed", to), true, SentAnswered},
		{"ack after the answer keeps it answered", "request", SentAnswered, up(SentEventAcked), true, SentAnswered},
		{"accepted is progress", "request", SentAcked, answer("accepted", to), true, SentAcked},
		{"answer from another peer", "request", SentAcked, answer("completed", other), false, SentAcked},
		{"answer to a message", "message", SentAcked, answer("completed", to), false, SentAcked},
		{"second final answer", "request", SentAnswered, answer("failed", to), false, SentAnswered},
		{"unknown status", "request", SentAcked, answer("done", to), false, SentAcked},
		{"unknown event", "message", SentQueued, up("bogus"), false, SentQueued},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := sentRec(1, c.kind)
			r.State = c.from
			if c.from == SentAnswered {
				r.ResponseID[0], r.ResponseStatus = 5, "completed"
			}
			changed := ApplySent(&r, c.u)
			if changed != c.changed || r.State != c.want {
				t.Fatalf("ApplySent: changed %v state %s, want %v %s", changed, r.State, c.changed, c.want)
			}
			if c.u.Event == SentEventResponse && c.changed {
				if c.u.Status == "accepted" && (r.Progress != 1 || r.ProgressID != resp || !r.ResponseID.IsZero()) {
					t.Fatalf("accepted: progress %d %s, response %s", r.Progress, r.ProgressID, r.ResponseID)
				}
				if c.u.Status != "accepted" && (r.ResponseID != resp || r.ResponseStatus != c.u.Status || r.AckedAt.IsZero()) {
					t.Fatalf("final: %+v", r)
				}
			}
			if c.from == SentAnswered && r.ResponseID[0] != 5 {
				t.Fatalf("the first answer was replaced: %+v", r)
			}
		})
	}
}

// FuzzApplySent: any sequence of events leaves a record in a known state,
// an answer and an acknowledgement are never undone, and nothing panics.
func FuzzApplySent(f *testing.F) {
	f.Add([]byte{0, 2, 5, 1})
	f.Add([]byte{5, 5, 2, 0, 1, 3})
	events := []string{SentEventAttempt, SentEventRetry, SentEventAcked, SentEventDead, SentEventFailed, SentEventResponse, "x"}
	statuses := []string{"accepted", "completed", "failed", ""}
	f.Fuzz(func(t *testing.T, seq []byte) {
		r := sentRec(1, "request")
		for i, b := range seq {
			u := SentUpdate{Event: events[int(b)%len(events)], At: time.Unix(int64(i), 0), Status: statuses[int(b>>4)%len(statuses)]}
			if b&8 == 0 {
				u.From = r.To
			}
			before := r
			ApplySent(&r, u)
			switch r.State {
			case SentQueued, SentInFlight, SentAcked, SentDead, SentFailed, SentAnswered:
			default:
				t.Fatalf("state %q", r.State)
			}
			if before.State == SentAnswered && (r.State != SentAnswered || r.ResponseID != before.ResponseID) {
				t.Fatalf("answer undone: %+v -> %+v", before, r)
			}
			if (before.State == SentAcked) && r.State != SentAcked && r.State != SentAnswered {
				t.Fatalf("ack undone: %s -> %s", before.State, r.State)
			}
		}
	})
}

func TestSentStore(t *testing.T) {
	testutil.CheckGoroutines(t)
	s, path := openStore(t, Options{})
	sn := s.Sent()
	a, b := sentRec(1, "request"), sentRec(2, "message")
	b.To[0] = 8
	for _, r := range []SentRecord{a, b} {
		if err := sn.Put(r); err != nil {
			t.Fatal(err)
		}
	}
	if err := sn.Put(a); err != nil { // ignored, no error
		t.Fatal(err)
	}
	at := time.Unix(3000, 0)
	var resp identity.UUID
	resp[3] = 3
	for _, u := range []SentUpdate{
		{ID: a.ID, Event: SentEventAttempt, At: at},
		{ID: a.ID, Event: SentEventAcked, At: at},
		{ID: a.ID, Event: SentEventResponse, At: at, From: a.To, ResponseID: resp, Status: "accepted"},
		{ID: b.ID, Event: SentEventRetry, At: at, Attempts: 1, Text: "dial: refused"},
		{ID: b.ID, Event: SentEventDead, At: at, Text: "expired"},
		{ID: identity.UUID{9}, Event: SentEventAcked, At: at}, // unknown: ignored
	} {
		if err := sn.Update(u); err != nil {
			t.Fatal(err)
		}
	}
	got, err := sn.Get(b.ID, identity.UUID{42}, a.ID)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 || got[0].ID != b.ID || got[1].ID != a.ID {
		t.Fatalf("Get: %+v", got)
	}
	if g := got[1]; g.State != SentAcked || !g.AckedAt.Equal(at) || g.Progress != 1 || g.ProgressID != resp || g.Peer != "bob" || !g.Reliable || g.Kind != "request" {
		t.Fatalf("a: %+v", g)
	}
	if g := got[0]; g.State != SentDead || g.Reason != "expired" || g.Attempts != 1 || g.LastError != "dial: refused" || !g.DiedAt.Equal(at) {
		t.Fatalf("b: %+v", g)
	}

	// Durable: a new Store on the file sees it all.
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s = reopen(t, path, Options{})
	sn = s.Sent()
	all, err := sn.List(SentQuery{})
	if err != nil || len(all) != 2 || all[0].ID != b.ID {
		t.Fatalf("List after reopen: %+v, %v (want newest first)", all, err)
	}
	only, err := sn.List(SentQuery{To: a.To, Limit: 5})
	if err != nil || len(only) != 1 || only[0].ID != a.ID {
		t.Fatalf("List to a peer: %+v, %v", only, err)
	}
	one, err := sn.List(SentQuery{Limit: 1})
	if err != nil || len(one) != 1 {
		t.Fatalf("List limit 1: %d, %v", len(one), err)
	}

	// Prune drops settled records created before the cutoff only.
	c := sentRec(3, "message") // queued: kept however old
	c.Created = time.Unix(10, 0)
	if err := sn.Put(c); err != nil {
		t.Fatal(err)
	}
	n, _, err := sn.Prune(time.Unix(1002, 0), time.Time{})
	if err != nil || n != 1 {
		t.Fatalf("Prune: %d, %v; want 1", n, err)
	}
	left, _ := sn.List(SentQuery{})
	if len(left) != 2 || left[0].ID != b.ID || left[1].ID != c.ID {
		t.Fatalf("after Prune: %+v", left)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if err := sn.Put(a); !errors.Is(err, ErrClosed) {
		t.Fatalf("Put after Close: %v", err)
	}
	if _, err := sn.List(SentQuery{}); !errors.Is(err, ErrClosed) {
		t.Fatalf("List after Close: %v", err)
	}
}

func TestIdempotencyKeys(t *testing.T) {
	testutil.CheckGoroutines(t)
	s, path := openStore(t, Options{})
	sn := s.Sent()
	t0 := time.Unix(5000, 0)
	k := Idem{Key: "k1", Op: "send_message", ArgsHash: []byte{1, 2}, Owner: "me", Created: t0}
	if got, ok, err := sn.ClaimKey(k, t0.Add(-time.Hour)); err != nil || !ok || got.Key != "k1" {
		t.Fatalf("first claim: %+v %v %v", got, ok, err)
	}
	// In use: another claim sees it running (Result nil).
	other := k
	other.Owner = "you"
	got, ok, err := sn.ClaimKey(other, t0.Add(-time.Hour))
	if err != nil || ok || got.Owner != "me" || got.Result != nil || !bytes.Equal(got.ArgsHash, []byte{1, 2}) {
		t.Fatalf("second claim: %+v %v %v", got, ok, err)
	}
	// Only the owner finishes it.
	if err := sn.FinishKey(Idem{Key: "k1", Owner: "you", Result: []byte(`"x"`)}); err != nil {
		t.Fatal(err)
	}
	k.Result = []byte(`{"id":"1"}`)
	if err := sn.FinishKey(k); err != nil {
		t.Fatal(err)
	}
	s.Close()
	s = reopen(t, path, Options{})
	sn = s.Sent()
	got, ok, err = sn.ClaimKey(other, t0.Add(-time.Hour))
	if err != nil || ok || string(got.Result) != `{"id":"1"}` || got.Op != "send_message" || !got.Created.Equal(t0) {
		t.Fatalf("claim after restart: %+v %v %v", got, ok, err)
	}
	// Past the window the key is free again.
	if got, ok, err := sn.ClaimKey(other, t0.Add(time.Second)); err != nil || !ok || got.Owner != "you" {
		t.Fatalf("claim after the window: %+v %v %v", got, ok, err)
	}
	// A released key can be claimed again; a finished one is not released.
	if err := sn.ReleaseKey(other); err != nil {
		t.Fatal(err)
	}
	if _, ok, err := sn.ClaimKey(k, t0); err != nil || !ok {
		t.Fatalf("claim after release: %v %v", ok, err)
	}
	if _, ok, err := sn.ClaimKey(Idem{Key: "k2", Op: "send_message", Created: t0}, t0); err == nil || ok {
		t.Fatalf("claim without an owner: %v %v", ok, err)
	}
	// Prune by age.
	if _, m, err := sn.Prune(time.Time{}, t0.Add(time.Second)); err != nil || m != 1 {
		t.Fatalf("Prune keys: %d %v", m, err)
	}
}

// Concurrent claims of one key: exactly one wins.
func TestIdempotencyClaimRace(t *testing.T) {
	testutil.CheckGoroutines(t)
	s, _ := openStore(t, Options{})
	sn := s.Sent()
	var wg sync.WaitGroup
	wins := make(chan string, 16)
	for i := range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			k := Idem{Key: "same", Op: "op", ArgsHash: []byte{0}, Owner: fmt.Sprint(i), Created: time.Unix(100, 0)}
			if _, ok, err := sn.ClaimKey(k, time.Unix(0, 0)); err != nil {
				t.Error(err)
			} else if ok {
				wins <- k.Owner
			}
		}()
	}
	wg.Wait()
	close(wins)
	if n := len(wins); n != 1 {
		t.Fatalf("%d claims won, want 1", n)
	}
}

// Write applies a batch in order: a record put and updated in one batch
// ends up updated.
func TestSentWriteBatch(t *testing.T) {
	testutil.CheckGoroutines(t)
	s, _ := openStore(t, Options{})
	sn := s.Sent()
	r := sentRec(4, "message")
	at := time.Unix(4000, 0)
	ops := []SentOp{{Put: &r}, {Update: SentUpdate{ID: r.ID, Event: SentEventAttempt, At: at}}, {Update: SentUpdate{ID: r.ID, Event: SentEventAcked, At: at}}}
	if err := sn.Write(ops); err != nil {
		t.Fatal(err)
	}
	got, err := sn.Get(r.ID)
	if err != nil || len(got) != 1 || got[0].State != SentAcked || !got[0].AckedAt.Equal(at) {
		t.Fatalf("after the batch: %+v, %v", got, err)
	}
}

// A released key is kept: the same call claimed again within the window
// gets the first claim's time (so it names the same call), another call
// or a claim after the window gets its own. A released key does not
// block anyone.
// A key whose call was running when its process stopped (no result) is
// released by ReleaseRunningKeys, as the daemon does at start: the same
// call made again claims it under its first time; a finished key keeps
// its result.
func TestReleaseRunningKeys(t *testing.T) {
	testutil.CheckGoroutines(t)
	s, path := openStore(t, Options{})
	sn := s.Sent()
	t0 := time.Unix(5000, 0)
	window := t0.Add(-time.Hour)
	running := Idem{Key: "k", Op: "send_message", ArgsHash: []byte{1}, Owner: "crashed", Created: t0}
	done := Idem{Key: "d", Op: "send_message", ArgsHash: []byte{2}, Owner: "crashed", Created: t0}
	for _, k := range []Idem{running, done} {
		if _, ok, err := sn.ClaimKey(k, window); err != nil || !ok {
			t.Fatalf("claim %s: %v %v", k.Key, ok, err)
		}
	}
	done.Result = []byte(`{"id":"x"}`)
	if err := sn.FinishKey(done); err != nil {
		t.Fatal(err)
	}
	s.Close()
	s = reopen(t, path, Options{})
	sn = s.Sent()
	if err := sn.ReleaseRunningKeys(); err != nil {
		t.Fatal(err)
	}
	retry := running
	retry.Owner, retry.Created = "restarted", t0.Add(time.Minute)
	got, ok, err := sn.ClaimKey(retry, window)
	if err != nil || !ok || !got.CallAt.Equal(t0) {
		t.Fatalf("the crashed call again: %+v %v %v; want it claimed under its first time %v", got, ok, err, t0)
	}
	again := done
	again.Owner, again.Result = "restarted", nil
	if got, ok, err := sn.ClaimKey(again, window); err != nil || ok || string(got.Result) != `{"id":"x"}` {
		t.Fatalf("a finished key after the release: %+v %v %v; want its result", got, ok, err)
	}
}

func TestIdempotencyKeyReleased(t *testing.T) {
	testutil.CheckGoroutines(t)
	s, path := openStore(t, Options{})
	sn := s.Sent()
	t0 := time.Unix(5000, 0)
	window := t0.Add(-time.Hour)
	first := Idem{Key: "k", Op: "send_message", ArgsHash: []byte{1}, Owner: "a", Created: t0}
	claim := func(k Idem, expired time.Time) Idem {
		t.Helper()
		got, ok, err := sn.ClaimKey(k, expired)
		if err != nil || !ok {
			t.Fatalf("claim %+v: %+v %v %v", k, got, ok, err)
		}
		if got.Owner != k.Owner || got.Result != nil {
			t.Fatalf("claim %+v: %+v, want it owned by %q and running", k, got, k.Owner)
		}
		return got
	}
	claim(first, window)
	if err := sn.ReleaseKey(first); err != nil {
		t.Fatal(err)
	}
	s.Close()
	s = reopen(t, path, Options{})
	sn = s.Sent()

	retry := first
	retry.Owner, retry.Created = "b", t0.Add(time.Minute)
	if got := claim(retry, window); !got.CallAt.Equal(t0) || !got.Created.Equal(retry.Created) {
		t.Fatalf("the same call again: call at %v, created %v; want the first claim's %v, and now", got.CallAt, got.Created, t0)
	}
	// Running again: busy for others.
	if got, ok, err := sn.ClaimKey(Idem{Key: "k", Op: "send_message", ArgsHash: []byte{1}, Owner: "c", Created: t0}, window); err != nil || ok || got.Owner != "b" {
		t.Fatalf("claim while the retry runs: %+v %v %v", got, ok, err)
	}
	// Released again, then used for another call: a new claim.
	if err := sn.ReleaseKey(retry); err != nil {
		t.Fatal(err)
	}
	other := Idem{Key: "k", Op: "send_message", ArgsHash: []byte{2}, Owner: "c", Created: t0.Add(2 * time.Minute)}
	if got := claim(other, window); !got.Created.Equal(other.Created) || !bytes.Equal(got.ArgsHash, []byte{2}) {
		t.Fatalf("another call: %+v, want its own claim", got)
	}
	if err := sn.ReleaseKey(other); err != nil {
		t.Fatal(err)
	}
	// After the window, the same call is a new claim too.
	late := other
	late.Owner, late.Created = "d", t0.Add(2*time.Hour)
	if got := claim(late, other.Created.Add(time.Second)); !got.Created.Equal(late.Created) || !got.CallAt.Equal(late.Created) {
		t.Fatalf("after the window: %+v, want its own claim", got)
	}
	// Only the owner releases; a finished key stays finished.
	if err := sn.ReleaseKey(other); err != nil {
		t.Fatal(err)
	}
	late.Result = []byte(`"ok"`)
	if err := sn.FinishKey(late); err != nil {
		t.Fatal(err)
	}
	if err := sn.ReleaseKey(late); err != nil {
		t.Fatal(err)
	}
	if got, ok, err := sn.ClaimKey(Idem{Key: "k", Op: "send_message", ArgsHash: []byte{2}, Owner: "e", Created: late.Created}, window); err != nil || ok || string(got.Result) != `"ok"` {
		t.Fatalf("claim of a finished key: %+v %v %v", got, ok, err)
	}
}

// The window of a key runs from its latest claim: a call that failed,
// was retried and then succeeded is replayed for a whole window after
// the retry, not after the failed attempt.
func TestIdempotencyWindowFromTheLatestClaim(t *testing.T) {
	s, _ := openStore(t, Options{})
	sn := s.Sent()
	t0 := time.Unix(5000, 0)
	const window = time.Hour
	k := Idem{Key: "k", Op: "send_message", ArgsHash: []byte{1}, Owner: "a", Created: t0}
	if _, ok, err := sn.ClaimKey(k, t0.Add(-window)); err != nil || !ok {
		t.Fatalf("first claim: %v %v", ok, err)
	}
	if err := sn.ReleaseKey(k); err != nil { // it failed
		t.Fatal(err)
	}
	retry := k
	retry.Owner, retry.Created = "b", t0.Add(50*time.Minute)
	got, ok, err := sn.ClaimKey(retry, retry.Created.Add(-window))
	if err != nil || !ok || !got.CallAt.Equal(t0) {
		t.Fatalf("retry: %+v %v %v", got, ok, err)
	}
	got.Result = []byte(`"sent"`)
	if err := sn.FinishKey(got); err != nil {
		t.Fatal(err)
	}
	at := t0.Add(61 * time.Minute) // past the first claim's window, within the retry's
	again, ok, err := sn.ClaimKey(Idem{Key: "k", Op: "send_message", ArgsHash: []byte{1}, Owner: "c", Created: at}, at.Add(-window))
	if err != nil || ok || string(again.Result) != `"sent"` {
		t.Fatalf("a repeat 11 minutes after the successful retry: %+v, claimed %v, %v; want the result replayed", again, ok, err)
	}
}

// An ack counts for a send record only from its recipient, when the
// update names who acknowledged.
func TestSentAckOnlyFromTheRecipient(t *testing.T) {
	bob, carol := identity.PeerID{1}, identity.PeerID{2}
	r := SentRecord{ID: identity.UUID{9}, To: bob, Kind: "message", State: SentStored}
	if ApplySent(&r, SentUpdate{ID: r.ID, Event: SentEventAcked, At: time.Unix(10, 0), From: carol}) || r.State != SentStored {
		t.Fatalf("an ack from carol for a send to bob: %+v", r)
	}
	if !ApplySent(&r, SentUpdate{ID: r.ID, Event: SentEventAcked, At: time.Unix(10, 0), From: bob}) || r.State != SentAcked {
		t.Fatalf("bob's ack: %+v", r)
	}
}

// Answered finds a final answer this node gave a request: a response to
// it, to the peer it came from, completed or failed, that did not fail
// to go out.
func TestSentAnswered(t *testing.T) {
	var req, other identity.UUID
	req[0], other[0] = 1, 2
	var elsewhere identity.PeerID
	elsewhere[0] = 9
	n := byte(10)
	resp := func(status, state string, to identity.PeerID, corr identity.UUID) SentRecord {
		n++
		r := sentRec(n, "response")
		r.CorrID, r.ResponseStatus, r.State = corr, status, state
		if !to.IsZero() {
			r.To = to
		}
		return r
	}
	bob := sentRec(0, "response").To
	for _, tc := range []struct {
		name string
		recs []SentRecord
		want bool
	}{
		{"none", nil, false},
		{"progress only", []SentRecord{resp("accepted", SentWritten, bob, req)}, false},
		{"completed, written", []SentRecord{resp("completed", SentWritten, bob, req)}, true},
		{"failed, queued", []SentRecord{resp("failed", SentQueued, bob, req)}, true},
		{"completed, in flight", []SentRecord{resp("completed", SentInFlight, bob, req)}, true},
		{"completed, its send failed", []SentRecord{resp("completed", SentFailed, bob, req)}, false},
		{"completed, a dead letter (which can be retried)", []SentRecord{resp("completed", SentDead, bob, req)}, true},
		{"to another peer", []SentRecord{resp("completed", SentWritten, elsewhere, req)}, false},
		{"to another request", []SentRecord{resp("completed", SentWritten, bob, other)}, false},
		{"a request, not a response", []SentRecord{func() SentRecord {
			r := sentRec(99, "request")
			r.CorrID, r.ResponseStatus = req, "completed"
			return r
		}()}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, _ := openStore(t, Options{})
			sn := s.Sent()
			for _, r := range tc.recs {
				if err := sn.Put(r); err != nil {
					t.Fatal(err)
				}
			}
			if got, err := sn.Answered(bob, req); err != nil || got != tc.want {
				t.Fatalf("Answered = %v, %v; want %v", got, err, tc.want)
			}
		})
	}
}
