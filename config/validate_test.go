package config

import (
	"errors"
	"math"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/meerkatd/meerkatd/transport"
)

func TestValidate(t *testing.T) {
	for _, tc := range []struct {
		name   string
		change func(*Config)
		key    string // the key the single error names; "" = valid
	}{
		{"default", func(*Config) {}, ""},
		{"full file", func(c *Config) { *c = fullConfig }, ""},

		{"name empty", func(c *Config) { c.Name = "" }, "name"},
		{"name space", func(c *Config) { c.Name = "a b" }, "name"},
		{"name slash", func(c *Config) { c.Name = "a/b" }, "name"},
		{"name dotdot", func(c *Config) { c.Name = ".." }, "name"},
		{"name unicode", func(c *Config) { c.Name = "café" }, "name"},
		{"name too long", func(c *Config) { c.Name = strings.Repeat("a", MaxNameLen+1) }, "name"},
		{"name max length", func(c *Config) { c.Name = strings.Repeat("a", MaxNameLen) }, ""},
		{"name all classes", func(c *Config) { c.Name = "Az09._-" }, ""},

		{"uds relative", func(c *Config) { c.Comms.ListenUDS = "meerkat.sock" }, "comms.listen_uds"},
		{"uds tilde", func(c *Config) { c.Comms.ListenUDS = "~/meerkat.sock" }, "comms.listen_uds"},
		{"uds name relative", func(c *Config) { c.Comms.ListenUDS = "{name}.sock" }, "comms.listen_uds"},
		{"uds root", func(c *Config) { c.Comms.ListenUDS = "/" }, "comms.listen_uds"},
		{"uds query char", func(c *Config) { c.Comms.ListenUDS = "/tmp/a?b" }, "comms.listen_uds"},
		{"uds OFF is a path", func(c *Config) { c.Comms.ListenUDS = "OFF" }, "comms.listen_uds"},
		{"uds off", func(c *Config) { c.Comms.ListenUDS = "off" }, ""},
		{"uds absolute", func(c *Config) { c.Comms.ListenUDS = "/run/meerkat/{name}.sock" }, ""},

		{"tcp no port", func(c *Config) { c.Comms.ListenTCP = "127.0.0.1" }, "comms.listen_tcp"},
		{"tcp no host", func(c *Config) { c.Comms.ListenTCP = ":4200" }, "comms.listen_tcp"},
		{"tcp port 0", func(c *Config) { c.Comms.ListenTCP = "127.0.0.1:0" }, "comms.listen_tcp"},
		{"tcp port 65536", func(c *Config) { c.Comms.ListenTCP = "127.0.0.1:65536" }, "comms.listen_tcp"},
		{"tcp port name", func(c *Config) { c.Comms.ListenTCP = "127.0.0.1:http" }, "comms.listen_tcp"},
		{"tcp port sign", func(c *Config) { c.Comms.ListenTCP = "127.0.0.1:+80" }, "comms.listen_tcp"},
		{"tcp bare ipv6", func(c *Config) { c.Comms.ListenTCP = "::1:4200" }, "comms.listen_tcp"},
		{"tcp url", func(c *Config) { c.Comms.ListenTCP = "tcp://127.0.0.1:4200" }, "comms.listen_tcp"},
		{"tcp port 65535", func(c *Config) { c.Comms.ListenTCP = "0.0.0.0:65535" }, ""},
		{"tcp ipv6", func(c *Config) { c.Comms.ListenTCP = "[::]:1" }, ""},
		{"tcp hostname", func(c *Config) { c.Comms.ListenTCP = "localhost:4200" }, ""},

		{"advertise ipv4 wildcard", func(c *Config) { c.Comms.AdvertiseTCP = "0.0.0.0:4200" }, "comms.advertise_tcp"},
		{"advertise ipv6 wildcard", func(c *Config) { c.Comms.AdvertiseTCP = "[::]:4200" }, "comms.advertise_tcp"},
		{"advertise no port", func(c *Config) { c.Comms.AdvertiseTCP = "192.0.2.7" }, "comms.advertise_tcp"},
		{"advertise no host", func(c *Config) { c.Comms.AdvertiseTCP = ":4200" }, "comms.advertise_tcp"},
		{"advertise port 0", func(c *Config) { c.Comms.AdvertiseTCP = "192.0.2.7:0" }, "comms.advertise_tcp"},
		{"advertise url", func(c *Config) { c.Comms.AdvertiseTCP = "tcp://192.0.2.7:4200" }, "comms.advertise_tcp"},
		{"advertise ipv4", func(c *Config) { c.Comms.AdvertiseTCP = "192.0.2.7:4200" }, ""},
		{"advertise ipv6", func(c *Config) { c.Comms.AdvertiseTCP = "[2001:db8::7]:4200" }, ""},
		{"advertise hostname", func(c *Config) { c.Comms.AdvertiseTCP = "node.example:4200" }, ""},
		{"advertise looks wild, is not", func(c *Config) { c.Comms.AdvertiseTCP = "0.0.0.1:4200" }, ""},

		{"ack 0", func(c *Config) { c.Comms.AckTimeoutSecs = 0 }, "comms.ack_timeout_secs"},
		{"ack negative", func(c *Config) { c.Comms.AckTimeoutSecs = -1 }, "comms.ack_timeout_secs"},
		{"ack huge", func(c *Config) { c.Comms.AckTimeoutSecs = MaxTimeoutSecs + 1 }, "comms.ack_timeout_secs"},
		{"ack 1", func(c *Config) { c.Comms.AckTimeoutSecs = 1 }, ""},
		{"frame 0", func(c *Config) { c.Comms.FrameTimeoutSecs = 0 }, "comms.frame_timeout_secs"},
		{"frame max", func(c *Config) { c.Comms.FrameTimeoutSecs = MaxTimeoutSecs }, ""},
		{"idle 0", func(c *Config) { c.Comms.IdleTimeoutSecs = 0 }, "comms.idle_timeout_secs"},
		{"idle huge", func(c *Config) { c.Comms.IdleTimeoutSecs = math.MaxInt }, "comms.idle_timeout_secs"},

		{"max message 0", func(c *Config) { c.Comms.MaxMessageBytes = 0 }, "comms.max_message_bytes"},
		{"max message under the least", func(c *Config) { c.Comms.MaxMessageBytes = 1023 }, "comms.max_message_bytes"},
		{"max message over protocol", func(c *Config) { c.Comms.MaxMessageBytes = 1048577 }, "comms.max_message_bytes"},
		{"max message at the least", func(c *Config) { c.Comms.MaxMessageBytes = 1024 }, ""},
		{"max connections 0", func(c *Config) { c.Comms.MaxConnections = 0 }, "comms.max_connections"},
		{"max connections 1", func(c *Config) { c.Comms.MaxConnections = 1 }, ""},
		{"peer share 0", func(c *Config) { c.Comms.PeerInboxShare = 0 }, "comms.peer_inbox_share"},
		{"peer share 101", func(c *Config) { c.Comms.PeerInboxShare = 101 }, "comms.peer_inbox_share"},
		{"peer share 100", func(c *Config) { c.Comms.PeerInboxShare = 100 }, ""},
		{"peer conns 0", func(c *Config) { c.Comms.PeerMaxConnections = 0 }, "comms.peer_max_connections"},
		{"inbox 0", func(c *Config) { c.Comms.InboxMax = 0 }, "comms.inbox_max"},
		{"inbox negative", func(c *Config) { c.Comms.InboxMax = -3 }, "comms.inbox_max"},
		{"backoff empty", func(c *Config) { c.Outbox.Backoff = "" }, "outbox.backoff"},
		{"backoff word", func(c *Config) { c.Outbox.Backoff = "0s,soon" }, "outbox.backoff"},
		{"backoff negative", func(c *Config) { c.Outbox.Backoff = "-1s" }, "outbox.backoff"},
		{"backoff over a week", func(c *Config) { c.Outbox.Backoff = "1s,169h" }, "outbox.backoff"},
		{"backoff too many steps", func(c *Config) { c.Outbox.Backoff = strings.Repeat("1s,", 32) + "1s" }, "outbox.backoff"},
		{"backoff one step", func(c *Config) { c.Outbox.Backoff = "250ms" }, ""},
		{"max attempts 0", func(c *Config) { c.Outbox.MaxAttempts = 0 }, "outbox.max_attempts"},
		{"breaker failures 0", func(c *Config) { c.Outbox.BreakerFailures = 0 }, "outbox.breaker_failures"},
		{"breaker open 0", func(c *Config) { c.Outbox.BreakerOpenSecs = 0 }, "outbox.breaker_open_secs"},
		{"ttl negative", func(c *Config) { c.Outbox.DefaultTTLSecs = -1 }, "outbox.default_ttl_secs"},
		{"ttl 0 is none", func(c *Config) { c.Outbox.DefaultTTLSecs = 0 }, ""},
		{"audit rotate tiny", func(c *Config) { c.Audit.MaxBytes = 100 }, "audit.max_bytes"},
		{"meup protocol unknown", func(c *Config) { c.MEUP.Protocol = "meup/v9" }, "meup.protocol"},
		{"meup protocol mcpx is read only", func(c *Config) { c.MEUP.Protocol = "mcpx/v0.1" }, "meup.protocol"},
		{"meup protocol mew", func(c *Config) { c.MEUP.Protocol = "mew/v0.4" }, ""},
		{"proposal ttl 0", func(c *Config) { c.MEUP.ProposalTTLSecs = 0 }, "meup.proposal_ttl_secs"},
		{"mcp pairing off", func(c *Config) { c.MCP.Pairing = "off" }, ""},
		{"tcp plaintext refuse", func(c *Config) { c.Comms.TCPPlaintext = "refuse" }, ""},
		{"tcp plaintext empty", func(c *Config) { c.Comms.TCPPlaintext = "" }, "comms.tcp_plaintext"},
		{"tcp plaintext other", func(c *Config) { c.Comms.TCPPlaintext = "Refuse" }, "comms.tcp_plaintext"},
		{"mcp pairing on", func(c *Config) { c.MCP.Pairing = "on" }, ""},
		{"mcp pairing empty", func(c *Config) { c.MCP.Pairing = "" }, "mcp.pairing"},
		{"mcp pairing OFF", func(c *Config) { c.MCP.Pairing = "OFF" }, "mcp.pairing"},
		{"mcp pairing false", func(c *Config) { c.MCP.Pairing = "false" }, "mcp.pairing"},
		{"metrics off", func(c *Config) { c.Metrics.Listen = "" }, ""},
		{"idempotency window short", func(c *Config) { c.Agent.IdempotencyWindowSecs = 59 }, "agent.idempotency_window_secs"},
		{"sent history 0", func(c *Config) { c.Agent.SentHistoryHours = 0 }, "agent.sent_history_hours"},
		{"notify every arrival", func(c *Config) { c.Agent.NotifyIntervalMS = 0 }, ""},
		{"notify negative", func(c *Config) { c.Agent.NotifyIntervalMS = -1 }, "agent.notify_interval_ms"},
		{"loop guard off", func(c *Config) { c.Agent.LoopMaxExchanges = 0 }, ""},
		{"loop guard negative", func(c *Config) { c.Agent.LoopMaxExchanges = -1 }, "agent.loop_max_exchanges"},
		{"loop fast 0", func(c *Config) { c.Agent.LoopFastMS = 0 }, "agent.loop_fast_ms"},
		{"loop hold 0", func(c *Config) { c.Agent.LoopHoldSecs = 0 }, "agent.loop_hold_secs"},
		{"metrics loopback", func(c *Config) { c.Metrics.Listen = "127.0.0.1:9464" }, ""},
		{"metrics any port", func(c *Config) { c.Metrics.Listen = "127.0.0.1:0" }, ""},
		{"metrics ipv6", func(c *Config) { c.Metrics.Listen = "[::1]:9464" }, ""},
		{"metrics all interfaces", func(c *Config) { c.Metrics.Listen = ":9464" }, ""},
		{"metrics no port", func(c *Config) { c.Metrics.Listen = "127.0.0.1" }, "metrics.listen"},
		{"metrics bad port", func(c *Config) { c.Metrics.Listen = "127.0.0.1:http" }, "metrics.listen"},
		{"metrics port too big", func(c *Config) { c.Metrics.Listen = "127.0.0.1:70000" }, "metrics.listen"},
		{"metrics url", func(c *Config) { c.Metrics.Listen = "http://127.0.0.1:9464" }, "metrics.listen"},
		{"proposal ttl a week", func(c *Config) { c.MEUP.ProposalTTLSecs = 7 * 24 * 3600 }, ""},
		{"history max bytes zero", func(c *Config) { c.Store.HistoryMaxBytes = 0 }, "store.history_max_bytes"},
		{"history max bytes one", func(c *Config) { c.Store.HistoryMaxBytes = 1 }, ""},
		{"dead letters max zero", func(c *Config) { c.Outbox.DeadLettersMax = 0 }, "outbox.dead_letters_max"},
		{"dead letter hours zero", func(c *Config) { c.Outbox.DeadLetterHours = 0 }, "outbox.dead_letter_hours"},
		{"dead letter hours over a year", func(c *Config) { c.Outbox.DeadLetterHours = 24*365 + 1 }, "outbox.dead_letter_hours"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := Default()
			tc.change(&c)
			err := c.Validate()
			if tc.key == "" {
				requireNoError(t, err)
				return
			}
			if got := errorKeys(err); !reflect.DeepEqual(got, []string{tc.key}) {
				t.Fatalf("error keys = %q, want [%q] (err: %v)", got, tc.key, err)
			}
			if !strings.HasPrefix(err.Error(), "config: "+tc.key+": ") {
				t.Errorf("message %q does not start with the key", err)
			}
		})
	}
}

