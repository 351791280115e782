package config

import (
	"errors"
	"reflect"
	"strings"
	"testing"
)

// wantEnv pins the environment variable of every key: these names are part
// of the product's interface (MEERKAT_COMMS_ACK_TIMEOUT is fixed by the spec).
var wantEnv = map[string]string{
	"name":                          "MEERKAT_NAME",
	"comms.listen_uds":              "MEERKAT_COMMS_LISTEN_UDS",
	"comms.listen_tcp":              "MEERKAT_COMMS_LISTEN_TCP",
	"comms.advertise_tcp":           "MEERKAT_COMMS_ADVERTISE_TCP",
	"comms.tcp_plaintext":           "MEERKAT_COMMS_TCP_PLAINTEXT",
	"comms.ack_timeout_secs":        "MEERKAT_COMMS_ACK_TIMEOUT",
	"comms.max_message_bytes":       "MEERKAT_COMMS_MAX_MESSAGE_BYTES",
	"comms.frame_timeout_secs":      "MEERKAT_COMMS_FRAME_TIMEOUT_SECS",
	"comms.idle_timeout_secs":       "MEERKAT_COMMS_IDLE_TIMEOUT_SECS",
	"comms.max_connections":         "MEERKAT_COMMS_MAX_CONNECTIONS",
	"comms.inbox_max":               "MEERKAT_COMMS_INBOX_MAX",
	"comms.inbox_max_bytes":         "MEERKAT_COMMS_INBOX_MAX_BYTES",
	"comms.peer_inbox_share":        "MEERKAT_COMMS_PEER_INBOX_SHARE",
	"comms.peer_max_connections":    "MEERKAT_COMMS_PEER_MAX_CONNECTIONS",
	"store.mode":                    "MEERKAT_STORE_MODE",
	"store.dedup_window_hours":      "MEERKAT_STORE_DEDUP_WINDOW_HOURS",
	"store.history_hours":           "MEERKAT_STORE_HISTORY_HOURS",
	"store.history_max_bytes":       "MEERKAT_STORE_HISTORY_MAX_BYTES",
	"outbox.backoff":                "MEERKAT_OUTBOX_BACKOFF",
	"outbox.max_attempts":           "MEERKAT_OUTBOX_MAX_ATTEMPTS",
	"outbox.breaker_failures":       "MEERKAT_OUTBOX_BREAKER_FAILURES",
	"outbox.breaker_open_secs":      "MEERKAT_OUTBOX_BREAKER_OPEN_SECS",
	"outbox.max_entries":            "MEERKAT_OUTBOX_MAX_ENTRIES",
	"outbox.max_bytes":              "MEERKAT_OUTBOX_MAX_BYTES",
	"outbox.default_ttl_secs":       "MEERKAT_OUTBOX_DEFAULT_TTL_SECS",
	"outbox.dead_letters_max":       "MEERKAT_OUTBOX_DEAD_LETTERS_MAX",
	"outbox.dead_letter_hours":      "MEERKAT_OUTBOX_DEAD_LETTER_HOURS",
	"audit.enabled":                 "MEERKAT_AUDIT_ENABLED",
	"audit.bodies":                  "MEERKAT_AUDIT_BODIES",
	"audit.max_bytes":               "MEERKAT_AUDIT_MAX_BYTES",
	"meup.protocol":                 "MEERKAT_MEUP_PROTOCOL",
	"meup.proposal_ttl_secs":        "MEERKAT_MEUP_PROPOSAL_TTL_SECS",
	"mcp.pairing":                   "MEERKAT_MCP_PAIRING",
	"metrics.listen":                "MEERKAT_METRICS_LISTEN",
	"agent.idempotency_window_secs": "MEERKAT_AGENT_IDEMPOTENCY_WINDOW_SECS",
	"agent.sent_history_hours":      "MEERKAT_AGENT_SENT_HISTORY_HOURS",
	"agent.notify_interval_ms":      "MEERKAT_AGENT_NOTIFY_INTERVAL_MS",
	"agent.loop_max_exchanges":      "MEERKAT_AGENT_LOOP_MAX_EXCHANGES",
	"agent.loop_fast_ms":            "MEERKAT_AGENT_LOOP_FAST_MS",
	"agent.loop_hold_secs":          "MEERKAT_AGENT_LOOP_HOLD_SECS",
	"log.level":                     "MEERKAT_LOG_LEVEL",
	"log.format":                    "MEERKAT_LOG_FORMAT",
	"nats.servers":                  "MEERKAT_NATS_SERVERS",
	"nats.creds_file":               "MEERKAT_NATS_CREDS_FILE",
	"nats.nkey_seed_file":           "MEERKAT_NATS_NKEY_SEED_FILE",
	"nats.user":                     "MEERKAT_NATS_USER",
	"nats.password":                 "MEERKAT_NATS_PASSWORD",
	"nats.tls_ca":                   "MEERKAT_NATS_TLS_CA",
	"nats.tls_cert":                 "MEERKAT_NATS_TLS_CERT",
	"nats.tls_key":                  "MEERKAT_NATS_TLS_KEY",
	"nats.subject_prefix":           "MEERKAT_NATS_SUBJECT_PREFIX",
	"nats.jetstream":                "MEERKAT_NATS_JETSTREAM",
	"nats.stream":                   "MEERKAT_NATS_STREAM",
	"nats.stream_max_age_secs":      "MEERKAT_NATS_STREAM_MAX_AGE_SECS",
	"nats.stream_max_bytes":         "MEERKAT_NATS_STREAM_MAX_BYTES",
	"nats.stream_max_msgs":          "MEERKAT_NATS_STREAM_MAX_MSGS",
	"nats.stream_replicas":          "MEERKAT_NATS_STREAM_REPLICAS",
	"nats.dedup_window_secs":        "MEERKAT_NATS_DEDUP_WINDOW_SECS",
	"nats.reconnect_wait_ms":        "MEERKAT_NATS_RECONNECT_WAIT_MS",
	"nats.connect_timeout_ms":       "MEERKAT_NATS_CONNECT_TIMEOUT_MS",
}

