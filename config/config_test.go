package config

import (
	"errors"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"
)

// fullConfig is testdata/full.toml decoded.
var fullConfig = Config{
	Name: "alice-1.test_node",
	Comms: Comms{
		ListenUDS:          "/tmp/meerkat-{name}.sock",
		ListenTCP:          "[::1]:4300",
		AdvertiseTCP:       "alice.example:4300",
		TCPPlaintext:       "refuse",
		AckTimeoutSecs:     5,
		MaxMessageBytes:    65536,
		FrameTimeoutSecs:   3,
		IdleTimeoutSecs:    120,
		MaxConnections:     16,
		InboxMax:           500,
		InboxMaxBytes:      1000000,
		PeerInboxShare:     30,
		PeerMaxConnections: 4,
	},
	Store: Store{Mode: "memory", DedupWindowHours: 24, HistoryHours: 48, HistoryMaxBytes: 3000000},
	Outbox: Outbox{Backoff: "1s, 2s,30s", MaxAttempts: 9, BreakerFailures: 5, BreakerOpenSecs: 30,
		MaxEntries: 100, MaxBytes: 2000000, DefaultTTLSecs: 3600, DeadLettersMax: 50, DeadLetterHours: 72},
	Audit:   Audit{Enabled: false, Bodies: true, MaxBytes: 1000000},
	MEUP:    MEUP{Protocol: "mew/v0.4", ProposalTTLSecs: 600},
	MCP:     MCP{Pairing: "off"},
	Metrics: Metrics{Listen: "127.0.0.1:9464"},
	Log:     Log{Level: "debug", Format: "json"},
	Agent: Agent{IdempotencyWindowSecs: 3600, SentHistoryHours: 48, NotifyIntervalMS: 250,
		LoopMaxExchanges: 10, LoopFastMS: 1500, LoopHoldSecs: 120},
	NATS: NATS{
		Servers:          []string{"nats://n1.example:4222", "tls://[2001:db8::2]:4443", "n3.example:4222"},
		CredsFile:        "nats/alice.creds",
		TLSCA:            "/etc/meerkat/nats-ca.pem",
		TLSCert:          "nats/client.pem",
		TLSKey:           "nats/client.key",
		SubjectPrefix:    "acme.meerkat",
		JetStream:        true,
		Stream:           "MEERKAT_ACME",
		StreamMaxAgeSecs: 86400,
		StreamMaxBytes:   -1,
		StreamMaxMsgs:    5000,
		StreamReplicas:   3,
		DedupWindowSecs:  300,
		ReconnectWaitMS:  500,
		ConnectTimeoutMS: 2500,
	},
}

func requireNoError(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatalf("unexpected error: %v", err)
	}
}

// errorKeys returns the Key of every *Error joined in err.
func errorKeys(err error) []string {
	var keys []string
	var walk func(error)
	walk = func(err error) {
		if j, ok := err.(interface{ Unwrap() []error }); ok {
			for _, e := range j.Unwrap() {
				walk(e)
			}
			return
		}
		var ce *Error
		if errors.As(err, &ce) {
			keys = append(keys, ce.Key)
		}
	}
	walk(err)
	return keys
}