func TestValidateAllAtOnce(t *testing.T) {
	c := Config{Name: "bad name", Comms: Comms{ListenUDS: "rel", ListenTCP: "nope"}, Metrics: Metrics{Listen: "nope"}, // every int 0
		NATS: NATS{Servers: []string{"http://x:1"}, CredsFile: "~/x.creds", NKeySeedFile: "seed", User: "u", TLSCert: "c.pem"}}
	err := c.Validate()
	want := []string{
		"name", "comms.listen_uds", "comms.listen_tcp", "comms.tcp_plaintext", "comms.ack_timeout_secs",
		"comms.max_message_bytes", "comms.frame_timeout_secs", "comms.idle_timeout_secs",
		"comms.max_connections", "comms.inbox_max", "comms.inbox_max_bytes",
		"comms.peer_inbox_share", "comms.peer_max_connections",
		"store.mode", "store.dedup_window_hours", "store.history_hours", "store.history_max_bytes",
		"outbox.backoff", "outbox.max_attempts", "outbox.breaker_failures", "outbox.breaker_open_secs",
		"outbox.max_entries", "outbox.max_bytes", "outbox.dead_letters_max", "outbox.dead_letter_hours", "audit.max_bytes",
		"meup.protocol", "meup.proposal_ttl_secs", "mcp.pairing", "metrics.listen", "log.level", "log.format",
		"agent.idempotency_window_secs", "agent.sent_history_hours", "agent.loop_fast_ms", "agent.loop_hold_secs",
		"nats.servers", "nats.nkey_seed_file", "nats.user", "nats.creds_file", "nats.tls_cert",
		"nats.subject_prefix", "nats.stream", "nats.stream_max_age_secs",
		"nats.stream_max_bytes", "nats.stream_max_msgs", "nats.stream_replicas", "nats.dedup_window_secs",
		"nats.reconnect_wait_ms", "nats.connect_timeout_ms",
	}
	if got := errorKeys(err); !reflect.DeepEqual(got, want) {
		t.Fatalf("error keys = %q, want %q", got, want)
	}
	if n := strings.Count(err.Error(), "\n") + 1; n != len(want) {
		t.Errorf("message has %d lines, want %d:\n%v", n, len(want), err)
	}
	var ce *Error
	if !errors.As(err, &ce) || ce.Unwrap() == nil {
		t.Errorf("errors.As(*Error) = %v", ce)
	}
}

