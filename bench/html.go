package bench

// The HTML page of a run (--html FILE): one self-contained file made from
// the same results as the table and the JSON lines. Inline CSS and SVG
// only: no script, no font, no reference to anything outside the file.

import (
	"bufio"
	"bytes"
	"cmp"
	"fmt"
	"html/template"
	"io"
	"io/fs"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/meerkatd/meerkatd/internal/atomicfile"
)

// htmlFile is the --html file, checked before the first repetition and
// written, whole, after the last.
type htmlFile struct {
	path string      // as given, for messages
	file string      // the file replaced: path, or where its symbolic link leads
	mode fs.FileMode // an existing file's permissions, kept
}

// openHTML checks that the page can be written to path before the run
// starts (nil for ""): a path that is not a regular file, an existing
// file that cannot be written, or a directory that cannot take a new
// file fails now, not after the run. The page replaces the file
// atomically (write), so a run that fails or a write that fails leaves
// what was there; a symbolic link is followed, and an existing file
// keeps its permissions.
func openHTML(path string) (*htmlFile, error) {
	if path == "" {
		return nil, nil
	}
	cannot := func(err error) error {
		if pe, ok := err.(*fs.PathError); ok {
			err = pe.Err
		}
		return fmt.Errorf("--html: cannot write %s: %v", path, err)
	}
	h := &htmlFile{path: path, file: path, mode: 0o644}
	if fi, err := os.Stat(path); err == nil {
		if !fi.Mode().IsRegular() {
			// A device or a pipe (/dev/null, /dev/stdout) cannot take
			// the page as a file.
			return nil, fmt.Errorf("--html: %s is not a regular file", path)
		}
		if h.file, err = filepath.EvalSymlinks(path); err != nil {
			return nil, cannot(err)
		}
		f, err := os.OpenFile(h.file, os.O_WRONLY, 0) // not truncated: only checked
		if err != nil {
			return nil, cannot(err)
		}
		f.Close()
		h.mode = fi.Mode().Perm()
	} else if _, lerr := os.Lstat(path); lerr == nil {
		return nil, fmt.Errorf("--html: %s is a symbolic link to nothing", path)
	}
	// The page is written beside the file and renamed over it: the
	// directory must take a new file.
	probe, err := os.CreateTemp(filepath.Dir(h.file), "."+filepath.Base(h.file)+".*.tmp")
	if err != nil {
		return nil, cannot(err)
	}
	probe.Close()
	os.Remove(probe.Name())
	return h, nil
}

// write replaces the file with the page of the run.
func (h *htmlFile) write(r *results, o settings, meta htmlMeta) error {
	if h == nil {
		return nil
	}
	var page bytes.Buffer
	if err := r.writeHTML(&page, o, meta); err != nil {
		return fmt.Errorf("--html %s: %w", h.path, err)
	}
	if err := atomicfile.WriteFile(h.file, page.Bytes(), h.mode); err != nil {
		return fmt.Errorf("--html: %w", err)
	}
	return nil
}

// htmlMeta is what the page's header says of where and when the run was.
type htmlMeta struct {
	Date      time.Time // start of the run
	GOOS      string
	GOARCH    string
	GoVersion string
}

// Chart geometry, in SVG user units (pixels at 100%).
const (
	chartW     = 780.0
	chartLeft  = 190.0 // room for the row labels
	chartRight = 50.0  // room for the figure after the longest bar
	chartTop   = 10.0
	refBand    = 16.0 // above the rows, for the reference line's label
	rowH       = 30.0
	axisH      = 44.0 // tick labels and axis title under the rows
)

type htmlAxisTick struct{ X, Label string }

// htmlChart is one horizontal chart: rows over a linear axis from 0.
type htmlChart struct {
	Width, Height string
	Left, Right   string // x of the axis's ends
	AxisY         string // y of the axis line
	TitleY        string // y of the axis title
	TitleX        string
	Title         string // the axis title, with its unit
	Ticks         []htmlAxisTick
	Rows          []htmlRow
	Refs          []htmlRef       // vertical reference lines: the crypto ceiling, the target of the check against it
	Classes       map[string]bool // the bar classes drawn, for the key
}

