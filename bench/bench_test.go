package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/meerkatd/meerkatd/internal/testutil"
)

// meerkatdExe is the meerkatd the tests run.
func meerkatdExe(t *testing.T) string { return testutil.Meerkatd(t) }

// TestBenchQuick runs the suite as `meerkatd bench --quick --json` does,
// so that it cannot rot: every scenario must print one line of the
// documented shape with sane values. It asserts no performance target (a
// quick run's figures mean nothing, the more so under -race), only that
// the checks were computed.
func TestBenchQuick(t *testing.T) {
	exe := meerkatdExe(t) // before TMPDIR changes: the binary is not the run's
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	tmp := t.TempDir()
	t.Setenv("TMPDIR", tmp)
	var stdout, stderr bytes.Buffer
	if err := Run(ctx, Options{Exe: exe, Quick: true, JSON: true}, &stdout, &stderr); err != nil {
		t.Fatalf("bench --quick --json: %v\nstderr:\n%s", err, stderr.String())
	}
	// Its own field names, so that a renamed key fails.
	type metric struct {
		Median *float64  `json:"median"`
		Min    *float64  `json:"min"`
		Max    *float64  `json:"max"`
		Values []float64 `json:"values"`
	}
	type check struct {
		Target string   `json:"target"`
		Value  *float64 `json:"value"`
		Limit  *float64 `json:"limit"`
		Pass   *bool    `json:"pass"`
		Bound  float64  `json:"bound"`
		Basis  string   `json:"bound_basis"`
		Hard   bool     `json:"bound_hard"`
	}
	type line struct {
		Impl      string            `json:"impl"`
		Scenario  string            `json:"scenario"`
		Transport string            `json:"transport"`
		Inbox     string            `json:"inbox"`
		Reps      int               `json:"reps"`
		Metrics   map[string]metric `json:"metrics"`
		Checks    []check           `json:"checks"`
	}
	want := map[string][]string{ // scenario → metrics
		"anchor_sign":               {"us"},
		"anchor_batch_sign":         {"us"},
		"anchor_verify":             {"us"},
		"anchor_exchange":           {"us", "wall_us"},
		"anchor_batch_verify":       {"us"},
		"anchor_pingpong":           {"p50_us"},
		"anchor_raw_sequential":     {"p50_us", "p99_us"},
		"anchor_raw_pipelined":      {"exchanges_per_s", "cpu_us_per_exchange"},
		"anchor_raw_batched":        {"exchanges_per_s", "cpu_us_per_exchange"},
		"anchor_raw_closed_loop_16": {"exchanges_per_s", "cpu_us_per_exchange"},
		"sequential":                {"p50_us", "p99_us", "vs_raw"},
		"pipelined":                 {"exchanges_per_s", "cpu_us_per_exchange", "vs_raw", "cpu_vs_raw", "vs_raw_batched", "cpu_vs_raw_batched"},
		"closed_loop_16":            {"exchanges_per_s", "cpu_us_per_exchange", "vs_raw", "cpu_vs_raw"},
		"conn_per_msg":              {"p50_us"},
		"flood_bad_signature":       {"exchanges_per_s", "ratio", "refused_per_s"},
		"flood_untrusted":           {"exchanges_per_s", "ratio", "refused_per_s"},
		"durable":                   {"exchanges_per_s", "ratio"},
		"space_broadcast":           {"envelopes_per_s", "copies_per_s", "cpu_us_per_copy", "ratio", "cpu_ratio", "copies_received"},
		"idle_rss":                  {"rss_mb"},
		"idle_rss_1000":             {"rss_mb"},
		"startup":                   {"ms"},
	}
	wantChecks := map[string]int{"sequential": 2, "pipelined": 3, "closed_loop_16": 1, "conn_per_msg": 1,
		"flood_bad_signature": 2, "flood_untrusted": 2, "durable": 1, "space_broadcast": 1, "idle_rss": 1, "idle_rss_1000": 1, "startup": 1}
	// The checks that carry the best this machine allows, worked out
	// from the run's own figures.
	wantBound := map[string][]string{
		"pipelined":      {"exchanges/s >= 2.0 x crypto ceiling (cores / exchange)"},
		"closed_loop_16": {"exchanges/s >= 1.6 x crypto ceiling (cores / exchange)"},
		"durable":        {"exchanges/s >= 0.75 x pipelined with the memory inbox"},
	}
	seen := map[string]bool{}
	for _, text := range strings.Split(strings.TrimSpace(stdout.String()), "\n") {
		var l line
		dec := json.NewDecoder(strings.NewReader(text))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&l); err != nil {
			t.Fatalf("line is not the bench JSON: %v\n%s", err, text)
		}
		metrics, ok := want[l.Scenario]
		if !ok || l.Impl != "meerkatd" || l.Reps != 1 || seen[l.Scenario] {
			t.Errorf("unexpected line: %s", text)
			continue
		}
		seen[l.Scenario] = true
		if strings.HasPrefix(l.Scenario, "anchor_") && l.Scenario != "anchor_pingpong" && !strings.HasPrefix(l.Scenario, "anchor_raw_") {
			if l.Transport != "none" || l.Inbox != "none" {
				t.Errorf("anchor line with a transport or inbox: %s", text)
			}
		} else if l.Transport != "uds" {
			t.Errorf("--quick ran over %q, want uds: %s", l.Transport, text)
		}
		if l.Checks == nil {
			t.Errorf("checks is not a list: %s", text)
		}
		if len(l.Checks) != wantChecks[l.Scenario] {
			t.Errorf("%s: %d checks, want %d: %s", l.Scenario, len(l.Checks), wantChecks[l.Scenario], text)
		}
		for _, name := range metrics {
			m, ok := l.Metrics[name]
			if !ok || m.Median == nil || m.Min == nil || m.Max == nil || len(m.Values) != 1 {
				t.Errorf("%s: metric %s missing or incomplete: %s", l.Scenario, name, text)
				continue
			}
			v := *m.Median
			if math.IsNaN(v) || v <= 0 || *m.Min > v || *m.Max < v || m.Values[0] != v {
				t.Errorf("%s: metric %s is not sane: %s", l.Scenario, name, text)
			}
		}
		for _, c := range l.Checks {
			if c.Target == "" || c.Value == nil || c.Limit == nil || c.Pass == nil || math.IsNaN(*c.Value) || *c.Value <= 0 {
				t.Errorf("%s: check not computed: %s", l.Scenario, text)
			}
			if (c.Bound != 0) != (c.Basis != "") || c.Bound < 0 {
				t.Errorf("%s: a bound without its basis, or the reverse: %s", l.Scenario, text)
			}
			if slices.Contains(wantBound[l.Scenario], c.Target) && c.Bound == 0 {
				t.Errorf("%s: %q has no bound: %s", l.Scenario, c.Target, text)
			}
		}
		if l.Scenario == "space_broadcast" {
			// Every copy reached its receiver, and the figures agree:
			// two receivers, so twice as many copies as envelopes.
			for _, c := range l.Checks {
				if !*c.Pass || *c.Value != 1 {
					t.Errorf("space_broadcast: a copy was not received: %s", text)
				}
			}
			env, copies := l.Metrics["envelopes_per_s"].Median, l.Metrics["copies_per_s"].Median
			if env != nil && copies != nil && math.Abs(*copies-2**env) > 0.01*(*copies) {
				t.Errorf("space_broadcast: copies_per_s is not 2 x envelopes_per_s: %s", text)
			}
		}
		if strings.HasPrefix(l.Scenario, "flood_") {
			// The node told us how it refused them: it must have.
			for _, c := range l.Checks {
				if strings.Contains(c.Target, "refused as") && !*c.Pass {
					t.Errorf("%s: flood envelopes not refused for their reason: %s", l.Scenario, text)
				}
			}
		}
	}
	for sc := range want {
		if !seen[sc] {
			t.Errorf("no %s line in:\n%s", sc, stdout.String())
		}
	}
	// Nothing left behind: the bench's temporary root is gone.
	if left, _ := os.ReadDir(tmp); len(left) > 0 {
		t.Errorf("bench left %v behind in TMPDIR", left)
	}
}

