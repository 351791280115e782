package config

import (
	"errors"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"
)

func TestValidateNATS(t *testing.T) {
	servers := func(s ...string) func(*Config) { return func(c *Config) { c.NATS.Servers = s } }
	many := make([]string, MaxNATSServers+1)
	for i := range many {
		many[i] = "h" + strings.Repeat("x", i) + ":4222"
	}
	for _, tc := range []struct {
		name   string
		change func(*Config)
		keys   []string // the keys the errors name, in order; nil = valid
	}{
		{"off", servers(), nil},
		{"nats url", servers("nats://a.example:4222"), nil},
		{"tls url", servers("tls://a.example:4443"), nil},
		{"bare host:port", servers("a.example:4222"), nil},
		{"ipv4", servers("nats://192.0.2.1:4222"), nil},
		{"ipv6", servers("tls://[2001:db8::1]:4222", "[::1]:4222"), nil},
		{"port 1 and 65535", servers("a:1", "b:65535"), nil},
		{"mixed schemes", servers("nats://a:4222", "tls://b:4443", "c:4222"), nil},
		{"64 servers", func(c *Config) { c.NATS.Servers = many[:MaxNATSServers] }, nil},
		{"65 servers", func(c *Config) { c.NATS.Servers = many }, []string{"nats.servers"}},
		{"empty server", servers("a:4222", ""), []string{"nats.servers"}},
		{"scheme http", servers("http://a:4222"), []string{"nats.servers"}},
		{"scheme ws", servers("ws://a:4222"), []string{"nats.servers"}},
		{"no port", servers("nats://a.example"), []string{"nats.servers"}},
		{"bare host", servers("a.example"), []string{"nats.servers"}},
		{"port 0", servers("nats://a:0"), []string{"nats.servers"}},
		{"port 65536", servers("a:65536"), []string{"nats.servers"}},
		{"port name", servers("a:nats"), []string{"nats.servers"}},
		{"port sign", servers("a:+4222"), []string{"nats.servers"}},
		{"no host", servers("nats://:4222"), []string{"nats.servers"}},
		{"bare no host", servers(":4222"), []string{"nats.servers"}},
		{"path", servers("nats://a:4222/x"), []string{"nats.servers"}},
		{"slash", servers("nats://a:4222/"), []string{"nats.servers"}},
		{"query", servers("nats://a:4222?x=1"), []string{"nats.servers"}},
		{"empty query", servers("nats://a:4222?"), []string{"nats.servers"}},
		{"fragment", servers("nats://a:4222#x"), []string{"nats.servers"}},
		{"user in url", servers("nats://u:p@a:4222"), []string{"nats.servers"}},
		{"space", servers("nats://a b:4222"), []string{"nats.servers"}},
		{"leading space", servers(" a:4222"), []string{"nats.servers"}},
		{"bare ipv6", servers("::1:4222"), []string{"nats.servers"}},
		{"twice", servers("a:4222", "nats://a:4222"), []string{"nats.servers"}},
		{"opaque", servers("nats:a:4222"), []string{"nats.servers"}},

		{"creds", func(c *Config) { c.NATS.CredsFile = "u.creds" }, nil},
		{"nkey", func(c *Config) { c.NATS.NKeySeedFile = "/etc/u.nk" }, nil},
		{"user and password", func(c *Config) { c.NATS.User, c.NATS.Password = "u", "p" }, nil},
		{"user alone", func(c *Config) { c.NATS.User = "u" }, nil}, // CheckPassword's, for the node that connects
		{"password alone", func(c *Config) { c.NATS.Password = "p" }, []string{"nats.password"}},
		{"creds and nkey", func(c *Config) { c.NATS.CredsFile, c.NATS.NKeySeedFile = "a", "b" }, []string{"nats.nkey_seed_file"}},
		{"creds and user", func(c *Config) { c.NATS.CredsFile, c.NATS.User, c.NATS.Password = "a", "u", "p" }, []string{"nats.user"}},
		{"nkey and password", func(c *Config) { c.NATS.NKeySeedFile, c.NATS.Password = "a", "p" },
			[]string{"nats.user", "nats.password"}}, // a second method, and a password without user
		{"all three", func(c *Config) {
			c.NATS.CredsFile, c.NATS.NKeySeedFile, c.NATS.User, c.NATS.Password = "a", "b", "u", "p"
		},
			[]string{"nats.nkey_seed_file", "nats.user"}},
		{"creds tilde", func(c *Config) { c.NATS.CredsFile = "~/u.creds" }, []string{"nats.creds_file"}},
		{"nkey NUL", func(c *Config) { c.NATS.NKeySeedFile = "a\x00b" }, []string{"nats.nkey_seed_file"}},

		{"tls ca", func(c *Config) { c.NATS.TLSCA = "ca.pem" }, nil},
		{"tls ca tilde", func(c *Config) { c.NATS.TLSCA = "~/ca.pem" }, []string{"nats.tls_ca"}},
		{"tls cert and key", func(c *Config) { c.NATS.TLSCert, c.NATS.TLSKey = "c.pem", "k.pem" }, nil},
		{"tls cert alone", func(c *Config) { c.NATS.TLSCert = "c.pem" }, []string{"nats.tls_cert"}},
		{"tls key alone", func(c *Config) { c.NATS.TLSKey = "k.pem" }, []string{"nats.tls_key"}},
		{"tls cert tilde", func(c *Config) { c.NATS.TLSCert, c.NATS.TLSKey = "~/c.pem", "k.pem" }, []string{"nats.tls_cert"}},

		{"prefix tokens", func(c *Config) { c.NATS.SubjectPrefix = "acme.prod-1.meer_kat" }, nil},
		{"prefix max length", func(c *Config) { c.NATS.SubjectPrefix = strings.Repeat("a", MaxNATSSubjectPrefixLen) }, nil},
		{"prefix too long", func(c *Config) { c.NATS.SubjectPrefix = strings.Repeat("a", MaxNATSSubjectPrefixLen+1) }, []string{"nats.subject_prefix"}},
		{"prefix empty", func(c *Config) { c.NATS.SubjectPrefix = "" }, []string{"nats.subject_prefix"}},
		{"prefix star", func(c *Config) { c.NATS.SubjectPrefix = "acme.*" }, []string{"nats.subject_prefix"}},
		{"prefix gt", func(c *Config) { c.NATS.SubjectPrefix = "acme.>" }, []string{"nats.subject_prefix"}},
		{"prefix space", func(c *Config) { c.NATS.SubjectPrefix = "ac me" }, []string{"nats.subject_prefix"}},
		{"prefix leading dot", func(c *Config) { c.NATS.SubjectPrefix = ".acme" }, []string{"nats.subject_prefix"}},
		{"prefix trailing dot", func(c *Config) { c.NATS.SubjectPrefix = "acme." }, []string{"nats.subject_prefix"}},
		{"prefix double dot", func(c *Config) { c.NATS.SubjectPrefix = "a..b" }, []string{"nats.subject_prefix"}},
		{"prefix unicode", func(c *Config) { c.NATS.SubjectPrefix = "café" }, []string{"nats.subject_prefix"}},

		{"jetstream", func(c *Config) { c.NATS.JetStream = true }, nil},
		{"stream name", func(c *Config) { c.NATS.Stream = "a-B_9" }, nil},
		{"stream max length", func(c *Config) { c.NATS.Stream = strings.Repeat("S", MaxNATSStreamLen) }, nil},
		{"stream too long", func(c *Config) { c.NATS.Stream = strings.Repeat("S", MaxNATSStreamLen+1) }, []string{"nats.stream"}},
		{"stream empty", func(c *Config) { c.NATS.Stream = "" }, []string{"nats.stream"}},
		{"stream dot", func(c *Config) { c.NATS.Stream = "A.B" }, []string{"nats.stream"}},
		{"stream star", func(c *Config) { c.NATS.Stream = "A*" }, []string{"nats.stream"}},
		{"stream space", func(c *Config) { c.NATS.Stream = "A B" }, []string{"nats.stream"}},

		{"max age 1", func(c *Config) { c.NATS.StreamMaxAgeSecs, c.NATS.DedupWindowSecs = 1, 1 }, nil},
		{"max age max", func(c *Config) { c.NATS.StreamMaxAgeSecs = MaxNATSStreamMaxAgeSecs }, nil},
		{"max age 0", func(c *Config) { c.NATS.StreamMaxAgeSecs = 0 }, []string{"nats.stream_max_age_secs"}},
		{"max age -1", func(c *Config) { c.NATS.StreamMaxAgeSecs = -1 }, []string{"nats.stream_max_age_secs"}},
		{"max age over", func(c *Config) { c.NATS.StreamMaxAgeSecs = MaxNATSStreamMaxAgeSecs + 1 }, []string{"nats.stream_max_age_secs"}},
		{"max bytes 1", func(c *Config) { c.NATS.StreamMaxBytes = 1 }, nil},
		{"max bytes unlimited", func(c *Config) { c.NATS.StreamMaxBytes = -1 }, nil},
		{"max bytes huge", func(c *Config) { c.NATS.StreamMaxBytes = math.MaxInt }, nil},
		{"max bytes 0", func(c *Config) { c.NATS.StreamMaxBytes = 0 }, []string{"nats.stream_max_bytes"}},
		{"max bytes -2", func(c *Config) { c.NATS.StreamMaxBytes = -2 }, []string{"nats.stream_max_bytes"}},
		{"max msgs 1", func(c *Config) { c.NATS.StreamMaxMsgs = 1 }, nil},
		{"max msgs unlimited", func(c *Config) { c.NATS.StreamMaxMsgs = -1 }, nil},
		{"max msgs 0", func(c *Config) { c.NATS.StreamMaxMsgs = 0 }, []string{"nats.stream_max_msgs"}},
		{"max msgs -5", func(c *Config) { c.NATS.StreamMaxMsgs = -5 }, []string{"nats.stream_max_msgs"}},
		{"replicas 5", func(c *Config) { c.NATS.StreamReplicas = 5 }, nil},
		{"replicas 0", func(c *Config) { c.NATS.StreamReplicas = 0 }, []string{"nats.stream_replicas"}},
		{"replicas 6", func(c *Config) { c.NATS.StreamReplicas = 6 }, []string{"nats.stream_replicas"}},
		{"dedup 1", func(c *Config) { c.NATS.DedupWindowSecs = 1 }, nil},
		{"dedup a week", func(c *Config) { c.NATS.DedupWindowSecs = MaxTimeoutSecs }, nil},
		{"dedup 0", func(c *Config) { c.NATS.DedupWindowSecs = 0 }, []string{"nats.dedup_window_secs"}},
		{"dedup over a week", func(c *Config) {
			c.NATS.StreamMaxAgeSecs, c.NATS.DedupWindowSecs = MaxNATSStreamMaxAgeSecs, MaxTimeoutSecs+1
		}, []string{"nats.dedup_window_secs"}},
		{"dedup over max age", func(c *Config) { c.NATS.StreamMaxAgeSecs, c.NATS.DedupWindowSecs = 60, 61 }, []string{"nats.dedup_window_secs"}},
		{"dedup equal max age", func(c *Config) { c.NATS.StreamMaxAgeSecs, c.NATS.DedupWindowSecs = 60, 60 }, nil},
		{"reconnect 1", func(c *Config) { c.NATS.ReconnectWaitMS = 1 }, nil},
		{"reconnect 0", func(c *Config) { c.NATS.ReconnectWaitMS = 0 }, []string{"nats.reconnect_wait_ms"}},
		{"reconnect over a week", func(c *Config) { c.NATS.ReconnectWaitMS = MaxTimeoutSecs*1000 + 1 }, []string{"nats.reconnect_wait_ms"}},
		{"connect timeout 1", func(c *Config) { c.NATS.ConnectTimeoutMS = 1 }, nil},
		{"connect timeout 0", func(c *Config) { c.NATS.ConnectTimeoutMS = 0 }, []string{"nats.connect_timeout_ms"}},
		{"connect timeout negative", func(c *Config) { c.NATS.ConnectTimeoutMS = -1 }, []string{"nats.connect_timeout_ms"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := Default()
			tc.change(&c)
			err := c.Validate()
			if tc.keys == nil {
				requireNoError(t, err)
				return
			}
			if got := errorKeys(err); !reflect.DeepEqual(got, tc.keys) {
				t.Fatalf("error keys = %q, want %q (err: %v)", got, tc.keys, err)
			}
			if !strings.HasPrefix(err.Error(), "config: "+tc.keys[0]+": ") {
				t.Errorf("message %q does not start with the key", err)
			}
			if n := strings.Count(err.Error(), "\n") + 1; n != len(tc.keys) {
				t.Errorf("message has %d lines, want %d: %q", n, len(tc.keys), err)
			}
		})
	}
}

