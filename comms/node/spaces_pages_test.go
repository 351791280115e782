package node

import (
	"context"
	"encoding/json"
	"slices"
	"testing"

	"github.com/meerkatd/meerkatd/comms/space"
)

// Proposals come a page at a time: at most the limit and the byte
// budget, and the cursor pages through all of them in order, none twice
// or left out; ProposalPage says when more follow.
func TestProposalPages(t *testing.T) {
	nodes := spaceNodes(t, map[string]string{"orch": `[{"kind": "*"}]`, "prop": `[{"kind": ["chat", "mcp/proposal", "mcp/withdraw"]}]`}, "orch", "prop")
	orch, prop := nodes["orch"], nodes["prop"]
	ctx := context.Background()
	proposeAt(t, orch, prop, "big", 12, 200<<10)
	proposeAt(t, orch, prop, "small", 30, 10)
	all, err := orch.spaces.eng.Proposals("", "")
	if err != nil || len(all) != 42 {
		t.Fatalf("%d proposals, %v", len(all), err)
	}
	var want []string
	for _, p := range all {
		want = append(want, p.ID)
	}

	for _, limit := range []int{0, 1, 7, MaxProposalLimit} {
		var got []string
		q := ProposalQuery{Limit: limit}
		for pages := 0; ; pages++ {
			if pages > len(want) {
				t.Fatalf("limit %d: more pages than proposals", limit)
			}
			page, err := ProposalPage(ctx, orch, q)
			if err != nil {
				t.Fatal(err)
			}
			b, _ := json.Marshal(page.Proposals)
			if len(page.Proposals) == 0 || (limit > 0 && len(page.Proposals) > limit) || len(b) > MaxProposalBatchBytes {
				t.Fatalf("limit %d: a page of %d proposals, %d bytes", limit, len(page.Proposals), len(b))
			}
			for _, p := range page.Proposals {
				got = append(got, p.ID)
			}
			if !page.More {
				if page.Cursor != "" {
					t.Errorf("limit %d: a cursor %q on the last page", limit, page.Cursor)
				}
				break
			}
			q.After = page.Cursor
		}
		if !slices.Equal(got, want) {
			t.Fatalf("limit %d: paged through %v, want %v", limit, got, want)
		}
	}

	// AllProposals (the command line's list) reads every page.
	if ps, err := AllProposals(ctx, orch, ProposalQuery{Limit: 5}); err != nil || len(ps) != len(want) {
		t.Fatalf("AllProposals: %d proposals, %v; want %d", len(ps), err, len(want))
	}

	// Filters page too; a page past the end is empty.
	if _, err := orch.SpaceSend(ctx, SpaceMessage{Space: "build", Action: ActReject, Proposal: "small003"}); err != nil {
		t.Fatal(err)
	}
	page, err := ProposalPage(ctx, orch, ProposalQuery{State: space.ProposalRejected, Limit: 5})
	if err != nil || len(page.Proposals) != 1 || page.Proposals[0].ID != "small003" || page.More {
		t.Fatalf("rejected: %+v, %v", page, err)
	}
	last := ProposalCursor(page.Proposals[0])
	if ps, err := orch.Proposals(ctx, ProposalQuery{State: space.ProposalRejected, After: last}); err != nil || len(ps) != 0 {
		t.Fatalf("after the last: %d, %v", len(ps), err)
	}

	for _, q := range []ProposalQuery{{Limit: -1}, {Limit: MaxProposalLimit + 1}, {After: "not a cursor"}, {After: "eA"}} {
		if _, err := orch.Proposals(ctx, q); CodeOf(err) != CodeBadArgument {
			t.Errorf("%+v: %v, want %s", q, err, CodeBadArgument)
		}
	}
}

// countingSpaces is a SpacesAPI other than a node, as the control
// socket's client is, that counts the Proposals calls made through it.
type countingSpaces struct {
	SpacesAPI
	calls int
}

func (c *countingSpaces) Proposals(ctx context.Context, q ProposalQuery) ([]Proposal, error) {
	c.calls++
	return c.SpacesAPI.Proposals(ctx, q)
}

// ProposalPage pages the same through a node and through another API;
// through the other API, a page that ends at its limit takes one call
// (the proposal after it comes with it), and no page takes more than
// two.
func TestProposalPageOneCall(t *testing.T) {
	nodes := spaceNodes(t, map[string]string{"orch": `[{"kind": "*"}]`, "prop": `[{"kind": ["chat", "mcp/proposal"]}]`}, "orch", "prop")
	orch, prop := nodes["orch"], nodes["prop"]
	ctx := context.Background()
	proposeAt(t, orch, prop, "big", 12, 200<<10) // five fill a page's bytes
	proposeAt(t, orch, prop, "small", 30, 10)

	type pageOf struct {
		ids    []string
		more   bool
		cursor string
		calls  int
	}
	pages := func(api SpacesAPI, limit int, calls func() int) []pageOf {
		var out []pageOf
		q := ProposalQuery{Limit: limit}
		for {
			before := calls()
			page, err := ProposalPage(ctx, api, q)
			if err != nil {
				t.Fatal(err)
			}
			p := pageOf{more: page.More, cursor: page.Cursor, calls: calls() - before}
			for _, x := range page.Proposals {
				p.ids = append(p.ids, x.ID)
			}
			out = append(out, p)
			if !page.More || len(out) > 42 {
				return out
			}
			q.After = page.Cursor
		}
	}
	for _, limit := range []int{0, 1, 7, 30, MaxProposalLimit} {
		direct := pages(orch, limit, func() int { return 0 })
		other := &countingSpaces{SpacesAPI: orch}
		through := pages(other, limit, func() int { return other.calls })
		if len(direct) != len(through) {
			t.Fatalf("limit %d: %d pages from the node, %d through another API", limit, len(direct), len(through))
		}
		for i, d := range direct {
			th := through[i]
			if !slices.Equal(d.ids, th.ids) || d.more != th.more || d.cursor != th.cursor {
				t.Fatalf("limit %d, page %d: %v (more %v, %q) from the node, %v (more %v, %q) through another API", limit, i, d.ids, d.more, d.cursor, th.ids, th.more, th.cursor)
			}
			// One call when the proposal after a page that ends at its
			// limit comes with it (a limit of MaxProposalLimit cannot
			// ask for one more); else a second asks for it.
			want := 2
			if th.more && limit > 0 && limit < MaxProposalLimit && len(th.ids) == limit && fitsAfter(t, orch, th.ids, direct[i+1].ids[0]) {
				want = 1
			}
			if th.calls != want {
				t.Errorf("limit %d, page %d of %d proposals (more %v): %d calls, want %d", limit, i, len(th.ids), th.more, th.calls, want)
			}
		}
	}

	// With a limit of one, every page but the last takes one call.
	other := &countingSpaces{SpacesAPI: orch}
	if n := len(pages(other, 1, func() int { return other.calls })); n != 42 || other.calls != n+1 {
		t.Errorf("limit 1: %d pages in %d calls, want 42 in 43", n, other.calls)
	}
}

// fitsAfter reports whether the proposal next fits in one page's bytes
// with those of page.
func fitsAfter(t *testing.T, n *Node, page []string, next string) bool {
	t.Helper()
	all, err := n.spaces.eng.Proposals("", "")
	if err != nil {
		t.Fatal(err)
	}
	size := 0
	for _, p := range all {
		if slices.Contains(page, p.ID) || p.ID == next {
			b, _ := json.Marshal(proposalView(p))
			size += len(b)
		}
	}
	return size <= MaxProposalBatchBytes
}
