package trust

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/meerkatd/meerkatd/identity"
	"github.com/meerkatd/meerkatd/transport"
)

type wantRow struct {
	index int
	name  string
	field string
	err   error
}

func TestParse(t *testing.T) {
	const (
		alice = `{"name":"alice","pubkey":"@1","addr":"uds:///tmp/alice.sock"}`
		bob   = `{"name":"bob","pubkey":"@2","addr":"tcp://10.0.0.2:4300"}`
	)
	peers := func(rows ...string) string { return withKeys(`{"peers":[` + strings.Join(rows, ",") + `]}`) }
	zeroKey := identity.PeerIDPrefix + base64.StdEncoding.EncodeToString(make([]byte, 32))

	tests := []struct {
		name    string
		data    string
		wantLen int
		rows    []wantRow // exactly these row errors, in any order
		fileErr error     // a whole-file error
		check   func(t *testing.T, l *List)
	}{
		// Good files.
		{name: "empty peers", data: `{"peers":[]}`, wantLen: 0},
		{name: "whitespace around", data: " \n\t{ \"peers\" : [ ] }\n\n", wantLen: 0},
		{name: "one uds", data: peers(alice), wantLen: 1, check: func(t *testing.T, l *List) {
			p, ok := l.ByName("alice")
			if !ok || p.ID != testKey(1) || p.Addr != mustAddr(t, "uds:///tmp/alice.sock") || p.Meta != nil {
				t.Errorf("alice = %+v, %v", p, ok)
			}
		}},
		{name: "two rows", data: peers(alice, bob), wantLen: 2},
		{name: "tcp default port", data: peers(`{"name":"c","pubkey":"@3","addr":"tcp://example.org"}`), wantLen: 1, check: func(t *testing.T, l *List) {
			if p, _ := l.ByName("c"); p.Addr.Port != transport.DefaultTCPPort {
				t.Errorf("port = %d", p.Addr.Port)
			}
		}},
		{name: "tcp ipv6", data: peers(`{"name":"v6","pubkey":"@3","addr":"tcp://[::1]:9"}`), wantLen: 1},
		{name: "meta object kept compact", data: peers(`{"name":"m","pubkey":"@3","addr":"tcp://h:1","meta":{ "team" : "ops", "n": [1, 2] }}`), wantLen: 1, check: func(t *testing.T, l *List) {
			if p, _ := l.ByName("m"); string(p.Meta) != `{"team":"ops","n":[1,2]}` {
				t.Errorf("meta = %s", p.Meta)
			}
		}},
		{name: "nats address", data: peers(`{"name":"n","pubkey":"@3","addr":"nats:"}`), wantLen: 1, check: func(t *testing.T, l *List) {
			if p, _ := l.ByName("n"); p.Addr.Scheme != transport.SchemeNATS || p.NATS || p.Addr.String() != "nats:" {
				t.Errorf("n = %+v", p)
			}
		}},
		{name: "direct and nats", data: peers(`{"name":"d","pubkey":"@3","addr":"tls://h:1","nats":true}`), wantLen: 1, check: func(t *testing.T, l *List) {
			if p, _ := l.ByName("d"); !p.NATS || p.Addr.Scheme != transport.SchemeTLS {
				t.Errorf("d = %+v", p)
			}
		}},
		{name: "nats false", data: peers(`{"name":"d","pubkey":"@3","addr":"tls://h:1","nats":false}`), wantLen: 1, check: func(t *testing.T, l *List) {
			if p, _ := l.ByName("d"); p.NATS {
				t.Errorf("d = %+v", p)
			}
		}},
		{name: "empty meta object", data: peers(`{"name":"m","pubkey":"@3","addr":"tcp://h:1","meta":{}}`), wantLen: 1},
		{name: "name with all allowed characters", data: peers(`{"name":"A-z_0.9","pubkey":"@3","addr":"tcp://h:1"}`), wantLen: 1},
		{name: "name of 64 bytes", data: peers(`{"name":"` + strings.Repeat("n", 64) + `","pubkey":"@3","addr":"tcp://h:1"}`), wantLen: 1},
		{name: "escaped name decodes", data: peers(`{"name":"\u0062ob","pubkey":"@3","addr":"tcp://h:1"}`), wantLen: 1, check: func(t *testing.T, l *List) {
			if _, ok := l.ByName("bob"); !ok {
				t.Error(`"\u0062ob" is not bob`)
			}
		}},

		// Bad rows.
		{name: "bad key text", data: peers(`{"name":"alice","pubkey":"ed25519:!!qYAYKxCrfVS/7TyWQHOg7hcvPapiMlrwIaaPcHURo=","addr":"tcp://h:1"}`),
			rows: []wantRow{{0, "alice", "pubkey", identity.ErrBadBase64}}},
		{name: "zero key", data: peers(`{"name":"alice","pubkey":"` + zeroKey + `","addr":"tcp://h:1"}`),
			rows: []wantRow{{0, "alice", "pubkey", identity.ErrZeroKey}}},
		{name: "wrong prefix", data: peers(alice, `{"name":"bob","pubkey":"ed448:11qYAYKxCrfVS/7TyWQHOg7hcvPapiMlrwIaaPcHURo=","addr":"tcp://h:1"}`),
			rows: []wantRow{{1, "bob", "pubkey", identity.ErrBadPrefix}}},
		{name: "short key", data: peers(`{"name":"alice","pubkey":"ed25519:AAAA","addr":"tcp://h:1"}`),
			rows: []wantRow{{0, "alice", "pubkey", identity.ErrBadLength}}},
		{name: "empty key", data: peers(`{"name":"alice","pubkey":"","addr":"tcp://h:1"}`),
			rows: []wantRow{{0, "alice", "pubkey", identity.ErrBadPrefix}}},
		{name: "duplicate name", data: peers(alice, bob, `{"name":"bob","pubkey":"@3","addr":"tcp://h:1"}`),
			rows: []wantRow{{2, "bob", "name", ErrDuplicateName}}},
		{name: "duplicate name ignoring case", data: peers(alice, `{"name":"ALICE","pubkey":"@3","addr":"tcp://h:1"}`),
			rows: []wantRow{{1, "ALICE", "name", ErrDuplicateName}}},
		{name: "duplicate key", data: peers(alice, `{"name":"carol","pubkey":"@1","addr":"tcp://h:1"}`),
			rows: []wantRow{{1, "carol", "pubkey", ErrDuplicateKey}}},
		{name: "duplicate of a bad row still reported", data: peers(`{"name":"alice","pubkey":"@1","addr":"ftp://h"}`, `{"name":"alice","pubkey":"@1","addr":"tcp://h:1"}`),
			rows: []wantRow{{0, "alice", "addr", transport.ErrUnsupportedScheme}, {1, "alice", "name", ErrDuplicateName}, {1, "alice", "pubkey", ErrDuplicateKey}}},
		{name: "bad addr scheme", data: peers(`{"name":"alice","pubkey":"@1","addr":"http://h:1"}`),
			rows: []wantRow{{0, "alice", "addr", transport.ErrUnsupportedScheme}}},
		{name: "addr without scheme", data: peers(`{"name":"alice","pubkey":"@1","addr":"/tmp/a.sock"}`),
			rows: []wantRow{{0, "alice", "addr", transport.ErrUnsupportedScheme}}},
		{name: "relative uds path", data: peers(`{"name":"alice","pubkey":"@1","addr":"uds://tmp/a.sock"}`),
			rows: []wantRow{{0, "alice", "addr", transport.ErrBadAddr}}},
		{name: "bad port", data: peers(`{"name":"alice","pubkey":"@1","addr":"tcp://h:65536"}`),
			rows: []wantRow{{0, "alice", "addr", transport.ErrBadAddr}}},
		{name: "unknown field", data: peers(`{"name":"alice","publickey":"@1","addr":"tcp://h:1"}`),
			rows: []wantRow{{0, "alice", "publickey", ErrUnknownField}, {0, "alice", "pubkey", ErrMissingField}}},
		{name: "missing addr", data: peers(`{"name":"alice","pubkey":"@1"}`),
			rows: []wantRow{{0, "alice", "addr", ErrMissingField}}},
		{name: "missing everything", data: peers(`{}`),
			rows: []wantRow{{0, "", "name", ErrMissingField}, {0, "", "pubkey", ErrMissingField}, {0, "", "addr", ErrMissingField}}},
		{name: "nats not a boolean", data: peers(`{"name":"alice","pubkey":"@1","addr":"tcp://h:1","nats":"yes"}`),
			rows: []wantRow{{0, "alice", "nats", ErrFormat}}},
		{name: "nats on a nats address", data: peers(`{"name":"alice","pubkey":"@1","addr":"nats:","nats":true}`),
			rows: []wantRow{{0, "alice", "nats", ErrFormat}}},
		{name: "nats url form", data: peers(`{"name":"alice","pubkey":"@1","addr":"nats://h:4222"}`),
			rows: []wantRow{{0, "alice", "addr", transport.ErrBadAddr}}},
		{name: "meta not object", data: peers(`{"name":"alice","pubkey":"@1","addr":"tcp://h:1","meta":["x"]}`),
			rows: []wantRow{{0, "alice", "meta", ErrBadMeta}}},
		{name: "meta string", data: peers(`{"name":"alice","pubkey":"@1","addr":"tcp://h:1","meta":"x"}`),
			rows: []wantRow{{0, "alice", "meta", ErrBadMeta}}},
		{name: "meta null", data: peers(`{"name":"alice","pubkey":"@1","addr":"tcp://h:1","meta":null}`),
			rows: []wantRow{{0, "alice", "meta", ErrBadMeta}}},
		{name: "empty name", data: peers(alice, `{"name":"","pubkey":"@2","addr":"tcp://h:1"}`),
			rows: []wantRow{{1, "", "name", ErrBadName}}},
		{name: "name with space", data: peers(`{"name":"bob smith","pubkey":"@2","addr":"tcp://h:1"}`),
			rows: []wantRow{{0, "bob smith", "name", ErrBadName}}},
		{name: "name with trailing space", data: peers(`{"name":"bob ","pubkey":"@2","addr":"tcp://h:1"}`),
			rows: []wantRow{{0, "bob ", "name", ErrBadName}}},
		{name: "name with control character", data: peers(`{"name":"bob\u0007","pubkey":"@2","addr":"tcp://h:1"}`),
			rows: []wantRow{{0, "bob\a", "name", ErrBadName}}},
		{name: "name like a flag", data: peers(`{"name":"-bob","pubkey":"@2","addr":"tcp://h:1"}`),
			rows: []wantRow{{0, "-bob", "name", ErrBadName}}},
		{name: "name dot", data: peers(`{"name":".","pubkey":"@2","addr":"tcp://h:1"}`),
			rows: []wantRow{{0, ".", "name", ErrBadName}}},
		{name: "name not ascii", data: peers(`{"name":"bøb","pubkey":"@2","addr":"tcp://h:1"}`),
			rows: []wantRow{{0, "bøb", "name", ErrBadName}}},
		{name: "name of 65 bytes", data: peers(`{"name":"` + strings.Repeat("n", 65) + `","pubkey":"@2","addr":"tcp://h:1"}`),
			rows: []wantRow{{0, strings.Repeat("n", 65), "name", ErrBadName}}},
		{name: "name not a string", data: peers(`{"name":42,"pubkey":"@2","addr":"tcp://h:1"}`),
			rows: []wantRow{{0, "", "name", ErrFormat}}},
		{name: "pubkey null", data: peers(`{"name":"bob","pubkey":null,"addr":"tcp://h:1"}`),
			rows: []wantRow{{0, "bob", "pubkey", ErrFormat}}},
		{name: "field given twice", data: peers(`{"name":"bob","pubkey":"@2","pubkey":"@3","addr":"tcp://h:1"}`),
			rows: []wantRow{{0, "bob", "pubkey", ErrFormat}}},
		{name: "row not an object", data: peers(alice, `"bob"`),
			rows: []wantRow{{1, "", "", ErrFormat}}},
		{name: "every bad row at once", data: peers(
			`{"name":"a b","pubkey":"@1","addr":"tcp://h:1"}`,
			`{"name":"good","pubkey":"@2","addr":"tcp://h:1"}`,
			`{"name":"c","pubkey":"@3","addr":"tcp://h:0"}`,
			`{"name":"d","pubkey":"@2","addr":"tcp://h:1"}`),
			rows: []wantRow{{0, "a b", "name", ErrBadName}, {2, "c", "addr", transport.ErrBadAddr}, {3, "d", "pubkey", ErrDuplicateKey}}},

		// Bad files.
		{name: "empty input", data: ``, fileErr: ErrFormat},
		{name: "trailing data", data: `{"peers":[]} x`, fileErr: ErrFormat},
		{name: "two objects", data: `{"peers":[]}{"peers":[]}`, fileErr: ErrFormat},
		{name: "not an object", data: `[]`, fileErr: ErrFormat},
		{name: "null", data: `null`, fileErr: ErrFormat},
		{name: "peers not array", data: `{"peers":{}}`, fileErr: ErrFormat},
		{name: "peers null", data: `{"peers":null}`, fileErr: ErrFormat},
		{name: "peers missing", data: `{}`, fileErr: ErrFormat},
		{name: "peers twice", data: `{"peers":[],"peers":[]}`, fileErr: ErrFormat},
		{name: "unknown top-level field", data: `{"peers":[],"version":2}`, fileErr: ErrUnknownField},
		{name: "syntax error", data: "{\"peers\":[\n  {\"name\":\"a\",}\n]}", fileErr: ErrFormat},
		{name: "invalid utf-8", data: "{\"peers\":[],\"\xff\":1}", fileErr: ErrFormat},
		{name: "too large", data: `{"peers":[]}` + strings.Repeat(" ", MaxFileSize), fileErr: ErrTooLarge},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			l, err := Parse([]byte(tt.data))
			if tt.rows == nil && tt.fileErr == nil {
				if err != nil {
					t.Fatalf("Parse: %v", err)
				}
				if l.Len() != tt.wantLen {
					t.Errorf("Len = %d, want %d", l.Len(), tt.wantLen)
				}
				if tt.check != nil {
					tt.check(t, l)
				}
				return
			}
			if err == nil {
				t.Fatalf("Parse succeeded with %d peers, want an error", l.Len())
			}
			if l != nil {
				t.Errorf("Parse returned a list along with %v", err)
			}
			if !strings.HasPrefix(err.Error(), "trust: ") {
				t.Errorf("error does not start with the package: %v", err)
			}
			if tt.fileErr != nil {
				if !errors.Is(err, tt.fileErr) {
					t.Errorf("error %v, want %v", err, tt.fileErr)
				}
				if res := rowErrors(err); len(res) != 0 {
					t.Errorf("file error came with row errors: %v", res)
				}
				return
			}
			got := rowErrors(err)
			if len(got) != len(tt.rows) {
				t.Errorf("%d row errors, want %d: %v", len(got), len(tt.rows), err)
			}
			for _, w := range tt.rows {
				if !errors.Is(err, w.err) {
					t.Errorf("errors.Is(err, %v) = false; err = %v", w.err, err)
				}
				i := slices.IndexFunc(got, func(re *RowError) bool {
					return re.Index == w.index && re.Name == w.name && re.Field == w.field && errors.Is(re, w.err)
				})
				if i < 0 {
					t.Errorf("no row error {%d %q %q %v} in %v", w.index, w.name, w.field, w.err, err)
					continue
				}
				msg := got[i].Error()
				where := fmt.Sprintf("peers[%d]", w.index)
				if w.name != "" {
					where += " (" + quoteShort(w.name) + ")"
				}
				if !strings.Contains(msg, where+": ") {
					t.Errorf("message does not name the row as %s: %s", where, msg)
				}
				if w.field != "" && !strings.Contains(msg, ": "+w.field+": ") {
					t.Errorf("message does not name the field %s: %s", w.field, msg)
				}
			}
		})
	}
}