func TestDefault(t *testing.T) {
	want := Config{
		Name: "meerkat",
		Comms: Comms{
			ListenUDS:          "",
			ListenTCP:          "",
			AckTimeoutSecs:     30,
			MaxMessageBytes:    1048576,
			FrameTimeoutSecs:   10,
			IdleTimeoutSecs:    60,
			MaxConnections:     1024,
			InboxMax:           10000,
			InboxMaxBytes:      268435456,
			PeerInboxShare:     50,
			PeerMaxConnections: 8,
			TCPPlaintext:       "allow",
		},
		Store: Store{Mode: "sqlite", DedupWindowHours: 168, HistoryHours: 168, HistoryMaxBytes: 268435456},
		Outbox: Outbox{Backoff: "0s,5s,15s,1m,5m", MaxAttempts: 50, BreakerFailures: 3, BreakerOpenSecs: 60,
			MaxEntries: 10000, MaxBytes: 268435456, DeadLettersMax: 10000, DeadLetterHours: 720},
		Audit:   Audit{Enabled: true, MaxBytes: 67108864},
		MEUP:    MEUP{Protocol: "meup/v0.1", ProposalTTLSecs: 3600},
		MCP:     MCP{Pairing: "on"},
		Metrics: Metrics{Listen: ""},
		Log:     Log{Level: "info", Format: "text"},
		Agent: Agent{IdempotencyWindowSecs: 86400, SentHistoryHours: 168, NotifyIntervalMS: 1000,
			LoopMaxExchanges: 20, LoopFastMS: 3000, LoopHoldSecs: 600},
		NATS: NATS{SubjectPrefix: "meerkat", Stream: "MEERKAT", StreamMaxAgeSecs: 604800,
			StreamMaxBytes: 1073741824, StreamMaxMsgs: 1000000, StreamReplicas: 1, DedupWindowSecs: 120,
			ReconnectWaitMS: 2000, ConnectTimeoutMS: 5000},
	}
	if got := Default(); !got.Equal(want) {
		t.Fatalf("Default() = %+v, want %+v", got, want)
	}
	requireNoError(t, Default().Validate())
	if b, err := Default().Outbox.BackoffDurations(); err != nil || !reflect.DeepEqual(b, []time.Duration{0, 5 * time.Second, 15 * time.Second, time.Minute, 5 * time.Minute}) {
		t.Fatalf("default backoff %v, %v", b, err)
	}
	c := Default().Comms
	if c.AckTimeout() != 30*time.Second || c.FrameTimeout() != 10*time.Second || c.IdleTimeout() != time.Minute {
		t.Errorf("durations = %v %v %v", c.AckTimeout(), c.FrameTimeout(), c.IdleTimeout())
	}
	n := Default().NATS
	if n.Enabled() || n.Servers != nil {
		t.Errorf("NATS on by default: %q", n.Servers)
	}
	if n.StreamMaxAge() != 7*24*time.Hour || n.DedupWindow() != 2*time.Minute ||
		n.ReconnectWait() != 2*time.Second || n.ConnectTimeout() != 5*time.Second {
		t.Errorf("NATS durations = %v %v %v %v", n.StreamMaxAge(), n.DedupWindow(), n.ReconnectWait(), n.ConnectTimeout())
	}
}

func TestDurationsClamp(t *testing.T) {
	c := Comms{AckTimeoutSecs: -5, FrameTimeoutSecs: math.MaxInt, IdleTimeoutSecs: 7}
	if c.AckTimeout() != 0 || c.FrameTimeout() != MaxTimeoutSecs*time.Second || c.IdleTimeout() != 7*time.Second {
		t.Errorf("durations = %v %v %v", c.AckTimeout(), c.FrameTimeout(), c.IdleTimeout())
	}
}

func TestParseFull(t *testing.T) {
	data, err := os.ReadFile("testdata/full.toml")
	requireNoError(t, err)
	got, err := Parse(data)
	requireNoError(t, err)
	if !got.Equal(fullConfig) {
		t.Fatalf("Parse(full.toml) = %+v, want %+v", got, fullConfig)
	}
	requireNoError(t, got.Validate())
	// Every field differs from its default, so the file proves each key lands.
	dv, gv := reflect.ValueOf(Default().Comms), reflect.ValueOf(got.Comms)
	for i := range dv.NumField() {
		if dv.Field(i).Interface() == gv.Field(i).Interface() {
			t.Errorf("full.toml leaves %s at its default", dv.Type().Field(i).Name)
		}
	}
	if got.Name == Default().Name {
		t.Error("full.toml leaves name at its default")
	}
	// The same for [nats], except the other authentication methods, which
	// cannot be set with creds_file.
	dv, gv = reflect.ValueOf(Default().NATS), reflect.ValueOf(got.NATS)
	for i := range dv.NumField() {
		switch name := dv.Type().Field(i).Name; name {
		case "NKeySeedFile", "User", "Password":
		default:
			if reflect.DeepEqual(dv.Field(i).Interface(), gv.Field(i).Interface()) {
				t.Errorf("full.toml leaves nats %s at its default", name)
			}
		}
	}
}

func TestParsePartialKeepsDefaults(t *testing.T) {
	for _, tc := range []struct {
		name, in string
		want     func(*Config)
	}{
		{"empty", "", func(*Config) {}},
		{"comments only", "# nothing\n\n", func(*Config) {}},
		{"empty table", "[comms]\n", func(*Config) {}},
		{"one key", "[comms]\nlisten_tcp = \"127.0.0.1:4200\"\n", func(c *Config) { c.Comms.ListenTCP = "127.0.0.1:4200" }},
		{"dotted key", "comms.inbox_max = 7\n", func(c *Config) { c.Comms.InboxMax = 7 }},
		{"inline table", "comms = { max_connections = 2 }\n", func(c *Config) { c.Comms.MaxConnections = 2 }},
		{"name only", "name = \"bob\"\n", func(c *Config) { c.Name = "bob" }},
		{"off", "[comms]\nlisten_uds = \"off\"\n", func(c *Config) { c.Comms.ListenUDS = "off" }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := Parse([]byte(tc.in))
			requireNoError(t, err)
			want := Default()
			tc.want(&want)
			if !got.Equal(want) {
				t.Errorf("got %+v, want %+v", got, want)
			}
		})
	}
}

