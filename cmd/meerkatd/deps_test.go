package main

import (
	"encoding/json"
	"io"
	"os/exec"
	"strings"
	"testing"
)

// The package layering of docs/STYLE: leaves import only the standard
// library and x/crypto, every package has exactly one package doc, and the
// chosen third-party modules stay in the packages that own them.

type listedPackage struct {
	ImportPath string
	Doc        string
	Imports    []string
	Deps       []string
}

func listPackages(t *testing.T) []listedPackage {
	t.Helper()
	cmd := exec.Command("go", "list", "-json", "github.com/meerkatd/meerkatd/...")
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	var pkgs []listedPackage
	dec := json.NewDecoder(strings.NewReader(string(out)))
	for {
		var p listedPackage
		if err := dec.Decode(&p); err == io.EOF {
			break
		} else if err != nil {
			t.Fatal(err)
		}
		pkgs = append(pkgs, p)
	}
	if len(pkgs) < 4 {
		t.Fatalf("go list found only %d packages", len(pkgs))
	}
	return pkgs
}

const module = "github.com/meerkatd/meerkatd"

func TestDependencyRules(t *testing.T) {
	// Allowed non-standard imports (module-internal or third-party) per
	// package; anything else is a layering violation.
	allowed := map[string][]string{
		"identity":               {"golang.org/x/crypto/"},
		"transport":              {"golang.org/x/crypto/"},
		"inbox":                  {},
		"inbox/store":            {module + "/inbox", module + "/comms/outbox", module + "/identity", "modernc.org/sqlite"},
		"comms/outbox":           {module + "/identity"},
		"comms/outbox/storetest": {module + "/comms/outbox", module + "/identity"},
		"comms/audit":            {},
		"trust":                  {module + "/identity", module + "/transport"},
		"trust/pair":             {module + "/identity", module + "/transport", module + "/trust"},
		"config":                 {module + "/transport", "github.com/BurntSushi/toml"},
		"comms/wire":             {module + "/identity"},
		"comms":                  {module + "/comms/wire", module + "/identity", module + "/inbox", module + "/transport", module + "/trust"},
		"mcpserver":              {"github.com/mark3labs/mcp-go/"},
		"bench":                  {module + "/comms", module + "/comms/wire", module + "/config", module + "/identity", module + "/transport", module + "/trust"},
		"cmd/meerkatd":           {module + "/"},
	}
	for _, p := range listPackages(t) {
		rel := strings.TrimPrefix(strings.TrimPrefix(p.ImportPath, module), "/")
		rules, ok := allowed[rel]
		if !ok {
			t.Errorf("package %s has no dependency rule: add one to this test", rel)
			continue
		}
		for _, imp := range p.Imports {
			first := strings.SplitN(imp, "/", 2)[0]
			if !strings.Contains(first, ".") {
				continue // standard library
			}
			okImp := false
			for _, prefix := range rules {
				okImp = okImp || imp == strings.TrimSuffix(prefix, "/") || strings.HasPrefix(imp, prefix)
			}
			if !okImp {
				t.Errorf("%s imports %s, which its layer does not allow", rel, imp)
			}
		}
		for _, dep := range p.Deps {
			if strings.HasPrefix(dep, "github.com/fxamacker/cbor") {
				t.Errorf("%s depends on %s: the CBOR library is only a test oracle", rel, dep)
			}
		}
	}
}

func TestPackageDocs(t *testing.T) {
	for _, p := range listPackages(t) {
		first := strings.Fields(p.Doc)
		switch {
		case p.Doc == "":
			t.Errorf("%s has no package doc", p.ImportPath)
		case strings.HasSuffix(p.ImportPath, "/cmd/meerkatd"):
			if first[0] != "Command" {
				t.Errorf("%s: doc should start \"Command meerkatd\": %q", p.ImportPath, p.Doc)
			}
		case first[0] != "Package":
			t.Errorf("%s: doc should start \"Package …\": %q", p.ImportPath, p.Doc)
		}
	}
}
