package trust

import (
	"bytes"
	"errors"
	"testing"
)

// FuzzParse checks that Parse never panics, that a failure is a lone error,
// and that a list it accepts survives Save's encoding (and the compact
// MarshalJSON form) unchanged, byte-stable on a second round.
func FuzzParse(f *testing.F) {
	for _, s := range []string{
		`{"peers":[]}`,
		`{"peers":[{"name":"alice","pubkey":"@1","addr":"uds:///tmp/a.sock"}]}`,
		`{"peers":[{"name":"b","pubkey":"@2","addr":"tcp://[::1]","meta":{"x":[1,"<&>",null,{"y":"\u2028"}]}},{"name":"C.d_e-f","pubkey":"@3","addr":"TCP://h:1"}]}`,
		`{"peers":[{"name":"a","pubkey":"@1","addr":"tcp://h:1"},{"name":"A","pubkey":"@1","addr":"tcp://h:1"}]}`,
		`{"peers":[{"name":"a b","pubkey":"ed25519:AAAA","addr":"http://x","meta":[],"extra":1}]}`,
		`{"peers":[{"name":"a","pubkey":"@1","addr":"uds://rel","name":"b"}, 7, null]}`,
		`{"peers":[{"name":"n","pubkey":"@1","addr":"nats:"},{"name":"d","pubkey":"@2","addr":"tls://h:1","nats":true}]}`,
		`{"peers":[{"name":"n","pubkey":"@1","addr":"nats:","nats":true}]}`,
		`{"peers":{}}`, `[]`, `{"peers":[]} {}`, "{\"peers\":[],\"\xff\":0}", ``,
	} {
		f.Add([]byte(withKeys(s)))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		l, err := Parse(data)
		if err != nil {
			if l != nil {
				t.Fatalf("Parse returned a list with error %v", err)
			}
			for _, re := range rowErrors(err) {
				if re.Err == nil || !errors.Is(err, re.Err) {
					t.Fatalf("row error without a cause: %#v", re)
				}
			}
			return
		}
		for _, indent := range []string{"  ", ""} {
			enc, err := l.encode(indent)
			if err != nil {
				t.Fatalf("encode: %v", err)
			}
			l2, err := Parse(enc)
			if err != nil {
				t.Fatalf("re-parse of %q: %v", enc, err)
			}
			if !l.Equal(l2) {
				t.Fatalf("round trip changed the list:\n%+v\n%+v", l.Peers(), l2.Peers())
			}
			enc2, err := l2.encode(indent)
			if err != nil || !bytes.Equal(enc, enc2) {
				t.Fatalf("encoding is not stable (%v):\n%s\n%s", err, enc, enc2)
			}
		}
		for _, p := range l.Peers() {
			if q, ok := l.Lookup(p.ID); !ok || !q.equal(p) {
				t.Fatalf("Lookup(%v) = %+v, %v; want %+v", p.ID, q, ok, p)
			}
			if q, ok := l.ByName(p.Name); !ok || !q.equal(p) {
				t.Fatalf("ByName(%q) = %+v, %v", p.Name, q, ok)
			}
		}
	})
}

// FuzzUsableName checks that any name another node offers becomes one
// the name rule accepts, and that an accepted name is kept as it is.
func FuzzUsableName(f *testing.F) {
	for _, s := range []string{"bob", "_bob", "..al ice", "", "é", "a\x00b"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, name string) {
		got := UsableName(name)
		if err := checkName(got); err != nil {
			t.Fatalf("UsableName(%q) = %q, refused: %v", name, got, err)
		}
		if checkName(name) == nil && got != name {
			t.Fatalf("UsableName(%q) = %q, changed a usable name", name, got)
		}
	})
}
