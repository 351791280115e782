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
// or left out; a page says when more follow.
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
			page, err := orch.Proposals(ctx, q)
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
	page, err := orch.Proposals(ctx, ProposalQuery{State: space.ProposalRejected, Limit: 5})
	if err != nil || len(page.Proposals) != 1 || page.Proposals[0].ID != "small003" || page.More {
		t.Fatalf("rejected: %+v, %v", page, err)
	}
	last := ProposalCursor(page.Proposals[0])
	if p, err := orch.Proposals(ctx, ProposalQuery{State: space.ProposalRejected, After: last}); err != nil || len(p.Proposals) != 0 || p.More || p.Proposals == nil {
		t.Fatalf("after the last: %+v, %v", p, err)
	}

	for _, q := range []ProposalQuery{{Limit: -1}, {Limit: MaxProposalLimit + 1}, {After: "not a cursor"}, {After: "eA"}} {
		if _, err := orch.Proposals(ctx, q); CodeOf(err) != CodeBadArgument {
			t.Errorf("%+v: %v, want %s", q, err, CodeBadArgument)
		}
	}
}

// A space name this node has no space under is unknown_space for the
// actions on proposals and requests and for the proposals listing, as
// for the other actions, not "no such proposal" or an empty list.
func TestUnknownSpaceNamed(t *testing.T) {
	nodes := spaceNodes(t, map[string]string{"orch": `[{"kind": "*"}]`}, "orch")
	orch := nodes["orch"]
	ctx := context.Background()
	for _, m := range []SpaceMessage{
		{Space: "nospace", Action: ActFulfill, Proposal: "p1"},
		{Space: "nospace", Action: ActReject, Proposal: "p1"},
		{Space: "nospace", Action: ActWithdraw, Proposal: "p1"},
		{Space: "nospace", Action: ActRespond, Request: "r1", Result: json.RawMessage(`{}`)},
		{Space: "nospace", Action: ActChat, Text: "hi"},
	} {
		if _, err := orch.SpaceSend(ctx, m); CodeOf(err) != CodeUnknownSpace {
			t.Errorf("%s in an unknown space: %v, want %s", m.Action, err, CodeUnknownSpace)
		}
	}
	if _, err := orch.SpaceSend(ctx, SpaceMessage{Space: "build", Action: ActFulfill, Proposal: "p1"}); CodeOf(err) != CodeUnknownProposal {
		t.Errorf("fulfil of an unknown proposal: %v, want %s", err, CodeUnknownProposal)
	}
	if p, err := orch.Proposals(ctx, ProposalQuery{Space: "nospace"}); CodeOf(err) != CodeUnknownSpace {
		t.Errorf("proposals of an unknown space: %+v, %v; want %s", p, err, CodeUnknownSpace)
	}
	if p, err := orch.Proposals(ctx, ProposalQuery{Space: "build"}); err != nil || len(p.Proposals) != 0 || p.More {
		t.Errorf("proposals of a space with none: %+v, %v", p, err)
	}
}

// The proposals of a space deleted here stay listed by its name; a
// state filter that matches none of them gives an empty page, not
// unknown_space.
func TestProposalsOfADeletedSpace(t *testing.T) {
	nodes := spaceNodes(t, map[string]string{"orch": `[{"kind": "*"}]`, "prop": `[{"kind": ["chat", "mcp/proposal"]}]`}, "orch", "prop")
	orch, prop := nodes["orch"], nodes["prop"]
	ctx := context.Background()
	proposeAt(t, orch, prop, "p", 2, 10)
	if _, err := orch.SpaceEdit(ctx, SpaceEdit{Op: SpaceDelete, Space: "build"}); err != nil {
		t.Fatal(err)
	}
	if p, err := orch.Proposals(ctx, ProposalQuery{Space: "build"}); err != nil || len(p.Proposals) != 2 {
		t.Fatalf("proposals of the deleted space: %+v, %v", p, err)
	}
	if p, err := orch.Proposals(ctx, ProposalQuery{Space: "build", State: space.ProposalRejected}); err != nil || len(p.Proposals) != 0 {
		t.Fatalf("its rejected proposals (none): %+v, %v", p, err)
	}
	if _, err := orch.Proposals(ctx, ProposalQuery{Space: "nosuch", State: space.ProposalRejected}); CodeOf(err) != CodeUnknownSpace {
		t.Fatalf("a name with no space and no proposals: %v, want %s", err, CodeUnknownSpace)
	}
}
