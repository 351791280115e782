package space_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/meerkatd/meerkatd/comms/meup"
	"github.com/meerkatd/meerkatd/comms/space"
)

// member returns the JSON text of a roster member.
func memberJSON(k byte, id, caps string) string {
	return fmt.Sprintf(`{"key": %q, "id": %q, "capabilities": %s}`, key(k), id, caps)
}

func TestParseRoster(t *testing.T) {
	ok := memberJSON(1, "alice", `[{"kind":"*"}]`)
	many := func(n int, f func(i int) string) string {
		var parts []string
		for i := range n {
			parts = append(parts, f(i))
		}
		return strings.Join(parts, ",")
	}
	tests := []struct {
		name string
		text string
		want string // substring of the error; "" : parses
	}{
		{"empty file", `{}`, ""},
		{"no spaces", `{"spaces": []}`, ""},
		{"one space", `{"spaces": [{"name": "lab", "members": [` + ok + `]}]}`, ""},
		{"name grammar", `{"spaces": [{"name": "A-z_0.9", "members": []}]}`, ""},
		{"addressed", `{"spaces": [{"name": "lab", "delivery": "addressed", "members": []}]}`, ""},
		{"same id in two spaces", `{"spaces": [{"name": "a", "members": [` + ok + `]}, {"name": "b", "members": [` + ok + `]}]}`, ""},
		{"no capabilities", `{"spaces": [{"name": "lab", "members": [` + memberJSON(1, "alice", `[]`) + `]}]}`, ""},
		{"null capabilities", `{"spaces": [{"name": "lab", "members": [` + memberJSON(1, "alice", `null`) + `]}]}`, ""},

		{"not JSON", `{"spaces": [`, "space: roster:"},
		{"trailing data", `{"spaces": []} {}`, "data after"},
		{"unknown field", `{"spaces": [], "extra": 1}`, `unknown field "extra"`},
		{"unknown member field", `{"spaces": [{"name": "lab", "members": [{"key": "` + key(1).String() + `", "id": "a", "role": "x"}]}]}`, `space 1 ("lab"), member 1 ("a"): unknown field "role"`},
		{"empty name", `{"spaces": [{"name": "", "members": []}]}`, "space 1: name: empty"},
		{"bad name", `{"spaces": [{"name": "lab", "members": []}, {"name": "my lab", "members": []}]}`, `space 2 ("my lab"): name:`},
		{"long name", `{"spaces": [{"name": "` + strings.Repeat("a", 65) + `", "members": []}]}`, "over the limit of 64"},
		{"name unique ignoring case", `{"spaces": [{"name": "Lab", "members": []}, {"name": "lab", "members": []}]}`, `space 2 ("lab"): name already used by space 1 ("Lab")`},
		{"bad delivery", `{"spaces": [{"name": "lab", "delivery": "some", "members": []}]}`, `space 1 ("lab"): delivery "some"`},
		{"bad key", `{"spaces": [{"name": "lab", "members": [{"key": "ed25519:xyz", "id": "a"}]}]}`, `space 1 ("lab"), member 1 ("a"): identity: key must be 32 bytes`},
		{"missing key", `{"spaces": [{"name": "lab", "members": [` + ok + `, {"id": "bob"}]}]}`, `space 1 ("lab"), member 2 ("bob"): key missing`},
		{"missing id", `{"spaces": [{"name": "lab", "members": [` + ok + `, {"key": "` + key(2).String() + `"}]}]}`, `space 1 ("lab"), member 2: id: empty`},
		{"id with a space", `{"spaces": [{"name": "lab", "members": [` + memberJSON(1, "al ice", `[]`) + `]}]}`, `member 1 ("al ice"): id:`},
		{"long id", `{"spaces": [{"name": "lab", "members": [` + memberJSON(1, strings.Repeat("x", 129), `[]`) + `]}]}`, "over the limit of 128"},
		{"id with a zero-width space", `{"spaces": [{"name": "lab", "members": [` + memberJSON(1, "orchestrator\u200b", `[]`) + `]}]}`, "an invisible one"},
		{"id with a right-to-left override", `{"spaces": [{"name": "lab", "members": [` + memberJSON(1, "a\u202eb", `[]`) + `]}]}`, "an invisible one"},
		{"id with a combining grapheme joiner", `{"spaces": [{"name": "lab", "members": [` + memberJSON(1, "orchestrator\u034f", `[]`) + `]}]}`, "an invisible one"},
		{"id with a Hangul filler", `{"spaces": [{"name": "lab", "members": [` + memberJSON(1, "a\u3164", `[]`) + `]}]}`, "an invisible one"},
		{"id with a soft hyphen", `{"spaces": [{"name": "lab", "members": [` + memberJSON(1, "or\u00adch", `[]`) + `]}]}`, "an invisible one"},
		{"id in another script", `{"spaces": [{"name": "lab", "members": [` + memberJSON(1, "\u00e9quipe-\u4e00", `[]`) + `]}]}`, ""},
		{"id with an emoji of joined parts", `{"spaces": [{"name": "lab", "members": [` + memberJSON(1, "dev\U0001f468\u200d\U0001f4bb", `[]`) + `]}]}`, ""},
		{"id with a variation selector", `{"spaces": [{"name": "lab", "members": [` + memberJSON(1, "love\u2764\ufe0f", `[]`) + `]}]}`, ""},
		{"id with an emoji of joined parts and a skin tone", `{"spaces": [{"name": "lab", "members": [` + memberJSON(1, "\U0001f469\U0001f3fd\u200d\U0001f52c", `[]`) + `]}]}`, ""},
		{"id with a heart on fire", `{"spaces": [{"name": "lab", "members": [` + memberJSON(1, "\u2764\ufe0f\u200d\U0001f525", `[]`) + `]}]}`, ""},
		{"id with a keycap", `{"spaces": [{"name": "lab", "members": [` + memberJSON(1, "team1\ufe0f\u20e3", `[]`) + `]}]}`, ""},
		{"id with a non-joiner in Persian", `{"spaces": [{"name": "lab", "members": [` + memberJSON(1, "\u0645\u06cc\u200c\u062e\u0648\u0627\u0647\u0645", `[]`) + `]}]}`, ""},
		{"id with a joiner between letters", `{"spaces": [{"name": "lab", "members": [` + memberJSON(1, "w\u200dorker", `[]`) + `]}]}`, "an invisible one"},
		{"id with a trailing joiner", `{"spaces": [{"name": "lab", "members": [` + memberJSON(1, "w\u00f6rker\u200d", `[]`) + `]}]}`, "an invisible one"},
		{"id with a joiner after an emoji only", `{"spaces": [{"name": "lab", "members": [` + memberJSON(1, "\U0001f468\u200dx", `[]`) + `]}]}`, "an invisible one"},
		{"id with a leading joiner", `{"spaces": [{"name": "lab", "members": [` + memberJSON(1, "\u200d\U0001f4bb", `[]`) + `]}]}`, "an invisible one"},
		{"id with a non-joiner in Latin", `{"spaces": [{"name": "lab", "members": [` + memberJSON(1, "work\u200cer", `[]`) + `]}]}`, "an invisible one"},
		{"id with a Mongolian selector after Latin", `{"spaces": [{"name": "lab", "members": [` + memberJSON(1, "worker\u180b", `[]`) + `]}]}`, "an invisible one"},
		{"id with a variation selector after a letter", `{"spaces": [{"name": "lab", "members": [` + memberJSON(1, "worker\ufe0f", `[]`) + `]}]}`, "an invisible one"},
		{"id with a leading variation selector", `{"spaces": [{"name": "lab", "members": [` + memberJSON(1, "\ufe0fworker", `[]`) + `]}]}`, "an invisible one"},
		{"id with an ideographic variation selector after Latin", `{"spaces": [{"name": "lab", "members": [` + memberJSON(1, "worker\U000e0100", `[]`) + `]}]}`, "an invisible one"},
		{"id with an ideographic variation selector after Han", `{"spaces": [{"name": "lab", "members": [` + memberJSON(1, "\u845b\U000e0100", `[]`) + `]}]}`, ""},
		{"id with stacked variation selectors", `{"spaces": [{"name": "lab", "members": [` + memberJSON(1, "love\u2764\ufe0f\ufe0f", `[]`) + `]}]}`, "an invisible one"},
		{"id with a variation selector after a digit that makes no keycap", `{"spaces": [{"name": "lab", "members": [` + memberJSON(1, "agent1\ufe0f", `[]`) + `]}]}`, "an invisible one"},
		{"id with a joiner between ASCII modifier letters", `{"spaces": [{"name": "lab", "members": [` + memberJSON(1, "ops^\u200d^", `[]`) + `]}]}`, "an invisible one"},
		{"id with stacked Mongolian selectors", `{"spaces": [{"name": "lab", "members": [` + memberJSON(1, "\u1820\u180b\u180b", `[]`) + `]}]}`, "an invisible one"},
		{"id in Sinhala with a joiner", `{"spaces": [{"name": "lab", "members": [` + memberJSON(1, "\u0dc1\u0dca\u200d\u0dbb\u0dd3", `[]`) + `]}]}`, ""},
		{"id in Devanagari with a half form", `{"spaces": [{"name": "lab", "members": [` + memberJSON(1, "\u0915\u094d\u200d\u0937", `[]`) + `]}]}`, ""},
		{"id in Malayalam ending in a chillu", `{"spaces": [{"name": "lab", "members": [` + memberJSON(1, "\u0d28\u0d4d\u200d", `[]`) + `]}]}`, ""},
		{"id with a double exclamation emoji", `{"spaces": [{"name": "lab", "members": [` + memberJSON(1, "go\u203c\ufe0f", `[]`) + `]}]}`, ""},
		{"id with an information emoji", `{"spaces": [{"name": "lab", "members": [` + memberJSON(1, "\u2139\ufe0f", `[]`) + `]}]}`, ""},
		{"id with a left-right arrow emoji", `{"spaces": [{"name": "lab", "members": [` + memberJSON(1, "\u2194\ufe0f", `[]`) + `]}]}`, ""},
		{"id with a wavy dash emoji", `{"spaces": [{"name": "lab", "members": [` + memberJSON(1, "\u3030\ufe0f", `[]`) + `]}]}`, ""},
		{"two ids that read the same", `{"spaces": [{"name": "lab", "members": [` + memberJSON(1, "x\u00a9\u00a9", `[]`) + `,` + memberJSON(2, "x\u00a9\u200d\u00a9", `[]`) + `]}]}`, `id reads the same as member 1's`},
		{"an emoji with and without its selector", `{"spaces": [{"name": "lab", "members": [` + memberJSON(1, "w\u00b0", `[]`) + `,` + memberJSON(2, "w\u00b0\ufe0f", `[]`) + `]}]}`, `id reads the same as member 1's`},
		{"name not ASCII", `{"spaces": [{"name": "\u00fcn\u00ef", "members": []}]}`, `'ü' is not allowed`},
		{"duplicate key", `{"spaces": [{"name": "lab", "members": [` + ok + `,` + memberJSON(1, "bob", `[]`) + `]}]}`, `space 1 ("lab"), member 2 ("bob"): key already used by member 1 ("alice")`},
		{"duplicate id", `{"spaces": [{"name": "lab", "members": [` + ok + `,` + memberJSON(2, "alice", `[]`) + `]}]}`, `space 1 ("lab"), member 2 ("alice"): id already used by member 1`},
		{"capability that does not compile", `{"spaces": [{"name": "lab", "members": [` + ok + `,` + memberJSON(2, "bob", `[{"kind": 5}]`) + `]}]}`, `space 1 ("lab"), member 2 ("bob"): capabilities:`},
		{"bad regex", `{"spaces": [{"name": "lab", "members": [` + memberJSON(2, "bob", `[{"kind": "chat", "payload": {"text": "/(/"}}]`) + `]}]}`, `member 1 ("bob"): capabilities:`},
		{"too many capabilities", `{"spaces": [{"name": "lab", "members": [` + memberJSON(2, "bob", "["+many(65, func(int) string { return `{"kind":"chat"}` })+"]") + `]}]}`, "65 capabilities"},
		{"too many members", `{"spaces": [{"name": "lab", "members": [` + many(257, func(i int) string {
			return fmt.Sprintf(`{"key": %q, "id": "m%d"}`, key(1), i)
		}) + `]}]}`, "257 members"},
		{"too many spaces", `{"spaces": [` + many(257, func(i int) string { return fmt.Sprintf(`{"name": "s%d", "members": []}`, i) }) + `]}`, "257 spaces"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r, err := space.ParseRoster([]byte(tt.text))
			if tt.want == "" {
				if err != nil {
					t.Fatalf("unexpected error: %v", err)
				}
				if r == nil {
					t.Fatal("nil roster")
				}
				return
			}
			if err == nil {
				t.Fatalf("parsed; want an error containing %q", tt.want)
			}
			if !strings.Contains(err.Error(), tt.want) {
				t.Errorf("error %q, want it to contain %q", err, tt.want)
			}
			if r != nil {
				t.Error("a roster came back with the error")
			}
		})
	}
}