// tomlPaths lists the key paths of Config's toml tags, by reflection.
func tomlPaths(t reflect.Type, prefix string) []string {
	var out []string
	for i := range t.NumField() {
		f := t.Field(i)
		p := prefix + f.Tag.Get("toml")
		if f.Type.Kind() == reflect.Struct {
			out = append(out, tomlPaths(f.Type, p+".")...)
		} else {
			out = append(out, p)
		}
	}
	return out
}

func TestKeysTable(t *testing.T) {
	ks := Keys()
	var paths []string
	envs := map[string]bool{}
	for _, k := range ks {
		paths = append(paths, k.Path)
		if envs[k.Env] {
			t.Errorf("duplicate env %s", k.Env)
		}
		envs[k.Env] = true
		if want := wantEnv[k.Path]; k.Env != want {
			t.Errorf("%s: env %q, want %q", k.Path, k.Env, want)
		}
		if k.Doc == "" || strings.ContainsAny(k.Doc, "|\n") {
			t.Errorf("%s: doc %q must be one non-empty line without '|'", k.Path, k.Doc)
		}
		// The documented default is what Default() holds.
		c, err := Parse([]byte(k.Path + " = " + k.Default))
		requireNoError(t, err)
		if !c.Equal(Default()) {
			t.Errorf("%s: Default %s does not match Default()", k.Path, k.Default)
		}
	}
	if want := tomlPaths(reflect.TypeFor[Config](), ""); !reflect.DeepEqual(paths, want) {
		t.Errorf("Keys paths = %q, want every Config field in order: %q", paths, want)
	}
	if len(wantEnv) != len(ks) {
		t.Errorf("wantEnv has %d keys, Keys %d", len(wantEnv), len(ks))
	}
	ks[0].Env = "CHANGED"
	if Keys()[0].Env == "CHANGED" {
		t.Error("Keys returns shared state")
	}
}

