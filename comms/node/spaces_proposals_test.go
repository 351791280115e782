package node

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/meerkatd/meerkatd/identity"
)

// proposeAt has prop propose n calls at orch, each with a payload of
// about size bytes, straight through orch's engine (as if received).
func proposeAt(t *testing.T, orch, prop *Node, prefix string, n, size int) {
	t.Helper()
	for i := range n {
		env := fmt.Sprintf(`{"protocol":"meup/v0.1","id":"%s%03d","from":"prop","kind":"mcp/proposal","payload":{"method":"tools/call","params":{"name":"write","arguments":{"text":%q}}}}`,
			prefix, i, strings.Repeat("x", size))
		if v := orch.spaces.eng.Receive(prop.h.Key.ID(), identity.NewUUID().String(), "build", []byte(env)); v.Refused != nil || v.Err != nil || !v.Deliver {
			t.Fatalf("proposal %d: %+v", i, v)
		}
	}
}

// Peers fill the proposals a node lists (MiBs of payloads per space):
// Proposals without a limit still returns a bounded page, not all of
// them.
func TestProposalsBoundedWithoutLimit(t *testing.T) {
	nodes := spaceNodes(t, map[string]string{"orch": `[{"kind": "*"}]`, "prop": `[{"kind": ["chat", "mcp/proposal"]}]`}, "orch", "prop")
	orch, prop := nodes["orch"], nodes["prop"]
	proposeAt(t, orch, prop, "big", 12, 200<<10) // 2.4 MiB of payloads
	page, err := orch.Proposals(context.Background(), ProposalQuery{})
	if err != nil {
		t.Fatal(err)
	}
	b, _ := json.Marshal(page.Proposals)
	if len(page.Proposals) == 0 || len(b) > 1<<20 || !page.More {
		t.Fatalf("%d proposals, %d bytes of JSON, more %v: want a page of at most 1 MiB, more to follow", len(page.Proposals), len(b), page.More)
	}
}