// Every error of a spaces.json that does not decode names the space and
// member at fault as Validate's errors do (number, then name or id), or
// the line and column of a syntax error: the whole text, each a case.
func TestParseRosterErrorTexts(t *testing.T) {
	k1, k2 := key(1).String(), key(2).String()
	tests := []struct {
		name, text, want string
	}{
		{"short key", `{"spaces": [{"name": "s", "members": [{"key": "` + k1 + `", "id": "me"}, {"key": "ed25519:AAAA", "id": "me2"}]}]}`,
			`space: roster: space 1 ("s"), member 2 ("me2"): identity: key must be 32 bytes (44 base64 characters)`},
		{"key without prefix", `{"spaces": [{"name": "s", "members": [{"key": "abc", "id": "me"}]}]}`,
			`space: roster: space 1 ("s"), member 1 ("me"): identity: key string must start with "ed25519:"`},
		{"empty key, no id", `{"spaces": [{"name": "s", "members": [{"key": ""}]}]}`,
			`space: roster: space 1 ("s"), member 1: identity: key string must start with "ed25519:"`},
		{"key not a string", `{"spaces": [{"name": "s", "members": [{"key": 5, "id": "me"}]}]}`,
			`space: roster: space 1 ("s"), member 1 ("me"): key: a JSON number, not a string`},
		{"unknown member field", `{"spaces": [{"name": "s", "members": [{"key": "` + k1 + `", "id": "me", "role": "x"}]}]}`,
			`space: roster: space 1 ("s"), member 1 ("me"): unknown field "role"`},
		{"unknown capability field", `{"spaces": [{"name": "s", "members": [{"key": "` + k1 + `", "id": "me", "capabilities": [{"kinds": "chat"}]}]}]}`,
			`space: roster: space 1 ("s"), member 1 ("me"): unknown field "kinds"`},
		{"capabilities not a list", `{"spaces": [{"name": "s", "members": [{"key": "` + k1 + `", "id": "me", "capabilities": {"kind": "chat"}}]}]}`,
			`space: roster: space 1 ("s"), member 1 ("me"): capabilities: a JSON object, not an array`},
		{"member not an object", `{"spaces": [{"name": "s", "members": [{"key": "` + k1 + `", "id": "me"}, "` + k2 + `"]}]}`,
			`space: roster: space 1 ("s"), member 2: a JSON string, not an object`},
		{"unknown space field", `{"spaces": [{"name": "s", "mode": "all", "members": []}]}`,
			`space: roster: space 1 ("s"): unknown field "mode"`},
		{"members not a list", `{"spaces": [{"name": "s", "members": 3}]}`,
			`space: roster: space 1 ("s"): members: a JSON number, not an array`},
		{"name not a string", `{"spaces": [{"name": "s"}, {"name": 7, "members": []}]}`,
			`space: roster: space 2: name: a JSON number, not a string`},
		{"spaces not a list", `{"spaces": {"name": "s"}}`,
			`space: roster: spaces: a JSON object, not an array`},
		{"not an object", `[]`,
			`space: roster: a JSON array, not an object`},
		{"syntax error", "{\"spaces\": [\n  {\"name\": \"s\",, \"members\": []}\n]}",
			`space: roster: line 2, column 16: invalid character ',' looking for beginning of object key string`},
		{"cut short", `{"spaces": [{"name": "s"`,
			`space: roster: the JSON text ends too soon, after line 1, column 24 (an object, array or string is not closed)`},
		{"cut short after lines", "{\"spaces\": [\n  {\"name\": \"s\",\n   \"members\": [\n\n",
			`space: roster: the JSON text ends too soon, after line 3, column 15 (an object, array or string is not closed)`},
		{"empty", "  \n",
			`space: roster: no JSON text (a roster with no spaces is {"spaces": []})`},
		// Validate's own errors, for comparison.
		{"duplicate key", `{"spaces": [{"name": "s", "members": [{"key": "` + k1 + `", "id": "me"}, {"key": "` + k1 + `", "id": "me2"}]}]}`,
			`space: roster: space 1 ("s"), member 2 ("me2"): key already used by member 1 ("me")`},
		{"missing key", `{"spaces": [{"name": "s", "members": [{"key": null, "id": "me"}]}]}`,
			`space: roster: space 1 ("s"), member 1 ("me"): key missing`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r, err := space.ParseRoster([]byte(tt.text))
			if err == nil || r != nil {
				t.Fatalf("parsed (%v); want %q", r, tt.want)
			}
			if err.Error() != tt.want {
				t.Errorf("error\n%s\nwant\n%s", err, tt.want)
			}
		})
	}
}