func TestResolve(t *testing.T) {
	const home = "/home/u/.config/meerkat"
	uds := func(p string) transport.Addr { return transport.Addr{Scheme: "uds", Path: p} }
	for _, tc := range []struct {
		name     string
		uds, tcp string
		home     string
		want     Listeners
		wantStr  []string
		errKey   string
	}{
		{name: "default socket in home", home: home,
			want: Listeners{UDS: uds(home + "/meerkat.sock")}, wantStr: []string{"uds://" + home + "/meerkat.sock"}},
		{name: "name substituted", uds: "/tmp/meerkat-{name}.sock", home: home,
			want: Listeners{UDS: uds("/tmp/meerkat-n1.sock")}, wantStr: []string{"uds:///tmp/meerkat-n1.sock"}},
		{name: "name substituted twice", uds: "/run/{name}/{name}.sock", home: "",
			want: Listeners{UDS: uds("/run/n1/n1.sock")}, wantStr: []string{"uds:///run/n1/n1.sock"}},
		{name: "path cleaned", uds: "/tmp//a/../b.sock", home: home,
			want: Listeners{UDS: uds("/tmp/b.sock")}, wantStr: []string{"uds:///tmp/b.sock"}},
		{name: "off", uds: "off", home: "relative/home", want: Listeners{}, wantStr: nil},
		{name: "off with tcp", uds: "off", tcp: "[::1]:4300", home: home,
			want:    Listeners{TCP: transport.Addr{Scheme: "tcp", Host: "::1", Port: 4300}},
			wantStr: []string{"tcp://[::1]:4300"}},
		{name: "both", tcp: "0.0.0.0:4200", home: home,
			want:    Listeners{UDS: uds(home + "/meerkat.sock"), TCP: transport.Addr{Scheme: "tcp", Host: "0.0.0.0", Port: 4200}},
			wantStr: []string{"uds://" + home + "/meerkat.sock", "tcp://0.0.0.0:4200"}},
		{name: "relative home", home: "relative", errKey: "comms.listen_uds"},
		{name: "empty home", home: "", errKey: "comms.listen_uds"},
		{name: "bad tcp", tcp: "x", home: home, errKey: "comms.listen_tcp"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := Default()
			c.Name = "n1"
			c.Comms.ListenUDS, c.Comms.ListenTCP = tc.uds, tc.tcp
			got, err := c.Resolve(tc.home)
			if tc.errKey != "" {
				if keys := errorKeys(err); !reflect.DeepEqual(keys, []string{tc.errKey}) {
					t.Fatalf("error keys = %q, want [%q] (err: %v)", keys, tc.errKey, err)
				}
				return
			}
			requireNoError(t, err)
			if got != tc.want {
				t.Errorf("Resolve = %+v, want %+v", got, tc.want)
			}
			var strs []string
			for _, a := range got.All() {
				strs = append(strs, a.String())
				if back, err := transport.ParseAddr(a.String()); err != nil || back != a {
					t.Errorf("%s does not round-trip through ParseAddr: %v", a, err)
				}
			}
			if !slices.Equal(strs, tc.wantStr) {
				t.Errorf("All = %q, want %q", strs, tc.wantStr)
			}
		})
	}
}