func TestParseSyntaxErrorPosition(t *testing.T) {
	_, err := Parse([]byte("{\"peers\":[\n  {\"name\":\"a\",}\n]}"))
	if err == nil || !strings.Contains(err.Error(), "line 2, column ") {
		t.Errorf("error does not give the line: %v", err)
	}
}

func TestParseNameErrorSuggestsRule(t *testing.T) {
	_, err := Parse([]byte(withKeys(`{"peers":[{"name":"bob smith","pubkey":"@1","addr":"tcp://h:1"}]}`)))
	if err == nil || !strings.Contains(err.Error(), "letters, digits") || !strings.Contains(err.Error(), `contains ' '`) {
		t.Errorf("name error does not explain the rule: %v", err)
	}
}

func TestParseReportsBoundedErrors(t *testing.T) {
	var rows []string
	for i := range 30 {
		rows = append(rows, fmt.Sprintf(`{"name":"p%d","pubkey":"@1x","addr":"tcp://h:1"}`, i))
	}
	_, err := Parse([]byte(withKeys(`{"peers":[` + strings.Join(rows, ",") + `]}`)))
	if n := len(rowErrors(err)); n != maxReported {
		t.Errorf("%d row errors reported, want %d", n, maxReported)
	}
	if err == nil || !strings.Contains(err.Error(), "10 more problems not shown") {
		t.Errorf("error does not count the hidden problems: %v", err)
	}
}

