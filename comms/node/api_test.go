package node

import (
	"encoding/json"
	"testing"
)

// A Message's JSON values come back as the exact JSON text.
func TestMessageUnmarshal(t *testing.T) {
	for _, tc := range []struct {
		in                     string
		params, result, fields string // "" for absent
	}{
		{`{"id":"a","params":{"n":12345678901234567890}}`, `{"n":12345678901234567890}`, "", ""},
		{`{"id":"a","result":1.50,"fields":{"type":"x"}}`, "", `1.50`, `{"type":"x"}`},
		{`{"id":"a","params":null}`, `null`, "", ""},
		{`{"id":"a"}`, "", "", ""},
	} {
		var m Message
		if err := json.Unmarshal([]byte(tc.in), &m); err != nil {
			t.Fatalf("%s: %v", tc.in, err)
		}
		for _, c := range []struct {
			got  any
			want string
		}{{m.Params, tc.params}, {m.Result, tc.result}, {m.Fields, tc.fields}} {
			raw, isRaw := c.got.(json.RawMessage)
			switch {
			case c.want == "" && c.got != nil:
				t.Errorf("%s: %#v, want absent", tc.in, c.got)
			case c.want != "" && (!isRaw || string(raw) != c.want):
				t.Errorf("%s: %#v, want %s", tc.in, c.got, c.want)
			}
		}
		if m.ID != "a" {
			t.Errorf("%s: id %q", tc.in, m.ID)
		}
	}
	var m Message
	if err := json.Unmarshal([]byte(`{"seq":"x"}`), &m); err == nil {
		t.Error("a string seq was accepted")
	}
}

// FuzzMessageUnmarshal: decoding never panics, and what decodes encodes
// and decodes again to the same message.
func FuzzMessageUnmarshal(f *testing.F) {
	f.Add([]byte(`{"seq":3,"id":"x","kind":"request","params":{"a":[1,2.5,"s",null,true]}}`))
	f.Add([]byte(`{"fields":{"type":"meup"},"result":"r"}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		var m Message
		if json.Unmarshal(b, &m) != nil {
			return
		}
		again, err := json.Marshal(m)
		if err != nil {
			return // a RawMessage that is not valid JSON on its own cannot be encoded
		}
		var m2 Message
		if err := json.Unmarshal(again, &m2); err != nil {
			t.Fatalf("re-decoding %s: %v", again, err)
		}
		third, err := json.Marshal(m2)
		if err != nil || string(third) != string(again) {
			t.Fatalf("not stable: %s then %s (%v)", again, third, err)
		}
	})
}
