package main

import (
	"encoding/json"
	"fmt"
	"io"
	"math"
	"slices"
	"text/tabwriter"

	"github.com/meerkatd/meerkatd/bench"
)

// result is one scenario's measurements, printed as a [bench.Line], the
// JSON line of meerkatd's bench:
//
//	{"impl":"nats","scenario":"sequential","transport":"tcp","inbox":"","reps":5,
//	 "metrics":{"p50_us":{"median":…,"min":…,"max":…,"values":[…]},…},"checks":[]}
type result struct {
	scenario string
	reps     int
	names    []string             // the scenario's metrics, in table order
	values   map[string][]float64 // by metric, in repetition order
}

func newResult(scenario string, reps int, names ...string) *result {
	return &result{scenario: scenario, reps: reps, names: names, values: map[string][]float64{}}
}

// add records one repetition's value of metric name.
func (r *result) add(name string, v float64) {
	if !slices.Contains(r.names, name) {
		panic("bug: unknown metric " + name)
	}
	r.values[name] = append(r.values[name], round(v))
}

// line returns the result as meerkatd's bench prints its own; NATS has no
// inbox mode, and meerkatd's bench computes the checks.
func (r *result) line() bench.Line {
	l := bench.Line{Impl: "nats", Scenario: r.scenario, Transport: "tcp", Reps: r.reps,
		Metrics: map[string]bench.Metric{}, Checks: []bench.Check{}}
	for _, n := range r.names {
		l.Metrics[n] = summary(r.values[n])
	}
	return l
}

// summary returns the metric over values, in repetition order.
func summary(values []float64) bench.Metric {
	if len(values) == 0 {
		return bench.Metric{Values: []float64{}}
	}
	s := slices.Sorted(slices.Values(values))
	n := len(s)
	m := bench.Metric{Median: s[n/2], Min: s[0], Max: s[n-1], Values: values}
	if n%2 == 0 {
		m.Median = round((s[n/2-1] + s[n/2]) / 2)
	}
	return m
}

// round keeps one decimal: more is noise.
func round(v float64) float64 { return math.Round(v*10) / 10 }

// writeJSON prints one JSON object per line per result.
func writeJSON(w io.Writer, rs []*result) error {
	enc := json.NewEncoder(w)
	for _, r := range rs {
		if err := enc.Encode(r.line()); err != nil {
			return err
		}
	}
	return nil
}

// writeTable prints the results for people.
func writeTable(w io.Writer, header string, rs []*result) error {
	fmt.Fprintln(w, header)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "scenario\tmetric\tmedian\tmin\tmax\t")
	for _, r := range rs {
		for _, n := range r.names {
			s := summary(r.values[n])
			fmt.Fprintf(tw, "%s\t%s\t%.1f\t%.1f\t%.1f\t\n", r.scenario, n, s.Median, s.Min, s.Max)
		}
	}
	return tw.Flush()
}
