package space_test

import (
	"errors"
	"fmt"
	"slices"
	"testing"

	"github.com/meerkatd/meerkatd/comms/meup"
	"github.com/meerkatd/meerkatd/comms/space"
)

// labIDs lists the participant ids of space "lab" in r.
func labIDs(r *space.Roster) []string {
	var ids []string
	for _, c := range r.Spaces {
		if c.Name == "lab" {
			for _, m := range c.Members {
				ids = append(ids, m.ID)
			}
		}
	}
	return ids
}

// handEdited is the test roster as a person edited it in the file: dave
// removed from lab, hank added.
func handEdited(t *testing.T) *space.Roster {
	t.Helper()
	r := testRoster(t)
	r.Spaces[0].Members = slices.DeleteFunc(r.Spaces[0].Members, func(m space.Member) bool { return m.ID == "dave" })
	r.Spaces[0].Members = append(r.Spaces[0].Members, space.Member{Key: key(9), ID: "hank", Capabilities: []meup.Capability{}})
	if err := r.Validate(); err != nil {
		t.Fatal(err)
	}
	return r
}

// staleOnce makes the harness's SaveRoster answer once that the file
// holds newer rosters (file), as the node does for a hand edit it has not
// reloaded yet.
func staleOnce(h *harness, file *space.Roster) {
	h.save = func(*space.Roster) error {
		h.save = nil // called with h.mu held
		return &space.StaleRosterError{Current: file}
	}
}

// A kick or an invite whose save finds newer rosters in the file (a hand
// edit not reloaded yet) is made on those: the edit is not written over
// and the kick or invite is not lost.
func TestRosterChangeOnNewerFile(t *testing.T) {
	want := []string{"alice", "bob", "erin", "hank"} // carol kicked, dave removed by hand, hank added by hand
	h := newHarness(t)
	staleOnce(h, handEdited(t))
	h.mustDeliver(kErin, "lab", &env{From: "erin", Kind: "space/kick", Payload: `{"participant_id":"carol"}`})
	if got := labIDs(h.e.Roster()); !slices.Equal(got, want) {
		t.Fatalf("lab after the kick: %v, want %v", got, want)
	}
	if len(h.saved) != 1 || !slices.Equal(labIDs(h.saved[0]), want) {
		t.Fatalf("saved %d rosters (lab %v), want one with %v", len(h.saved), labIDs(h.saved[len(h.saved)-1]), want)
	}

	h = newHarness(t)
	staleOnce(h, handEdited(t))
	h.mustDeliver(kErin, "lab", &env{From: "erin", Kind: "space/invite", Payload: fmt.Sprintf(`{"participant_id":"frank","key":%q}`, kFrank)})
	want = []string{"alice", "bob", "carol", "erin", "hank", "frank"}
	if got := labIDs(h.e.Roster()); !slices.Equal(got, want) {
		t.Fatalf("lab after the invite: %v, want %v", got, want)
	}
	if len(h.saved) != 1 || !slices.Equal(labIDs(h.saved[0]), want) {
		t.Fatalf("saved %d rosters, want one with %v", len(h.saved), want)
	}
}

// UpdateRoster edits the rosters in force, or the newer ones SaveRoster
// reports; a failed save, or a failing change, changes nothing.
func TestUpdateRoster(t *testing.T) {
	addIvy := func(r *space.Roster) error {
		r.Spaces[0].Members = append(r.Spaces[0].Members, space.Member{Key: key(10), ID: "ivy", Capabilities: []meup.Capability{}})
		return nil
	}
	h := newHarness(t)
	staleOnce(h, handEdited(t))
	if err := h.e.UpdateRoster(addIvy); err != nil {
		t.Fatal(err)
	}
	want := []string{"alice", "bob", "carol", "erin", "hank", "ivy"}
	if got := labIDs(h.e.Roster()); !slices.Equal(got, want) {
		t.Fatalf("lab: %v, want %v", got, want)
	}
	if len(h.saved) != 1 || !slices.Equal(labIDs(h.saved[0]), want) {
		t.Fatalf("saved %d rosters, want one with %v", len(h.saved), want)
	}

	h = newHarness(t)
	before := labIDs(h.e.Roster())
	broken := errors.New("disk full")
	h.save = func(*space.Roster) error { return broken }
	if err := h.e.UpdateRoster(addIvy); !errors.Is(err, broken) {
		t.Fatalf("a failed save: %v", err)
	}
	mine := errors.New("no")
	if err := h.e.UpdateRoster(func(*space.Roster) error { return mine }); !errors.Is(err, mine) {
		t.Fatalf("a failing change: %v", err)
	}
	if err := h.e.UpdateRoster(func(r *space.Roster) error { r.Spaces[0].Members[1].ID = "alice"; return nil }); err == nil {
		t.Fatal("a change that does not validate was taken")
	}
	if got := labIDs(h.e.Roster()); !slices.Equal(got, before) {
		t.Fatalf("lab after failed updates: %v, want %v", got, before)
	}
}

// A file that keeps changing past the retries: the kick still goes on
// the rosters the file last held (in memory), not on older ones.
func TestRosterChangeOnAFileThatKeepsChanging(t *testing.T) {
	h := newHarness(t)
	edits := 0
	h.save = func(*space.Roster) error {
		// Each time another hand edit: hank's name changes.
		edits++
		file := handEdited(t)
		file.Spaces[0].Members[len(file.Spaces[0].Members)-1].ID = fmt.Sprint("hank", edits)
		return &space.StaleRosterError{Current: file}
	}
	h.mustDeliver(kErin, "lab", &env{From: "erin", Kind: "space/kick", Payload: `{"participant_id":"carol"}`})
	want := []string{"alice", "bob", "erin", fmt.Sprint("hank", edits)}
	if got := labIDs(h.e.Roster()); !slices.Equal(got, want) {
		t.Fatalf("lab after the kick: %v, want %v (the file's last rosters with the kick)", got, want)
	}
}