// A private key pasted where the public key goes must not be echoed.
func TestParseDoesNotEchoKeyMaterial(t *testing.T) {
	secret := bytes.Repeat([]byte{0x5a, 0xa5, 0x3c}, 22)[:64]
	for _, text := range []string{
		identity.PeerIDPrefix + base64.StdEncoding.EncodeToString(secret),
		identity.PeerIDPrefix + base64.StdEncoding.EncodeToString(secret[:32]) + "x",
		base64.StdEncoding.EncodeToString(secret[:32]),
	} {
		data, _ := json.Marshal(map[string]any{"peers": []any{map[string]string{"name": "bob", "pubkey": text, "addr": "tcp://h:1"}}})
		_, err := Parse(data)
		if err == nil {
			t.Fatalf("Parse accepted pubkey %q", text)
		}
		for _, form := range []string{base64.StdEncoding.EncodeToString(secret[:32])[:16], text} {
			if strings.Contains(err.Error(), form) {
				t.Errorf("error repeats key material %q: %v", form, err)
			}
		}
	}
}

func TestRowErrorFormat(t *testing.T) {
	inner := errors.New("inner")
	tests := []struct {
		e    RowError
		want string
	}{
		{RowError{File: "trusted_peers.json", Index: 2, Name: "bob", Field: "pubkey", Err: inner}, `trust: trusted_peers.json: peers[2] ("bob"): pubkey: inner`},
		{RowError{Index: 0, Err: inner}, `trust: peers[0]: inner`},
		{RowError{Index: -1, Name: "bob", Field: "name", Err: inner}, `trust: peer ("bob"): name: inner`},
		{RowError{Index: 1, Name: "a\nb", Field: "x y", Err: inner}, `trust: peers[1] ("a\nb"): "x y": inner`},
		{RowError{Index: 1, Name: strings.Repeat("n", 100), Err: inner}, `trust: peers[1] ("` + strings.Repeat("n", 64) + `"…): inner`},
		{RowError{Index: 1}, `trust: peers[1]: invalid`},
	}
	for _, tt := range tests {
		if got := tt.e.Error(); got != tt.want {
			t.Errorf("Error() = %s\nwant      %s", got, tt.want)
		}
	}
	e := &RowError{Err: inner}
	if !errors.Is(e, inner) {
		t.Error("RowError does not unwrap")
	}
}

