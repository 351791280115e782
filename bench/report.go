package bench

// What `meerkatd bench` reports: per scenario the values of every
// repetition, the checks against the performance targets, a table or JSON lines.

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"math"
	"net/url"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/meerkatd/meerkatd/transport"
)

// Line is one scenario's results as [Run] prints them with
// [Options.JSON], one JSON object per line (docs/performance.md); the
// NATS bench (bench/nats) prints the same, and Run reads its lines back.
//
//	{"impl":"meerkatd","scenario":"sequential","transport":"uds","inbox":"memory","reps":5,
//	 "metrics":{"p50_us":{"median":…,"min":…,"max":…,"values":[…]},…},"checks":[…]}
type Line struct {
	Impl      string            `json:"impl"`      // "meerkatd" or "nats"
	Scenario  string            `json:"scenario"`  // "sequential", "anchor_sign", … (Help)
	Transport string            `json:"transport"` // "uds", "tcp", "tls", "nats", "nats-unsealed"; "none": anchor_sign, anchor_verify, anchor_exchange
	Inbox     string            `json:"inbox"`     // the node's store mode, or "none" for the anchors; NATS: ""
	Reps      int               `json:"reps"`      // measured repetitions
	Metrics   map[string]Metric `json:"metrics"`   // by name: "p50_us", "exchanges_per_s", …
	Checks    []Check           `json:"checks"`    // never null: [] without checks
}

// Metric is one metric of a scenario over the repetitions.
type Metric struct {
	Median float64   `json:"median"`
	Min    float64   `json:"min"`
	Max    float64   `json:"max"`
	Values []float64 `json:"values"` // one per repetition, in repetition order
}

// Check is one performance target and how the run fared: Value is the
// median over the repetitions of the ratio the target bounds by Limit.
type Check struct {
	Target string  `json:"target"`
	Value  float64 `json:"value"`
	Limit  float64 `json:"limit"`
	Pass   bool    `json:"pass"`
	// Bound, when not zero, is the best Value within reach, worked out
	// from other figures of the same run (median over the repetitions);
	// BoundBasis says how. With BoundHard the bound follows from the
	// crypto and raw anchors alone, so a bound beyond the limit means the
	// target cannot be met on this machine, whatever the node does;
	// without it, the bound is what the node's own measured CPU cost
	// allows.
	Bound      float64 `json:"bound,omitempty"`
	BoundBasis string  `json:"bound_basis,omitempty"`
	BoundHard  bool    `json:"bound_hard,omitempty"`
	atMost     bool
}

// shown is c's value as the report prints it: rounded (round3), with
// more digits when rounding would make a failed value look like its
// limit (1.1004 against 1.10).
func (c Check) shown() string {
	if s := num(round3(c.Value)); s != num(c.Limit) || c.Pass {
		return s
	}
	return strconv.FormatFloat(c.Value, 'g', 6, 64)
}

// beyond reports whether c's bound is on the wrong side of its limit.
func (c Check) beyond() bool {
	if c.Bound == 0 {
		return false
	}
	if c.atMost {
		return c.Bound > c.Limit
	}
	return c.Bound < c.Limit
}

// Unreachable reports whether c's bound shows that its limit cannot be
// met on this machine.
func (c Check) Unreachable() bool { return c.BoundHard && c.beyond() }

type seriesKey struct{ impl, scenario, transport, inbox string }

// series is one scenario's values, one per repetition per metric, in
// repetition order: index i of every series is the same repetition.
type series struct {
	key     seriesKey
	metrics []string
	values  map[string][]float64
	checks  []Check
}

type results struct {
	reps, cores int
	series      []*series
	byKey       map[seriesKey]*series
	notes       []string
	// samples holds the round trips (µs) of the latency scenarios, pooled
	// over the repetitions, for the page's distributions.
	samples map[seriesKey][]float64
}

func newResults() *results {
	return &results{byKey: map[seriesKey]*series{}, samples: map[seriesKey][]float64{}}
}

// addLatencies records a latency scenario's round trips: its p50 and p99
// as metrics, and the round trips themselves for the distributions.
func (r *results) addLatencies(impl, scenario, tr, inbox string, lat []time.Duration) (p50 float64) {
	us := sortedUS(lat)
	p50 = sortedQuantile(us, 0.50)
	r.add(impl, scenario, tr, inbox, mP50, p50)
	r.add(impl, scenario, tr, inbox, mP99, sortedQuantile(us, 0.99))
	k := seriesKey{impl, scenario, tr, inbox}
	r.samples[k] = append(r.samples[k], us...)
	return p50
}

