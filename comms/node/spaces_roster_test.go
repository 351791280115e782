package node

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/meerkatd/meerkatd/comms/meup"
	"github.com/meerkatd/meerkatd/comms/space"
	"github.com/meerkatd/meerkatd/identity"
)

// memberIDs lists the participant ids of space "build" in r.
func memberIDs(r *space.Roster) []string {
	var ids []string
	for _, c := range r.Spaces {
		if c.Name == "build" {
			for _, m := range c.Members {
				ids = append(ids, m.ID)
			}
		}
	}
	return ids
}

// engineIDs lists the members of space "build" the engine of n runs.
func engineIDs(n *Node) []string { return memberIDs(n.spaces.eng.Roster()) }

// fileIDs lists the members of space "build" in n's spaces.json.
func fileIDs(t *testing.T, n *Node) []string {
	t.Helper()
	r, err := space.LoadRoster(n.h.SpacesPath())
	if err != nil {
		t.Fatal(err)
	}
	return memberIDs(r)
}

// addMember adds a member with a fresh (untrusted) key to space "build"
// of n.
func addMember(t *testing.T, n *Node, id string) {
	t.Helper()
	k, err := identity.GenerateKeypair()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := n.SpaceEdit(context.Background(), SpaceEdit{Op: SpaceAdd, Space: "build", Peer: k.ID().String(), ID: id}); err != nil {
		t.Fatal(err)
	}
}