// testValue is a valid, non-default text value for the key.
func testValue(k Key) string {
	if k.Path == "nats.servers" {
		return "nats://a.example:4222, tls://[2001:db8::1]:4443,b.example:4222"
	}
	if strings.HasPrefix(k.Default, `"`) {
		switch k.Path {
		case "nats.creds_file":
			return "nats/user.creds"
		case "nats.nkey_seed_file":
			return "/etc/meerkat/user.nk"
		case "nats.user":
			return "meerkat"
		case "nats.password":
			return "s3cret, with \"quotes\""
		case "nats.tls_ca", "nats.tls_cert", "nats.tls_key":
			return "/etc/meerkat/tls.pem"
		case "nats.subject_prefix":
			return "acme.meerkat-2"
		case "nats.stream":
			return "MEERKAT_ACME"
		case "name":
			return "n0de"
		case "comms.listen_tcp":
			return "127.0.0.1:4242"
		case "comms.advertise_tcp":
			return "node.example:4242"
		case "comms.tcp_plaintext":
			return "refuse"
		case "outbox.backoff":
			return "1s,1m"
		case "metrics.listen":
			return "127.0.0.1:9464"
		case "log.level":
			return "debug"
		case "log.format":
			return "json"
		}
		return "/run/x-{name}.sock"
	}
	switch k.Default {
	case "true":
		return "false"
	case "false":
		return "true"
	}
	switch k.Path {
	case "audit.max_bytes":
		return "70000"
	case "nats.stream_max_bytes", "nats.stream_max_msgs":
		return "-1"
	case "nats.stream_replicas":
		return "3"
	}
	return "7"
}

func TestApplyEnvEachKey(t *testing.T) {
	for _, k := range Keys() {
		t.Run(k.Env, func(t *testing.T) {
			v := testValue(k)
			env := map[string]string{k.Env: v}
			var asked []string
			c := Default()
			err := c.ApplyEnv(func(name string) (string, bool) {
				asked = append(asked, name)
				s, ok := env[name]
				return s, ok
			})
			requireNoError(t, err)
			// The same value written in the file must give the same Config:
			// the variable lands in the field the TOML key names.
			tomlValue := v
			if strings.HasPrefix(k.Default, `"`) {
				tomlValue = quoteTOML(v)
			}
			if strings.HasPrefix(k.Default, "[") {
				l, err := ParseList(v)
				requireNoError(t, err)
				tomlValue = formatList(l)
			}
			want, err := Parse([]byte(k.Path + " = " + tomlValue))
			requireNoError(t, err)
			if want.Equal(Default()) {
				t.Fatalf("test value %q is the default", v)
			}
			if !c.Equal(want) {
				t.Errorf("after %s=%s: %+v, want %+v", k.Env, v, c, want)
			}
			if len(asked) != len(Keys()) {
				t.Errorf("looked up %d variables, want %d: %q", len(asked), len(Keys()), asked)
			}
		})
	}
}

func TestApplyEnvBadValue(t *testing.T) {
	for _, k := range Keys() {
		if strings.HasPrefix(k.Default, `"`) || strings.HasPrefix(k.Default, "[") {
			continue // any string or list is accepted here; Validate judges it (list syntax: TestApplyEnvList)
		}
		for _, bad := range []string{"", "abc", "1.5", "30s", " 30", "0x10", "99999999999999999999"} {
			t.Run(k.Env+"="+bad, func(t *testing.T) {
				c := Default()
				err := c.ApplyEnv(func(name string) (string, bool) {
					if name == k.Env {
						return bad, true
					}
					return "", false
				})
				if err == nil {
					t.Fatal("ApplyEnv accepted a bad integer")
				}
				if !strings.Contains(err.Error(), k.Env) || !strings.Contains(err.Error(), k.Path) {
					t.Errorf("error %q does not name %s and %s", err, k.Env, k.Path)
				}
				var ce *Error
				if !errors.As(err, &ce) || ce.Source != k.Env || ce.Key != k.Path {
					t.Errorf("error %#v, want *Error{Source: %s, Key: %s}", ce, k.Env, k.Path)
				}
				if !c.Equal(Default()) {
					t.Errorf("config changed on error: %+v", c)
				}
			})
		}
	}
}

