package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"slices"
	"text/tabwriter"
)

// result is one scenario's measurements, printed as meerkatd's bench
// prints its own:
//
//	{"impl":"nats","scenario":"sequential","transport":"tcp","inbox":"","reps":5,
//	 "metrics":{"p50_us":{"median":…,"min":…,"max":…,"values":[…]},…},"checks":[]}
type result struct {
	Impl      string            `json:"impl"`
	Scenario  string            `json:"scenario"`
	Transport string            `json:"transport"`
	Inbox     string            `json:"inbox"` // meerkatd's inbox mode; NATS has none
	Reps      int               `json:"reps"`
	Metrics   metrics           `json:"metrics"`
	Checks    []json.RawMessage `json:"checks"` // meerkatd's target checks; none here
}

func newResult(scenario string, reps int, names ...string) *result {
	r := &result{Impl: "nats", Scenario: scenario, Transport: "tcp", Reps: reps, Checks: []json.RawMessage{}}
	for _, n := range names {
		r.Metrics = append(r.Metrics, namedMetric{name: n})
	}
	return r
}

// add records one repetition's value of metric name.
func (r *result) add(name string, v float64) {
	for i := range r.Metrics {
		if r.Metrics[i].name == name {
			r.Metrics[i].Values = append(r.Metrics[i].Values, round(v))
			return
		}
	}
	panic("bug: unknown metric " + name)
}

// metric is one metric over the repetitions, in repetition order.
type metric struct {
	Median float64   `json:"median"`
	Min    float64   `json:"min"`
	Max    float64   `json:"max"`
	Values []float64 `json:"values"`
}

type namedMetric struct {
	name string
	metric
}

// summary returns m with Median, Min and Max filled in.
func (m metric) summary() metric {
	if len(m.Values) == 0 {
		return metric{Values: []float64{}}
	}
	s := slices.Sorted(slices.Values(m.Values))
	n := len(s)
	m.Min, m.Max = s[0], s[n-1]
	m.Median = s[n/2]
	if n%2 == 0 {
		m.Median = round((s[n/2-1] + s[n/2]) / 2)
	}
	return m
}

// metrics is a JSON object whose members keep the scenario's order.
type metrics []namedMetric

func (ms metrics) MarshalJSON() ([]byte, error) {
	var b bytes.Buffer
	b.WriteByte('{')
	for i, m := range ms {
		if i > 0 {
			b.WriteByte(',')
		}
		k, _ := json.Marshal(m.name)
		v, err := json.Marshal(m.summary())
		if err != nil {
			return nil, err
		}
		b.Write(k)
		b.WriteByte(':')
		b.Write(v)
	}
	b.WriteByte('}')
	return b.Bytes(), nil
}

// round keeps one decimal: more is noise.
func round(v float64) float64 { return math.Round(v*10) / 10 }

// writeJSON prints one JSON object per line per result.
func writeJSON(w io.Writer, rs []*result) error {
	enc := json.NewEncoder(w)
	for _, r := range rs {
		if err := enc.Encode(r); err != nil {
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
		for _, m := range r.Metrics {
			s := m.summary()
			fmt.Fprintf(tw, "%s\t%s\t%.1f\t%.1f\t%.1f\t\n", r.Scenario, m.name, s.Median, s.Min, s.Max)
		}
	}
	return tw.Flush()
}