func (r *results) add(impl, scenario, tr, inbox, metric string, v float64) {
	k := seriesKey{impl, scenario, tr, inbox}
	s := r.byKey[k]
	if s == nil {
		s = &series{key: k, values: map[string][]float64{}}
		r.byKey[k] = s
		r.series = append(r.series, s)
	}
	if _, ok := s.values[metric]; !ok {
		s.metrics = append(s.metrics, metric)
	}
	s.values[metric] = append(s.values[metric], v)
}

// find returns the series of impl's scenario over tr, whatever its inbox.
func (r *results) find(impl, scenario, tr string) *series {
	for _, s := range r.series {
		if s.key.impl == impl && s.key.scenario == scenario && s.key.transport == tr {
			return s
		}
	}
	return nil
}

func (r *results) values(impl, scenario, tr, metric string) []float64 {
	if s := r.find(impl, scenario, tr); s != nil {
		return s.values[metric]
	}
	return nil
}

// ratioCheck adds to s a check on the median over repetitions of f(i).
func (r *results) ratioCheck(s *series, target string, limit float64, atMost bool, f func(i int) float64) {
	if s == nil {
		return
	}
	var vs []float64
	for i := range r.reps {
		if v := f(i); !math.IsNaN(v) && !math.IsInf(v, 0) {
			vs = append(vs, v)
		}
	}
	if len(vs) == 0 {
		r.notes = append(r.notes, fmt.Sprintf("check %q of %s/%s not computed: values missing", target, s.key.scenario, s.key.transport))
		return
	}
	v := medianF(vs)
	pass := v >= limit
	if atMost {
		pass = v <= limit
	}
	s.checks = append(s.checks, Check{Target: target, Value: v, Limit: limit, Pass: pass, atMost: atMost})
}

// bound sets the bound of s's check of target (added by ratioCheck; none:
// nothing to bound) to the median over repetitions of f(i), with basis
// saying what it is; hard as Check.BoundHard.
func (r *results) bound(s *series, target string, hard bool, basis string, f func(i int) float64) {
	if s == nil {
		return
	}
	i := slices.IndexFunc(s.checks, func(c Check) bool { return c.Target == target })
	if i < 0 {
		return
	}
	var vs []float64
	for i := range r.reps {
		if v := f(i); !math.IsNaN(v) && !math.IsInf(v, 0) && v > 0 {
			vs = append(vs, v)
		}
	}
	if len(vs) == 0 {
		return
	}
	c := &s.checks[i]
	c.Bound, c.BoundBasis, c.BoundHard = medianF(vs), basis, hard
}

// ceilingTarget is the pipelined check's limit, in crypto ceilings (its
// target's text says it too).
const ceilingTarget = 2.0

// The targets of the checks that carry a bound.
const (
	targetPipeCeiling = "exchanges/s >= 2.0 x crypto ceiling (cores / exchange)"
	targetLoopCeiling = "exchanges/s >= 1.6 x crypto ceiling (cores / exchange)"
	targetDurable     = "exchanges/s >= 0.75 x pipelined with the memory inbox"
	targetNATSP50     = "p50 <= 0.50 x NATS p50"
	targetP99         = "p99 <= 2 x p50"
)

// rawTail notes, when seq's p99 check failed, the raw sequential anchor's
// own p99/p50 over tr in the same repetitions (median): the tail the
// machine gives two processes that only do the crypto and the round
// trip. It is context, not a bound: the node's distribution is not the
// anchor's.
func (r *results) rawTail(seq *series, tr string) {
	if seq == nil {
		return
	}
	i := slices.IndexFunc(seq.checks, func(c Check) bool { return c.Target == targetP99 })
	raw := r.find(implMeerkatd, scAnchorRawSeq, tr)
	if i < 0 || seq.checks[i].Pass || raw == nil {
		return
	}
	p50, p99 := raw.values[mP50], raw.values[mP99]
	var vs []float64
	for j := range min(len(p50), len(p99)) {
		if p50[j] > 0 {
			vs = append(vs, p99[j]/p50[j])
		}
	}
	if len(vs) == 0 {
		return
	}
	r.notes = append(r.notes, fmt.Sprintf("%s/%s %q: the raw exchange between the same processes (%s) had p99 %s x its p50 in this run",
		scSequential, tr, targetP99, scAnchorRawSeq, num(round3(medianF(vs)))))
}

