package meup

import (
	"encoding/json"
	"fmt"
	"os"
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
