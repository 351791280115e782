package config

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestUnknownEnv(t *testing.T) {
	for _, tc := range []struct {
		name    string
		environ []string
		want    []string // the messages, in order
	}{
		{"none", []string{"HOME=/h", "PATH=/bin"}, nil},
		{"known keys", []string{"MEERKAT_COMMS_ACK_TIMEOUT=3", "MEERKAT_LOG_LEVEL=debug", "MEERKAT_NAME="}, nil},
		{"caller's own", []string{"MEERKAT_HOME=/x"}, nil},
		{"other prefix", []string{"MEERKATD_CPUPROFILE=/tmp/p", "XMEERKAT_FOO=1", "MEERKAT=1"}, nil},
		{"typo", []string{"MEERKAT_COMMS_ACK_TIMOUT=3"},
			[]string{"config: MEERKAT_COMMS_ACK_TIMOUT: unknown setting; did you mean MEERKAT_COMMS_ACK_TIMEOUT?"}},
		{"lower case", []string{"MEERKAT_log_level=debug"},
			[]string{"config: MEERKAT_log_level: unknown setting; did you mean MEERKAT_LOG_LEVEL?"}},
		{"typo of the caller's own", []string{"MEERKAT_HOM=/x"},
			[]string{"config: MEERKAT_HOM: unknown setting; did you mean MEERKAT_HOME?"}},
		{"table left out", []string{"MEERKAT_INBOX_MAX=5"},
			[]string{"config: MEERKAT_INBOX_MAX: unknown setting; did you mean MEERKAT_COMMS_INBOX_MAX?"}},
		{"word added to the caller's own", []string{"MEERKAT_HOME_DIR=/x"},
			[]string{"config: MEERKAT_HOME_DIR: unknown setting; did you mean MEERKAT_HOME?"}},
		{"word added", []string{"MEERKAT_METRICS_LISTEN_ADDR=:1"},
			[]string{"config: MEERKAT_METRICS_LISTEN_ADDR: unknown setting; did you mean MEERKAT_METRICS_LISTEN?"}},
		{"far from everything", []string{"MEERKAT_BANANA=1"}, []string{"config: MEERKAT_BANANA: unknown setting"}},
		{"name only, sorted, once", []string{"MEERKAT_ZZZ", "MEERKAT_AAA=secret", "MEERKAT_ZZZ=2"},
			[]string{"config: MEERKAT_AAA: unknown setting", "config: MEERKAT_ZZZ: unknown setting"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			errs := UnknownEnv(tc.environ, "MEERKAT_HOME")
			var got []string
			for _, err := range errs {
				if !errors.Is(err, ErrUnknownSetting) {
					t.Errorf("%v does not wrap ErrUnknownSetting", err)
				}
				var ce *Error
				if !errors.As(err, &ce) || !strings.HasPrefix(ce.Source, EnvPrefix) {
					t.Errorf("%v: not an *Error naming the variable", err)
				}
				if strings.Contains(err.Error(), "secret") {
					t.Errorf("%v: shows the value", err)
				}
				got = append(got, err.Error())
			}
			if strings.Join(got, "\n") != strings.Join(tc.want, "\n") {
				t.Errorf("got\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(tc.want, "\n"))
			}
		})
	}
}

func TestSources(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, FileName)
	requireNoError(t, os.WriteFile(path, []byte("name = \"n1\"\n[comms]\nack_timeout_secs = 5\nlisten_tcp = \"127.0.0.1:1\"\n[log]\nformat = \"json\"\n"), 0o600))
	c, src, err := LoadWithSources(path)
	requireNoError(t, err)
	env := map[string]string{"MEERKAT_COMMS_ACK_TIMEOUT": "9", "MEERKAT_LOG_LEVEL": "warn"}
	requireNoError(t, c.ApplyEnvSources(func(k string) (string, bool) { v, ok := env[k]; return v, ok }, src))
	requireNoError(t, c.Set("comms.listen_tcp", "127.0.0.1:2"))
	src["comms.listen_tcp"] = "--listen-tcp"

	want := map[string][2]string{ // key → value, source
		"name":                   {`"n1"`, path},
		"comms.ack_timeout_secs": {"9", "MEERKAT_COMMS_ACK_TIMEOUT"},
		"comms.listen_tcp":       {`"127.0.0.1:2"`, "--listen-tcp"},
		"log.format":             {`"json"`, path},
		"log.level":              {`"warn"`, "MEERKAT_LOG_LEVEL"},
		"comms.listen_uds":       {`""`, SourceDefault},
		"audit.enabled":          {"true", SourceDefault},
		"outbox.max_attempts":    {"50", SourceDefault},
	}
	settings := Settings(&c, src)
	if len(settings) != len(Keys()) {
		t.Fatalf("%d settings, want one per key (%d)", len(settings), len(Keys()))
	}
	for i, s := range settings {
		if s.Key != Keys()[i].Path || s.Env != Keys()[i].Env {
			t.Errorf("setting %d is %s (%s), want %s in file order", i, s.Key, s.Env, Keys()[i].Path)
		}
		if w, ok := want[s.Key]; ok && (s.Value != w[0] || s.Source != w[1]) {
			t.Errorf("%s = %s from %s, want %s from %s", s.Key, s.Value, s.Source, w[0], w[1])
		}
	}

	_, src, err = LoadWithSources(filepath.Join(dir, "missing.toml"))
	requireNoError(t, err)
	if len(src) != 0 || src.Of("name") != SourceDefault {
		t.Errorf("missing file: sources %v", src)
	}
	requireNoError(t, os.WriteFile(path, []byte("nmae = \"x\"\n"), 0o600))
	if _, _, err := LoadWithSources(path); !errors.Is(err, ErrUnknownKey) {
		t.Errorf("unknown key: %v", err)
	}
}

// Each problem Validate finds names where its bad value came from, by
// the sources: the file, the variable or the flag; a default names none.
func TestValidateSources(t *testing.T) {
	c := Default()
	c.Comms.AckTimeoutSecs = 0
	c.Log.Level = "loud"
	c.Store.Mode = "disk"
	src := Sources{
		"comms.ack_timeout_secs": "MEERKAT_COMMS_ACK_TIMEOUT",
		"log.level":              "--log-level",
		"name":                   "/h/meerkat.toml",
	}
	err := c.ValidateSources(src)
	var got []string
	for _, e := range err.(interface{ Unwrap() []error }).Unwrap() {
		var ce *Error
		if !errors.As(e, &ce) {
			t.Fatalf("%v: not an *Error", e)
		}
		got = append(got, ce.Source+" | "+ce.Key)
	}
	want := []string{
		"MEERKAT_COMMS_ACK_TIMEOUT | comms.ack_timeout_secs",
		" | store.mode",
		"--log-level | log.level",
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("got\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	if msg := err.Error(); !strings.Contains(msg, "config: MEERKAT_COMMS_ACK_TIMEOUT: comms.ack_timeout_secs: must be between 1 and 604800, got 0") {
		t.Fatalf("message %q", msg)
	}
	if err := Default().ValidateSources(src); err != nil {
		t.Fatalf("defaults: %v", err)
	}
	// Errors other than a key's, and those that name a source, stay.
	other := errors.New("other")
	named := &Error{Source: "X", Key: "name", Err: other}
	if got := src.Attribute(errors.Join(other, named)).Error(); got != "other\nconfig: X: name: other" {
		t.Fatalf("Attribute: %q", got)
	}
	if src.Attribute(nil) != nil {
		t.Fatal("Attribute(nil) is not nil")
	}
}