func TestRosterSaveLoad(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "spaces.json")
	r, err := space.LoadRoster(path)
	if err != nil || len(r.Spaces) != 0 {
		t.Fatalf("missing file: %+v, %v", r, err)
	}
	r = testRoster(t)
	r.Spaces[1].Members[0].Capabilities = nil
	if err := r.Save(path); err != nil {
		t.Fatal(err)
	}
	st, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if st.Mode().Perm() != 0o600 {
		t.Errorf("mode %v, want 0600", st.Mode().Perm())
	}
	data, _ := os.ReadFile(path)
	if strings.Contains(string(data), "null") {
		t.Errorf("saved roster holds null:\n%s", data)
	}
	back, err := space.LoadRoster(path)
	if err != nil {
		t.Fatal(err)
	}
	if len(back.Spaces) != 3 || back.Spaces[0].Members[1].Key != kBob || back.Spaces[2].Delivery != space.DeliveryAddressed {
		t.Errorf("loaded %+v", back)
	}
	// An invalid roster is not saved, and the file stays.
	bad := testRoster(t)
	bad.Spaces[0].Name = "bad name"
	if err := bad.Save(path); err == nil {
		t.Error("saved an invalid roster")
	}
	if _, err := space.LoadRoster(path); err != nil {
		t.Error(err)
	}
	// A file that does not parse names the path.
	if err := os.WriteFile(path, []byte(`{"spaces": 5}`), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := space.LoadRoster(path); err == nil || !strings.Contains(err.Error(), path) {
		t.Errorf("load of a bad file: %v", err)
	}
}

