package config

import (
	"strings"
	"testing"
)

func TestMarshalRoundTrip(t *testing.T) {
	odd := fullConfig
	odd.Name = "weird"
	odd.Comms.ListenUDS = "/tmp/a \"quoted\" \\ back\tslash\n\x00\x7f\x1b é 🦦.sock"
	odd.Comms.ListenTCP = "'single'"
	odd.Comms.InboxMax = -5 // Marshal writes what it is given; Validate judges
	for name, c := range map[string]Config{"default": Default(), "full": fullConfig, "odd strings": odd, "zero": {}} {
		t.Run(name, func(t *testing.T) {
			data, err := Marshal(c)
			requireNoError(t, err)
			back, err := Parse(data)
			if err != nil {
				t.Fatalf("Parse(Marshal(c)): %v\n%s", err, data)
			}
			if !back.Equal(c) {
				t.Errorf("round trip = %+v, want %+v\n%s", back, c, data)
			}
		})
	}
}

func TestMarshalCommented(t *testing.T) {
	data, err := Marshal(Default())
	requireNoError(t, err)
	text := string(data)
	for _, k := range Keys() {
		leaf := k.Path[strings.LastIndexByte(k.Path, '.')+1:]
		if !strings.Contains(text, "\n"+leaf+" = "+k.Default+"\n") {
			t.Errorf("no line %q", leaf+" = "+k.Default)
		}
		if !strings.Contains(text, "# Environment: "+k.Env+". Default: "+k.Default+".\n") {
			t.Errorf("no env/default comment for %s", k.Path)
		}
		first := strings.Fields(k.Doc)[0]
		if !strings.Contains(text, "\n# "+first) {
			t.Errorf("no description comment for %s", k.Path)
		}
	}
	for line := range strings.Lines(text) {
		if len(line) > 80 {
			t.Errorf("line longer than 80 bytes: %q", line)
		}
	}
}

func TestMarshalInvalidUTF8(t *testing.T) {
	c := Default()
	c.Comms.ListenUDS = "/tmp/\xff.sock"
	if _, err := Marshal(c); err == nil || !strings.Contains(err.Error(), "comms.listen_uds") {
		t.Errorf("Marshal(invalid UTF-8) err = %v, want an error naming comms.listen_uds", err)
	}
}