func TestNilAndZeroListAreEmpty(t *testing.T) {
	for name, l := range map[string]*List{"nil": nil, "zero": {}, "New()": mustNew(t)} {
		t.Run(name, func(t *testing.T) {
			if l.Len() != 0 {
				t.Errorf("Len = %d", l.Len())
			}
			if _, ok := l.Lookup(testKey(1)); ok {
				t.Error("Lookup found a peer")
			}
			if _, ok := l.ByName("alice"); ok {
				t.Error("ByName found a peer")
			}
			if ps := l.Peers(); ps == nil || len(ps) != 0 {
				t.Errorf("Peers = %#v, want empty non-nil", ps)
			}
			if !l.Equal(nil) || !l.Equal(&List{}) {
				t.Error("not Equal to the other empty lists")
			}
			if _, err := l.Without("alice"); !errors.Is(err, ErrNotFound) {
				t.Errorf("Without: %v", err)
			}
			l2, err := l.With(peer(t, "alice", 1, "tcp://h:1", ""))
			if err != nil || l2.Len() != 1 || l.Len() != 0 {
				t.Errorf("With: %v, %d, %d", err, l2.Len(), l.Len())
			}
			b, err := l.MarshalJSON()
			if err != nil || string(b) != "{\"peers\":[]}\n" {
				t.Errorf("MarshalJSON = %q, %v", b, err)
			}
		})
	}
}