func TestNATSServerURLs(t *testing.T) {
	n := NATS{Servers: []string{"a.example:4222", "nats://b.example:4222", "tls://[2001:db8::1]:4443", "NATS://C.example:1"}}
	got, err := n.ServerURLs()
	requireNoError(t, err)
	want := []string{"nats://a.example:4222", "nats://b.example:4222", "tls://[2001:db8::1]:4443", "nats://C.example:1"}
	if !slices.Equal(got, want) {
		t.Errorf("ServerURLs = %q, want %q", got, want)
	}
	if got, err := (NATS{}).ServerURLs(); got != nil || err != nil {
		t.Errorf("no servers: %q, %v", got, err)
	}
	// Every bad server is named, in one error.
	_, err = NATS{Servers: []string{"http://a:1", "ok:1", "b"}}.ServerURLs()
	if err == nil || !strings.Contains(err.Error(), `"http://a:1"`) || !strings.Contains(err.Error(), `"b"`) || strings.Contains(err.Error(), "\n") {
		t.Errorf("err = %v, want both bad servers on one line", err)
	}
	if !(NATS{Servers: []string{"a:1"}}).Enabled() || (NATS{Servers: []string{}}).Enabled() {
		t.Error("Enabled is not len(servers) > 0")
	}
}

func TestNATSPath(t *testing.T) {
	const home = "/home/u/.config/meerkat"
	var n NATS
	for _, tc := range []struct{ in, want string }{
		{"", ""},
		{"u.creds", home + "/u.creds"},
		{"nats/./u.creds", home + "/nats/u.creds"},
		{"../shared/u.creds", "/home/u/.config/shared/u.creds"},
		{"/etc/meerkat/u.creds", "/etc/meerkat/u.creds"},
		{"/etc//meerkat/../u.creds", "/etc/u.creds"},
	} {
		if got := n.Path(home, tc.in); got != tc.want {
			t.Errorf("Path(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}

func TestNATSDurations(t *testing.T) {
	n := NATS{StreamMaxAgeSecs: 30 * 24 * 3600, DedupWindowSecs: 90, ReconnectWaitMS: 250, ConnectTimeoutMS: 1500}
	if n.StreamMaxAge() != 30*24*time.Hour || n.DedupWindow() != 90*time.Second ||
		n.ReconnectWait() != 250*time.Millisecond || n.ConnectTimeout() != 1500*time.Millisecond {
		t.Errorf("durations = %v %v %v %v", n.StreamMaxAge(), n.DedupWindow(), n.ReconnectWait(), n.ConnectTimeout())
	}
	// Values Validate rejects are clamped, not overflowed.
	n = NATS{StreamMaxAgeSecs: math.MaxInt, DedupWindowSecs: -1, ReconnectWaitMS: math.MaxInt, ConnectTimeoutMS: -5}
	if n.StreamMaxAge() != MaxNATSStreamMaxAgeSecs*time.Second || n.DedupWindow() != 0 ||
		n.ReconnectWait() != MaxTimeoutSecs*time.Second || n.ConnectTimeout() != 0 {
		t.Errorf("clamped durations = %v %v %v %v", n.StreamMaxAge(), n.DedupWindow(), n.ReconnectWait(), n.ConnectTimeout())
	}
}

func TestParseList(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want []string
		bad  bool
	}{
		{in: "", want: nil},
		{in: "   ", want: nil},
		{in: "\t\n", want: nil},
		{in: "a", want: []string{"a"}},
		{in: " a ", want: []string{"a"}},
		{in: "nats://a:4222,nats://b:4222", want: []string{"nats://a:4222", "nats://b:4222"}},
		{in: "a, b ,\tc", want: []string{"a", "b", "c"}},
		{in: "a b,c", want: []string{"a b", "c"}}, // inner space kept: Validate judges it
		{in: "a,a", want: []string{"a", "a"}},
		{in: ",", bad: true},
		{in: "a,", bad: true},
		{in: ",a", bad: true},
		{in: "a,,b", bad: true},
		{in: "a, ,b", bad: true},
	} {
		got, err := ParseList(tc.in)
		if tc.bad {
			if err == nil {
				t.Errorf("ParseList(%q) = %q, want an error", tc.in, got)
			}
			continue
		}
		if err != nil || !reflect.DeepEqual(got, tc.want) {
			t.Errorf("ParseList(%q) = %q, %v; want %q", tc.in, got, err, tc.want)
		}
	}
}

// FuzzParseList: ParseList never panics; what it accepts holds no empty
// or untrimmed item and comes back from joining with commas.
func FuzzParseList(f *testing.F) {
	for _, s := range []string{"", " ", "a", "a,b", " a , b ", "a,,b", ",", "nats://a:4222,tls://[::1]:4443", "\xff,\x00"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		l, err := ParseList(s)
		if err != nil {
			if l != nil {
				t.Fatalf("error with a list: %q", l)
			}
			return
		}
		for _, item := range l {
			if item == "" || item != strings.TrimSpace(item) || strings.Contains(item, ",") {
				t.Fatalf("ParseList(%q) gave item %q", s, item)
			}
		}
		back, err := ParseList(strings.Join(l, ","))
		if err != nil || !slices.Equal(back, l) {
			t.Fatalf("ParseList(join(%q)) = %q, %v", l, back, err)
		}
	})
}

func TestApplyEnvList(t *testing.T) {
	for _, tc := range []struct {
		value string
		want  []string
		bad   bool
	}{
		{value: "nats://a:4222,nats://b:4222", want: []string{"nats://a:4222", "nats://b:4222"}},
		{value: "tls://a:4443", want: []string{"tls://a:4443"}},
		{value: " a:4222 , b:4222 ", want: []string{"a:4222", "b:4222"}},
		{value: "", want: nil}, // set but empty: NATS off, over the file's servers
		{value: "a:4222,", bad: true},
		{value: "a:4222,,b:4222", bad: true},
	} {
		t.Run(tc.value, func(t *testing.T) {
			c, err := Parse([]byte("[nats]\nservers = [\"file:4222\"]\n"))
			requireNoError(t, err)
			before := c
			err = c.ApplyEnv(func(name string) (string, bool) {
				if name == "MEERKAT_NATS_SERVERS" {
					return tc.value, true
				}
				return "", false
			})
			if tc.bad {
				var ce *Error
				if !errors.As(err, &ce) || ce.Source != "MEERKAT_NATS_SERVERS" || ce.Key != "nats.servers" {
					t.Fatalf("err = %v, want an *Error from MEERKAT_NATS_SERVERS for nats.servers", err)
				}
				if !c.Equal(before) {
					t.Errorf("config changed on error: %q", c.NATS.Servers)
				}
				return
			}
			requireNoError(t, err)
			if !reflect.DeepEqual(c.NATS.Servers, tc.want) {
				t.Errorf("servers = %q, want %q", c.NATS.Servers, tc.want)
			}
		})
	}
}

func TestSetList(t *testing.T) {
	c := Default()
	requireNoError(t, c.Set("nats.servers", "nats://a:4222, tls://b:4443"))
	if want := []string{"nats://a:4222", "tls://b:4443"}; !slices.Equal(c.NATS.Servers, want) {
		t.Errorf("servers = %q, want %q", c.NATS.Servers, want)
	}
	requireNoError(t, c.Validate())
	if err := c.Set("nats.servers", "a:1,,b:2"); err == nil || !strings.HasPrefix(err.Error(), "config: nats.servers: ") {
		t.Errorf("Set(bad list) err = %v", err)
	}
	if len(c.NATS.Servers) != 2 {
		t.Errorf("failed Set changed the servers: %q", c.NATS.Servers)
	}
	requireNoError(t, c.Set("nats.servers", ""))
	if c.NATS.Servers != nil || c.NATS.Enabled() {
		t.Errorf("Set(\"\") left servers %q", c.NATS.Servers)
	}
	requireNoError(t, c.Set("nats.password", "a,b")) // strings are not split
	if c.NATS.Password != "a,b" {
		t.Errorf("password = %q", c.NATS.Password)
	}
}

func TestParseNATS(t *testing.T) {
	for _, tc := range []struct {
		name, in string
		want     []string
		errWant  string // substring of the error; "" = no error
	}{
		{"array", "[nats]\nservers = [\"nats://a:4222\", \"b:4222\"]\n", []string{"nats://a:4222", "b:4222"}, ""},
		{"multi-line array", "[nats]\nservers = [\n  \"a:1\",\n  \"b:2\", # second\n]\n", []string{"a:1", "b:2"}, ""},
		{"empty array is nil", "[nats]\nservers = []\n", nil, ""},
		{"dotted", "nats.servers = ['a:1']\n", []string{"a:1"}, ""},
		{"string, not an array", "[nats]\nservers = \"a:1\"\n", nil, "nats.servers"},
		{"array of ints", "[nats]\nservers = [1]\n", nil, "nats.servers"},
		{"mixed array", "[nats]\nservers = [\"a:1\", 2]\n", nil, "line 2"},
		{"unknown key", "[nats]\nserver = [\"a:1\"]\n", nil, `did you mean "nats.servers"?`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := Parse([]byte(tc.in))
			if tc.errWant != "" {
				if err == nil || !strings.Contains(err.Error(), tc.errWant) {
					t.Fatalf("err = %v, want one containing %q", err, tc.errWant)
				}
				return
			}
			requireNoError(t, err)
			if !reflect.DeepEqual(c.NATS.Servers, tc.want) {
				t.Errorf("servers = %#v, want %#v", c.NATS.Servers, tc.want)
			}
		})
	}
}

func TestMarshalNATS(t *testing.T) {
	c := Default()
	c.NATS.Servers = []string{"nats://a:4222", `odd"one\`}
	c.NATS.User, c.NATS.Password = "u", "p"
	out, err := Marshal(c)
	requireNoError(t, err)
	for _, line := range []string{"\n[nats]\n", "\nservers = [\"nats://a:4222\", \"odd\\\"one\\\\\"]\n", "Default: [].\n", "\npassword = \"p\"\n"} {
		if !strings.Contains(string(out), line) {
			t.Errorf("Marshal lacks %q", line)
		}
	}
	back, err := Parse(out)
	requireNoError(t, err)
	if !back.Equal(c) {
		t.Errorf("round trip: %+v, want %+v", back.NATS, c.NATS)
	}
	def, err := Marshal(Default())
	requireNoError(t, err)
	if !strings.Contains(string(def), "\nservers = []\n") {
		t.Error("Marshal(Default()) lacks servers = []")
	}
	c.NATS.Servers = []string{"\xff"}
	if _, err := Marshal(c); err == nil || !strings.Contains(err.Error(), "nats.servers") {
		t.Errorf("Marshal(invalid UTF-8 server) err = %v", err)
	}
}

func TestSettingsHidePassword(t *testing.T) {
	c := Default()
	value := func() string {
		for _, s := range Settings(&c, Sources{}) {
			if s.Key == "nats.password" {
				return s.Value
			}
		}
		t.Fatal("no nats.password setting")
		return ""
	}
	if v := value(); v != `""` {
		t.Errorf("unset password shown as %s", v)
	}
	c.NATS.User, c.NATS.Password = "u", "hunter2"
	if v := value(); v != HiddenValue || strings.Contains(v, "hunter2") {
		t.Errorf("password shown as %s", v)
	}
	// Nor a password in a server URL (which validation refuses, but
	// config show prints what it read before it says so).
	c.NATS.Servers = []string{"nats://u:S3cret@127.0.0.1:4222", "tls://a.example:4443", "nats://x:p@ss@b:1"}
	for _, s := range Settings(&c, Sources{}) {
		if s.Key == "nats.servers" && s.Value != `["nats://***@127.0.0.1:4222", "tls://a.example:4443", "nats://***@b:1"]` {
			t.Errorf("servers shown as %s", s.Value)
		}
	}
}

func TestEqual(t *testing.T) {
	a, b := Default(), Default()
	b.NATS.Servers = []string{}
	if !a.Equal(b) || !b.Equal(a) {
		t.Error("nil and empty servers differ")
	}
	b.NATS.Servers = []string{"a:1"}
	if a.Equal(b) {
		t.Error("servers ignored")
	}
	a.NATS.Servers = []string{"a:1"}
	if !a.Equal(b) {
		t.Error("equal servers differ")
	}
	a.NATS.Password = "x"
	if a.Equal(b) {
		t.Error("password ignored")
	}
	a = Default()
	a.Agent.LoopFastMS++
	if a.Equal(Default()) {
		t.Error("agent ignored")
	}
}

// A server URL's user information never reaches an error message, however
// the URL is wrong; the rest of it does.
func TestNATSServerErrorsHidePasswords(t *testing.T) {
	for _, tc := range []struct{ url, shown string }{
		{"nats://alice:hunter2@broker:4222", `"nats://***@broker:4222"`},
		{"alice:hunter2@broker:4222", `"***@broker:4222"`},
		{"http://alice:hunter2@broker:4222", `"http://***@broker:4222"`},
		{"nats://alice:hunter2@broker:4222/x", `"nats://***@broker:4222/x"`},
		{"nats://a@b:hunter2@broker", `"nats://***@broker"`},
		{"nats://alice:hunter2 @broker:4222", `"nats://***@broker:4222"`},
		{"nats://alice:pa/ss@broker:4222", `"nats://***@broker:4222"`},
		{"nats://alice:pa?ss#x@broker:4222", `"nats://***@broker:4222"`},
		{"alice:hun/ter2@broker:4222", `"***@broker:4222"`},
		{"nats://broker:4222/x", `"nats://broker:4222/x"`}, // no user information: nothing hidden
	} {
		c := Default()
		c.NATS.Servers = []string{tc.url}
		err := c.Validate()
		if err == nil {
			t.Errorf("%q: valid", tc.url)
			continue
		}
		if strings.Contains(err.Error(), "hunter2") {
			t.Errorf("%q: the error repeats the password: %v", tc.url, err)
		}
		if !strings.Contains(err.Error(), tc.shown) {
			t.Errorf("%q: error %q does not show %s", tc.url, err, tc.shown)
		}
	}
}

// A syntax error on the line of nats.password does not quote the line;
// one elsewhere keeps the decoder's message.
func TestSyntaxErrorHidesPassword(t *testing.T) {
	for _, doc := range []string{
		"[nats]\npassword = hunter2secret\n",
		"[nats]\npassword = 'hunter2' secret\n",
		"[nats]\npassword = \"hunter2\\qsecret\"\n",
		"[nats]\n\"password\" = [\"hunter2\" \"secret\"]\n",
		"nats.password = hunter2secret\n",
	} {
		_, err := Parse([]byte(doc))
		if err == nil {
			t.Errorf("%q: parsed", doc)
			continue
		}
		if strings.Contains(err.Error(), "hunter") || strings.Contains(err.Error(), "secret\"") {
			t.Errorf("%q: the error quotes the value: %v", doc, err)
		}
		if !strings.Contains(err.Error(), "nats.password") || !strings.Contains(err.Error(), "line ") {
			t.Errorf("%q: the error does not say where: %v", doc, err)
		}
	}
	_, err := Parse([]byte("[comms]\nlisten_tcp = oops\n"))
	if err == nil || !strings.Contains(err.Error(), `"oops"`) {
		t.Errorf("a syntax error elsewhere lost the decoder's message: %v", err)
	}
}

// A list from the environment that does not parse is not quoted back: a
// server URL in it may hold a password.
func TestParseListDoesNotQuote(t *testing.T) {
	_, err := ParseList("nats://alice:hunter2@b:1,,x")
	if err == nil || strings.Contains(err.Error(), "hunter2") || !strings.Contains(err.Error(), "item 2") {
		t.Fatalf("ParseList: %v", err)
	}
}

// A meerkat.toml that holds nats.password is refused by both loaders
// (the daemon's goes through LoadWithSources) while group or others may
// read it; one without a password, or kept 0600, is not.
func TestPasswordFileMode(t *testing.T) {
	for _, tc := range []struct {
		name, text string
		mode       os.FileMode
		refused    bool
	}{
		{"password, 0644", "[nats]\nuser = \"u\"\npassword = \"p\"\n", 0o644, true},
		{"password, 0640", "[nats]\nuser = \"u\"\npassword = \"p\"\n", 0o640, true},
		{"password, 0600", "[nats]\nuser = \"u\"\npassword = \"p\"\n", 0o600, false},
		{"no password, 0644", "[nats]\nuser = \"u\"\n", 0o644, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), FileName)
			if err := os.WriteFile(path, []byte(tc.text), 0o600); err != nil {
				t.Fatal(err)
			}
			if err := os.Chmod(path, tc.mode); err != nil {
				t.Fatal(err)
			}
			_, err1 := Load(path)
			_, _, err2 := LoadWithSources(path)
			for i, err := range []error{err1, err2} {
				var ce *Error
				if tc.refused != (err != nil) || tc.refused && (!errors.As(err, &ce) || ce.Key != "nats.password") {
					t.Errorf("loader %d: %v, refused want %v", i, err, tc.refused)
				}
			}
		})
	}
}

// CheckPassword asks for the password with a user, only when NATS is on:
// the node that connects (and config check) calls it, not every command.
func TestCheckPassword(t *testing.T) {
	on := []string{"nats://127.0.0.1:4222"}
	for _, tc := range []struct {
		name    string
		n       NATS
		wantErr bool
	}{
		{"user alone", NATS{Servers: on, User: "u"}, true},
		{"user and password", NATS{Servers: on, User: "u", Password: "p"}, false},
		{"no user", NATS{Servers: on}, false},
		{"user alone, NATS off", NATS{User: "u"}, false},
	} {
		err := tc.n.CheckPassword()
		var ce *Error
		if tc.wantErr != (err != nil) || (err != nil && (!errors.As(err, &ce) || ce.Key != "nats.password")) {
			t.Errorf("%s: CheckPassword() = %v, want an error for nats.password: %v", tc.name, err, tc.wantErr)
		}
	}
}