// computeChecks derives the checks from the repetitions.
func (r *results) computeChecks(o settings) {
	at := func(v []float64, i int) float64 {
		if i < len(v) {
			return v[i]
		}
		return math.NaN()
	}
	exch := r.values(implMeerkatd, scAnchorExch, transportNone, mUS)
	sign := r.values(implMeerkatd, scAnchorSign, transportNone, mUS)
	batchS := r.values(implMeerkatd, scAnchorBatchSign, transportNone, mUS)
	verify := r.values(implMeerkatd, scAnchorVerify, transportNone, mUS)
	batchV := r.values(implMeerkatd, scAnchorBatch, transportNone, mUS)
	ceiling := func(i int) float64 { return float64(r.cores) * 1e6 / at(exch, i) }
	for _, tr := range o.transports {
		if tr == transport.SchemeTLS {
			r.tlsChecks(o)
			continue
		}
		if isNATS(tr) {
			continue // no targets: vs_tcp and vs_unsealed say what it costs
		}
		pipe := r.find(implMeerkatd, scPipelined, tr)
		seq := r.find(implMeerkatd, scSequential, tr)
		pipeRate := r.values(implMeerkatd, scPipelined, tr, mRate)
		seqP50 := r.values(implMeerkatd, scSequential, tr, mP50)
		rawSeqP50 := r.values(implMeerkatd, scAnchorRawSeq, tr, mP50)
		rawPipeRate := r.values(implMeerkatd, scAnchorRawPipe, tr, mRate)
		r.ratioCheck(seq, "p50 <= 1.10 x raw sequential p50 (anchor_raw_sequential)", 1.10, true, func(i int) float64 {
			return at(seqP50, i) / at(rawSeqP50, i)
		})
		r.ratioCheck(seq, targetP99, 2, true, func(i int) float64 {
			return at(seq.values[mP99], i) / at(seqP50, i)
		})
		r.rawTail(seq, tr)
		r.ratioCheck(pipe, "exchanges/s >= 0.95 x raw pipelined (anchor_raw_pipelined)", 0.95, false, func(i int) float64 {
			return at(pipeRate, i) / at(rawPipeRate, i)
		})
		r.ratioCheck(pipe, targetPipeCeiling, ceilingTarget, false, func(i int) float64 {
			return at(pipeRate, i) / ceiling(i)
		})
		r.bound(pipe, targetPipeCeiling, false, "every core busy at the CPU per exchange measured: exchange / CPU per exchange", func(i int) float64 {
			return at(exch, i) / at(pipe.values[mCPU], i)
		})
		r.ratioCheck(pipe, "CPU per delivered message (both processes) <= 0.50 x exchange", 0.50, true, func(i int) float64 {
			return at(pipe.values[mCPU], i) / at(exch, i)
		})
		loop := r.find(implMeerkatd, scClosedLoop, tr)
		r.ratioCheck(loop, targetLoopCeiling, 1.6, false, func(i int) float64 {
			return at(loop.values[mRate], i) / ceiling(i)
		})
		rawLoopCPU := r.values(implMeerkatd, scAnchorRawLoop, tr, mCPU)
		r.bound(loop, targetLoopCeiling, true, "16 peers with one envelope in flight each: every exchange needs its own message signature, "+
			"its own ack signature (acks to different peers cannot share one; at best signed in a batch with the others) and the ack verified alone, "+
			"the message verified at best in a batch, and the two frames the raw closed loop moves on its connection; "+
			"the least CPU per exchange is the raw closed loop's (anchor_raw_closed_loop_16, every operation alone) "+
			"less what batches could save, (sign - batch_sign) + (verify - batch_verify), "+
			"and never below sign + batch_sign + verify + batch_verify; exchange / that, every core busy", func(i int) float64 {
			return at(exch, i) / closedLoopFloor(at(sign, i), at(batchS, i), at(verify, i), at(batchV, i), at(rawLoopCPU, i))
		})
		cpm := r.find(implMeerkatd, scConnPerMsg, tr)
		r.ratioCheck(cpm, "p50 <= 2 x sequential p50", 2, true, func(i int) float64 {
			return at(cpm.values[mP50], i) / at(seqP50, i)
		})
		for _, sc := range []string{scFloodBadSig, scFloodUntrust} {
			fl := r.find(implMeerkatd, sc, tr)
			if fl == nil {
				continue
			}
			r.ratioCheck(fl, "trusted exchanges/s >= 0.50 x pipelined", 0.50, false, func(i int) float64 {
				return at(fl.values[mRatio], i)
			})
			target := "every bad signature refused as bad_signature (refused/sent, worst repetition)"
			if sc == scFloodUntrust {
				target = "every untrusted envelope refused as untrusted, before the signature check (refused/sent, worst repetition)"
			}
			worst := slices.Min(fl.values[mRefusedOK])
			wrong := slices.Max(fl.values[mWrong])
			fl.checks = append(fl.checks, Check{Target: target, Value: worst, Limit: 1, Pass: worst >= 1 && wrong == 0})
		}
		dur := r.find(implMeerkatd, scDurable, tr)
		r.ratioCheck(dur, targetDurable, 0.75, false, func(i int) float64 {
			return at(dur.values[mRatio], i)
		})
		if dur != nil {
			r.bound(dur, targetDurable, false, "every core busy at the CPU per exchange measured with SQLite: (cores / durable CPU per exchange) / memory exchanges/s", func(i int) float64 {
				return float64(r.cores) * 1e6 / at(dur.values[mCPU], i) / at(pipeRate, i)
			})
		}
		if sp := r.find(implMeerkatd, scSpace, tr); sp != nil {
			// A copy missing or extra in any repetition fails it (the
			// notes say which receiver); the value is the worst ratio.
			worst := slices.Min(sp.values[mDelivered])
			if hi := slices.Max(sp.values[mDelivered]); math.Abs(hi-1) > math.Abs(worst-1) {
				worst = hi
			}
			wrong := slices.Max(append([]float64{0}, sp.values[mWrongCopies]...))
			sp.checks = append(sp.checks, Check{Target: "every copy received at the two receivers, once (received/sent, worst repetition)",
				Value: worst, Limit: 1, Pass: worst == 1 && wrong == 0})
		}
		for _, c := range []struct {
			sc, target string
			limit      float64
			metric     string
		}{
			{scIdleRSS, "idle RSS <= 20 MB", 20, mRSS},
			{scIdleRSS1000, fmt.Sprintf("RSS with %d idle connections <= 80 MB", o.idleConns), 80, mRSS},
			{scStartup, "start to listening <= 50 ms", 50, mMS},
		} {
			s := r.find(implMeerkatd, c.sc, tr)
			r.ratioCheck(s, c.target, c.limit, true, func(i int) float64 { return at(s.values[c.metric], i) })
		}
	}
	switch {
	case o.nats == "":
		r.notes = append(r.notes, "NATS checks omitted: no --nats given")
	case !slices.Contains(o.transports, transport.SchemeTCP):
		r.notes = append(r.notes, "NATS checks omitted: they compare over TCP, which --transport left out")
	default:
		tr := transport.SchemeTCP
		seq := r.find(implMeerkatd, scSequential, tr)
		natsP50 := r.values(implNATS, scSequential, tr, mP50)
		natsRate := r.values(implNATS, scPipelined, tr, mRate)
		if natsP50 == nil || natsRate == nil {
			r.notes = append(r.notes, "NATS checks omitted: the NATS bench printed no sequential or pipelined TCP figures")
			break
		}
		r.ratioCheck(seq, targetNATSP50, 0.50, true, func(i int) float64 {
			return at(seq.values[mP50], i) / at(natsP50, i)
		})
		rawSeq := r.values(implMeerkatd, scAnchorRawSeq, tr, mP50)
		r.bound(seq, targetNATSP50, true, "an exchange holds at least the raw one between the same processes (the round trip and its four crypto operations in a row), "+
			"less the ack's signature, which could overlap the message's verification: (raw sequential p50 - sign) / NATS p50", func(i int) float64 {
			return (at(rawSeq, i) - at(sign, i)) / at(natsP50, i)
		})
		pipe := r.find(implMeerkatd, scPipelined, tr)
		r.ratioCheck(pipe, "exchanges/s >= 1.5 x NATS", 1.5, false, func(i int) float64 {
			return at(pipe.values[mRate], i) / at(natsRate, i)
		})
	}
}