func TestLookups(t *testing.T) {
	l := mustNew(t,
		peer(t, "carol", 3, "tcp://c:1", ""),
		peer(t, "Alice", 1, "uds:///a.sock", `{"x":1}`),
		peer(t, "bob", 2, "tcp://b:2", ""),
	)
	for n, name := range map[byte]string{1: "Alice", 2: "bob", 3: "carol"} {
		p, ok := l.Lookup(testKey(n))
		if !ok || p.Name != name || p.ID != testKey(n) {
			t.Errorf("Lookup(key %d) = %+v, %v", n, p, ok)
		}
		q, ok := l.ByName(name)
		if !ok || !q.equal(p) {
			t.Errorf("ByName(%q) = %+v, %v", name, q, ok)
		}
	}
	if _, ok := l.Lookup(testKey(4)); ok {
		t.Error("Lookup found an unlisted key")
	}
	if _, ok := l.ByName("alice"); ok {
		t.Error(`ByName("alice") found "Alice": names match exactly`)
	}
	// Resolve takes the name in any letter case, the key or the peer UUID.
	for _, tc := range []struct {
		ref, want string
	}{
		{"Alice", "Alice"}, {"alice", "Alice"}, {"BOB", "bob"},
		{testKey(3).String(), "carol"},
		{testKey(2).UUID().String(), "bob"},
		{strings.ToUpper(testKey(1).UUID().String()), "Alice"},
		{"dave", ""}, {testKey(4).String(), ""}, {testKey(4).UUID().String(), ""}, {"", ""},
	} {
		p, ok := l.Resolve(tc.ref)
		if ok != (tc.want != "") || p.Name != tc.want {
			t.Errorf("Resolve(%q) = %q, %v; want %q", tc.ref, p.Name, ok, tc.want)
		}
	}
	var names []string
	for _, p := range l.Peers() {
		names = append(names, p.Name)
	}
	if want := []string{"Alice", "bob", "carol"}; !slices.Equal(names, want) {
		t.Errorf("Peers names = %v, want %v", names, want)
	}
	// Save keeps insertion order.
	b, _ := l.MarshalJSON()
	if i, j := bytes.Index(b, []byte("carol")), bytes.Index(b, []byte("Alice")); i < 0 || j < i {
		t.Errorf("MarshalJSON does not keep list order: %s", b)
	}
}