type htmlRow struct {
	Label      string
	Y          string // baseline of the label
	Mid        string // y of the row's middle
	Top, H     string // bar: top and height
	Class      string // bar: "bar pipelined", "bar anchor", "bar anchor batched", "bar nats"
	Impl       string
	Transport  string
	BarW       string // bar: width; "" for no bar
	Tip        string // tooltip of the bar
	Value      string // bar: the figure written after it
	ValueX     string
	WhiskerX1  string // bar: min–max over the repetitions; "" for none
	WhiskerX2  string
	Dots       []htmlDot  // latency: one per repetition and percentile
	Medians    []htmlMark // latency: the median of each percentile; distribution: p50 and p99
	ValueLabel string     // latency: the medians in words
	Bins       []htmlBin  // distribution: one bar per interval with round trips in it
	Stats      []string   // distribution: round trips, p50, p90, p99, p99.9, max, and those beyond the axis
}

// htmlBin is one bar of a distribution: the round trips in an interval.
type htmlBin struct{ X, Y, W, H, Class, Tip string }

type htmlDot struct{ X, Class, Tip string }

type htmlMark struct{ X, Y1, Y2, Class, Tip string }

type htmlRef struct{ Class, X, Y1, Y2, LabelY, Label string }

type htmlCheck struct {
	Pass                bool
	Scenario, Transport string
	Target              string
	Value, Limit        string
	Bound, Basis        string // the best within reach, if worked out ("" if not)
	Unreachable         bool
	OwnCost             bool // within reach of the machine, not of the node's own CPU cost
}

type htmlMetric struct {
	Impl, Scenario, Transport, Inbox, Metric string
	Median, Min, Max                         string
}

type htmlPage struct {
	Date, Machine, GoVersion string
	Cores                    int
	Reps                     int
	Warmup                   bool
	Options                  string
	Transports               string
	Quick                    bool
	Ceiling                  string // "" when no anchor_exchange
	Empty                    bool
	Latency                  *htmlChart
	Distribution             *htmlChart
	Throughput               *htmlChart
	Checks                   []htmlCheck
	Failed                   int
	Notes                    []string
	Metrics                  []htmlMetric
}

// optionsLine is the run's settings in the terms of the command's flags.
func (o settings) optionsLine() string {
	parts := []string{fmt.Sprintf("--reps %d", o.reps), "--transport " + strings.Join(o.transports, ","),
		fmt.Sprintf("--duration %v", o.duration), fmt.Sprintf("--msgs %d", o.msgs), fmt.Sprintf("--idle-conns %d", o.idleConns)}
	if o.only != nil {
		var gs []string
		for _, g := range groups {
			if o.only[g] {
				gs = append(gs, g)
			}
		}
		parts = append(parts, "--only "+strings.Join(gs, ","))
	}
	if o.nats != "" {
		parts = append(parts, "--nats "+o.nats)
	}
	if o.natsURL != "" {
		parts = append(parts, "--nats-url "+redactURL(o.natsURL))
	}
	if o.quick {
		parts = append(parts, "--quick")
	}
	return strings.Join(parts, " ")
}

// writeHTML writes the page of the run to w.
func (r *results) writeHTML(w io.Writer, o settings, meta htmlMeta) error {
	p := htmlPage{
		Date:       meta.Date.UTC().Format("2006-01-02 15:04 UTC"),
		Machine:    meta.GOOS + "/" + meta.GOARCH,
		GoVersion:  meta.GoVersion,
		Cores:      r.cores,
		Reps:       r.reps,
		Warmup:     o.warmup,
		Options:    o.optionsLine(),
		Transports: strings.Join(o.transports, ", "),
		Quick:      o.quick,
		Empty:      len(r.series) == 0,
		Notes:      r.notes,
	}
	if ex := r.values(implMeerkatd, scAnchorExch, transportNone, mUS); ex != nil {
		p.Ceiling = fmt.Sprintf("%d cores / %s µs per exchange = %s exchanges/s", r.cores, num(round3(medianF(ex))), num(r.ceiling()))
	}
	p.Latency = r.latencyChart()
	p.Distribution = r.distributionChart()
	p.Throughput = r.throughputChart()
	for _, s := range r.series {
		for _, c := range s.checks {
			hc := htmlCheck{Pass: c.Pass, Scenario: s.key.scenario, Transport: s.key.transport,
				Target: c.Target, Value: c.shown(), Limit: num(c.Limit), Unreachable: c.Unreachable(), OwnCost: !c.Unreachable() && c.beyond()}
			if c.Bound != 0 {
				hc.Bound, hc.Basis = num(round3(c.Bound)), c.BoundBasis
			}
			p.Checks = append(p.Checks, hc)
			if !c.Pass {
				p.Failed++
			}
		}
		l := r.line(s)
		for _, m := range s.metrics {
			if mm, ok := l.Metrics[m]; ok {
				p.Metrics = append(p.Metrics, htmlMetric{l.Impl, l.Scenario, l.Transport, l.Inbox, m, num(mm.Median), num(mm.Min), num(mm.Max)})
			}
		}
	}
	bw := bufio.NewWriter(w)
	if err := htmlTmpl.Execute(bw, p); err != nil {
		return err
	}
	return bw.Flush()
}