// closedLoopFloor is the least CPU per exchange (µs) closed_loop_16 can
// spend: the crypto of an exchange done as cheaply as 16 peers with one
// envelope in flight each allow, or, when the raw closed loop was
// measured (rawLoop, NaN if not), that anchor's CPU per exchange less what
// signing the ack and verifying the message in batches could save. The
// raw closed loop does nothing but those four operations and the two
// frames per exchange, each on its own connection, which the node must
// move as well.
func closedLoopFloor(sign, batchSign, verify, batchVerify, rawLoop float64) float64 {
	floor := sign + batchSign + verify + batchVerify
	if rawLoop > 0 { // false for NaN
		floor = max(floor, rawLoop-(sign-batchSign)-(verify-batchVerify))
	}
	return floor
}

// tlsChecks compares TLS with plaintext TCP, repetition by repetition.
func (r *results) tlsChecks(o settings) {
	if !slices.Contains(o.transports, transport.SchemeTCP) {
		r.notes = append(r.notes, "TLS checks omitted: they compare with plaintext TCP, which --transport left out")
		return
	}
	ratio := func(s *series) func(int) float64 {
		return func(i int) float64 {
			if v := s.values[mVsTCP]; i < len(v) {
				return v[i]
			}
			return math.NaN()
		}
	}
	if seq := r.find(implMeerkatd, scSequential, transport.SchemeTLS); seq != nil {
		r.ratioCheck(seq, "p50 <= 1.15 x plaintext TCP p50", 1.15, true, ratio(seq))
	}
	if pipe := r.find(implMeerkatd, scPipelined, transport.SchemeTLS); pipe != nil {
		r.ratioCheck(pipe, "exchanges/s >= 0.90 x plaintext TCP", 0.90, false, ratio(pipe))
	}
}

