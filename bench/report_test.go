package bench

import (
	"context"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// figures are one repetition's figures of a report for the checks, per
// transport the same. The defaults (gateFigures) put every ratio of a
// check well inside its target; a test changes the figure it is about.
type figures struct {
	exchUS                  float64 // anchor_exchange; with 2 cores, ceiling = 2e6 / exchUS
	rawSeqP50, rawPipeRate  float64 // anchor_raw_sequential p50, anchor_raw_pipelined exchanges/s
	rawSeqP99               float64 // anchor_raw_sequential p99; 0: not recorded
	seqP50, seqP99          float64
	pipeRate, pipeCPU       float64
	loopRate                float64
	rawLoopCPU              float64 // anchor_raw_closed_loop_16 CPU per exchange; 0: not measured
	connP50                 float64
	floodRatio              float64 // of both floods
	durableRatio            float64 // durable's ratio to pipelined (memory)
	idleRSS, busyRSS, start float64
	natsP50, natsRate       float64 // the NATS bench over TCP
	signUS, verifyUS        float64 // anchor_sign, anchor_verify
	batchSignUS             float64 // anchor_batch_sign, per signature
	batchUS                 float64 // anchor_batch_verify, per signature
	durableCPU              float64 // durable's CPU µs per exchange
}

// gateFigures passes every check: ceiling 10,000 exchanges/s.
func gateFigures() figures {
	return figures{exchUS: 200, rawSeqP50: 100, rawPipeRate: 6000,
		seqP50: 100, seqP99: 150, pipeRate: 30000, pipeCPU: 50, loopRate: 20000, connP50: 150,
		floodRatio: 0.9, durableRatio: 0.9, idleRSS: 15, busyRSS: 50, start: 20,
		natsP50: 1000, natsRate: 10000,
		signUS: 20, batchSignUS: 15, verifyUS: 40, batchUS: 20, durableCPU: 60}
}

// add records f as one more repetition, over every transport of trs.
func (f figures) add(r *results, trs []string) {
	const mem = "memory"
	r.add(implMeerkatd, scAnchorExch, transportNone, inboxNone, mUS, f.exchUS)
	r.add(implMeerkatd, scAnchorSign, transportNone, inboxNone, mUS, f.signUS)
	r.add(implMeerkatd, scAnchorBatchSign, transportNone, inboxNone, mUS, f.batchSignUS)
	r.add(implMeerkatd, scAnchorVerify, transportNone, inboxNone, mUS, f.verifyUS)
	r.add(implMeerkatd, scAnchorBatch, transportNone, inboxNone, mUS, f.batchUS)
	for _, tr := range trs {
		r.add(implMeerkatd, scAnchorRawSeq, tr, inboxNone, mP50, f.rawSeqP50)
		if f.rawSeqP99 > 0 {
			r.add(implMeerkatd, scAnchorRawSeq, tr, inboxNone, mP99, f.rawSeqP99)
		}
		r.add(implMeerkatd, scAnchorRawPipe, tr, inboxNone, mRate, f.rawPipeRate)
		r.add(implMeerkatd, scSequential, tr, mem, mP50, f.seqP50)
		r.add(implMeerkatd, scSequential, tr, mem, mP99, f.seqP99)
		r.add(implMeerkatd, scPipelined, tr, mem, mRate, f.pipeRate)
		r.add(implMeerkatd, scPipelined, tr, mem, mCPU, f.pipeCPU)
		r.add(implMeerkatd, scClosedLoop, tr, mem, mRate, f.loopRate)
		if f.rawLoopCPU > 0 {
			r.add(implMeerkatd, scAnchorRawLoop, tr, inboxNone, mCPU, f.rawLoopCPU)
		}
		r.add(implMeerkatd, scConnPerMsg, tr, mem, mP50, f.connP50)
		for _, sc := range []string{scFloodBadSig, scFloodUntrust} {
			r.add(implMeerkatd, sc, tr, mem, mRatio, f.floodRatio)
			r.add(implMeerkatd, sc, tr, mem, mRefusedOK, 1)
			r.add(implMeerkatd, sc, tr, mem, mWrong, 0)
		}
		r.add(implMeerkatd, scDurable, tr, "sqlite", mRatio, f.durableRatio)
		r.add(implMeerkatd, scDurable, tr, "sqlite", mCPU, f.durableCPU)
		r.add(implMeerkatd, scIdleRSS, tr, "sqlite", mRSS, f.idleRSS)
		r.add(implMeerkatd, scIdleRSS1000, tr, "sqlite", mRSS, f.busyRSS)
		r.add(implMeerkatd, scStartup, tr, "sqlite", mMS, f.start)
	}
	r.add(implNATS, scSequential, "tcp", "", mP50, f.natsP50)
	r.add(implNATS, scPipelined, "tcp", "", mRate, f.natsRate)
}

// checked computes the checks of the repetitions reps over uds and tcp,
// with the NATS bench, on 2 cores.
func checked(reps ...figures) *results {
	trs := []string{"uds", "tcp"}
	r := newResults()
	r.reps, r.cores = len(reps), 2
	for _, f := range reps {
		f.add(r, trs)
	}
	o := settings{transports: trs, nats: "bin/natsbench", idleConns: 1000}
	r.computeChecks(o)
	return r
}

// check returns the check of scenario over tr whose target is target.
func (r *results) check(t *testing.T, scenario, tr, target string) Check {
	t.Helper()
	s := r.find(implMeerkatd, scenario, tr)
	if s == nil {
		t.Fatalf("no %s/%s series", scenario, tr)
	}
	for _, c := range s.checks {
		if c.Target == target {
			return c
		}
	}
	t.Fatalf("%s/%s: no check %q; checks: %+v; notes: %q", scenario, tr, target, s.checks, r.notes)
	return Check{}
}

// The gates of the plaintext transports and of NATS, each 1% inside its
// limit (a pass) and 1% beyond it (a fail), over both transports (NATS:
// TCP only). TestChecksAtTheLimitExactly has the limits themselves.
func TestChecksAroundTheirLimits(t *testing.T) {
	type gate struct {
		scenario, target string
		limit            float64
		atMost           bool // the ratio must be <= limit; else >=
		set              func(f *figures, ratio float64)
		trs              []string
	}
	both := []string{"uds", "tcp"}
	gates := []gate{
		{scSequential, "p50 <= 1.10 x raw sequential p50 (anchor_raw_sequential)", 1.10, true,
			func(f *figures, v float64) { f.seqP50, f.seqP99 = v*f.rawSeqP50, v*f.rawSeqP50 }, both},
		{scSequential, "p99 <= 2 x p50", 2, true,
			func(f *figures, v float64) { f.seqP99 = v * f.seqP50 }, both},
		{scPipelined, "exchanges/s >= 0.95 x raw pipelined (anchor_raw_pipelined)", 0.95, false,
			func(f *figures, v float64) { f.pipeRate = v * f.rawPipeRate }, both},
		{scPipelined, "exchanges/s >= 2.0 x crypto ceiling (cores / exchange)", 2.0, false,
			func(f *figures, v float64) { f.pipeRate, f.rawPipeRate = v*10000, v*10000 }, both},
		{scPipelined, "CPU per delivered message (both processes) <= 0.50 x exchange", 0.50, true,
			func(f *figures, v float64) { f.pipeCPU = v * f.exchUS }, both},
		{scClosedLoop, "exchanges/s >= 1.6 x crypto ceiling (cores / exchange)", 1.6, false,
			func(f *figures, v float64) { f.loopRate = v * 10000 }, both},
		{scDurable, "exchanges/s >= 0.75 x pipelined with the memory inbox", 0.75, false,
			func(f *figures, v float64) { f.durableRatio = v }, both},
		{scConnPerMsg, "p50 <= 2 x sequential p50", 2, true,
			func(f *figures, v float64) { f.connP50 = v * f.seqP50 }, both},
		{scSequential, "p50 <= 0.50 x NATS p50", 0.50, true,
			func(f *figures, v float64) { f.natsP50 = f.seqP50 / v }, []string{"tcp"}},
		{scPipelined, "exchanges/s >= 1.5 x NATS", 1.5, false,
			func(f *figures, v float64) { f.natsRate = f.pipeRate / v }, []string{"tcp"}},
	}
	for _, g := range gates {
		inside, beyond := 0.99, 1.01
		if !g.atMost {
			inside, beyond = beyond, inside
		}
		for _, tc := range []struct {
			name   string
			factor float64
			pass   bool
		}{{"inside", inside, true}, {"beyond", beyond, false}} {
			t.Run(fmt.Sprintf("%s/%s/%s", g.scenario, g.target, tc.name), func(t *testing.T) {
				f := gateFigures()
				ratio := g.limit * tc.factor
				g.set(&f, ratio)
				r := checked(f, f, f)
				for _, tr := range g.trs {
					c := r.check(t, g.scenario, tr, g.target)
					if c.Limit != g.limit {
						t.Errorf("%s: limit %v, want %v", tr, c.Limit, g.limit)
					}
					if diff := c.Value - ratio; diff > 1e-9 || diff < -1e-9 {
						t.Errorf("%s: value %v, want %v", tr, c.Value, ratio)
					}
					if c.Pass != tc.pass {
						t.Errorf("%s: ratio %v against limit %v: pass = %v, want %v", tr, c.Value, g.limit, c.Pass, tc.pass)
					}
				}
			})
		}
	}
}

// TestChecksAtTheLimitExactly: figures whose ratio is exactly the limit
// pass (the limits are inclusive). Each ratio is of two integers, so that
// the division, correctly rounded, gives the limit's own float64.
func TestChecksAtTheLimitExactly(t *testing.T) {
	for _, tc := range []struct {
		scenario, tr, target string
		limit                float64
		set                  func(f *figures)
	}{
		{scSequential, "uds", "p50 <= 1.10 x raw sequential p50 (anchor_raw_sequential)", 1.10,
			func(f *figures) { f.rawSeqP50, f.seqP50, f.seqP99 = 100, 110, 110 }},
		{scSequential, "uds", "p99 <= 2 x p50", 2,
			func(f *figures) { f.seqP50, f.seqP99 = 100, 200 }},
		{scPipelined, "uds", "exchanges/s >= 0.95 x raw pipelined (anchor_raw_pipelined)", 0.95,
			func(f *figures) { f.rawPipeRate, f.pipeRate = 20000, 19000 }},
		{scPipelined, "uds", "exchanges/s >= 2.0 x crypto ceiling (cores / exchange)", 2.0,
			func(f *figures) { f.exchUS, f.pipeRate = 200, 20000 }},
		{scPipelined, "uds", "CPU per delivered message (both processes) <= 0.50 x exchange", 0.50,
			func(f *figures) { f.exchUS, f.pipeCPU = 200, 100 }},
		{scClosedLoop, "uds", "exchanges/s >= 1.6 x crypto ceiling (cores / exchange)", 1.6,
			func(f *figures) { f.exchUS, f.loopRate = 200, 16000 }},
		{scDurable, "uds", "exchanges/s >= 0.75 x pipelined with the memory inbox", 0.75,
			func(f *figures) { f.durableRatio = 0.75 }},
		{scConnPerMsg, "uds", "p50 <= 2 x sequential p50", 2,
			func(f *figures) { f.seqP50, f.seqP99, f.connP50 = 100, 100, 200 }},
		{scSequential, "tcp", "p50 <= 0.50 x NATS p50", 0.50,
			func(f *figures) { f.seqP50, f.seqP99, f.natsP50 = 100, 100, 200 }},
		{scPipelined, "tcp", "exchanges/s >= 1.5 x NATS", 1.5,
			func(f *figures) { f.pipeRate, f.natsRate = 15000, 10000 }},
	} {
		f := gateFigures()
		tc.set(&f)
		c := checked(f).check(t, tc.scenario, tc.tr, tc.target)
		if c.Value != tc.limit || c.Limit != tc.limit || !c.Pass {
			t.Errorf("%s/%s: %s: %+v, want value and limit %v and a pass", tc.scenario, tc.tr, tc.target, c, tc.limit)
		}
	}
}

// TestChecksMedianOfRatios: a check is the median of the per-repetition
// ratios, not the ratio of the medians, so that a repetition's figures
// are compared with its own anchors.
func TestChecksMedianOfRatios(t *testing.T) {
	var reps []figures
	// sequential / raw per repetition: 1.00, 1.20, 1.05 (median 1.05, a
	// pass); the ratio of the medians would be 240/200 = 1.20, a fail.
	for _, p := range [][2]float64{{100, 100}, {240, 200}, {315, 300}} {
		f := gateFigures()
		f.seqP50, f.seqP99, f.rawSeqP50 = p[0], p[0], p[1]
		reps = append(reps, f)
	}
	r := checked(reps...)
	c := r.check(t, scSequential, "uds", "p50 <= 1.10 x raw sequential p50 (anchor_raw_sequential)")
	if c.Value < 1.0499 || c.Value > 1.0501 || !c.Pass {
		t.Errorf("check %+v, want the median ratio 1.05 and a pass", c)
	}
}

// TestChecksSet: the plaintext transports have exactly these checks (the
// gates replaced by them are gone), and TLS and NATS transports none of
// these.
func TestChecksSet(t *testing.T) {
	r := checked(gateFigures())
	want := map[string][]string{
		scSequential: {"p50 <= 1.10 x raw sequential p50 (anchor_raw_sequential)", "p99 <= 2 x p50"},
		scPipelined: {"exchanges/s >= 0.95 x raw pipelined (anchor_raw_pipelined)",
			"exchanges/s >= 2.0 x crypto ceiling (cores / exchange)",
			"CPU per delivered message (both processes) <= 0.50 x exchange"},
		scClosedLoop:   {"exchanges/s >= 1.6 x crypto ceiling (cores / exchange)"},
		scConnPerMsg:   {"p50 <= 2 x sequential p50"},
		scDurable:      {"exchanges/s >= 0.75 x pipelined with the memory inbox"},
		scIdleRSS:      {"idle RSS <= 20 MB"},
		scIdleRSS1000:  {"RSS with 1000 idle connections <= 80 MB"},
		scStartup:      {"start to listening <= 50 ms"},
		scFloodBadSig:  {"trusted exchanges/s >= 0.50 x pipelined", "every bad signature refused as bad_signature (refused/sent, worst repetition)"},
		scFloodUntrust: {"trusted exchanges/s >= 0.50 x pipelined", "every untrusted envelope refused as untrusted, before the signature check (refused/sent, worst repetition)"},
	}
	nats := map[string][]string{
		scSequential: {"p50 <= 0.50 x NATS p50"},
		scPipelined:  {"exchanges/s >= 1.5 x NATS"},
	}
	for _, tr := range []string{"uds", "tcp"} {
		for sc, targets := range want {
			if tr == "tcp" {
				targets = append(slices.Clone(targets), nats[sc]...)
			}
			var got []string
			for _, c := range r.find(implMeerkatd, sc, tr).checks {
				got = append(got, c.Target)
				if !c.Pass {
					t.Errorf("%s/%s: %q fails with the passing figures: %+v", sc, tr, c.Target, c)
				}
			}
			if !slices.Equal(got, targets) {
				t.Errorf("%s/%s: checks\n%s\nwant\n%s", sc, tr, strings.Join(got, "\n"), strings.Join(targets, "\n"))
			}
		}
	}
	if len(r.notes) != 0 {
		t.Errorf("notes %q, want none", r.notes)
	}
}

// TestChecksWithoutAnchor: a check whose anchor was not measured is left
// out, with a note, rather than passed or failed.
func TestChecksWithoutAnchor(t *testing.T) {
	r := newResults()
	r.reps, r.cores = 1, 2
	r.add(implMeerkatd, scSequential, "uds", "memory", mP50, 100)
	r.add(implMeerkatd, scSequential, "uds", "memory", mP99, 150)
	r.computeChecks(settings{transports: []string{"uds"}})
	got := r.find(implMeerkatd, scSequential, "uds").checks
	if len(got) != 1 || got[0].Target != "p99 <= 2 x p50" {
		t.Errorf("checks %+v, want only p99 <= 2 x p50", got)
	}
	if !slices.ContainsFunc(r.notes, func(n string) bool {
		return strings.Contains(n, "raw sequential") && strings.Contains(n, "not computed")
	}) {
		t.Errorf("notes %q, want one on the raw sequential check", r.notes)
	}
}

// TestBounds: the bounds worked out from the run's own figures, and when
// they say a target cannot be met.
func TestBounds(t *testing.T) {
	const (
		pipeTarget = "exchanges/s >= 2.0 x crypto ceiling (cores / exchange)"
		loopTarget = "exchanges/s >= 1.6 x crypto ceiling (cores / exchange)"
		durTarget  = "exchanges/s >= 0.75 x pipelined with the memory inbox"
		natsTarget = "p50 <= 0.50 x NATS p50"
	)
	f := gateFigures()
	r := checked(f)
	for _, tc := range []struct {
		scenario, target string
		bound            float64
		hard             bool
	}{
		// exchange / pipelined CPU per exchange: 200 / 50.
		{scPipelined, pipeTarget, 4, false},
		// exchange / (sign + batch sign + verify + batch): 200 / 95.
		{scClosedLoop, loopTarget, 200.0 / 95, true},
		// 2 cores / 60 µs = 33,333/s over the memory rate 30,000.
		{scDurable, durTarget, 2e6 / 60 / 30000, false},
		// (raw sequential p50 - sign) / NATS p50: (100 - 20) / 1000.
		{scSequential, natsTarget, 0.08, true},
	} {
		c := r.check(t, tc.scenario, "tcp", tc.target)
		if !near(c.Bound, tc.bound) || c.BoundBasis == "" || c.BoundHard != tc.hard || c.Unreachable() {
			t.Errorf("%s: bound %v (%q, hard %v, unreachable %v); want %v, hard %v, reachable", tc.scenario, c.Bound, c.BoundBasis, c.BoundHard, c.Unreachable(), tc.bound, tc.hard)
		}
	}

	// The raw closed loop measured: its CPU less what batches save,
	// 130 - (20-15) - (40-20) = 105, above the crypto's 95.
	f.rawLoopCPU = 130
	if c := checked(f).check(t, scClosedLoop, "tcp", loopTarget); !near(c.Bound, 200.0/105) || !c.BoundHard || c.Unreachable() {
		t.Errorf("closed loop with its raw anchor: bound %v (hard %v, unreachable %v), want %v, reachable", c.Bound, c.BoundHard, c.Unreachable(), 200.0/105)
	}
	// 160 - 25 = 135: 200/135 = 1.48 < 1.6, whatever the node does.
	f.rawLoopCPU = 160
	if c := checked(f).check(t, scClosedLoop, "tcp", loopTarget); !near(c.Bound, 200.0/135) || !c.Unreachable() {
		t.Errorf("closed loop with a costly raw anchor: bound %v (unreachable %v), want %v, unreachable", c.Bound, c.Unreachable(), 200.0/135)
	}
	f.rawLoopCPU = 0

	// Figures that put each bound beyond its limit.
	f.pipeCPU = 110    // 200/110 = 1.82 < 2.0
	f.signUS = 50      // 200/(50+15+40+20) = 1.6, not beyond: with
	f.batchSignUS = 40 // 200/(50+40+40+20) = 1.33 < 1.6
	f.durableCPU = 100 // 20,000/30,000 = 0.667 < 0.75
	f.rawSeqP50 = 600  // (600-50)/1000 = 0.55 > 0.50
	r = checked(f)
	for _, tc := range []struct {
		scenario, target string
		hard             bool
	}{
		{scPipelined, pipeTarget, false}, {scClosedLoop, loopTarget, true}, {scDurable, durTarget, false}, {scSequential, natsTarget, true},
	} {
		if c := r.check(t, tc.scenario, "tcp", tc.target); !c.beyond() || c.Unreachable() != tc.hard {
			t.Errorf("%s: bound %v against limit %v: beyond %v, unreachable %v", tc.scenario, c.Bound, c.Limit, c.beyond(), c.Unreachable())
		}
	}
	var out strings.Builder
	if err := r.writeTable(&out, settings{transports: []string{"uds", "tcp"}}); err != nil {
		t.Fatal(err)
	}
	// Closed loop over uds and tcp, NATS over tcp only; the others are
	// the node's own cost.
	if n := strings.Count(out.String(), "unreachable here: "); n != 3 {
		t.Errorf("%d unreachable lines, want 3:\n%s", n, out.String())
	}
	if n := strings.Count(out.String(), "limited by its own CPU cost: "); n != 4 {
		t.Errorf("%d lines of bounds from the CPU cost, want 4:\n%s", n, out.String())
	}
}

// TestClosedLoopFloor: the least CPU per exchange of closed_loop_16, from
// the crypto anchors alone or from the raw closed loop less what batches
// save, whichever is more.
func TestClosedLoopFloor(t *testing.T) {
	for _, tc := range []struct {
		name                                    string
		sign, batchSign, verify, batch, rawLoop float64
		want                                    float64
	}{
		{"crypto only", 20, 15, 40, 20, math.NaN(), 95},
		{"raw loop not measured", 20, 15, 40, 20, 0, 95},
		{"raw loop above the crypto", 20, 15, 40, 20, 130, 105},
		{"raw loop below the crypto", 20, 15, 40, 20, 100, 95},
		{"no batch savings", 20, 20, 40, 40, 150, 150},
	} {
		if got := closedLoopFloor(tc.sign, tc.batchSign, tc.verify, tc.batch, tc.rawLoop); got != tc.want {
			t.Errorf("%s: %v, want %v", tc.name, got, tc.want)
		}
	}
}

func near(a, b float64) bool { return a > b*0.999 && a < b*1.001 }

// TestSpaceCheck: every copy received once, in every repetition; a copy
// missing or extra anywhere fails, and the value is the worst ratio.
func TestSpaceCheck(t *testing.T) {
	for _, tc := range []struct {
		name      string
		delivered []float64
		wrong     []float64
		value     float64
		pass      bool
	}{
		{"all there", []float64{1, 1}, []float64{0, 0}, 1, true},
		{"one missing", []float64{1, 0.5}, []float64{0, 10}, 0.5, false},
		{"one extra", []float64{1, 1.25}, []float64{0, 5}, 1.25, false},
		{"one missing, one extra: same total", []float64{1, 1}, []float64{0, 2}, 1, false},
	} {
		r := newResults()
		r.reps, r.cores = len(tc.delivered), 2
		for i := range tc.delivered {
			r.add(implMeerkatd, scSpace, "uds", "memory", mDelivered, tc.delivered[i])
			r.add(implMeerkatd, scSpace, "uds", "memory", mWrongCopies, tc.wrong[i])
		}
		r.computeChecks(settings{transports: []string{"uds"}})
		cs := r.find(implMeerkatd, scSpace, "uds").checks
		if len(cs) != 1 || cs[0].Value != tc.value || cs[0].Pass != tc.pass {
			t.Errorf("%s: checks %+v, want value %v pass %v", tc.name, cs, tc.value, tc.pass)
		}
	}
}

// TestCheckShown: a failed value never prints as its limit.
func TestCheckShown(t *testing.T) {
	for _, tc := range []struct {
		c    Check
		want string
	}{
		{Check{Value: 1.1004, Limit: 1.1, Pass: false}, "1.1004"},
		{Check{Value: 1.0996, Limit: 1.1, Pass: true}, "1.1"},
		{Check{Value: 1.234, Limit: 2, Pass: true}, "1.23"},
		{Check{Value: 0.4999, Limit: 0.5, atMost: false, Pass: false}, "0.4999"},
		{Check{Value: 20.04, Limit: 20, atMost: true, Pass: false}, "20.04"}, // idle RSS: num prints one decimal
		{Check{Value: 50.03, Limit: 50, atMost: true, Pass: false}, "50.03"},
	} {
		if got := tc.c.shown(); got != tc.want {
			t.Errorf("%+v: %q, want %q", tc.c, got, tc.want)
		}
	}
}

func TestRepetitions(t *testing.T) {
	for n, want := range map[int]string{1: "1 repetition", 3: "3 repetitions"} {
		if got := repetitions(n); got != want {
			t.Errorf("repetitions(%d) = %q, want %q", n, got, want)
		}
	}
}

// TestSortedQuantile: the rank is ⌈q·n⌉, q·n's rounding forgiven.
func TestSortedQuantile(t *testing.T) {
	v := make([]float64, 2000)
	for i := range v {
		v[i] = float64(i + 1)
	}
	for _, tc := range []struct{ q, want float64 }{{0.50, 1000}, {0.99, 1980}, {0.999, 1998}, {1, 2000}, {0, 1}} {
		if got := sortedQuantile(v, tc.q); got != tc.want {
			t.Errorf("q %v: %v, want %v", tc.q, got, tc.want)
		}
	}
	// 0.07 × 100 is 7.000000000000001 in floating point: still rank 7.
	if got := sortedQuantile(v[:100], 0.07); got != 7 {
		t.Errorf("q 0.07 of 100: %v, want 7", got)
	}
	if got := sortedQuantile(nil, 0.5); !math.IsNaN(got) {
		t.Errorf("none: %v, want NaN", got)
	}
}

// TestRawTail: a failed p99 check is noted with the raw sequential
// anchor's own p99/p50 (the median over the repetitions); a passed one,
// or one without the anchor's p99, is not.
func TestRawTail(t *testing.T) {
	tail := func(r *results) []string {
		var out []string
		for _, n := range r.notes {
			if strings.Contains(n, "anchor_raw_sequential) had p99") {
				out = append(out, n)
			}
		}
		return out
	}
	f := gateFigures()
	f.rawSeqP99 = 230 // 2.3 x its p50 of 100
	if got := tail(checked(f)); len(got) != 0 {
		t.Fatalf("p99 check passed, yet noted: %q", got)
	}
	a, b, c := f, f, f
	a.seqP99, b.seqP99, c.seqP99 = 250, 250, 250 // 2.5 x p50: fails
	a.rawSeqP99, b.rawSeqP99, c.rawSeqP99 = 210, 240, 400
	got := tail(checked(a, b, c))
	want := []string{
		`sequential/uds "p99 <= 2 x p50": the raw exchange between the same processes (anchor_raw_sequential) had p99 2.4 x its p50 in this run`,
		`sequential/tcp "p99 <= 2 x p50": the raw exchange between the same processes (anchor_raw_sequential) had p99 2.4 x its p50 in this run`,
	}
	if !slices.Equal(got, want) {
		t.Fatalf("notes %q, want %q", got, want)
	}
	a.rawSeqP99 = 0
	if got := tail(checked(a)); len(got) != 0 {
		t.Fatalf("no p99 of the anchor, yet noted: %q", got)
	}
}

// TestNATSFiguresInOrder: the NATS bench's figures are recorded in the
// order of their names, the same in every run (its JSON holds them in an
// object, which Go reads into a map).
func TestNATSFiguresInOrder(t *testing.T) {
	script := filepath.Join(t.TempDir(), "natsbench")
	line := `{"impl":"nats","scenario":"sequential","transport":"tcp","inbox":"none","metrics":{"p99_us":{"median":90},"p50_us":{"median":40},"exchanges_per_s":{"median":7000},"cpu_us_per_exchange":{"median":120}}}`
	if err := os.WriteFile(script, []byte("#!/bin/sh\necho '"+line+"'\n"), 0o700); err != nil {
		t.Fatal(err)
	}
	b := &runner{opts: settings{nats: script}}
	want := []string{"cpu_us_per_exchange", "exchanges_per_s", "p50_us", "p99_us"}
	for range 8 { // a map's order would differ within a few runs
		rec := newResults()
		if err := b.natsOnce(context.Background(), rec); err != nil {
			t.Fatal(err)
		}
		s := rec.find(implNATS, scSequential, "tcp")
		if s == nil || !slices.Equal(s.metrics, want) || s.values["p50_us"][0] != 40 {
			t.Fatalf("recorded %+v; want the metrics %v", s, want)
		}
	}
}

// TestCeilingFigureAsTabled: the header's crypto ceiling names the
// exchange anchor as the table prints it (rounded once, not twice).
func TestCeilingFigureAsTabled(t *testing.T) {
	for _, v := range []float64{165.549, 165.55, 99.96, 1234.5, 41.04} {
		r := newResults()
		r.reps, r.cores = 1, 2
		r.add(implMeerkatd, scAnchorExch, transportNone, inboxNone, mUS, v)
		var out strings.Builder
		if err := r.writeTable(&out, settings{transports: []string{"uds"}}); err != nil {
			t.Fatal(err)
		}
		var header, tabled string
		for line := range strings.Lines(out.String()) {
			if rest, ok := strings.CutPrefix(line, "crypto ceiling: 2 cores / "); ok {
				header, _, _ = strings.Cut(rest, " ")
			}
			if f := strings.Fields(line); len(f) > 5 && f[1] == scAnchorExch && f[4] == mUS {
				tabled = f[5]
			}
		}
		if header == "" || header != tabled {
			t.Errorf("anchor %v: header says %q, the table %q\n%s", v, header, tabled, out.String())
		}
	}
}