// A password with no user is reported under nats.password, so that the
// error names where the password came from (the environment, say, not
// the file), never the password itself.
func TestNATSPasswordWithoutUser(t *testing.T) {
	c := Default()
	c.NATS.Servers = []string{"nats://127.0.0.1:4222"}
	c.NATS.Password = "secret"
	err := c.Validate()
	if got := errorKeys(err); !reflect.DeepEqual(got, []string{"nats.password"}) {
		t.Fatalf("error keys %q, want [nats.password] (err: %v)", got, err)
	}
	err = c.ValidateSources(Sources{"nats.password": "MEERKAT_NATS_PASSWORD"})
	if !strings.Contains(err.Error(), "MEERKAT_NATS_PASSWORD") || strings.Contains(err.Error(), "secret") {
		t.Errorf("message %q: want it to name MEERKAT_NATS_PASSWORD, and never the password", err)
	}
}

// The errors of a TCP address say what to write: an address to advertise
// with no host needs the host other nodes reach this one at (not a
// wildcard, which is refused there), and a scheme is left out.
func TestTCPAddressHints(t *testing.T) {
	for _, tc := range []struct {
		name   string
		tune   func(*Config)
		want   string
		refuse string // must not be in the error
	}{
		{"advertise no host", func(c *Config) { c.Comms.AdvertiseTCP = ":47330" }, "the name or IP address other nodes reach this one at, like 192.0.2.10:47330", "0.0.0.0"},
		{"advertise with scheme", func(c *Config) { c.Comms.AdvertiseTCP = "tls://127.0.0.1:47312" }, "without tls://", "too many colons"},
		{"listen with scheme", func(c *Config) { c.Comms.ListenTCP = "tcp://127.0.0.1:4200" }, "without tcp://", "too many colons"},
		{"listen no host", func(c *Config) { c.Comms.ListenTCP = ":4200" }, "use 0.0.0.0:4200 or [::]:4200", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := Default()
			tc.tune(&c)
			err := c.Validate()
			if err == nil || !strings.Contains(err.Error(), tc.want) || tc.refuse != "" && strings.Contains(err.Error(), tc.refuse) {
				t.Fatalf("%v; want %q in it", err, tc.want)
			}
		})
	}
}