func FuzzParseRoster(f *testing.F) {
	f.Add([]byte(`{"spaces": [{"name": "lab", "members": [` + memberJSON(1, "alice", `[{"kind":"*"}]`) + `]}]}`))
	f.Add([]byte(`{"spaces": [{"name": "lab", "delivery": "addressed", "members": [` + memberJSON(1, "a", `[{"kind":["chat","mcp/*"],"payload":{"method":"tools/*"}}]`) + `,` + memberJSON(2, "b", `[]`) + `]}]}`))
	f.Add([]byte(`{"spaces": [{"name": "Lab", "members": []}, {"name": "lab", "members": []}]}`))
	f.Add([]byte(`{}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		r, err := space.ParseRoster(data)
		if err != nil {
			if r != nil {
				t.Fatal("roster and error")
			}
			return
		}
		if err := r.Validate(); err != nil {
			t.Fatalf("parsed roster does not validate: %v", err)
		}
		// What parses survives a write and a read unchanged.
		path := filepath.Join(t.TempDir(), "spaces.json")
		if err := r.Save(path); err != nil {
			t.Fatalf("save: %v", err)
		}
		back, err := space.LoadRoster(path)
		if err != nil {
			t.Fatalf("reload: %v", err)
		}
		a, _ := json.Marshal(normalise(r))
		b, _ := json.Marshal(normalise(back))
		if !bytes.Equal(a, b) {
			t.Fatalf("round trip changed the roster:\n%s\n%s", a, b)
		}
	})
}

// normalise makes nil member and capability lists empty, so that equal
// rosters marshal alike (json.Marshal compacts the capabilities' JSON).
func normalise(r *space.Roster) *space.Roster {
	out := &space.Roster{Spaces: []space.Config{}}
	for _, c := range r.Spaces {
		ms := []space.Member{}
		for _, m := range c.Members {
			if m.Capabilities == nil {
				m.Capabilities = []meup.Capability{}
			}
			ms = append(ms, m)
		}
		c.Members = ms
		out.Spaces = append(out.Spaces, c)
	}
	return out
}