// ceiling is the crypto ceiling of the run: cores / the median exchange.
func (r *results) ceiling() float64 {
	ex := r.values(implMeerkatd, scAnchorExch, transportNone, mUS)
	if ex == nil {
		return math.NaN()
	}
	return float64(r.cores) * 1e6 / medianF(ex)
}

// niceAxis returns the end of an axis from 0 that holds hi, and its step.
func niceAxis(hi float64) (end, step float64) {
	if !(hi > 0) || math.IsInf(hi, 0) {
		return 1, 0.2
	}
	raw := hi / 5
	mag := math.Pow(10, math.Floor(math.Log10(raw)))
	for _, m := range []float64{1, 2, 2.5, 5, 10} {
		if step = m * mag; step >= raw {
			break
		}
	}
	return math.Ceil(hi/step) * step, step
}

// tickLabel is an axis figure: 250, 1500, 40k, 1.2M (thousands as k from
// 10,000).
func tickLabel(v float64) string {
	switch a := math.Abs(v); {
	case a >= 1e6:
		return strconv.FormatFloat(v/1e6, 'g', 4, 64) + "M"
	case a >= 1e4:
		return strconv.FormatFloat(v/1e3, 'g', 4, 64) + "k"
	default:
		return strconv.FormatFloat(v, 'g', 4, 64)
	}
}

func px(v float64) string { return fmt.Sprintf("%.1f", v) }

// newChart lays out a chart of n rows over 0…hi.
func newChart(top float64, n int, hi float64, title string) (*htmlChart, func(float64) float64) {
	end, step := niceAxis(hi)
	plotW := chartW - chartLeft - chartRight
	x := func(v float64) float64 {
		if math.IsNaN(v) || v < 0 {
			v = 0
		}
		return chartLeft + plotW*min(v, end)/end
	}
	axisY := top + float64(n)*rowH
	c := &htmlChart{Width: px(chartW), Height: px(axisY + axisH), Left: px(chartLeft), Right: px(chartW - chartRight),
		AxisY: px(axisY), TitleY: px(axisY + axisH - 6), TitleX: px(chartLeft + plotW/2), Title: title}
	for v := 0.0; v <= end+step/2; v += step {
		c.Ticks = append(c.Ticks, htmlAxisTick{X: px(x(v)), Label: tickLabel(v)})
	}
	return c, x
}

// rowGeometry places row i of a chart whose rows start at y0.
func rowGeometry(row *htmlRow, y0 float64, i int) {
	top := y0 + float64(i)*rowH
	row.Y, row.Mid = px(top+rowH/2+4), px(top+rowH/2)
	row.Top, row.H = px(top+6), px(rowH-12)
}