func TestApplyEnvSeveralBad(t *testing.T) {
	env := map[string]string{
		"MEERKAT_COMMS_ACK_TIMEOUT":       "soon",
		"MEERKAT_COMMS_INBOX_MAX":         "lots",
		"MEERKAT_COMMS_LISTEN_TCP":        "127.0.0.1:9",
		"MEERKAT_COMMS_ACK_TIMEOUT_SECS":  "1", // not a variable: ignored
		"MEERKAT_COMMS_MAX_MESSAGE_BYTES": "512",
	}
	c := Default()
	err := c.ApplyEnv(func(name string) (string, bool) { s, ok := env[name]; return s, ok })
	if got, want := errorKeys(err), []string{"comms.ack_timeout_secs", "comms.inbox_max"}; !reflect.DeepEqual(got, want) {
		t.Errorf("error keys = %q, want %q (err: %v)", got, want, err)
	}
	if !c.Equal(Default()) {
		t.Errorf("config changed on error: %+v", c)
	}
	delete(env, "MEERKAT_COMMS_ACK_TIMEOUT")
	delete(env, "MEERKAT_COMMS_INBOX_MAX")
	requireNoError(t, c.ApplyEnv(func(name string) (string, bool) { s, ok := env[name]; return s, ok }))
	if c.Comms.AckTimeoutSecs != DefaultAckTimeoutSecs || c.Comms.ListenTCP != "127.0.0.1:9" || c.Comms.MaxMessageBytes != 512 {
		t.Errorf("after env: %+v", c)
	}
}

func TestApplyEnvNil(t *testing.T) {
	c := fullConfig
	requireNoError(t, c.ApplyEnv(nil))
	if !c.Equal(fullConfig) {
		t.Errorf("nil lookup changed the config: %+v", c)
	}
}

// TestPrecedence: defaults < file < environment (flags are cmd's, via Set).
func TestPrecedence(t *testing.T) {
	c, err := Parse([]byte("name = \"filenode\"\n[comms]\nack_timeout_secs = 5\nlisten_tcp = \"127.0.0.1:4200\"\ninbox_max = 9\n"))
	requireNoError(t, err)
	env := map[string]string{
		"MEERKAT_COMMS_ACK_TIMEOUT":       "7",  // env beats file
		"MEERKAT_COMMS_LISTEN_TCP":        "",   // set to empty: turns the file's listener off
		"MEERKAT_COMMS_IDLE_TIMEOUT_SECS": "90", // env beats default
	}
	requireNoError(t, c.ApplyEnv(func(name string) (string, bool) { s, ok := env[name]; return s, ok }))
	requireNoError(t, c.Set("comms.inbox_max", "11")) // a flag beats everything
	want := Default()
	want.Name = "filenode"          // file beats default
	want.Comms.AckTimeoutSecs = 7   // env beats file
	want.Comms.ListenTCP = ""       // env "" beats file
	want.Comms.IdleTimeoutSecs = 90 // env beats default
	want.Comms.InboxMax = 11        // flag beats file
	if !c.Equal(want) {
		t.Errorf("got %+v, want %+v", c, want)
	}
}

func TestSet(t *testing.T) {
	c := Default()
	requireNoError(t, c.Set("comms.listen_uds", "off"))
	requireNoError(t, c.Set("name", "x"))
	requireNoError(t, c.Set("comms.max_connections", "3"))
	want := Default()
	want.Comms.ListenUDS, want.Name, want.Comms.MaxConnections = "off", "x", 3
	if !c.Equal(want) {
		t.Errorf("got %+v, want %+v", c, want)
	}
	if err := c.Set("comms.max_conections", "3"); !errors.Is(err, ErrUnknownKey) || !strings.Contains(err.Error(), `"comms.max_connections"`) {
		t.Errorf("Set(typo) err = %v, want ErrUnknownKey with a suggestion", err)
	}
	if err := c.Set("comms.max_connections", "many"); err == nil || !strings.Contains(err.Error(), "comms.max_connections") {
		t.Errorf("Set(bad int) err = %v", err)
	}
	if !c.Equal(want) {
		t.Errorf("failed Set changed the config: %+v", c)
	}
}