// handEdit rewrites n's spaces.json as a person would, with edit applied
// to the roster in it, keeping the file's size and modification time:
// the file watcher does not notice it (as it would not for up to a
// second), so what the node does before it reloads the file can be
// seen. The new file is put in place by a rename, so the watcher never
// sees a half-written one either.
func handEdit(t *testing.T, n *Node, edit func(*space.Roster)) {
	t.Helper()
	path := n.h.SpacesPath()
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	r, err := space.LoadRoster(path)
	if err != nil {
		t.Fatal(err)
	}
	edit(r)
	data, err := json.Marshal(r)
	if err != nil {
		t.Fatal(err)
	}
	if int64(len(data)) > fi.Size() {
		t.Fatalf("the hand edit (%d bytes) must not be longer than the file (%d bytes)", len(data), fi.Size())
	}
	for int64(len(data)) < fi.Size() {
		data = append(data, ' ')
	}
	tmp := filepath.Join(filepath.Dir(path), "spaces.hand")
	if err := os.WriteFile(tmp, data, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Chtimes(tmp, fi.ModTime(), fi.ModTime()); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
	if after, err := os.Stat(path); err != nil || !after.ModTime().Equal(fi.ModTime()) || after.Size() != fi.Size() {
		t.Fatalf("the hand edit changed the file's stamp: %v, %v", after, err)
	}
}

// A kick received after spaces.json was edited by hand, before the file
// watcher reloaded it, applies to the edited roster: the node neither
// writes its older roster over the edit nor loses the kick.
func TestRosterHandEditSurvivesKick(t *testing.T) {
	nodes := spaceNodes(t, map[string]string{"orch": `[{"kind": "*"}]`, "prop": `[{"kind": "chat"}]`}, "orch", "prop")
	orch, prop := nodes["orch"], nodes["prop"]
	for _, n := range []*Node{orch, prop} {
		addMember(t, n, "extra")
	}
	addMember(t, prop, "spare")
	addMember(t, prop, "spare2")
	remove := func(id string) func(*space.Roster) {
		return func(r *space.Roster) {
			for i := range r.Spaces {
				r.Spaces[i].Members = slices.DeleteFunc(r.Spaces[i].Members, func(m space.Member) bool { return m.ID == id })
			}
		}
	}

	// The person removes spare from prop's file by hand.
	handEdit(t, prop, remove("spare"))
	// Orch kicks extra; prop applies it.
	if _, err := orch.SpaceSend(context.Background(), SpaceMessage{Space: "build", Kind: meup.KindSpaceKick, Payload: json.RawMessage(`{"participant_id":"extra"}`)}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 5*time.Second, "prop applies the kick", func() bool { return !slices.Contains(engineIDs(prop), "extra") })

	want := []string{"orch", "prop", "spare2"}
	if got := fileIDs(t, prop); !slices.Equal(got, want) {
		t.Fatalf("prop's spaces.json holds %v, want %v: the kick must not undo the hand edit (spare removed), nor be lost", got, want)
	}
	if got := engineIDs(prop); !slices.Equal(got, want) {
		t.Fatalf("prop runs %v, want %v", got, want)
	}

	// Likewise an edit through the API (edit_space, meerkatd space add).
	handEdit(t, prop, remove("spare2"))
	addMember(t, prop, "late")
	want = []string{"orch", "prop", "late"}
	if got := fileIDs(t, prop); !slices.Equal(got, want) {
		t.Fatalf("prop's spaces.json holds %v, want %v: the edit must not undo the hand edit (spare2 removed)", got, want)
	}
	if got := engineIDs(prop); !slices.Equal(got, want) {
		t.Fatalf("prop runs %v, want %v", got, want)
	}

	// A hand edit that does not validate is not written over: an edit
	// through the API fails and says why, and the file stays as it is.
	broken := []byte(`{"spaces": [{"name": "build", "members": [{"key": "nonsense", "id": "a"}]}]}`)
	if err := os.WriteFile(prop.h.SpacesPath(), broken, 0o600); err != nil {
		t.Fatal(err)
	}
	k, _ := identity.GenerateKeypair()
	if _, err := prop.SpaceEdit(context.Background(), SpaceEdit{Op: SpaceAdd, Space: "build", Peer: k.ID().String(), ID: "later"}); CodeOf(err) != CodeInternal || !strings.Contains(err.Error(), SpacesFileName) {
		t.Fatalf("an edit over a broken file: %v (%s): want no code (a bad file, not a bad argument)", err, CodeOf(err))
	}
	if data, _ := os.ReadFile(prop.h.SpacesPath()); string(data) != string(broken) {
		t.Fatalf("the broken file was written over: %s", data)
	}
	if got := engineIDs(prop); !slices.Equal(got, want) {
		t.Fatalf("prop runs %v, want %v", got, want)
	}
}

// A roster edit and kicks received meanwhile are all kept: the edit is
// made on the roster in force when it is saved, not on a copy taken
// before a kick changed it.
func TestSpaceEditConcurrentWithKicks(t *testing.T) {
	nodes := spaceNodes(t, map[string]string{"orch": `[{"kind": "*"}]`, "prop": `[{"kind": "chat"}]`}, "orch", "prop")
	orch, prop := nodes["orch"], nodes["prop"]
	const rounds = 40
	for i := range rounds {
		addMember(t, prop, fmt.Sprintf("old%d", i))
	}
	keys := make([]string, rounds)
	for i := range keys {
		k, err := identity.GenerateKeypair()
		if err != nil {
			t.Fatal(err)
		}
		keys[i] = k.ID().String()
	}
	for i := range rounds {
		var wg sync.WaitGroup
		start := make(chan struct{})
		var editErr error
		var kick space.Verdict
		wg.Add(2)
		go func() {
			defer wg.Done()
			<-start
			_, editErr = prop.SpaceEdit(context.Background(), SpaceEdit{Op: SpaceAdd, Space: "build", Peer: keys[i], ID: fmt.Sprintf("new%d", i)})
		}()
		go func() {
			defer wg.Done()
			<-start
			env := fmt.Sprintf(`{"protocol":"meup/v0.1","id":"kick-%d","from":"orch","kind":"space/kick","payload":{"participant_id":"old%d"}}`, i, i)
			kick = prop.spaces.eng.Receive(orch.h.Key.ID(), identity.NewUUID().String(), "build", []byte(env))
		}()
		close(start)
		wg.Wait()
		if editErr != nil || kick.Refused != nil || kick.Err != nil {
			t.Fatalf("round %d: edit %v, kick %+v", i, editErr, kick)
		}
		for what, ids := range map[string][]string{"engine": engineIDs(prop), "file": fileIDs(t, prop)} {
			if !slices.Contains(ids, fmt.Sprintf("new%d", i)) || slices.Contains(ids, fmt.Sprintf("old%d", i)) {
				t.Fatalf("round %d: the %s holds %v: want new%d added and old%d kicked", i, what, ids, i, i)
			}
		}
	}
}
