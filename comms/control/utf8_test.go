package control

import (
	"context"
	"encoding/json"
	"path/filepath"
	"reflect"
	"testing"

	"github.com/meerkatd/meerkatd/comms/node"
)

// A request's arguments holding text that is not UTF-8 name the first
// such string by its JSON name, wherever it sits; JSON bytes
// (json.RawMessage) are not text.
func TestBadText(t *testing.T) {
	type inner struct {
		Note string `json:"note"`
	}
	type embedded struct {
		Reason string `json:"reason,omitempty"`
	}
	type args struct {
		embedded
		Peer    string            `json:"peer"`
		Skip    string            `json:"-"`
		Plain   string            // no tag: its Go name
		Tags    []string          `json:"tags"`
		Meta    map[string]string `json:"meta"`
		In      *inner            `json:"in"`
		Any     any               `json:"any"`
		Params  json.RawMessage   `json:"params"`
		private string
	}
	const bad = "a\xffb"
	for _, tc := range []struct {
		name string
		in   any
		want string // "": none
	}{
		{"all good", args{Peer: "bob", Tags: []string{"é"}, Meta: map[string]string{"k": "v"}, In: &inner{"ok"}}, ""},
		{"top-level string", bad, "argument"},
		{"field", args{Peer: bad}, "peer"},
		{"untagged field", args{Plain: bad}, "Plain"},
		{"embedded field", args{embedded: embedded{Reason: bad}}, "reason"},
		{"slice element", args{Tags: []string{"ok", bad}}, "tags"},
		{"map key", args{Meta: map[string]string{bad: "v"}}, "meta"},
		{"map value", args{Meta: map[string]string{"k": bad}}, "meta"},
		{"through a pointer", args{In: &inner{bad}}, "note"},
		{"through an interface", args{Any: inner{bad}}, "note"},
		{"nil pointer", args{In: nil}, ""},
		{"ignored field", args{Skip: bad}, ""},
		{"unexported field", args{private: bad}, ""},
		{"raw JSON", args{Params: json.RawMessage(`"` + bad + `"`)}, ""},
		{"a member named -", struct {
			Dash string `json:"-,"`
		}{bad}, "-"},
		{"a cycle of pointers", cyclic(), ""},
	} {
		got, isBad := badText(reflect.ValueOf(tc.in), "argument")
		if isBad != (tc.want != "") || got != tc.want {
			t.Errorf("%s: badText = %q, %v; want %q", tc.name, got, isBad, tc.want)
		}
	}
}

// loop is a type whose values can point back at themselves.
type loop struct {
	Text string `json:"text"`
	Next *loop  `json:"next"`
}

// cyclic is a loop pointing at itself, its text fine: badText's walk ends.
func cyclic() *loop {
	l := &loop{Text: "fine"}
	l.Next = l
	return l
}

// Text that is not UTF-8 is refused before anything reaches a daemon:
// JSON would carry it changed (each bad byte U+FFFD), and the daemon
// would send other text than the caller's.
func TestClientRefusesTextNotUTF8(t *testing.T) {
	c := NewClient(filepath.Join(t.TempDir(), "control.sock")) // nobody listens
	ctx := context.Background()
	_, err := c.SendMessage(ctx, "bob", "a\xffb", node.SendOptions{})
	if node.CodeOf(err) != node.CodeBadArgument || node.UserText(err) != "the body is not valid UTF-8" {
		t.Fatalf("SendMessage: %v; want bad_argument, the body is not valid UTF-8", err)
	}
	_, err = c.SendRequest(ctx, "bob", "re\xffview", nil, node.SendOptions{})
	if node.CodeOf(err) != node.CodeBadArgument || node.UserText(err) != "the intent is not valid UTF-8" {
		t.Fatalf("SendRequest: %v; want bad_argument, the intent is not valid UTF-8", err)
	}
	if _, err := c.SendMessage(ctx, "bob", "fine", node.SendOptions{}); node.CodeOf(err) == node.CodeBadArgument {
		t.Fatalf("valid text refused: %v", err)
	}
}