func TestParseOnly(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want []string // groups that run; nil: all
		err  bool
	}{
		{in: "", want: nil},
		{in: "sequential", want: []string{"sequential"}},
		{in: "sequential, conn_per_msg", want: []string{"sequential", "conn_per_msg"}},
		{in: "flood", want: []string{"flood", "pipelined"}},
		{in: "durable,resources", want: []string{"durable", "pipelined", "resources"}},
		{in: "space", want: []string{"space", "pipelined"}},
		{in: "conn_per_msg", want: []string{"conn_per_msg", "sequential"}},
		{in: "pipelined,bogus", err: true},
		{in: ",", err: true},
		{in: "Sequential", err: true},
	} {
		only, err := parseOnly(tc.in)
		if tc.err {
			if err == nil {
				t.Errorf("parseOnly(%q) = %v, want an error", tc.in, only)
			}
			continue
		}
		if err != nil {
			t.Errorf("parseOnly(%q): %v", tc.in, err)
			continue
		}
		o := settings{only: only}
		for _, g := range groups {
			if got, want := o.want(g), tc.want == nil || slices.Contains(tc.want, g); got != want {
				t.Errorf("parseOnly(%q): group %s runs = %v, want %v", tc.in, g, got, want)
			}
		}
	}
}

// Options checked before anything runs: a --nats-url with credentials
// (which nats.servers does not take) is refused without repeating them,
// and a --nats that is not a program is named.
func TestSettingsChecks(t *testing.T) {
	dir := t.TempDir()
	notExe := filepath.Join(dir, "natsbench")
	if err := os.WriteFile(notExe, []byte("#!/bin/sh\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		o    Options
		want string
		not  string
	}{
		{"credentials in --nats-url", Options{NATSURL: "nats://u:hunter2@127.0.0.1:4222", Transport: "nats"}, "credentials do not belong in the URL", "hunter2"},
		{"token in --nats-url", Options{NATSURL: "nats://s3cr3t@127.0.0.1:4222", Transport: "nats"}, "credentials do not belong in the URL", "s3cr3t"},
		{"--nats-url with a path", Options{NATSURL: "nats://127.0.0.1:4222/x", Transport: "nats"}, "no path", ""},
		{"--nats missing", Options{NATS: filepath.Join(dir, "nope")}, "no such program", ""},
		{"--nats not in PATH", Options{NATS: "no-such-natsbench-here"}, "no such program", ""},
		{"--nats a directory", Options{NATS: dir}, "cannot be run", ""},
		{"--nats not executable", Options{NATS: notExe}, "cannot be run", ""},
	} {
		tc.o.Exe = "meerkatd"
		_, err := tc.o.settings()
		if err == nil || !errors.Is(err, ErrUsage) || !strings.Contains(err.Error(), tc.want) || tc.not != "" && strings.Contains(err.Error(), tc.not) {
			t.Errorf("%s: %v, want a usage error saying %q", tc.name, err, tc.want)
		}
	}
	for _, nats := range []string{"/bin/sh", "sh"} { // a path, or a name in PATH
		ok := Options{Exe: "meerkatd", NATSURL: "nats://127.0.0.1:4222", Transport: "nats", NATS: nats}
		if _, err := ok.settings(); err != nil {
			t.Errorf("good options (--nats %s): %v", nats, err)
		}
	}
}

// TestBenchQuickTLS runs the TLS scenarios as `meerkatd bench --quick
// --transport tcp,tls --only sequential,pipelined --json` does: over tls
// they report their ratio to plaintext TCP, and their checks are
// computed. It asserts no performance target.
func TestBenchQuickTLS(t *testing.T) {
	exe := meerkatdExe(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	t.Setenv("TMPDIR", t.TempDir())
	var stdout, stderr bytes.Buffer
	o := Options{Exe: exe, Quick: true, JSON: true, Transport: "tcp,tls", Only: "sequential,pipelined"}
	if err := Run(ctx, o, &stdout, &stderr); err != nil {
		t.Fatalf("bench: %v\nstderr:\n%s", err, stderr.String())
	}
	var tls []Line
	for _, text := range strings.Split(strings.TrimSpace(stdout.String()), "\n") {
		var l Line
		if err := json.Unmarshal([]byte(text), &l); err != nil {
			t.Fatalf("%v: %s", err, text)
		}
		if l.Transport == "tls" {
			tls = append(tls, l)
		}
	}
	wantCheck := map[string]string{"sequential": "p50 <= 1.15 x plaintext TCP p50", "pipelined": "exchanges/s >= 0.90 x plaintext TCP"}
	if len(tls) != len(wantCheck) {
		t.Fatalf("%d tls lines, want %d:\n%s", len(tls), len(wantCheck), stdout.String())
	}
	for _, l := range tls {
		m, ok := l.Metrics["vs_tcp"]
		if !ok || m.Median <= 0 || math.IsNaN(m.Median) {
			t.Errorf("%s/tls: no vs_tcp figure: %+v", l.Scenario, l.Metrics)
		}
		if len(l.Checks) != 1 || l.Checks[0].Target != wantCheck[l.Scenario] || l.Checks[0].Value != m.Median {
			t.Errorf("%s/tls: checks %+v, want one %q on vs_tcp", l.Scenario, l.Checks, wantCheck[l.Scenario])
		}
	}
}

func TestParseTransports(t *testing.T) {
	for _, tc := range []struct {
		in       string
		withNATS bool   // --nats-url given
		want     string // comma-joined; "" for an error
	}{
		{"all", false, "uds,tcp,tls"},
		{"all", true, "uds,tcp,tls,nats,nats-unsealed"},
		{"both", false, "uds,tcp"},
		{"both", true, "uds,tcp"},
		{"uds", false, "uds"},
		{"tls", false, "tls"},
		{"tls,tcp", false, "tcp,tls"}, // TLS runs after the TCP it is compared with
		{"tcp, uds ,tcp", false, "uds,tcp"},
		{"nats-unsealed,nats,tcp", true, "tcp,nats,nats-unsealed"},
		{"nats", true, "nats"},
		{"nats", false, ""}, // no server to go through
		{"tcp,nats-unsealed", false, ""},
		{"", false, ""},
		{"udp", false, ""},
		{"tcp,", false, ""},
		{"TLS", false, ""},
		{"NATS", true, ""},
	} {
		got, err := parseTransports(tc.in, tc.withNATS)
		if tc.want == "" {
			if err == nil {
				t.Errorf("parseTransports(%q, %v) = %v, want an error", tc.in, tc.withNATS, got)
			}
			continue
		}
		if err != nil || strings.Join(got, ",") != tc.want {
			t.Errorf("parseTransports(%q, %v) = %v, %v; want %s", tc.in, tc.withNATS, got, err, tc.want)
		}
	}
}

// --gate with nothing to gate (TLS alone compares with plaintext TCP,
// which did not run) fails rather than passing vacuously.
func TestGateWithoutChecks(t *testing.T) {
	exe := meerkatdExe(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	t.Setenv("TMPDIR", t.TempDir())
	var stdout, stderr bytes.Buffer
	o := Options{Exe: exe, Quick: true, Gate: true, Transport: "tls", Only: "sequential"}
	err := Run(ctx, o, &stdout, &stderr)
	if err == nil || !strings.Contains(err.Error(), "no check was computed") {
		t.Fatalf("--gate with no checks: %v\nstdout:\n%s", err, stdout.String())
	}
	if !strings.Contains(stdout.String(), "note: ") {
		t.Errorf("the table does not say why:\n%s", stdout.String())
	}
}

// An echo server that cannot start says why (its stderr), not only that
// it did not: here a Unix socket path too long to bind.
func TestEchoFailureSaysWhy(t *testing.T) {
	exe := meerkatdExe(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	long := filepath.Join(t.TempDir(), strings.Repeat("x", 110))
	if err := os.Mkdir(long, 0o700); err != nil {
		t.Fatal(err)
	}
	t.Setenv("TMPDIR", long)
	var stdout, stderr bytes.Buffer
	err := Run(ctx, Options{Exe: exe, Quick: true, Only: "sequential"}, &stdout, &stderr)
	if err == nil || !strings.Contains(err.Error(), "echo server did not start") || !strings.Contains(err.Error(), "listen unix") {
		t.Fatalf("bench with a socket path too long: %v", err)
	}
}
