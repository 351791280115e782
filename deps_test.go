package meerkatd_test

import (
	"bytes"
	"encoding/json"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// The package layering of the architecture (docs/architecture.md): what
// each package may import, the arrows that must never exist, the
// third-party modules each confined to one package, and one package doc
// per package.

type listedPackage struct {
	ImportPath string
	Name       string
	Doc        string
	GoFiles    []string
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
		if len(p.GoFiles) == 0 {
			continue // only tests, like this one
		}
		pkgs = append(pkgs, p)
	}
	if len(pkgs) < 10 {
		t.Fatalf("go list found only %d packages", len(pkgs))
	}
	return pkgs
}

const module = "github.com/meerkatd/meerkatd"

// allowed lists, per package, the non-standard imports it may have
// (module packages or third-party prefixes); anything else is a layering
// violation.
var allowed = map[string][]string{
	// Leaves.
	"identity": {"golang.org/x/crypto/", "github.com/oasisprotocol/curve25519-voi/", "filippo.io/edwards25519", "filippo.io/edwards25519/field",
		module + "/internal/atomicfile", module + "/internal/filemode"},
	"transport":           {"golang.org/x/crypto/", "golang.org/x/sys/unix"},
	"inbox":               {},
	"comms/wire":          {module + "/identity"},
	"comms/audit":         {},
	"comms/metrics":       {"github.com/prometheus/client_golang/"},
	"comms/outbox":        {module + "/identity"},
	"comms/meup":          {"github.com/bmatcuk/doublestar/v4", "github.com/theory/jsonpath"},
	"comms/card":          {module + "/identity"}, // slice E: agent cards
	"comms/seal":          {module + "/identity"},
	"internal/atomicfile": {},
	"internal/filelock":   {},
	"internal/pgoclean":   {},
	"internal/filemode":   {},
	"internal/testutil":   {},
	"internal/natstest":   {"github.com/nats-io/nats-server/v2/"}, // real NATS servers for tests
	// The service and shell helpers of cmd/meerkatd (leaves).
	"internal/sdnotify":    {},
	"internal/systemdunit": {},
	"internal/completion":  {},
	"internal/termtext":    {},
	"internal/flagdoc":     {},
	// The core.
	"inbox/store": {module + "/inbox", module + "/comms/outbox", module + "/comms/space", module + "/comms/meup",
		module + "/identity", "modernc.org/sqlite", module + "/internal/filemode"},
	"comms/outbox/storetest": {module + "/comms/outbox", module + "/identity"},
	"comms/space":            {module + "/comms/meup", module + "/identity", module + "/internal/atomicfile", module + "/internal/filemode"},
	"comms/space/storetest":  {module + "/comms/space", module + "/comms/meup", module + "/identity"},
	"trust":                  {module + "/identity", module + "/transport", module + "/internal/atomicfile", module + "/internal/filelock", module + "/internal/filemode"},
	"trust/pair":             {module + "/identity", module + "/transport", module + "/trust"},
	"config":                 {module + "/transport", "github.com/BurntSushi/toml", module + "/internal/filemode"},
	"comms":                  {module + "/comms/wire", module + "/comms/seal", module + "/identity", module + "/inbox", module + "/transport", module + "/trust"},
	// The NATS relay: the only package that speaks to a broker.
	"comms/natsrelay": {module + "/comms", module + "/identity", "github.com/nats-io/nats.go", "github.com/nats-io/nats.go/",
		// config check reads a credentials file as connecting would.
		"github.com/nats-io/nkeys"},
	// The node and its faces.
	"comms/node": {module + "/comms", module + "/comms/wire", module + "/comms/outbox", module + "/comms/audit", module + "/inbox",
		module + "/inbox/store", module + "/trust", module + "/trust/pair", module + "/config", module + "/identity",
		module + "/transport", module + "/internal/atomicfile", module + "/internal/filelock", module + "/internal/filemode", module + "/comms/meup", module + "/comms/space",
		module + "/comms/metrics", module + "/comms/natsrelay",
		module + "/comms/card"},
	"comms/control":       {module + "/comms/node", module + "/transport", module + "/internal/sdnotify", module + "/internal/filemode"},
	"comms/node/nodetext": {module + "/comms/node", module + "/comms/outbox", module + "/internal/termtext"},
	"mcpserver":           {module + "/comms/node", "github.com/mark3labs/mcp-go/"},
	"bench": {module + "/comms", module + "/comms/wire", module + "/config", module + "/identity", module + "/transport", module + "/trust",
		// space_broadcast drives the node under test as an agent does: its control socket.
		module + "/comms/control", module + "/comms/node",
		// The nats transports: the bench's peers reach the node through a NATS server.
		module + "/comms/natsrelay",
		// --html: the page replaces its file whole.
		module + "/internal/atomicfile"},
	"cmd/meerkatd": {module + "/comms/control", module + "/comms/node", module + "/comms/node/nodetext", module + "/mcpserver", module + "/bench", module + "/comms/audit",
		module + "/comms/outbox", module + "/config", module + "/identity", module + "/transport", module + "/trust", module + "/trust/pair",
		module + "/internal/atomicfile", module + "/internal/sdnotify", module + "/internal/systemdunit", module + "/internal/completion", module + "/internal/termtext",
		module + "/internal/flagdoc"},
}

