package store

import (
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/meerkatd/meerkatd/identity"
)

func testSentRequest(i int, peer byte, at time.Time) SentRequest {
	r := SentRequest{ID: fmt.Sprintf("00000000-0000-4000-8000-%012d", i), Peer: "bob", Intent: "review", Created: at, State: RequestOpen, Updated: at}
	r.Recipient[0] = peer
	return r
}

func TestSentRequestsLifecycle(t *testing.T) {
	s, path := openStore(t, Options{})
	t0 := time.Unix(1_700_000_000, 0)
	for i := range 5 {
		r := testSentRequest(i, byte(1+i%2), t0.Add(time.Duration(i)*time.Second))
		if i == 2 {
			r.Deadline = t0.Add(time.Hour)
		}
		if err := s.PutSentRequest(r, 100); err != nil {
			t.Fatal(err)
		}
	}
	// A second put of the same id keeps the first.
	dup := testSentRequest(0, 9, t0)
	dup.Intent = "other"
	if err := s.PutSentRequest(dup, 100); err != nil {
		t.Fatal(err)
	}
	if r, ok, err := s.SentRequest(testSentRequest(0, 0, t0).ID); err != nil || !ok || r.Intent != "review" || r.Recipient[0] != 1 {
		t.Fatalf("SentRequest = %+v, %v, %v", r, ok, err)
	}

	id1, id2, id3 := testSentRequest(1, 0, t0).ID, testSentRequest(2, 0, t0).ID, testSentRequest(3, 0, t0).ID
	if ok, err := s.AnswerSentRequest(id1, "resp-1", "completed", t0.Add(time.Minute)); err != nil || !ok {
		t.Fatalf("answer open: %v %v", ok, err)
	}
	if ok, err := s.MoveSentRequest(id2, RequestOpen, RequestTimedOut, t0.Add(2*time.Minute), ""); err != nil || !ok {
		t.Fatalf("time out: %v %v", ok, err)
	}
	// Only from the state named.
	if ok, err := s.MoveSentRequest(id2, RequestOpen, RequestCancelled, t0, "x"); err != nil || ok {
		t.Fatalf("cancel of timed out request moved: %v %v", ok, err)
	}
	// A late final response is recorded, the state stays.
	if ok, err := s.AnswerSentRequest(id2, "resp-2", "failed", t0.Add(3*time.Minute)); err != nil || ok {
		t.Fatalf("late answer reported open: %v %v", ok, err)
	}
	// A second final keeps the first's id.
	if _, err := s.AnswerSentRequest(id2, "resp-3", "completed", t0); err != nil {
		t.Fatal(err)
	}
	if ok, err := s.MoveSentRequest(id3, RequestOpen, RequestCancelled, t0.Add(4*time.Minute), "no longer needed"); err != nil || !ok {
		t.Fatalf("cancel: %v %v", ok, err)
	}

	s.Close()
	s = reopen(t, path, Options{}) // durable
	r2, _, _ := s.SentRequest(id2)
	if r2.State != RequestTimedOut || r2.ResponseID != "resp-2" || r2.FinalStatus != "failed" || !r2.Deadline.Equal(t0.Add(time.Hour)) {
		t.Fatalf("timed out request after reopen = %+v", r2)
	}
	r3, _, _ := s.SentRequest(id3)
	if r3.State != RequestCancelled || r3.Note != "no longer needed" || !r3.Updated.Equal(t0.Add(4*time.Minute)) {
		t.Fatalf("cancelled request = %+v", r3)
	}
	peer1 := identity.PeerID{1}
	for _, tc := range []struct {
		name string
		q    SentRequestQuery
		want []int
	}{
		{"all newest first", SentRequestQuery{}, []int{4, 3, 2, 1, 0}},
		{"open", SentRequestQuery{States: []string{RequestOpen}}, []int{4, 0}},
		{"closed states", SentRequestQuery{States: []string{RequestAnswered, RequestCancelled}}, []int{3, 1}},
		{"peer", SentRequestQuery{Peer: &peer1}, []int{4, 2, 0}},
		{"limit", SentRequestQuery{Limit: 2}, []int{4, 3}},
		{"before", SentRequestQuery{Before: t0.Add(2 * time.Second), Limit: 1}, []int{1}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rs, err := s.SentRequests(tc.q)
			if err != nil {
				t.Fatal(err)
			}
			var got []int
			for _, r := range rs {
				var i int
				fmt.Sscanf(r.ID[len(r.ID)-12:], "%d", &i)
				got = append(got, i)
			}
			if fmt.Sprint(got) != fmt.Sprint(tc.want) {
				t.Fatalf("got %v, want %v", got, tc.want)
			}
		})
	}
	if due, err := s.OpenDeadlines(); err != nil || len(due) != 0 {
		t.Fatalf("OpenDeadlines = %v, %v (the one with a deadline timed out)", due, err)
	}
}