func TestParseUnknownKeys(t *testing.T) {
	for _, tc := range []struct {
		name, in string
		keys     []string // reported key paths, in order
		suggest  string   // expected "did you mean" for the first, or ""
	}{
		{"top level", "nmae = \"x\"\n", []string{"nmae"}, `"name"`},
		{"in comms", "[comms]\nlisten_udp = \"/x\"\n", []string{"comms.listen_udp"}, `"comms.listen_uds"`},
		{"env-style name", "[comms]\nack_timeout = 5\n", []string{"comms.ack_timeout"}, `"comms.ack_timeout_secs"`},
		{"wrong table", "listen_tcp = \"127.0.0.1:1\"\n", []string{"listen_tcp"}, `"comms.listen_tcp"`},
		{"upper case", "[comms]\nLISTEN_UDS = \"/x\"\n", []string{"comms.LISTEN_UDS"}, `"comms.listen_uds"`},
		{"case twin", "[comms]\nlisten_uds = \"/y\"\nListen_Uds = \"/x\"\n", []string{"comms.Listen_Uds"}, `"comms.listen_uds"`},
		{"unknown table reported once", "[foo]\na = 1\n[foo.bar]\nb = 2\n", []string{"foo"}, ""},
		{"unknown array of tables once", "[[foo]]\na = 1\n[[foo]]\nb = {c = 2}\n", []string{"foo"}, ""},
		{"unknown inline table once", "foo = {a = 1, b = {c = 2}}\n", []string{"foo"}, ""},
		{"table typo", "[comm]\nlisten_tcp = \"x\"\n", []string{"comm"}, `"comms"`},
		{"sub-table of comms", "[comms.tls]\ncert = \"x\"\n", []string{"comms.tls"}, ""},
		{"no suggestion", "zzzzzzzz = 1\n", []string{"zzzzzzzz"}, ""},
		{"quoted key", "\"a b\" = 1\n", []string{`"a b"`}, ""},
		{"several", "x = 1\n[comms]\ny = 2\nmax_conections = 3\n", []string{"x", "comms.y", "comms.max_conections"}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Parse([]byte(tc.in))
			if err == nil {
				t.Fatal("Parse accepted unknown key")
			}
			if !errors.Is(err, ErrUnknownKey) {
				t.Errorf("error does not match ErrUnknownKey: %v", err)
			}
			if got := errorKeys(err); !reflect.DeepEqual(got, tc.keys) {
				t.Errorf("keys = %q, want %q (err: %v)", got, tc.keys, err)
			}
			first := strings.Split(err.Error(), "\n")[0]
			if want := "config: " + tc.keys[0] + ": unknown key"; !strings.HasPrefix(first, want) {
				t.Errorf("message %q does not start with %q", first, want)
			}
			if tc.suggest != "" && !strings.Contains(first, "did you mean "+tc.suggest) {
				t.Errorf("message %q lacks suggestion %s", first, tc.suggest)
			}
			if tc.suggest == "" && strings.Contains(first, "did you mean") {
				t.Errorf("message %q suggests something", first)
			}
		})
	}
}