// latencyChart charts the sequential scenario's p50 and p99 of every
// repetition per transport, the medians marked; nil without one.
func (r *results) latencyChart() *htmlChart {
	type row struct {
		label, impl, tr string
		p50, p99        []float64
	}
	var rows []row
	hi := 0.0
	for _, s := range r.series {
		if s.key.scenario != scSequential {
			continue
		}
		p50, p99 := s.values[mP50], s.values[mP99]
		if len(p50) == 0 && len(p99) == 0 {
			continue
		}
		label := s.key.transport
		if s.key.impl != implMeerkatd {
			label = s.key.impl + " bench · " + s.key.transport
		}
		rows = append(rows, row{label, s.key.impl, s.key.transport, p50, p99})
		for _, v := range slices.Concat(p50, p99) {
			if !math.IsNaN(v) && !math.IsInf(v, 0) {
				hi = max(hi, v)
			}
		}
	}
	if len(rows) == 0 {
		return nil
	}
	c, x := newChart(chartTop, len(rows), hi, "latency of one exchange, sequential (µs)")
	for i, rw := range rows {
		hr := htmlRow{Label: rw.label, Impl: rw.impl, Transport: rw.tr}
		rowGeometry(&hr, chartTop, i)
		top := chartTop + float64(i)*rowH
		var words []string
		for _, pc := range []struct {
			name string
			vs   []float64
		}{{"p50", rw.p50}, {"p99", rw.p99}} {
			if len(pc.vs) == 0 {
				continue
			}
			for j, v := range pc.vs {
				hr.Dots = append(hr.Dots, htmlDot{X: px(x(v)), Class: "dot " + pc.name,
					Tip: fmt.Sprintf("%s %s, repetition %d: %s µs", rw.label, pc.name, j+1, num(round3(v)))})
			}
			m := medianF(pc.vs)
			hr.Medians = append(hr.Medians, htmlMark{X: px(x(m)), Y1: px(top + 4), Y2: px(top + rowH - 4), Class: "median " + pc.name,
				Tip: fmt.Sprintf("%s %s median of %d: %s µs", rw.label, pc.name, len(pc.vs), num(round3(m)))})
			words = append(words, pc.name+" "+num(round3(m)))
		}
		hr.ValueLabel = strings.Join(words, " · ") + " µs"
		c.Rows = append(c.Rows, hr)
	}
	return c
}

// Distribution geometry: a row is a histogram.
const (
	distRowH = 56.0
	distBins = 80
)

// distributionChart charts every round trip of the sequential scenario
// and of its raw anchor, pooled over the repetitions, per transport: a
// histogram over an axis that ends near the largest p99.5, the round
// trips beyond it counted in words; nil without any.
func (r *results) distributionChart() *htmlChart {
	type row struct {
		label, impl, tr, class string
		v                      []float64 // sorted
	}
	var rows []row
	hi := 0.0
	for _, s := range r.series {
		v := slices.Clone(r.samples[s.key])
		if len(v) == 0 {
			continue
		}
		slices.Sort(v)
		rw := row{label: s.key.transport, impl: s.key.impl, tr: s.key.transport, class: "bin", v: v}
		if s.key.scenario == scAnchorRawSeq {
			rw.label, rw.class = s.key.transport+" · raw anchor", "bin anchor"
		}
		rows = append(rows, rw)
		hi = max(hi, sortedQuantile(v, 0.995))
	}
	if len(rows) == 0 || !(hi > 0) {
		return nil
	}
	end, step := niceAxis(hi)
	plotW := chartW - chartLeft - chartRight
	x := func(v float64) float64 { return chartLeft + plotW*min(max(v, 0), end)/end }
	axisY := chartTop + float64(len(rows))*distRowH
	c := &htmlChart{Width: px(chartW), Height: px(axisY + axisH), Left: px(chartLeft), Right: px(chartW - chartRight),
		AxisY: px(axisY), TitleY: px(axisY + axisH - 6), TitleX: px(chartLeft + plotW/2), Title: "round trip of one exchange, sequential (µs)"}
	for t := 0.0; t <= end+step/2; t += step {
		c.Ticks = append(c.Ticks, htmlAxisTick{X: px(x(t)), Label: tickLabel(t)})
	}
	width := end / distBins
	for i, rw := range rows {
		top := chartTop + float64(i)*distRowH
		hr := htmlRow{Label: rw.label, Impl: rw.impl, Transport: rw.tr, Y: px(top + distRowH/2 + 4), Mid: px(top + distRowH/2)}
		var counts [distBins]int
		beyond := 0
		for _, v := range rw.v {
			b := int(v / width)
			if b >= distBins {
				beyond++
				continue
			}
			counts[max(b, 0)]++
		}
		most := slices.Max(counts[:])
		n := len(rw.v)
		for b, k := range counts {
			if k == 0 {
				continue
			}
			h := (distRowH - 12) * float64(k) / float64(most)
			lo := float64(b) * width
			hr.Bins = append(hr.Bins, htmlBin{X: px(x(lo)), Y: px(top + distRowH - 6 - h), W: px(max(plotW/distBins-1, 1)), H: px(h), Class: rw.class,
				Tip: fmt.Sprintf("%s: %d of %d round trips (%s%%) from %s to %s µs", rw.label, k, n, num(round3(100*float64(k)/float64(n))), num(round3(lo)), num(round3(lo+width)))})
		}
		for _, q := range []struct {
			name string
			p    float64
		}{{"p50", 0.50}, {"p99", 0.99}} {
			v := sortedQuantile(rw.v, q.p)
			hr.Medians = append(hr.Medians, htmlMark{X: px(x(v)), Y1: px(top + 4), Y2: px(top + distRowH - 4), Class: "median " + q.name,
				Tip: fmt.Sprintf("%s %s: %s µs", rw.label, q.name, num(round3(v)))})
		}
		hr.Stats = []string{strconv.Itoa(n)}
		for _, p := range []float64{0.50, 0.90, 0.99, 0.999, 1} {
			hr.Stats = append(hr.Stats, num(round3(sortedQuantile(rw.v, p))))
		}
		hr.Stats = append(hr.Stats, fmt.Sprintf("%d above %s µs", beyond, tickLabel(end)))
		c.Rows = append(c.Rows, hr)
	}
	return c
}

