package main

import (
	"maps"
	"slices"
	"strings"
	"testing"
)

// TestCommandTable checks commands.txt against the commands' bodies:
// every command has a body, a summary and a usage, and every body a text.
func TestCommandTable(t *testing.T) {
	table := commandTable()
	if got, want := slices.Sorted(maps.Keys(table)), slices.Sorted(maps.Keys(commandRuns)); !slices.Equal(got, want) {
		t.Fatalf("commands.txt has %q; the bodies are %q", got, want)
	}
	for name, c := range table {
		if c.run == nil || c.summary == "" || c.usage == "" {
			t.Errorf("%s: run set %t, summary %q, usage %q", name, c.run != nil, c.summary, c.usage)
		}
	}
	for _, name := range []string{"send", "inbox", "broadcast", "service", "bench", "completion"} {
		if table[name].help == "" {
			t.Errorf("%s has no help", name)
		}
	}
}

func TestParseCommands(t *testing.T) {
	tests := []struct {
		name, text string
		want       map[string]command
	}{
		{"empty", "", map[string]command{}},
		{"header only", "# comment\n\n", map[string]command{}},
		{"summary and usage", "# h\n\n== a\nsay a\nusage: a [--x]\n", map[string]command{"a": {summary: "say a", usage: "a [--x]"}}},
		{"continued usage and help", "\n== b\nsay b\nusage: b X\n       | b Y\n\nMore about b,\non two lines.\n\n== c\nsay c\nusage: c\n",
			map[string]command{"b": {summary: "say b", usage: "b X\n       | b Y", help: "More about b,\non two lines."}, "c": {summary: "say c", usage: "c"}}},
		{"no usage", "\n== d\nsay d\n\nhelp of d\n", map[string]command{"d": {summary: "say d", help: "help of d"}}},
		{"name only", "\n== e", map[string]command{"e": {}}},
	}
	for _, tc := range tests {
		got := parseCommands(tc.text)
		if !maps.EqualFunc(got, tc.want, func(a, b command) bool { return a.summary == b.summary && a.usage == b.usage && a.help == b.help }) {
			t.Errorf("%s: got %+v, want %+v", tc.name, got, tc.want)
		}
	}
}

func FuzzParseCommands(f *testing.F) {
	f.Add(commandsText)
	f.Add("\n== a\n")
	f.Add("\n== \n\n== \nusage: \n       ")
	f.Fuzz(func(t *testing.T, text string) {
		for name, c := range parseCommands(text) {
			if !strings.Contains(text, "\n== "+name) {
				t.Errorf("command %q is not named in the text", name)
			}
			for _, part := range []string{c.summary, c.usage, c.help} {
				if !strings.Contains(text, part) {
					t.Errorf("%q: %q is not in the text", name, part)
				}
			}
		}
	})
}