// failed lists the failed checks.
func (r *results) failed() []string {
	var out []string
	for _, s := range r.series {
		for _, c := range s.checks {
			if !c.Pass {
				out = append(out, fmt.Sprintf("%s/%s: %s: %s (limit %s)", s.key.scenario, s.key.transport, c.Target, c.shown(), num(c.Limit)))
			}
		}
	}
	return out
}

func (r *results) nchecks() int {
	n := 0
	for _, s := range r.series {
		n += len(s.checks)
	}
	return n
}

// line returns a series as printed; metrics whose name starts with "_"
// are internal.
func (r *results) line(s *series) Line {
	l := Line{Impl: s.key.impl, Scenario: s.key.scenario, Transport: s.key.transport, Inbox: s.key.inbox,
		Reps: r.reps, Metrics: map[string]Metric{}, Checks: []Check{}}
	for _, m := range s.metrics {
		if strings.HasPrefix(m, "_") {
			continue
		}
		vs := s.values[m]
		rounded := make([]float64, len(vs))
		for i, v := range vs {
			rounded[i] = round3(v)
		}
		l.Metrics[m] = Metric{Median: round3(medianF(vs)), Min: round3(slices.Min(vs)), Max: round3(slices.Max(vs)), Values: rounded}
	}
	for _, c := range s.checks {
		c.Value = round3(c.Value)
		l.Checks = append(l.Checks, c)
	}
	return l
}

func (r *results) writeJSON(w io.Writer) error {
	enc := json.NewEncoder(w)
	for _, s := range r.series {
		if err := enc.Encode(r.line(s)); err != nil {
			return err
		}
	}
	return nil
}

// repetitions is "1 repetition", "3 repetitions".
func repetitions(n int) string {
	if n == 1 {
		return "1 repetition"
	}
	return strconv.Itoa(n) + " repetitions"
}