// throughputChart charts pipelined exchanges/s per transport with the
// raw anchors of that transport and the NATS bench's figure, against the
// crypto ceiling; nil without a pipelined scenario or anchor.
func (r *results) throughputChart() *htmlChart {
	type bar struct {
		label, class, impl, tr string
		vs                     []float64
	}
	var bars []bar
	for _, s := range r.series {
		vs := s.values[mRate]
		if len(vs) == 0 {
			continue
		}
		switch {
		case s.key.impl == implMeerkatd && s.key.scenario == scPipelined:
			bars = append(bars, bar{"pipelined · " + s.key.transport, "bar pipelined", s.key.impl, s.key.transport, vs})
		case s.key.impl == implMeerkatd && s.key.scenario == scAnchorRawPipe:
			bars = append(bars, bar{"raw anchor · " + s.key.transport, "bar anchor", s.key.impl, s.key.transport, vs})
		case s.key.impl == implMeerkatd && s.key.scenario == scAnchorRawBatch:
			bars = append(bars, bar{"raw batched anchor · " + s.key.transport, "bar anchor batched", s.key.impl, s.key.transport, vs})
		case s.key.impl != implMeerkatd && s.key.scenario == scPipelined:
			bars = append(bars, bar{s.key.impl + " bench · " + s.key.transport, "bar nats", s.key.impl, s.key.transport, vs})
		}
	}
	if len(bars) == 0 {
		return nil
	}
	// Per transport in run order meerkatd's bar, then its raw anchors';
	// the NATS bench's last.
	trOrder := map[string]int{}
	for _, b := range bars {
		if _, ok := trOrder[b.tr]; !ok && b.class == "bar pipelined" {
			trOrder[b.tr] = len(trOrder)
		}
	}
	order := map[string]int{"bar pipelined": 0, "bar anchor": 1, "bar anchor batched": 2, "bar nats": 3}
	rank := func(b bar) (int, int) {
		if b.class == "bar nats" {
			return len(bars) + 1, 0
		}
		t, ok := trOrder[b.tr]
		if !ok {
			t = len(bars)
		}
		return t, order[b.class]
	}
	slices.SortStableFunc(bars, func(a, b bar) int {
		at, ac := rank(a)
		bt, bc := rank(b)
		return cmp.Or(cmp.Compare(at, bt), cmp.Compare(ac, bc))
	})
	hi := 0.0
	for _, b := range bars {
		for _, v := range b.vs {
			if !math.IsNaN(v) && !math.IsInf(v, 0) {
				hi = max(hi, v)
			}
		}
	}
	ceil := r.ceiling()
	hasCeil := !math.IsNaN(ceil) && !math.IsInf(ceil, 0)
	top := chartTop
	if hasCeil {
		hi = max(hi, ceilingTarget*ceil)
		top += refBand
	}
	c, x := newChart(top, len(bars), hi, "exchanges per second, pipelined (128 in flight)")
	c.Classes = map[string]bool{}
	for i, b := range bars {
		c.Classes[b.class] = true
		hr := htmlRow{Label: b.label, Class: b.class, Impl: b.impl, Transport: b.tr}
		rowGeometry(&hr, top, i)
		m := medianF(b.vs)
		hr.BarW = px(x(m) - chartLeft)
		hr.Value, hr.ValueX = num(round3(m)), px(x(m)+4)
		hr.Tip = fmt.Sprintf("%s: median %s exchanges/s over %s", b.label, num(round3(m)), repetitions(len(b.vs)))
		if len(b.vs) > 1 {
			hr.WhiskerX1, hr.WhiskerX2 = px(x(slices.Min(b.vs))), px(x(slices.Max(b.vs)))
			hr.Tip += fmt.Sprintf(" [%s – %s]", num(round3(slices.Min(b.vs))), num(round3(slices.Max(b.vs))))
			hr.ValueX = px(max(x(m), x(slices.Max(b.vs))) + 4)
		}
		c.Rows = append(c.Rows, hr)
	}
	if hasCeil {
		for _, ref := range []struct {
			class, label string
			v            float64
		}{
			{"ref", "crypto ceiling " + num(round3(ceil)), ceil},
			{"ref target", fmt.Sprintf("target %s × ceiling", num(ceilingTarget)), ceilingTarget * ceil},
		} {
			c.Refs = append(c.Refs, htmlRef{Class: ref.class, X: px(x(ref.v)), Y1: px(top - 4), Y2: c.AxisY, LabelY: px(top - 6), Label: ref.label})
		}
	}
	return c
}