func TestWithWithout(t *testing.T) {
	alice := peer(t, "alice", 1, "uds:///a.sock", `{"team": "ops"}`)
	bob := peer(t, "bob", 2, "tcp://b:2", "")
	l1, err := (*List)(nil).With(alice)
	if err != nil {
		t.Fatal(err)
	}
	l2, err := l1.With(bob)
	if err != nil {
		t.Fatal(err)
	}
	if l1.Len() != 1 || l2.Len() != 2 {
		t.Fatalf("Len: l1 %d, l2 %d", l1.Len(), l2.Len())
	}
	if _, ok := l1.ByName("bob"); ok {
		t.Error("With changed the old list")
	}
	if p, _ := l2.ByName("alice"); string(p.Meta) != `{"team":"ops"}` {
		t.Errorf("With did not compact meta: %s", p.Meta)
	}

	bad := []struct {
		name  string
		p     Peer
		field string
		err   error
	}{
		{"duplicate name", peer(t, "alice", 3, "tcp://h:1", ""), "name", ErrDuplicateName},
		{"duplicate name ignoring case", peer(t, "BOB", 3, "tcp://h:1", ""), "name", ErrDuplicateName},
		{"duplicate key", peer(t, "carol", 2, "tcp://h:1", ""), "pubkey", ErrDuplicateKey},
		{"bad name", peer(t, "carol smith", 3, "tcp://h:1", ""), "name", ErrBadName},
		{"empty name", peer(t, "", 3, "tcp://h:1", ""), "name", ErrBadName},
		{"zero key", Peer{Name: "carol", Addr: mustAddr(t, "tcp://h:1")}, "pubkey", identity.ErrZeroKey},
		{"zero addr", Peer{Name: "carol", ID: testKey(3)}, "addr", transport.ErrBadAddr},
		{"relative uds", Peer{Name: "carol", ID: testKey(3), Addr: transport.Addr{Scheme: transport.SchemeUDS, Path: "rel.sock"}}, "addr", transport.ErrBadAddr},
		{"unknown scheme", Peer{Name: "carol", ID: testKey(3), Addr: transport.Addr{Scheme: "udp", Host: "h", Port: 1}}, "addr", transport.ErrUnsupportedScheme},
		{"meta array", peer(t, "carol", 3, "tcp://h:1", `[1]`), "meta", ErrBadMeta},
		{"meta null", peer(t, "carol", 3, "tcp://h:1", `null`), "meta", ErrBadMeta},
		{"meta invalid", peer(t, "carol", 3, "tcp://h:1", `{"a":`), "meta", ErrBadMeta},
	}
	for _, tt := range bad {
		t.Run(tt.name, func(t *testing.T) {
			l3, err := l2.With(tt.p)
			if err == nil {
				t.Fatalf("With accepted %+v", tt.p)
			}
			if l3 != nil {
				t.Error("With returned a list with its error")
			}
			res := rowErrors(err)
			if len(res) != 1 || res[0].Index != -1 || res[0].Field != tt.field || !errors.Is(res[0], tt.err) {
				t.Errorf("With error %#v (%v), want one RowError{Index: -1, Field: %q} wrapping %v", res, err, tt.field, tt.err)
			}
			if l2.Len() != 2 {
				t.Error("a failed With changed the list")
			}
		})
	}

	// Addresses are stored in canonical form.
	l3, err := l2.With(Peer{Name: "carol", ID: testKey(3), Addr: transport.Addr{Scheme: transport.SchemeUDS, Path: "/tmp//c/../c.sock"}})
	if err != nil {
		t.Fatal(err)
	}
	if p, _ := l3.ByName("carol"); p.Addr.Path != "/tmp/c.sock" {
		t.Errorf("addr path %q not canonical", p.Addr.Path)
	}

	l4, err := l3.Without("alice")
	if err != nil {
		t.Fatal(err)
	}
	if l4.Len() != 2 || l3.Len() != 3 {
		t.Errorf("Len after Without: new %d, old %d", l4.Len(), l3.Len())
	}
	if _, ok := l4.Lookup(testKey(1)); ok {
		t.Error("Without left alice's key")
	}
	if _, ok := l3.Lookup(testKey(1)); !ok {
		t.Error("Without changed the old list")
	}
	if p, ok := l4.Lookup(testKey(3)); !ok || p.Name != "carol" {
		t.Errorf("Without broke the other lookups: %+v %v", p, ok)
	}
	for _, name := range []string{"alice", "nobody", "BOB", ""} {
		if _, err := l4.Without(name); !errors.Is(err, ErrNotFound) {
			t.Errorf("Without(%q) = %v, want ErrNotFound", name, err)
		}
	}
	// Removing a peer frees its name and key.
	if _, err := l4.With(alice); err != nil {
		t.Errorf("re-adding a removed peer: %v", err)
	}
}

