package mcpserver

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/meerkatd/meerkatd/comms/node"
)

// pagedNode is a node whose proposals come a page at a time, as a node's
// do: at most q.Limit (0: all) after the cursor q.After.
type pagedNode struct {
	*fakeNode
	proposals []node.Proposal
	mu        sync.Mutex
	queries   []node.ProposalQuery
}

func (p *pagedNode) Proposals(_ context.Context, q node.ProposalQuery) (node.ProposalsPage, error) {
	p.mu.Lock()
	p.queries = append(p.queries, q)
	p.mu.Unlock()
	ps := p.proposals
	if q.After != "" {
		i := slices.IndexFunc(ps, func(x node.Proposal) bool { return node.ProposalCursor(x) == q.After })
		if i < 0 {
			return node.ProposalsPage{}, &node.Error{Code: node.CodeBadArgument, Msg: "cursor: not a cursor"}
		}
		ps = ps[i+1:]
	}
	page := node.ProposalsPage{Proposals: slices.Clone(ps)}
	if q.Limit > 0 && len(ps) > q.Limit {
		page.Proposals = slices.Clone(ps[:q.Limit])
		page.More, page.Cursor = true, node.ProposalCursor(ps[q.Limit-1])
	}
	return page, nil
}

// list_proposals gives a page (100 proposals by default, or limit), says
// whether more follow, and continues from its cursor; the last page has
// more false and no cursor.
func TestListProposalsPages(t *testing.T) { bothEras(t, testListProposalsPages) }

func testListProposalsPages(t *testing.T, era string) {
	f := &pagedNode{fakeNode: newFakeNode()}
	at := time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)
	for i := range 250 {
		f.proposals = append(f.proposals, node.Proposal{Space: "build", ID: fmt.Sprintf("p%03d", i), Proposer: "carol", State: "pending",
			Payload: []byte(`{"method":"tools/call"}`), Created: at.Add(time.Duration(i) * time.Second)})
	}
	c, _ := startClient(t, f, era)
	var ids []string
	page := func(args map[string]any) (n int, more bool, cursor string) {
		t.Helper()
		res, out, err := call(t, c, "list_proposals", args)
		if err != nil || res.IsError {
			t.Fatalf("list_proposals %v: %v %s", args, err, text(res))
		}
		ps, _ := out["proposals"].([]any)
		for _, p := range ps {
			ids = append(ids, p.(map[string]any)["id"].(string))
		}
		cursor, _ = out["cursor"].(string)
		more, _ = out["more"].(bool)
		return len(ps), more, cursor
	}
	n, more, cursor := page(map[string]any{"space": "build"})
	if n != node.DefaultProposalLimit || !more || cursor == "" {
		t.Fatalf("first page: %d proposals, more %v, cursor %q: want %d, more and a cursor", n, more, cursor, node.DefaultProposalLimit)
	}
	n, more, cursor = page(map[string]any{"space": "build", "limit": 120, "cursor": cursor})
	if n != 120 || !more || cursor == "" {
		t.Fatalf("second page: %d proposals, more %v, cursor %q", n, more, cursor)
	}
	n, more, cursor = page(map[string]any{"space": "build", "limit": 1000, "cursor": cursor})
	if n != 30 || more || cursor != "" {
		t.Fatalf("last page: %d proposals, more %v, cursor %q", n, more, cursor)
	}
	var want []string
	for _, p := range f.proposals {
		want = append(want, p.ID)
	}
	if !slices.Equal(ids, want) {
		t.Fatalf("paged through %d proposals, want all %d in order", len(ids), len(want))
	}
	f.mu.Lock()
	qs := slices.Clone(f.queries)
	f.mu.Unlock()
	// One call to the node a page, the first with the default limit.
	if len(qs) != 3 || qs[0].Space != "build" || qs[0].Limit != node.DefaultProposalLimit || qs[0].After != "" {
		t.Errorf("the pages' queries %+v: want 3, the first for %d", qs, node.DefaultProposalLimit)
	}
	res, _, err := call(t, c, "list_proposals", map[string]any{"cursor": "bogus"})
	if err != nil || !res.IsError {
		t.Fatalf("a bad cursor: %v %v", err, res)
	}
	for _, bad := range []map[string]any{{"limit": 0}, {"limit": node.MaxProposalLimit + 1}, {"limit": 1.5}, {"cursor": 3}} {
		if err := checkArgs("list_proposals", bad); err == nil {
			t.Errorf("list_proposals %v: want invalid params", bad)
		}
	}
}