var htmlTmpl = template.Must(template.New("page").Parse(`<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8"/>
<meta name="viewport" content="width=device-width, initial-scale=1"/>
<title>meerkatd bench, {{.Date}}</title>
<style>
body { font-family: system-ui, sans-serif; margin: 2em auto; max-width: 60em; padding: 0 1em; color: #222; }
h1 { font-size: 1.5em; }
h2 { font-size: 1.2em; margin-top: 2em; }
dl { display: grid; grid-template-columns: max-content auto; gap: 0.2em 1em; }
dt { font-weight: bold; }
dd { margin: 0; }
code { font-family: ui-monospace, monospace; }
table { border-collapse: collapse; font-size: 0.9em; }
th, td { text-align: left; padding: 0.2em 0.6em; border-bottom: 1px solid #ddd; }
td.num { text-align: right; font-variant-numeric: tabular-nums; }
tr.fail td { background: #fde8e8; }
.pass { color: #1a7f37; font-weight: bold; }
.fail-verdict { color: #c62828; font-weight: bold; }
.note { color: #666; }
svg { display: block; max-width: 100%; height: auto; font-size: 12px; }
svg text { fill: #222; }
svg .axis { stroke: #888; stroke-width: 1; }
svg .grid { stroke: #eee; stroke-width: 1; }
svg .tick { fill: #555; text-anchor: middle; }
svg .title { text-anchor: middle; fill: #444; }
svg .label { text-anchor: end; }
svg .dot.p50 { fill: #1f77b4; fill-opacity: 0.7; }
svg .dot.p99 { fill: #d62728; fill-opacity: 0.7; }
svg .median { stroke-width: 3; }
svg .median.p50 { stroke: #1f77b4; }
svg .median.p99 { stroke: #d62728; }
svg .bar.pipelined { fill: #1f77b4; }
svg .bin { fill: #1f77b4; }
svg .bin.anchor { fill: #9ecae1; }
svg .bar.anchor { fill: #9ecae1; }
svg .bar.anchor.batched { fill: #c6dbef; }
svg .bar.nats { fill: #ff7f0e; }
svg .whisker { stroke: #333; stroke-width: 1.5; }
svg .ref { stroke: #c62828; stroke-width: 1.5; stroke-dasharray: 5 3; }
svg .ref.target { stroke-dasharray: 1 3; }
svg .reflabel { fill: #c62828; text-anchor: end; }
.key span { margin-right: 1.2em; }
.sw { display: inline-block; width: 0.8em; height: 0.8em; margin-right: 0.3em; vertical-align: middle; }
</style>
</head>
<body>
<h1>meerkatd bench</h1>
<dl>
<dt>date</dt><dd>{{.Date}}</dd>
<dt>machine</dt><dd>{{.Machine}}, {{.Cores}} CPUs, {{.GoVersion}}</dd>
<dt>run</dt><dd>{{.Reps}} repetition{{if ne .Reps 1}}s{{end}} {{if .Warmup}}after a warm-up repetition{{else}}with no warm-up{{end}}; {{.Transports}} on loopback</dd>
<dt>options</dt><dd><code>meerkatd bench {{.Options}}</code></dd>
{{- if .Ceiling}}
<dt>crypto ceiling</dt><dd>{{.Ceiling}}</dd>
{{- end}}
</dl>
{{- if .Quick}}
<p class="note">--quick: a smoke run; the figures mean nothing.</p>
{{- end}}
{{- if .Empty}}
<p>Nothing to show: this run recorded no scenarios.</p>
{{- else}}
<h2>Latency: sequential</h2>
{{- with .Latency}}
{{- $c := .}}
<p class="key">One dot per repetition, the thick mark the median over the repetitions. <span><span class="sw" style="background:#1f77b4"></span>p50</span><span><span class="sw" style="background:#d62728"></span>p99</span></p>
<svg viewBox="0 0 {{.Width}} {{.Height}}" width="{{.Width}}" height="{{.Height}}" role="img" aria-label="sequential latency per transport">
{{- template "axis" .}}
{{- range .Rows}}
<g class="row" data-impl="{{.Impl}}" data-transport="{{.Transport}}">
<text class="label" x="{{$c.Left}}" dx="-8" y="{{.Y}}">{{.Label}}</text>
{{- range .Medians}}
<line class="{{.Class}}" x1="{{.X}}" x2="{{.X}}" y1="{{.Y1}}" y2="{{.Y2}}"><title>{{.Tip}}</title></line>
{{- end}}
{{- $mid := .Mid}}
{{- range .Dots}}
<circle class="{{.Class}}" cx="{{.X}}" cy="{{$mid}}" r="4"><title>{{.Tip}}</title></circle>
{{- end}}
</g>
{{- end}}
</svg>
<table>
<tr><th>transport</th><th>median</th></tr>
{{- range .Rows}}
<tr><td>{{.Label}}</td><td>{{.ValueLabel}}</td></tr>
{{- end}}
</table>
{{- else}}
<p>No sequential scenario in this run.</p>
{{- end}}
<h2>Latency distribution: sequential</h2>
{{- with .Distribution}}
{{- $c := .}}
<p class="key">Every round trip of the counted repetitions, pooled: how many fall in each interval of the axis (a row's tallest bar is the row's height); the marks are p50 and p99. The raw anchor is the crypto of an exchange alone between the same two processes. <span><span class="sw" style="background:#1f77b4"></span>meerkatd</span><span><span class="sw" style="background:#9ecae1"></span>raw anchor</span></p>
<svg viewBox="0 0 {{.Width}} {{.Height}}" width="{{.Width}}" height="{{.Height}}" role="img" aria-label="distribution of sequential round trips per transport">
{{- template "axis" .}}
{{- range .Rows}}
<g class="row" data-impl="{{.Impl}}" data-transport="{{.Transport}}">
<text class="label" x="{{$c.Left}}" dx="-8" y="{{.Y}}">{{.Label}}</text>
{{- range .Bins}}
<rect class="{{.Class}}" x="{{.X}}" y="{{.Y}}" width="{{.W}}" height="{{.H}}"><title>{{.Tip}}</title></rect>
{{- end}}
{{- range .Medians}}
<line class="{{.Class}}" x1="{{.X}}" x2="{{.X}}" y1="{{.Y1}}" y2="{{.Y2}}"><title>{{.Tip}}</title></line>
{{- end}}
</g>
{{- end}}
</svg>
<table>
<tr><th>transport</th><th>round trips</th><th>p50 µs</th><th>p90 µs</th><th>p99 µs</th><th>p99.9 µs</th><th>max µs</th><th>beyond the axis</th></tr>
{{- range .Rows}}
<tr><td>{{.Label}}</td>{{range .Stats}}<td>{{.}}</td>{{end}}</tr>
{{- end}}
</table>
{{- else}}
<p>No round trips recorded in this run.</p>
{{- end}}
<h2>Throughput: pipelined</h2>
{{- with .Throughput}}
{{- $c := .}}
<p class="key">The bar is the median over the repetitions, the line across it the range. <span><span class="sw" style="background:#1f77b4"></span>meerkatd</span>{{if index .Classes "bar anchor"}}<span><span class="sw" style="background:#9ecae1"></span>raw anchor (the crypto of an exchange alone between two processes)</span>{{end}}{{if index .Classes "bar anchor batched"}}<span><span class="sw" style="background:#c6dbef"></span>raw batched anchor (the crypto alone of the protocol two nodes speak)</span>{{end}}{{if index .Classes "bar nats"}}<span><span class="sw" style="background:#ff7f0e"></span>NATS bench</span>{{end}}{{if .Refs}}<span><span class="sw" style="background:#c62828"></span>crypto ceiling (cores / anchor_exchange), and the pipelined check's target (dotted)</span>{{end}}</p>
<svg viewBox="0 0 {{.Width}} {{.Height}}" width="{{.Width}}" height="{{.Height}}" role="img" aria-label="pipelined exchanges per second">
{{- template "axis" .}}
{{- range .Rows}}
<g class="row" data-impl="{{.Impl}}" data-transport="{{.Transport}}">
<text class="label" x="{{$c.Left}}" dx="-8" y="{{.Y}}">{{.Label}}</text>
<rect class="{{.Class}}" x="{{$c.Left}}" y="{{.Top}}" width="{{.BarW}}" height="{{.H}}"><title>{{.Tip}}</title></rect>
{{- if .WhiskerX1}}
<line class="whisker" x1="{{.WhiskerX1}}" x2="{{.WhiskerX2}}" y1="{{.Mid}}" y2="{{.Mid}}"/>
{{- end}}
<text x="{{.ValueX}}" y="{{.Y}}">{{.Value}}</text>
</g>
{{- end}}
{{- range .Refs}}
<line class="{{.Class}}" x1="{{.X}}" x2="{{.X}}" y1="{{.Y1}}" y2="{{.Y2}}"/>
<text class="reflabel" x="{{.X}}" dx="-4" y="{{.LabelY}}">{{.Label}}</text>
{{- end}}
</svg>
{{- else}}
<p>No pipelined scenario in this run.</p>
{{- end}}
{{- end}}
<h2>Checks</h2>
{{- if .Checks}}
<p>{{len .Checks}} checks, {{.Failed}} failed (per-repetition ratios, median).</p>
<table class="checks">
<tr><th>verdict</th><th>scenario</th><th>target</th><th>value</th><th>limit</th><th>best within reach</th></tr>
{{- range .Checks}}
<tr class="{{if .Pass}}pass-row{{else}}fail{{end}}"><td>{{if .Pass}}<span class="pass">PASS</span>{{else}}<span class="fail-verdict">FAIL</span>{{end}}</td><td>{{.Scenario}}/{{.Transport}}</td><td>{{.Target}}</td><td class="num">{{.Value}}</td><td class="num">{{.Limit}}</td><td>{{if .Bound}}<span title="{{.Basis}}">{{.Bound}}{{if .Unreachable}} (unreachable here){{else if .OwnCost}} (limited by its own CPU cost){{end}}</span>{{end}}</td></tr>
{{- end}}
</table>
{{- else}}
<p>No checks were computed.</p>
{{- end}}
{{- range .Notes}}
<p class="note">note: {{.}}</p>
{{- end}}
{{- if .Metrics}}
<h2>Every figure</h2>
<table class="metrics">
<tr><th>impl</th><th>scenario</th><th>transport</th><th>inbox</th><th>metric</th><th>median</th><th>min</th><th>max</th></tr>
{{- range .Metrics}}
<tr><td>{{.Impl}}</td><td>{{.Scenario}}</td><td>{{.Transport}}</td><td>{{.Inbox}}</td><td>{{.Metric}}</td><td class="num">{{.Median}}</td><td class="num">{{.Min}}</td><td class="num">{{.Max}}</td></tr>
{{- end}}
</table>
{{- end}}
</body>
</html>
{{define "axis"}}
{{- $c := .}}
{{- range .Ticks}}
<line class="grid" x1="{{.X}}" x2="{{.X}}" y1="0" y2="{{$c.AxisY}}"/>
<text class="tick" x="{{.X}}" y="{{$c.AxisY}}" dy="16">{{.Label}}</text>
{{- end}}
<line class="axis" x1="{{.Left}}" x2="{{.Right}}" y1="{{.AxisY}}" y2="{{.AxisY}}"/>
<text class="title" x="{{.TitleX}}" y="{{.TitleY}}">{{.Title}}</text>
{{- end}}`))
