package mcpserver

import (
	"context"
	"os"
	"strings"
	"testing"

	"github.com/mark3labs/mcp-go/mcp"
)

// Every tool the server lists is a row of the tools table of docs/mcp.md,
// and that table is one table: a paragraph or a blank line inside it
// splits it, and Markdown then shows the rows after the split as text.
func TestToolsTableInDocs(t *testing.T) {
	b, err := os.ReadFile("../docs/mcp.md")
	if err != nil {
		t.Fatal(err)
	}
	rows := toolsTable(string(b))
	if len(rows) == 0 {
		t.Fatal("docs/mcp.md has no table starting with | tool | arguments |")
	}
	c, _ := startClient(t, newFakeNode(), legacyEra)
	res, err := c.ListTools(context.Background(), mcp.ListToolsRequest{})
	if err != nil {
		t.Fatal(err)
	}
	for _, tool := range res.Tools {
		if !rows[tool.Name] {
			t.Errorf("tool %s is not a row of the tools table of docs/mcp.md", tool.Name)
		}
	}
}

// toolsTable returns the tools named in the first cell of the rows of the
// table of text whose header starts "| tool | arguments |", up to the
// first line that is not a table row.
func toolsTable(text string) map[string]bool {
	lines := strings.Split(text, "\n")
	rows := map[string]bool{}
	for i, l := range lines {
		if !strings.HasPrefix(l, "| tool | arguments |") {
			continue
		}
		for _, r := range lines[i+2:] { // past the header and its rule
			if !strings.HasPrefix(r, "|") {
				break
			}
			cell, _, _ := strings.Cut(strings.TrimPrefix(r, "|"), "|")
			for _, name := range strings.Split(cell, ",") {
				rows[strings.Trim(strings.TrimSpace(name), "`")] = true
			}
		}
		break
	}
	return rows
}
