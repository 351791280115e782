package meup

import (
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"testing"
)

// capabilityCases is the shape of testdata/meup/capability-cases.json.
type capabilityCases struct {
	About string `json:"about"`
	Cases []struct {
		Capabilities json.RawMessage `json:"capabilities"`
		Message      struct {
			Kind    string          `json:"kind"`
			Payload json.RawMessage `json:"payload"`
		} `json:"message"`
		Expect bool   `json:"expect"`
		Source string `json:"source"`
		Note   string `json:"note"`
	} `json:"cases"`
}

func TestCapabilityCases(t *testing.T) {
	data, err := os.ReadFile("../../testdata/meup/capability-cases.json")
	if err != nil {
		t.Fatal(err)
	}
	var cc capabilityCases
	if err := json.Unmarshal(data, &cc); err != nil {
		t.Fatal(err)
	}
	if len(cc.Cases) != 63 {
		t.Fatalf("got %d cases, want 63", len(cc.Cases))
	}
	for i, c := range cc.Cases {
		t.Run(fmt.Sprintf("%s/%d", c.Source, i), func(t *testing.T) {
			caps, err := ParseCapabilities(c.Capabilities)
			if err != nil {
				t.Fatalf("ParseCapabilities: %v", err)
			}
			m, err := Compile(caps)
			if err != nil {
				t.Fatalf("Compile: %v", err)
			}
			e := Envelope{Kind: c.Message.Kind, Payload: c.Message.Payload}
			if got := m.Allows(e); got != c.Expect {
				t.Errorf("Allows = %v, want %v (%s)", got, c.Expect, c.Note)
			}
		})
	}
}

// deepNest returns a payload pattern of n "**" keys, each nested in the
// previous one's value, around leaf.
func deepNest(n int, leaf string) string {
	for range n {
		leaf = `{"**":` + leaf + `}`
	}
	return leaf
}

// chain returns a payload of depth objects {"a": …} around leaf.
func chain(depth int, leaf string) string {
	for range depth {
		leaf = `{"a":` + leaf + `}`
	}
	return leaf
}

func TestMatchWorkBounded(t *testing.T) {
	const limit = 1 << 20
	var alternatives []string
	for range 2000 {
		alternatives = append(alternatives, "1")
	}
	var globs []string
	for range 100 {
		globs = append(globs, `"`+strings.Repeat("*a", maxGlobWildcards)+`b"`)
	}
	var paths []string
	for i := range 40 {
		paths = append(paths, fmt.Sprintf(`"$..k%d":"x"`, i))
	}
	many := func(n int, c string) string { return "[" + strings.TrimSuffix(strings.Repeat(c+",", n), ",") + "]" }
	tests := []struct {
		name    string
		caps    string // each costly on payload, and matching nothing; a capability that allows everything follows
		payload string
	}{
		{"** nested in **", `[{"kind":"*","payload":` + deepNest(8, `{"zz":"no"}`) + `}]`, chain(29, `"v"`)},
		{"** with many alternatives", many(MaxCapabilities, `{"kind":"*","payload":{"**":[`+strings.Join(alternatives, ",")+`]}}`), `{"a":` + many(2000, `{}`) + `}`},
		{"many globs over a long string", many(MaxCapabilities, `{"kind":"*","payload":{"a":[`+strings.Join(globs, ",")+`]}}`), `{"a":"` + strings.Repeat("a", 64<<10) + `"}`},
		{"many JSONPath keys", many(MaxCapabilities, `{"kind":"*","payload":{`+strings.Join(paths, ",")+`}}`), `{"a":` + many(2000, `{"b":1}`) + `}`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			costly, err := Compile(caps(t, tt.caps))
			if err != nil {
				t.Fatal(err)
			}
			all, err := Compile(caps(t, `[{"kind":"*"}]`))
			if err != nil {
				t.Fatal(err)
			}
			e := Envelope{Kind: "x", Payload: json.RawMessage(tt.payload)}
			// Out of work, the decision is a denial, even though a later
			// capability would allow the envelope: the costly patterns
			// are never matched to the end.
			ok, used := allowsWithin(e, limit, []*Matcher{costly, all})
			if ok {
				t.Errorf("allowed after running out of work (%d units spent)", used)
			}
			// Alone, the cheap capability allows it.
			if !AllowsAny(e, all) {
				t.Error("the capability that allows everything does not")
			}
		})
	}
}

func TestMatchWorkEnough(t *testing.T) {
	// Ordinary capabilities over a payload of MaxPayloadBytes are decided
	// well within the bound.
	m, err := Compile(caps(t, `[
		{"kind":"chat"},
		{"kind":"mcp/request","payload":{"method":"tools/call","params":{"name":"read_*","arguments":{"path":"!/^\\/etc\\//"}}}},
		{"kind":"mcp/request","payload":{"**":"/secret/","$.params.name":"read_*","$.params.arguments[*]":"*"}}]`))
	if err != nil {
		t.Fatal(err)
	}
	text := strings.Repeat("x", MaxPayloadBytes-200)
	e := Envelope{Kind: "mcp/request", Payload: json.RawMessage(`{"method":"tools/call","params":{"name":"read_file","arguments":{"path":"/home/a","text":"` + text + `"}}}`)}
	ok, used := allowsWithin(e, maxMatchWork, []*Matcher{m})
	if !ok {
		t.Fatal("denied")
	}
	if used > maxMatchWork/4 {
		t.Fatalf("spent %d units of work, more than a quarter of the bound %d", used, maxMatchWork)
	}
}