func TestSentRequestsBounded(t *testing.T) {
	s, _ := openStore(t, Options{})
	t0 := time.Unix(1_700_000_000, 0)
	for i := range 4 {
		if err := s.PutSentRequest(testSentRequest(i, 1, t0.Add(time.Duration(i)*time.Second)), 3); err != nil {
			t.Fatal(err)
		}
	}
	// All open at the fourth put: the oldest went.
	if _, ok, _ := s.SentRequest(testSentRequest(0, 0, t0).ID); ok {
		t.Fatal("the oldest open request was kept past the bound")
	}
	if _, err := s.MoveSentRequest(testSentRequest(3, 0, t0).ID, RequestOpen, RequestCancelled, t0, ""); err != nil {
		t.Fatal(err)
	}
	if err := s.PutSentRequest(testSentRequest(4, 1, t0.Add(10*time.Second)), 3); err != nil {
		t.Fatal(err)
	}
	if _, ok, _ := s.SentRequest(testSentRequest(3, 0, t0).ID); ok {
		t.Fatal("a closed request should go before older open ones")
	}
	if _, ok, _ := s.SentRequest(testSentRequest(1, 0, t0).ID); !ok {
		t.Fatal("an open request went while a closed one was there")
	}
	// Prune: closed ones updated before the cutoff.
	if _, err := s.MoveSentRequest(testSentRequest(1, 0, t0).ID, RequestOpen, RequestTimedOut, t0, ""); err != nil {
		t.Fatal(err)
	}
	if n, err := s.PruneRequests(t0.Add(time.Second), t0); err != nil || n != 1 {
		t.Fatalf("PruneRequests = %d, %v", n, err)
	}
}

func TestHeldCancels(t *testing.T) {
	s, _ := openStore(t, Options{})
	t0 := time.Unix(1_700_000_000, 0)
	alice, bob := identity.PeerID{1}, identity.PeerID{2}
	c := HeldCancel{Sender: alice, ID: "r1", At: t0, Reason: "deadline"}
	if fresh, err := s.PutHeldCancel(c, 2); err != nil || !fresh {
		t.Fatalf("first put: %v %v", fresh, err)
	}
	c2 := c
	c2.Reason, c2.At = "cancelled", t0.Add(time.Hour)
	if fresh, err := s.PutHeldCancel(c2, 2); err != nil || fresh {
		t.Fatalf("repeat put: %v %v", fresh, err)
	}
	if got, ok, err := s.HeldCancel(alice, "r1"); err != nil || !ok || got.Reason != "deadline" || !got.At.Equal(t0) {
		t.Fatalf("HeldCancel = %+v %v %v", got, ok, err)
	}
	if _, ok, _ := s.HeldCancel(bob, "r1"); ok {
		t.Fatal("a cancel from alice shows for bob's request of the same id")
	}
	for i := range 2 {
		if _, err := s.PutHeldCancel(HeldCancel{Sender: bob, ID: fmt.Sprint(i), At: t0.Add(time.Duration(i+1) * time.Second), Reason: "cancelled"}, 2); err != nil {
			t.Fatal(err)
		}
	}
	if _, ok, _ := s.HeldCancel(alice, "r1"); ok {
		t.Fatal("the oldest cancel was kept past the bound")
	}
}

// A database of an earlier schema gains the lifecycle tables, empty,
// and keeps working.
func TestRequestsUpgrade(t *testing.T) {
	path := filepath.Join(t.TempDir(), "meerkat.db")
	makeV4(t, path)
	s := reopen(t, path, Options{})
	for _, table := range []string{"sent_requests", "held_cancels"} {
		var n int
		if err := s.db.QueryRow(`SELECT count(*) FROM sqlite_schema WHERE type = 'table' AND name = ?`, table).Scan(&n); err != nil || n != 1 {
			t.Fatalf("table %s after upgrade: %d, %v", table, n, err)
		}
	}
	if rs, err := s.SentRequests(SentRequestQuery{}); err != nil || len(rs) != 0 {
		t.Fatalf("SentRequests after upgrade: %v, %v", rs, err)
	}
	if err := s.PutSentRequest(testSentRequest(1, 1, time.Unix(1_700_000_000, 0)), 10); err != nil {
		t.Fatal(err)
	}
}

// DropSentRequest forgets an open request, and leaves one that is no
// longer open (answered, timed out, cancelled) as it is.
func TestDropSentRequest(t *testing.T) {
	s, _ := openStore(t, Options{})
	t0 := time.Unix(1_700_000_000, 0)
	open, closed := testSentRequest(1, 1, t0), testSentRequest(2, 1, t0)
	for _, r := range []SentRequest{open, closed} {
		if err := s.PutSentRequest(r, 100); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := s.MoveSentRequest(closed.ID, RequestOpen, RequestTimedOut, t0, ""); err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{open.ID, closed.ID, "00000000-0000-4000-8000-999999999999"} {
		if err := s.DropSentRequest(id); err != nil {
			t.Fatal(err)
		}
	}
	if _, ok, err := s.SentRequest(open.ID); err != nil || ok {
		t.Fatalf("the open request is still there: %v, %v", ok, err)
	}
	if r, ok, err := s.SentRequest(closed.ID); err != nil || !ok || r.State != RequestTimedOut {
		t.Fatalf("the timed-out request: %+v, %v, %v", r, ok, err)
	}
}
