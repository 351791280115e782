package comms

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"slices"
	"strings"
	"testing"
)

// TestRejectReasonsComplete: RejectReasons lists every Reject… constant
// of the package, once.
func TestRejectReasonsComplete(t *testing.T) {
	pkgs, err := parser.ParseDir(token.NewFileSet(), ".", func(fi fs.FileInfo) bool {
		return !strings.HasSuffix(fi.Name(), "_test.go")
	}, 0)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, f := range pkgs["comms"].Files {
		for _, d := range f.Decls {
			g, ok := d.(*ast.GenDecl)
			if !ok || g.Tok != token.CONST {
				continue
			}
			for _, sp := range g.Specs {
				for _, n := range sp.(*ast.ValueSpec).Names {
					if strings.HasPrefix(n.Name, "Reject") {
						names = append(names, n.Name)
					}
				}
			}
		}
	}
	if len(names) != len(RejectReasons) {
		t.Errorf("%d Reject… constants (%v), RejectReasons has %d", len(names), names, len(RejectReasons))
	}
	seen := map[string]bool{}
	for _, r := range RejectReasons {
		if seen[r] {
			t.Errorf("%q listed twice", r)
		}
		seen[r] = true
	}
	if !slices.Contains(RejectReasons, RejectBadSignature) {
		t.Errorf("RejectReasons lacks %q", RejectBadSignature)
	}
}
