package nodetext

import (
	"bytes"
	"strings"
	"testing"

	"github.com/meerkatd/meerkatd/comms/node"
)

// The first line of a space says who this node is in it, or that its
// key is not in the space's roster (no empty "you are ,").
func TestSpaceHeading(t *testing.T) {
	for _, tc := range []struct {
		name string
		s    node.SpaceInfo
		want string
	}{
		{"member", node.SpaceInfo{Name: "build", Self: "orch", Delivery: "all", Pending: 2},
			"space build (you are orch, delivery all, 2 pending proposals)\n"},
		{"not a member", node.SpaceInfo{Name: "build", Delivery: "addressed"},
			"space build (you are not a member, delivery addressed, 0 pending proposals)\n"},
		{"no delivery known", node.SpaceInfo{Name: "build"},
			"space build (you are not a member, 0 pending proposals)\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var b bytes.Buffer
			if err := Space(&b, tc.s); err != nil {
				t.Fatal(err)
			}
			if first, _, _ := strings.Cut(b.String(), "\n"); first+"\n" != tc.want {
				t.Errorf("got %q, want %q", first+"\n", tc.want)
			}
		})
	}
}

// Each copy of a space send says what became of it; a direct copy that
// failed has no delivery state, and says it was not delivered.
func TestSpaceSentCopies(t *testing.T) {
	var b, errb bytes.Buffer
	SpaceSent(&b, &errb, node.SpaceSent{Space: "build", ID: "m1", Kind: "chat", Copies: []node.SpaceCopy{
		{Participant: "a", Delivery: "acked"},
		{Participant: "b", Delivery: "queued", LastError: "peer offline"},
		{Participant: "c", LastError: "peer offline"},
		{Participant: "d", Skipped: "not trusted"},
	}})
	want := "sent chat m1 to space build\n  a: acked\n  b: queued (peer offline)\n  c: not delivered (peer offline)\n  d: skipped: not trusted\n"
	if b.String() != want || errb.Len() != 0 {
		t.Errorf("got\n%s\nwant\n%s\n(stderr %q)", b.String(), want, errb.String())
	}
	// What the copies do not show goes to stderr.
	for _, tc := range []struct {
		copies []node.SpaceCopy
		want   string
	}{
		{nil, "no other active member in the space: nothing was sent\n"},
		{[]node.SpaceCopy{{Participant: "d", Skipped: "not trusted"}}, "warning: every member was skipped (see each copy above): nothing was sent\n"},
	} {
		b.Reset()
		errb.Reset()
		SpaceSent(&b, &errb, node.SpaceSent{Space: "build", ID: "m1", Kind: "chat", Copies: tc.copies})
		if errb.String() != tc.want {
			t.Errorf("copies %+v: stderr %q, want %q", tc.copies, errb.String(), tc.want)
		}
	}
}