// forbidden are arrows that must not exist even indirectly: the core never
// depends on the node, the node never on its faces.
var forbidden = map[string][]string{
	"comms":         {module + "/comms/node", module + "/comms/control", module + "/mcpserver", module + "/comms/space", module + "/comms/meup"},
	"comms/space":   {module + "/comms", module + "/comms/node", module + "/inbox/store"},
	"comms/node":    {module + "/comms/control", module + "/mcpserver", module + "/cmd/meerkatd"},
	"comms/control": {module + "/mcpserver"},
	"mcpserver":     {module + "/comms/control"},
}

// owners confine each third-party module to the one package that owns it.
var owners = map[string]string{
	"github.com/mark3labs/mcp-go":   "mcpserver",
	"github.com/BurntSushi/toml":    "config",
	"modernc.org/sqlite":            "inbox/store",
	"golang.org/x/sys":              "transport",
	"github.com/bmatcuk/doublestar": "comms/meup",
	"github.com/theory/jsonpath":    "comms/meup",
	"filippo.io/edwards25519":       "identity",
	// Ed25519 signing and (batch) verification; ed25519consensus only in
	// the benchmark that compares the two.
	"github.com/oasisprotocol/curve25519-voi": "identity",
	"github.com/hdevalence/ed25519consensus":  "identity",
	// The exposition format and registry (expfmt only in its tests).
	"github.com/prometheus/client_golang": "comms/metrics",
	"github.com/prometheus/client_model":  "comms/metrics",
	"github.com/prometheus/common":        "comms/metrics",
	"github.com/nats-io/nats.go":          "comms/natsrelay",
	"github.com/nats-io/nkeys":            "comms/natsrelay",
	"github.com/nats-io/nats-server":      "internal/natstest",
}

func TestDependencyRules(t *testing.T) {
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
				// Entries ending in "/" are prefixes (a module's packages);
				// the others name one package exactly.
				okImp = okImp || imp == prefix || strings.HasSuffix(prefix, "/") && strings.HasPrefix(imp, prefix)
			}
			if !okImp {
				t.Errorf("%s imports %s, which its layer does not allow", rel, imp)
			}
			for mod, owner := range owners {
				if (imp == mod || strings.HasPrefix(imp, mod+"/")) && rel != owner {
					t.Errorf("%s imports %s: only %s may", rel, imp, owner)
				}
			}
		}
		for _, bad := range forbidden[rel] {
			if slices.Contains(p.Deps, bad) {
				t.Errorf("%s depends on %s (perhaps indirectly): the arrow points the wrong way", rel, bad)
			}
		}
		for _, dep := range p.Deps {
			if strings.HasPrefix(dep, "github.com/fxamacker/cbor") {
				t.Errorf("%s depends on %s: the CBOR library is only a test oracle", rel, dep)
			}
		}
	}
}

// The rules above must be able to fail: a table of made-up packages checks
// the checks themselves.
func TestDependencyRulesCatch(t *testing.T) {
	if slices.Contains(allowed["comms"], module+"/comms/node") {
		t.Fatal("comms may import comms/node")
	}
	if !slices.Contains(forbidden["comms/node"], module+"/mcpserver") || !slices.Contains(forbidden["comms/node"], module+"/comms/control") {
		t.Fatal("comms/node → mcpserver or comms/control is not forbidden")
	}
	for mod, owner := range owners {
		for rel, rules := range allowed {
			for _, r := range rules {
				if strings.HasPrefix(r, mod) && rel != owner {
					t.Errorf("%s is allowed %s, owned by %s", rel, r, owner)
				}
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
		case strings.HasSuffix(p.ImportPath, "/cmd/meerkatd"), p.Name == "main":
			if first[0] != "Command" {
				t.Errorf("%s: doc should start \"Command …\": %q", p.ImportPath, p.Doc)
			}
		case first[0] != "Package":
			t.Errorf("%s: doc should start \"Package …\": %q", p.ImportPath, p.Doc)
		}
	}
}

// maxCommandLines bounds cmd/meerkatd: flags, printing and exit codes, over
// the node's API. Anything larger belongs in a package under it (the text
// of results is comms/node/nodetext's, the commands' help commands.txt's).
const maxCommandLines = 2500

func TestCommandStaysThin(t *testing.T) {
	files, err := filepath.Glob(filepath.Join("cmd", "meerkatd", "*.go"))
	if err != nil {
		t.Fatal(err)
	}
	lines := 0
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		lines += bytes.Count(b, []byte("\n"))
	}
	if lines == 0 || lines >= maxCommandLines {
		t.Fatalf("cmd/meerkatd has %d non-test lines; keep it under %d (move logic into comms/node, comms/control or another package)", lines, maxCommandLines)
	}
	t.Logf("cmd/meerkatd: %d non-test lines", lines)
}