func TestParseTypeAndSyntaxErrors(t *testing.T) {
	for _, tc := range []struct {
		name, in string
		want     []string // substrings of the message
	}{
		{"string for int", "name = \"n\"\n\n[comms]\nack_timeout_secs = \"30\"\n", []string{"line 4", "comms.ack_timeout_secs", "string"}},
		{"int for string", "\nname = 5\n", []string{"line 2", `"name"`}},
		{"float for int", "[comms]\ninbox_max = 1.5\n", []string{"line 2", "comms.inbox_max", "float"}},
		{"bool for string", "[comms]\n\nlisten_tcp = true\n", []string{"line 3", "comms.listen_tcp"}},
		{"int overflow", "[comms]\nmax_connections = 99999999999999999999\n", []string{"line 2"}},
		{"comms not a table", "comms = 5\n", []string{"line 1", "comms"}},
		{"array of tables", "[[comms]]\n", []string{"line 1", "comms"}},
		{"syntax", "name = \"a\"\n[comms]\ninbox_max = = 1\n", []string{"line 3"}},
		{"unterminated string", "name = \"a\n", []string{"line 1"}},
		{"duplicate key", "name = \"a\"\nname = \"b\"\n", []string{"line 2", "name"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Parse([]byte(tc.in))
			if err == nil {
				t.Fatal("Parse accepted bad input")
			}
			if errors.Is(err, ErrUnknownKey) {
				t.Errorf("reported as unknown key: %v", err)
			}
			if !strings.HasPrefix(err.Error(), "config: ") {
				t.Errorf("message %q lacks the package prefix", err)
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("message %q lacks %q", err, w)
				}
			}
		})
	}
}

func TestParseLimits(t *testing.T) {
	big := []byte("# " + strings.Repeat("x", MaxFileSize) + "\n")
	if _, err := Parse(big); !errors.Is(err, ErrFileTooLarge) {
		t.Errorf("oversized input: err = %v, want ErrFileTooLarge", err)
	}
	if _, err := Parse([]byte("name = \"\xff\"\n")); err == nil || !strings.Contains(err.Error(), "UTF-8") {
		t.Errorf("invalid UTF-8: err = %v", err)
	}
}

func TestLoad(t *testing.T) {
	dir := t.TempDir()
	write := func(name, content string) string {
		t.Helper()
		p := filepath.Join(dir, name)
		requireNoError(t, os.WriteFile(p, []byte(content), 0o600))
		return p
	}

	full, err := os.ReadFile("testdata/full.toml")
	requireNoError(t, err)
	good := write("good.toml", string(full))
	for name, load := range map[string]func(string) (Config, error){"Load": Load, "LoadOrDefault": LoadOrDefault} {
		c, err := load(good)
		requireNoError(t, err)
		if !c.Equal(fullConfig) {
			t.Errorf("%s = %+v, want %+v", name, c, fullConfig)
		}
	}

	missing := filepath.Join(dir, "nope", FileName)
	if _, err := Load(missing); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("Load(missing) err = %v, want fs.ErrNotExist", err)
	}
	c, err := LoadOrDefault(missing)
	requireNoError(t, err)
	if !c.Equal(Default()) {
		t.Errorf("LoadOrDefault(missing) = %+v, want Default()", c)
	}

	bad := write(FileName, "[comms]\nlisten_udp = \"/x\"\n")
	for name, load := range map[string]func(string) (Config, error){"Load": Load, "LoadOrDefault": LoadOrDefault} {
		_, err := load(bad)
		want := `config: ` + bad + `: comms.listen_udp: unknown key (did you mean "comms.listen_uds"?)`
		if err == nil || err.Error() != want {
			t.Errorf("%s(bad) err = %v, want %s", name, err, want)
		}
	}

	typo := write("type.toml", "\n\n[comms]\ninbox_max = \"many\"\n")
	if _, err := Load(typo); err == nil || !strings.Contains(err.Error(), typo) || !strings.Contains(err.Error(), "line 4") {
		t.Errorf("Load(type error) err = %v, want path and line 4", err)
	}

	huge := write("huge.toml", "# "+strings.Repeat("x", MaxFileSize))
	if _, err := LoadOrDefault(huge); !errors.Is(err, ErrFileTooLarge) || !strings.Contains(err.Error(), huge) {
		t.Errorf("Load(huge) err = %v, want ErrFileTooLarge naming the file", err)
	}

	if _, err := LoadOrDefault(dir); err == nil || errors.Is(err, os.ErrNotExist) {
		t.Errorf("Load(directory) err = %v, want a non-ErrNotExist error", err)
	}
}

func TestQuotedDottedKeyHint(t *testing.T) {
	_, err := Parse([]byte(`"comms.listen_tcp" = "127.0.0.1:4200"` + "\n"))
	if err == nil || !strings.Contains(err.Error(), "quoted key is one key") {
		t.Fatalf("quoted dotted key: %v", err)
	}
}

func TestResolveRefusesUnsafeNameInPath(t *testing.T) {
	c := Default()
	c.Name = "../../etc"
	c.Comms.ListenUDS = "/tmp/{name}/x.sock"
	if _, err := c.Resolve("/home/x"); err == nil {
		t.Fatal("Resolve substituted an unsafe name into the socket path")
	}
}