func TestSnapshotsAreImmutable(t *testing.T) {
	meta := []byte(`{"a":1}`)
	l, err := (*List)(nil).With(Peer{Name: "alice", ID: testKey(1), Addr: mustAddr(t, "tcp://h:1"), Meta: meta})
	if err != nil {
		t.Fatal(err)
	}
	meta[1] = 'X' // the caller's buffer
	p, _ := l.ByName("alice")
	p.Meta[1] = 'Y'
	q, _ := l.Lookup(testKey(1))
	q.Meta[1] = 'Z'
	ps := l.Peers()
	ps[0].Meta[1] = 'W'
	ps[0].Name = "mallory"
	if got, _ := l.ByName("alice"); string(got.Meta) != `{"a":1}` {
		t.Errorf("meta changed through a copy: %s", got.Meta)
	}
	if _, ok := l.ByName("mallory"); ok {
		t.Error("name changed through Peers")
	}
}

func TestNewReportsEveryRow(t *testing.T) {
	_, err := New(
		peer(t, "alice", 1, "tcp://h:1", ""),
		peer(t, "a b", 2, "tcp://h:1", ""),
		peer(t, "ALICE", 3, "tcp://h:1", ""),
		peer(t, "dave", 1, "tcp://h:1", ""),
	)
	got := rowErrors(err)
	if len(got) != 3 || got[0].Index != 1 || got[1].Index != 2 || got[2].Index != 3 {
		t.Fatalf("New errors %v", err)
	}
	if !errors.Is(got[1], ErrDuplicateName) || !errors.Is(got[2], ErrDuplicateKey) {
		t.Errorf("New errors %v", err)
	}
}