func (r *results) writeTable(w io.Writer, o settings) error {
	bw := bufio.NewWriter(w)
	warm := "no warm-up"
	if o.warmup {
		warm = "after a warm-up repetition"
	}
	fmt.Fprintf(bw, "meerkatd bench: %s %s; %d CPUs; %s on loopback; %v per throughput scenario, %d round trips per latency scenario\n",
		repetitions(r.reps), warm, r.cores, strings.Join(o.transports, " and "), o.duration, o.msgs)
	if slices.ContainsFunc(o.transports, isNATS) {
		fmt.Fprintf(bw, "nats transports through the NATS server at %s\n", redactURL(o.natsURL))
	}
	if ex := r.values(implMeerkatd, scAnchorExch, transportNone, mUS); ex != nil {
		// The anchor as the table shows it (round3, then num): the same
		// figure in the header, the table and the page.
		fmt.Fprintf(bw, "crypto ceiling: %d cores / %s µs per exchange = %.0f exchanges/s\n", r.cores, num(round3(medianF(ex))), float64(r.cores)*1e6/medianF(ex))
	}
	fmt.Fprintln(bw)
	tw := tabwriter.NewWriter(bw, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "impl\tscenario\ttransport\tinbox\tmetric\tmedian\t[min – max]")
	for _, s := range r.series {
		l := r.line(s)
		for _, m := range s.metrics {
			mm, ok := l.Metrics[m]
			if !ok {
				continue
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t[%s – %s]\n", l.Impl, l.Scenario, l.Transport, l.Inbox, m, num(mm.Median), num(mm.Min), num(mm.Max))
		}
	}
	tw.Flush()
	fmt.Fprintln(bw, "\nchecks (per-repetition ratios, median):")
	tw = tabwriter.NewWriter(bw, 0, 0, 2, ' ', 0)
	for _, s := range r.series {
		for _, c := range s.checks {
			verdict := "PASS"
			if !c.Pass {
				verdict = "FAIL"
			}
			fmt.Fprintf(tw, "  %s\t%s/%s\t%s\t%s\t(limit %s)\n", verdict, s.key.scenario, s.key.transport, c.Target, c.shown(), num(c.Limit))
		}
	}
	tw.Flush()
	for _, s := range r.series {
		for _, c := range s.checks {
			switch {
			case c.Unreachable():
				fmt.Fprintf(bw, "unreachable here: %s/%s %q: at best %s (limit %s): %s\n",
					s.key.scenario, s.key.transport, c.Target, num(round3(c.Bound)), num(c.Limit), c.BoundBasis)
			case c.beyond():
				fmt.Fprintf(bw, "limited by its own CPU cost: %s/%s %q: at best %s (limit %s): %s\n",
					s.key.scenario, s.key.transport, c.Target, num(round3(c.Bound)), num(c.Limit), c.BoundBasis)
			}
		}
	}
	for _, n := range r.notes {
		fmt.Fprintf(bw, "note: %s\n", n)
	}
	if o.quick {
		fmt.Fprintln(bw, "note: --quick: a smoke run; the figures mean nothing")
	}
	return bw.Flush()
}

// natsOnce runs the NATS bench once and records its lines.
func (b *runner) natsOnce(ctx context.Context, rec *results) error {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Minute)
	defer cancel()
	args := []string{"--once", "--json", "--transport", transport.SchemeTCP}
	if b.opts.quick {
		args = append(args, "--quick")
	}
	cmd := exec.CommandContext(ctx, b.opts.nats, args...)
	cmd.Env = b.env
	cmd.SysProcAttr = sysProcAttr()
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return fmt.Errorf("%s: %w\n%s", b.opts.nats, err, stderr.String())
	}
	n := 0
	for line := range strings.Lines(string(out)) {
		if strings.TrimSpace(line) == "" {
			continue
		}
		var l Line
		if err := json.Unmarshal([]byte(line), &l); err != nil {
			return fmt.Errorf("%s printed a line that is not the bench JSON: %v: %q", b.opts.nats, err, line)
		}
		if l.Impl == "" {
			l.Impl = implNATS
		}
		// In the order of their names (p50 before p99), not the map's
		// order, which changes from run to run.
		for _, name := range slices.Sorted(maps.Keys(l.Metrics)) {
			rec.add(l.Impl, l.Scenario, l.Transport, l.Inbox, name, l.Metrics[name].Median)
		}
		n++
	}
	if n == 0 {
		return fmt.Errorf("%s printed nothing", b.opts.nats)
	}
	return nil
}

// redactURL hides a password in a server URL.
func redactURL(s string) string {
	if u, err := url.Parse(s); err == nil {
		return u.Redacted()
	}
	return s
}

func medianF(v []float64) float64 {
	if len(v) == 0 {
		return math.NaN()
	}
	s := slices.Clone(v)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

// round3 rounds to two decimals, or to three significant digits below 1.
func round3(v float64) float64 {
	if v == 0 || math.IsNaN(v) || math.IsInf(v, 0) {
		return v
	}
	digits := max(2, 2-int(math.Floor(math.Log10(math.Abs(v)))))
	p := math.Pow(10, float64(digits))
	return math.Round(v*p) / p
}

// num formats a figure for the table.
func num(v float64) string {
	switch a := math.Abs(v); {
	case a >= 1000:
		return fmt.Sprintf("%.0f", v)
	case a >= 10:
		return fmt.Sprintf("%.1f", v)
	default:
		return fmt.Sprintf("%.3g", v)
	}
}
