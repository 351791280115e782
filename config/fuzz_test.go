package config

import (
	"os"
	"path/filepath"
	"testing"
)

// FuzzParse: Parse never panics; whatever it accepts validates without
// panicking and survives Marshal → Parse unchanged.
func FuzzParse(f *testing.F) {
	def, err := Marshal(Default())
	if err != nil {
		f.Fatal(err)
	}
	f.Add(def)
	seeds, _ := filepath.Glob("testdata/*.toml")
	for _, p := range seeds {
		data, err := os.ReadFile(p)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(data)
	}
	for _, s := range []string{
		"", "[comms]\nlisten_udp = 1\n", "comms.inbox_max = -1\n", "name = \"\\u0000\"\n",
		"[comms]\nlisten_uds = \"/tmp/{name}\\t\\\"x\\\".sock\"\n", "comms = {}\n", "[a.b.c]\n",
		"name = '''\nmulti\nline'''\n", "NAME = \"x\"\n",
		"[nats]\nservers = [\"a:1\", \"\\u0000\", 'x\\y']\n", "nats.servers = []\n", "[nats]\nservers = [[\"a\"]]\n",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		c, err := Parse(data)
		if err != nil {
			if !c.Equal(Config{}) {
				t.Fatalf("Parse failed but returned %+v", c)
			}
			return
		}
		_ = c.Validate()
		_, _ = c.Resolve("/home/fuzz")
		out, err := Marshal(c)
		if err != nil {
			t.Fatalf("Marshal(%+v): %v", c, err)
		}
		back, err := Parse(out)
		if err != nil {
			t.Fatalf("Parse(Marshal(c)): %v\n%s", err, out)
		}
		if !back.Equal(c) {
			t.Fatalf("round trip changed the config:\n got %+v\nwant %+v", back, c)
		}
	})
}
