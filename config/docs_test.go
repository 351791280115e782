package config

import (
	"flag"
	"os"
	"strings"
	"testing"
)

var update = flag.Bool("update", false, "rewrite the generated key table in docs/config.md")

const (
	docPath    = "../docs/config.md"
	tableBegin = "<!-- keys:begin — generated from config.Keys by `go test ./config -run TestDocs -update`; do not edit -->\n"
	tableEnd   = "<!-- keys:end -->\n"
)

// markdownTable renders Keys as the table in docs/config.md.
func markdownTable() string {
	var b strings.Builder
	b.WriteString("| Key | Environment variable | Default | Meaning |\n")
	b.WriteString("|-----|----------------------|---------|---------|\n")
	for _, k := range Keys() {
		b.WriteString("| `" + k.Path + "` | `" + k.Env + "` | `" + k.Default + "` | " + k.Doc + " |\n")
	}
	return b.String()
}

// TestDocs keeps docs/config.md in step with Keys: the generated table
// must be current, and every key, variable and default must appear.
func TestDocs(t *testing.T) {
	data, err := os.ReadFile(docPath)
	requireNoError(t, err)
	doc := string(data)
	before, rest, ok1 := strings.Cut(doc, tableBegin)
	table, after, ok2 := strings.Cut(rest, tableEnd)
	if !ok1 || !ok2 {
		t.Fatalf("%s lacks the generated-table markers:\n%s%s", docPath, tableBegin, tableEnd)
	}
	if want := markdownTable(); table != want {
		if *update {
			doc = before + tableBegin + want + tableEnd + after
			requireNoError(t, os.WriteFile(docPath, []byte(doc), 0o644))
			t.Logf("updated %s", docPath)
			table = want
		} else {
			t.Errorf("%s key table is stale; run go test ./config -run TestDocs -update\ngot:\n%s\nwant:\n%s", docPath, table, want)
		}
	}
	for _, k := range Keys() {
		for _, s := range []string{"`" + k.Path + "`", "`" + k.Env + "`", "`" + k.Default + "`"} {
			if !strings.Contains(table, s) {
				t.Errorf("%s: key table lacks %s", docPath, s)
			}
		}
	}
	// The sample file in the prose is the defaults.
	_, sample, found := strings.Cut(after, "```toml\n")
	sample, _, closed := strings.Cut(sample, "```")
	if !found || !closed {
		t.Errorf("%s lacks the sample file", docPath)
	} else if c, err := Parse([]byte(sample)); err != nil || !c.Equal(Default()) {
		t.Errorf("%s: sample file parses to %+v, %v; want Default()", docPath, c, err)
	}
	for _, s := range []string{"{name}", "Precedence", "MEERKAT_COMMS_ACK_TIMEOUT", `"off"`, "meerkat.sock"} {
		if !strings.Contains(before+after, s) {
			t.Errorf("%s prose does not mention %s", docPath, s)
		}
	}
}
