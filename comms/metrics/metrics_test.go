package metrics

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/meerkatd/meerkatd/internal/testutil"
)

// fakeSource reports the figures and readiness it is given.
type fakeSource struct {
	mu     sync.Mutex
	f      Figures
	ready  error
	checks int           // Ready calls
	gate   chan struct{} // if set, Ready waits for it
}

func (s *fakeSource) Figures() Figures {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.f
}

func (s *fakeSource) Ready(context.Context) error {
	s.mu.Lock()
	s.checks++
	gate := s.gate
	s.mu.Unlock()
	if gate != nil {
		<-gate
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.ready
}

func (s *fakeSource) set(f func(*fakeSource)) {
	s.mu.Lock()
	defer s.mu.Unlock()
	f(s)
}

func fetch(t *testing.T, addr, path string) (int, string, http.Header) {
	t.Helper()
	resp, err := (&http.Client{Timeout: 10 * time.Second}).Get("http://" + addr + path)
	if err != nil {
		t.Fatalf("GET %s: %v", path, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b), resp.Header
}

// Scrape fetches /metrics from addr and parses it with the Prometheus
// text parser.
func Scrape(t *testing.T, addr string) map[string]*dto.MetricFamily {
	t.Helper()
	code, body, _ := fetch(t, addr, "/metrics")
	if code != http.StatusOK {
		t.Fatalf("/metrics: %d %q", code, body)
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(strings.NewReader(body))
	if err != nil {
		t.Fatalf("/metrics does not parse: %v\n%s", err, body)
	}
	return fams
}

// Value is the value of the series name with the given label pairs (name,
// value, name, value…), and whether it exists; for a histogram its
// sample count.
func Value(fams map[string]*dto.MetricFamily, name string, labels ...string) (float64, bool) {
	f := fams[name]
	if f == nil {
		return 0, false
	}
next:
	for _, m := range f.GetMetric() {
		have := map[string]string{}
		for _, l := range m.GetLabel() {
			have[l.GetName()] = l.GetValue()
		}
		for i := 0; i+1 < len(labels); i += 2 {
			if have[labels[i]] != labels[i+1] {
				continue next
			}
		}
		switch {
		case m.Counter != nil:
			return m.GetCounter().GetValue(), true
		case m.Gauge != nil:
			return m.GetGauge().GetValue(), true
		case m.Histogram != nil:
			return float64(m.GetHistogram().GetSampleCount()), true
		}
	}
	return 0, false
}

func serve(t *testing.T, src Source) (*Metrics, *Server) {
	t.Helper()
	testutil.CheckGoroutines(t)
	m := New(src)
	s, err := m.Listen("tcp", "127.0.0.1:0", nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return m, s
}

func TestSeriesFromFigures(t *testing.T) {
	src := &fakeSource{f: Figures{
		Received: 5, Duplicates: 1, AcksSent: 6,
		Refused:    map[string]uint64{"bad_signature": 2, "untrusted": 3},
		Sends:      map[string]uint64{"acked": 4, "retry": 2},
		InboxItems: 3, InboxBytes: 1234, WaitingReads: 2,
		Peers: []PeerFigures{
			{Name: "bob", Queued: 2, Breaker: "open"},
			{Name: "carol", Queued: 0, Breaker: "half_open"},
			{Name: "", Queued: 1, Breaker: "closed"},    // no longer trusted
			{Name: "other", Queued: 5, Breaker: "open"}, // a peer's name, not the bucket
		},
		DeadLetters: 7, Connections: 3, Authenticated: 2, DBBytes: 4096,
		NATS: &NATSFigures{Connected: true, Reconnects: 2, Stored: 11},
	}}
	m, s := serve(t, src)
	m.ObserveRoundTrip(3 * time.Millisecond)
	m.ObserveRoundTrip(40 * time.Millisecond)
	fams := Scrape(t, s.Addr().String())
	for _, tc := range []struct {
		name   string
		labels []string
		want   float64
	}{
		{"meerkatd_envelopes_received_total", nil, 5},
		{"meerkatd_envelopes_duplicate_total", nil, 1},
		{"meerkatd_acks_sent_total", nil, 6},
		{"meerkatd_envelopes_refused_total", []string{"reason", "untrusted"}, 3},
		{"meerkatd_envelopes_refused_total", []string{"reason", "bad_signature"}, 2},
		{"meerkatd_sends_total", []string{"outcome", "acked"}, 4},
		{"meerkatd_sends_total", []string{"outcome", "retry"}, 2},
		{"meerkatd_ack_round_trip_seconds", nil, 2},
		{"meerkatd_inbox_items", nil, 3},
		{"meerkatd_inbox_bytes", nil, 1234},
		{"meerkatd_inbox_waiting_reads", nil, 2},
		{"meerkatd_outbox_queued", []string{"peer", "bob"}, 2},
		{"meerkatd_outbox_queued", []string{"peer", OtherPeer}, 1},
		{"meerkatd_outbox_queued", []string{"peer", "other"}, 5},
		{"meerkatd_outbox_breaker", []string{"peer", "other", "state", "open"}, 1},
		{"meerkatd_outbox_breaker", []string{"peer", "bob", "state", "open"}, 1},
		{"meerkatd_outbox_breaker", []string{"peer", "bob", "state", "closed"}, 0},
		{"meerkatd_outbox_breaker", []string{"peer", "carol", "state", "half_open"}, 1},
		{"meerkatd_dead_letters", nil, 7},
		{"meerkatd_inbound_connections", []string{"state", "authenticated"}, 2},
		{"meerkatd_inbound_connections", []string{"state", "unauthenticated"}, 1},
		{"meerkatd_db_bytes", nil, 4096},
		{"meerkatd_nats_connected", nil, 1},
		{"meerkatd_nats_reconnects_total", nil, 2},
		{"meerkatd_nats_stored_in_broker_total", nil, 11},
	} {
		if got, ok := Value(fams, tc.name, tc.labels...); !ok || got != tc.want {
			t.Errorf("%s%v = %v (present %v), want %v", tc.name, tc.labels, got, ok, tc.want)
		}
	}
	if f := fams["meerkatd_envelopes_received_total"]; f.GetType() != dto.MetricType_COUNTER {
		t.Errorf("received is a %v, want a counter", f.GetType())
	}
	if f := fams["meerkatd_ack_round_trip_seconds"]; f.GetType() != dto.MetricType_HISTOGRAM {
		t.Errorf("round trip is a %v, want a histogram", f.GetType())
	}
	// Figures are read at each scrape: a change shows at the next one.
	src.set(func(s *fakeSource) { s.f.Received = 9 })
	if got, _ := Value(Scrape(t, s.Addr().String()), "meerkatd_envelopes_received_total"); got != 9 {
		t.Errorf("received after a change: %v, want 9", got)
	}
	// Without NATS configured its series are absent, not zero.
	src.set(func(s *fakeSource) { s.f.NATS = nil })
	if _, ok := Value(Scrape(t, s.Addr().String()), "meerkatd_nats_connected"); ok {
		t.Errorf("meerkatd_nats_connected is present without NATS")
	}
}

// Peer labels stay bounded: the first MaxPeerLabels names in order have
// their own, the rest are summed as other.
func TestPeerLabelsBounded(t *testing.T) {
	var peers []PeerFigures
	for i := range MaxPeerLabels + 44 {
		peers = append(peers, PeerFigures{Name: fmt.Sprintf("peer%04d", i), Queued: 1, Breaker: "open"})
	}
	_, s := serve(t, &fakeSource{f: Figures{Peers: peers}})
	fams := Scrape(t, s.Addr().String())
	if n := len(fams["meerkatd_outbox_queued"].GetMetric()); n != MaxPeerLabels+1 {
		t.Fatalf("%d queued series, want %d", n, MaxPeerLabels+1)
	}
	if v, _ := Value(fams, "meerkatd_outbox_queued", "peer", fmt.Sprintf("peer%04d", MaxPeerLabels-1)); v != 1 {
		t.Errorf("the last named peer: %v", v)
	}
	if _, ok := Value(fams, "meerkatd_outbox_queued", "peer", fmt.Sprintf("peer%04d", MaxPeerLabels)); ok {
		t.Error("a peer beyond the bound has its own label")
	}
	if v, _ := Value(fams, "meerkatd_outbox_queued", "peer", OtherPeer); v != 44 {
		t.Errorf("other queued = %v, want 44", v)
	}
	if v, _ := Value(fams, "meerkatd_outbox_breaker", "peer", OtherPeer, "state", "open"); v != 44 {
		t.Errorf("other open breakers = %v, want 44", v)
	}
}

func TestHealthAndReadiness(t *testing.T) {
	src := &fakeSource{}
	m, s := serve(t, src)
	m.ready.every = 0 // every request checks
	addr := s.Addr().String()
	if code, body, _ := fetch(t, addr, "/healthz"); code != http.StatusOK {
		t.Fatalf("/healthz: %d %q", code, body)
	}
	if code, body, _ := fetch(t, addr, "/readyz"); code != http.StatusOK {
		t.Fatalf("/readyz ready: %d %q", code, body)
	}
	src.set(func(s *fakeSource) { s.ready = errors.New("store: not writable: disk I/O error\nsecond line") })
	code, body, _ := fetch(t, addr, "/readyz")
	if code != http.StatusServiceUnavailable || body != "store: not writable: disk I/O error\n" {
		t.Fatalf("/readyz not ready: %d %q", code, body)
	}
	if code, _, _ := fetch(t, addr, "/healthz"); code != http.StatusOK {
		t.Fatalf("/healthz while not ready: %d", code)
	}
	if code, _, _ := fetch(t, addr, "/nothing"); code != http.StatusNotFound {
		t.Fatalf("/nothing: %d", code)
	}
}

// Close stops the server: no goroutine stays (CheckGoroutines), the port
// answers no more, and a second Close is harmless.
func TestServerClose(t *testing.T) {
	_, s := serve(t, &fakeSource{})
	addr := s.Addr().String()
	fetch(t, addr, "/healthz") // a kept-alive connection too
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s.Close()
	if _, err := (&http.Client{Timeout: 5 * time.Second}).Get("http://" + addr + "/healthz"); err == nil {
		t.Fatal("the server answers after Close")
	}
}

// Oversized request headers are refused.
func TestHeaderBound(t *testing.T) {
	_, s := serve(t, &fakeSource{})
	req, _ := http.NewRequest("GET", "http://"+s.Addr().String()+"/healthz", nil)
	req.Header.Set("X-Big", strings.Repeat("a", 64<<10))
	resp, err := (&http.Client{Timeout: 10 * time.Second}).Do(req)
	if err != nil {
		return // the server may close the connection outright
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusRequestHeaderFieldsTooLarge {
		t.Fatalf("a 64 KiB header: %d", resp.StatusCode)
	}
}

// Many clients asking /readyz at once run one readiness check (a write
// transaction on the store), whose outcome they all get, and it is kept
// for a while: the metrics port cannot be used to hold the store's lock.
func TestReadinessChecksCoalesce(t *testing.T) {
	gate := make(chan struct{})
	src := &fakeSource{gate: gate}
	_, s := serve(t, src)
	addr := s.Addr().String()
	var wg sync.WaitGroup
	codes := make(chan int, 20)
	for range 20 {
		wg.Go(func() {
			code, _, _ := fetch(t, addr, "/readyz")
			codes <- code
		})
	}
	testutil.WaitFor(t, 10*time.Second, "the first check to start", func() bool {
		src.mu.Lock()
		defer src.mu.Unlock()
		return src.checks > 0
	})
	time.Sleep(50 * time.Millisecond) // the other requests arrive and wait
	close(gate)
	wg.Wait()
	close(codes)
	for code := range codes {
		if code != http.StatusOK {
			t.Fatalf("/readyz: %d", code)
		}
	}
	if code, _, _ := fetch(t, addr, "/readyz"); code != http.StatusOK {
		t.Fatalf("/readyz after: %d", code)
	}
	src.mu.Lock()
	defer src.mu.Unlock()
	if src.checks != 1 {
		t.Fatalf("%d readiness checks for 21 requests within a second, want 1", src.checks)
	}
}
