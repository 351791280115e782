package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"math"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/meerkatd/meerkatd/internal/testutil"
)

// TestMain lets the test binary be its own responder, as the natsbench
// binary is: run re-executes os.Executable().
func TestMain(m *testing.M) {
	if len(os.Args) > 1 && os.Args[1] == responderArg {
		os.Exit(responderMain())
	}
	os.Exit(m.Run())
}

// benchLine is what meerkatd's bench parses from each line.
type benchLine struct {
	Impl      string                `json:"impl"`
	Scenario  string                `json:"scenario"`
	Transport string                `json:"transport"`
	Inbox     *string               `json:"inbox"`
	Reps      int                   `json:"reps"`
	Metrics   map[string]benchValue `json:"metrics"`
	Checks    []json.RawMessage     `json:"checks"`
}

type benchValue struct {
	Median float64   `json:"median"`
	Min    float64   `json:"min"`
	Max    float64   `json:"max"`
	Values []float64 `json:"values"`
}

func TestQuickJSON(t *testing.T) {
	for _, tc := range []struct {
		args []string
		reps int
	}{
		{[]string{"--quick", "--json", "--reps", "2"}, 2},
		{[]string{"--quick", "--json", "--once", "--transport", "tcp"}, 1},
	} {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			out := runOK(t, tc.args...)
			want := map[string][]string{
				"sequential": {"p50_us", "p99_us"},
				"pipelined":  {"exchanges_per_s", "cpu_us_per_exchange"},
			}
			sc := bufio.NewScanner(strings.NewReader(out))
			lines := 0
			for sc.Scan() {
				lines++
				dec := json.NewDecoder(strings.NewReader(sc.Text()))
				dec.DisallowUnknownFields()
				var l benchLine
				if err := dec.Decode(&l); err != nil {
					t.Fatalf("line %q: %v", sc.Text(), err)
				}
				if l.Impl != "nats" || l.Transport != "tcp" || l.Inbox == nil || *l.Inbox != "" || l.Reps != tc.reps {
					t.Errorf("line %q: wrong impl, transport, inbox or reps", sc.Text())
				}
				if l.Checks == nil || len(l.Checks) != 0 {
					t.Errorf("line %q: checks should be []", sc.Text())
				}
				names, ok := want[l.Scenario]
				if !ok {
					t.Errorf("unexpected scenario %q (or printed twice)", l.Scenario)
					continue
				}
				delete(want, l.Scenario)
				if len(l.Metrics) != len(names) {
					t.Errorf("%s: metrics %v, want %v", l.Scenario, l.Metrics, names)
				}
				for _, name := range names {
					checkMetric(t, l.Scenario+" "+name, l.Metrics[name], tc.reps)
				}
				if l.Scenario == "sequential" {
					p50, p99 := l.Metrics["p50_us"].Values, l.Metrics["p99_us"].Values
					for i := range min(len(p50), len(p99)) {
						if p50[i] > p99[i] {
							t.Errorf("rep %d: p50 %v µs > p99 %v µs", i, p50[i], p99[i])
						}
					}
				}
			}
			if lines != 2 || len(want) != 0 {
				t.Errorf("%d lines, scenarios missing: %v\n%s", lines, want, out)
			}
		})
	}
}

// checkMetric checks that m is a plausible summary of reps positive values.
// It asserts nothing about performance.
func checkMetric(t *testing.T, name string, m benchValue, reps int) {
	t.Helper()
	if len(m.Values) != reps {
		t.Errorf("%s: %d values, want %d", name, len(m.Values), reps)
		return
	}
	lo, hi := math.Inf(1), math.Inf(-1)
	for _, v := range m.Values {
		if !(v > 0) || math.IsInf(v, 0) {
			t.Errorf("%s: value %v", name, v)
		}
		lo, hi = min(lo, v), max(hi, v)
	}
	if m.Min != lo || m.Max != hi || m.Median < lo || m.Median > hi {
		t.Errorf("%s: median %v, min %v, max %v of %v", name, m.Median, m.Min, m.Max, m.Values)
	}
}

func TestTable(t *testing.T) {
	out := runOK(t, "--quick", "--reps", "1", "--msgs", "20")
	for _, s := range []string{"nats-server", "p50_us", "p99_us", "exchanges_per_s", "cpu_us_per_exchange"} {
		if !strings.Contains(out, s) {
			t.Errorf("table lacks %q:\n%s", s, out)
		}
	}
}

func TestBadFlags(t *testing.T) {
	for _, args := range [][]string{
		{"--transport", "uds"},
		{"--reps", "0"},
		{"--msgs", "-1"},
		{"--timeout", "0s"},
		{"--nope"},
		{"extra"},
	} {
		err := run(context.Background(), args, io.Discard, io.Discard)
		if err == nil {
			t.Errorf("%q: no error", args)
		}
	}
}

// TestCancel checks that a cancelled run ends promptly, with its responder.
func TestCancel(t *testing.T) {
	testutil.CheckGoroutines(t)
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	start := time.Now()
	err := run(ctx, []string{"--json", "--msgs", "10000000"}, io.Discard, io.Discard)
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("err = %v, want %v", err, context.DeadlineExceeded)
	}
	if d := time.Since(start); d > 15*time.Second {
		t.Errorf("took %v to stop", d)
	}
}

// runOK runs natsbench with args, checks that it succeeds without leaving
// goroutines behind, and returns its stdout.
func runOK(t *testing.T, args ...string) string {
	t.Helper()
	testutil.CheckGoroutines(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var stdout, stderr bytes.Buffer
	if err := run(ctx, args, &stdout, &stderr); err != nil {
		t.Fatalf("natsbench %q: %v\n%s", args, err, stderr.String())
	}
	if stderr.Len() > 0 {
		t.Errorf("stderr: %s", stderr.String())
	}
	return stdout.String()
}