func TestEqual(t *testing.T) {
	a := peer(t, "alice", 1, "tcp://h:1", `{"x":1}`)
	b := peer(t, "bob", 2, "tcp://h:2", "")
	base := mustNew(t, a, b)
	if !base.Equal(mustNew(t, b, a)) {
		t.Error("order matters to Equal")
	}
	for name, other := range map[string]Peer{
		"name":    {Name: "alicia", ID: a.ID, Addr: a.Addr, Meta: a.Meta},
		"key":     {Name: a.Name, ID: testKey(3), Addr: a.Addr, Meta: a.Meta},
		"addr":    {Name: a.Name, ID: a.ID, Addr: mustAddr(t, "tcp://h:9"), Meta: a.Meta},
		"meta":    {Name: a.Name, ID: a.ID, Addr: a.Addr, Meta: []byte(`{"x":2}`)},
		"no meta": {Name: a.Name, ID: a.ID, Addr: a.Addr},
	} {
		if base.Equal(mustNew(t, other, b)) {
			t.Errorf("lists differing in %s are Equal", name)
		}
	}
	if base.Equal(mustNew(t, a)) || mustNew(t, a).Equal(base) {
		t.Error("lists of different length are Equal")
	}
}

func TestDuplicateMessages(t *testing.T) {
	tests := []struct {
		data, want string
	}{
		{`{"peers":[{"name":"bob","pubkey":"@1","addr":"tcp://h:1"},{"name":"bob","pubkey":"@2","addr":"tcp://h:1"}]}`,
			`peers[1] ("bob"): name: duplicate peer name: "bob" is also the name of peers[0]`},
		{`{"peers":[{"name":"bob","pubkey":"@1","addr":"tcp://h:1"},{"name":"Bob","pubkey":"@2","addr":"tcp://h:1"}]}`,
			`peers[1] ("Bob"): name: duplicate peer name: "Bob" clashes with peers[0] ("bob"); names are unique ignoring case`},
		{`{"peers":[{"name":"bob","pubkey":"@1","addr":"tcp://h:1"},{"name":"carol","pubkey":"@1","addr":"tcp://h:1"}]}`,
			`peers[1] ("carol"): pubkey: duplicate peer key: same pubkey as peers[0] ("bob")`},
		{`{"peers":[{"pubkey":"@1","addr":"tcp://h:1"},{"name":"carol","pubkey":"@1","addr":"tcp://h:1"}]}`,
			`peers[1] ("carol"): pubkey: duplicate peer key: same pubkey as peers[0]` + "\n"},
	}
	for _, tt := range tests {
		_, err := Parse([]byte(withKeys(tt.data)))
		if err == nil || !strings.Contains(err.Error()+"\n", tt.want) {
			t.Errorf("error\n%v\ndoes not contain\n%s", err, tt.want)
		}
	}
}

func TestUsableName(t *testing.T) {
	long := strings.Repeat("x", MaxNameLen+10)
	for _, c := range []struct{ in, want string }{
		{"bob", "bob"},
		{"build-01.lab", "build-01.lab"},
		{"_bob", "bob"},
		{"-.x", "x"},
		{"..al ice", "al-ice"},
		{"a/b\\c", "a-b-c"},
		{"é", "peer"},
		{"xé", "x--"},
		{"", "peer"},
		{"___", "peer"},
		{long, long[:MaxNameLen]},
		{"_" + long, long[:MaxNameLen]},
	} {
		got := UsableName(c.in)
		if got != c.want {
			t.Errorf("UsableName(%q) = %q, want %q", c.in, got, c.want)
		}
		if err := checkName(got); err != nil {
			t.Errorf("UsableName(%q) = %q, which the rule refuses: %v", c.in, got, err)
		}
	}
}
