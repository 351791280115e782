package metrics

import (
	"cmp"
	"context"
	"errors"
	"log/slog"
	"net"
	"net/http"
	"slices"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// MaxPeerLabels bounds the peer label values: the first peers by name get
// their own, the others are summed under [OtherPeer].
const MaxPeerLabels = 256

// OtherPeer is the peer label of the peers beyond MaxPeerLabels.
const OtherPeer = "_other"

// Breaker states, as [PeerFigures.Breaker] gives them.
var breakerStates = []string{"closed", "open", "half_open"}

// Figures is what a [Source] reports at a scrape.
type Figures struct {
	Received   uint64            // envelopes admitted to the inbox
	Duplicates uint64            // repeats acked again, not delivered
	AcksSent   uint64            // acks written
	Refused    map[string]uint64 // by reason
	Sends      map[string]uint64 // delivery attempts by outcome
	InboxItems int
	InboxBytes int64
	// WaitingReads are the reads of the inbox waiting for an item now.
	WaitingReads int
	// Peers are the peers with something queued or a breaker that is not
	// closed.
	Peers         []PeerFigures
	DeadLetters   int
	Connections   int // inbound, open now
	Authenticated int // of which authenticated
	DBBytes       int64
	// NATS is the NATS connection; nil when the node has none
	// configured (its series are then absent).
	NATS *NATSFigures
}

// NATSFigures is the state of the node's NATS connection.
type NATSFigures struct {
	Connected  bool
	Reconnects uint64
	Stored     uint64 // envelopes the broker confirmed storing (JetStream)
}

// PeerFigures is one peer's outbox state.
type PeerFigures struct {
	Name    string // trust-list name ("" if no longer trusted: summed as other)
	Queued  int
	Breaker string // closed, open, half_open
}

// Source is the node as the metrics see it.
type Source interface {
	// Figures returns the figures now.
	Figures() Figures
	// Ready returns nil when the node serves (listeners up, store
	// writable), or why not in one line.
	Ready(ctx context.Context) error
}

// Metrics are a node's registry: its collector and the round-trip
// histogram. Create them with [New] before the node starts sending, so
// that every round trip is observed.
type Metrics struct {
	reg       *prometheus.Registry
	src       Source
	roundTrip prometheus.Histogram
	ready     readyCheck
}

// New makes the registry of src.
func New(src Source) *Metrics {
	m := &Metrics{reg: prometheus.NewRegistry(), src: src, ready: readyCheck{every: readyEvery}}
	m.roundTrip = prometheus.NewHistogram(prometheus.HistogramOpts{
		Name:    "meerkatd_ack_round_trip_seconds",
		Help:    "Time from the start of a delivery attempt to the peer's ack.",
		Buckets: []float64{.0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30},
	})
	m.reg.MustRegister(m.roundTrip, collector{src: src}, collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return m
}

// ObserveRoundTrip records one acknowledged attempt's round trip. It is
// safe on a nil *Metrics (no metrics kept).
func (m *Metrics) ObserveRoundTrip(d time.Duration) {
	if m != nil {
		m.roundTrip.Observe(d.Seconds())
	}
}

var (
	descReceived   = prometheus.NewDesc("meerkatd_envelopes_received_total", "Envelopes admitted to the inbox.", nil, nil)
	descDuplicate  = prometheus.NewDesc("meerkatd_envelopes_duplicate_total", "Repeated envelopes acknowledged again but not delivered twice.", nil, nil)
	descAcks       = prometheus.NewDesc("meerkatd_acks_sent_total", "Acks written to peers.", nil, nil)
	descRefused    = prometheus.NewDesc("meerkatd_envelopes_refused_total", "Envelopes refused without an ack, by reason.", []string{"reason"}, nil)
	descSends      = prometheus.NewDesc("meerkatd_sends_total", "Delivery attempts by outcome.", []string{"outcome"}, nil)
	descInbox      = prometheus.NewDesc("meerkatd_inbox_items", "Unacknowledged items in the inbox.", nil, nil)
	descInboxBytes = prometheus.NewDesc("meerkatd_inbox_bytes", "Size in bytes of the unacknowledged items in the inbox.", nil, nil)
	descWaiting    = prometheus.NewDesc("meerkatd_inbox_waiting_reads", "Reads of the inbox waiting for an item now (inbox --wait, receive_messages with wait).", nil, nil)
	descQueued     = prometheus.NewDesc("meerkatd_outbox_queued", "Reliable sends waiting in the outbox, per peer.", []string{"peer"}, nil)
	descBreaker    = prometheus.NewDesc("meerkatd_outbox_breaker", "1 for the state of a peer's circuit breaker (for peer=\"_other\", how many peers are in it).", []string{"peer", "state"}, nil)
	descDead       = prometheus.NewDesc("meerkatd_dead_letters", "Reliable sends given up on, kept as dead letters.", nil, nil)
	descConns      = prometheus.NewDesc("meerkatd_inbound_connections", "Inbound connections open now, by state.", []string{"state"}, nil)
	descDB         = prometheus.NewDesc("meerkatd_db_bytes", "Size on disk of the database and its write-ahead log.", nil, nil)
	descNATSUp     = prometheus.NewDesc("meerkatd_nats_connected", "1 while the node is connected to a NATS server, else 0 (absent without [nats] servers).", nil, nil)
	descNATSRecon  = prometheus.NewDesc("meerkatd_nats_reconnects_total", "Times the NATS connection was re-established.", nil, nil)
	descNATSStored = prometheus.NewDesc("meerkatd_nats_stored_in_broker_total", "Envelopes the NATS JetStream stream confirmed storing since the node started (stored is not delivered: the recipient's signed ack completes a send).", nil, nil)
)

// collector reads the Source at each scrape.
type collector struct{ src Source }

func (c collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descReceived, descDuplicate, descAcks, descRefused, descSends, descInbox, descInboxBytes,
		descWaiting, descQueued, descBreaker, descDead, descConns, descDB, descNATSUp, descNATSRecon, descNATSStored} {
		ch <- d
	}
}

func (c collector) Collect(ch chan<- prometheus.Metric) {
	f := c.src.Figures()
	counter := func(d *prometheus.Desc, v uint64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, float64(v), labels...)
	}
	gauge := func(d *prometheus.Desc, v float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, labels...)
	}
	counter(descReceived, f.Received)
	counter(descDuplicate, f.Duplicates)
	counter(descAcks, f.AcksSent)
	for _, k := range sortedKeys(f.Refused) {
		counter(descRefused, f.Refused[k], k)
	}
	for _, k := range sortedKeys(f.Sends) {
		counter(descSends, f.Sends[k], k)
	}
	gauge(descInbox, float64(f.InboxItems))
	gauge(descInboxBytes, float64(f.InboxBytes))
	gauge(descWaiting, float64(f.WaitingReads))
	queued, breakers := peerSeries(f.Peers)
	for _, p := range sortedKeys(queued) {
		gauge(descQueued, float64(queued[p]), p)
	}
	for _, p := range sortedKeys(breakers) {
		for _, st := range breakerStates {
			gauge(descBreaker, float64(breakers[p][st]), p, st)
		}
	}
	gauge(descDead, float64(f.DeadLetters))
	gauge(descConns, float64(f.Authenticated), "authenticated")
	gauge(descConns, float64(f.Connections-f.Authenticated), "unauthenticated")
	gauge(descDB, float64(f.DBBytes))
	if f.NATS != nil {
		up := 0.0
		if f.NATS.Connected {
			up = 1
		}
		gauge(descNATSUp, up)
		counter(descNATSRecon, f.NATS.Reconnects)
		counter(descNATSStored, f.NATS.Stored)
	}
}

// peerSeries sums the peers' figures by label: the first MaxPeerLabels
// names in order get their own, the rest (and peers without a name) go
// to OtherPeer.
func peerSeries(peers []PeerFigures) (queued map[string]int, breakers map[string]map[string]int) {
	names := make([]string, 0, len(peers))
	for _, p := range peers {
		if p.Name != "" && p.Name != OtherPeer {
			names = append(names, p.Name)
		}
	}
	slices.Sort(names)
	names = slices.Compact(names)
	own := map[string]bool{}
	for _, n := range names[:min(len(names), MaxPeerLabels)] {
		own[n] = true
	}
	queued, breakers = map[string]int{}, map[string]map[string]int{}
	for _, p := range peers {
		label := p.Name
		if !own[label] {
			label = OtherPeer
		}
		queued[label] += p.Queued
		if breakers[label] == nil {
			breakers[label] = map[string]int{}
		}
		breakers[label][cmp.Or(p.Breaker, "closed")]++
	}
	return queued, breakers
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

// readyTimeout bounds one readiness check.
const readyTimeout = 5 * time.Second

// Handler serves /metrics, /healthz and /readyz.
func (m *Metrics) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{ErrorHandling: promhttp.ContinueOnError, MaxRequestsInFlight: maxScrapes}))
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		w.Write([]byte("ok\n"))
	})
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		if err := m.ready.get(r.Context(), m.src.Ready); err != nil {
			w.WriteHeader(http.StatusServiceUnavailable)
			w.Write([]byte(oneLine(err.Error()) + "\n"))
			return
		}
		w.Write([]byte("ready\n"))
	})
	return mux
}

// Whoever reaches the metrics port may ask as often as it likes: a
// readiness check (a write transaction on the store) runs at most once
// per readyEvery, one at a time, and the scrapes served at once are
// bounded.
const (
	readyEvery = time.Second
	maxScrapes = 4
)

// readyCheck runs a readiness check for everyone asking: one at a time,
// its outcome kept for every (the others asking meanwhile wait for it).
type readyCheck struct {
	every time.Duration
	mu    sync.Mutex
	at    time.Time     // when the last check ended (zero: none yet)
	err   error         // its outcome
	busy  chan struct{} // closed when the check under way ends; nil: none
}

// get returns the outcome of a check ended less than c.every ago, or
// of the one under way, or runs one (within readyTimeout, whoever asked
// first going away or not); ctx bounds only the wait.
func (c *readyCheck) get(ctx context.Context, run func(context.Context) error) error {
	c.mu.Lock()
	if !c.at.IsZero() && time.Since(c.at) < c.every {
		err := c.err
		c.mu.Unlock()
		return err
	}
	if busy := c.busy; busy != nil {
		c.mu.Unlock()
		select {
		case <-busy:
			c.mu.Lock()
			defer c.mu.Unlock()
			return c.err
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	busy := make(chan struct{})
	c.busy = busy
	c.mu.Unlock()
	rctx, cancel := context.WithTimeout(context.Background(), readyTimeout)
	err := run(rctx)
	cancel()
	c.mu.Lock()
	c.at, c.err, c.busy = time.Now(), err, nil
	c.mu.Unlock()
	close(busy)
	return err
}

// oneLine keeps the first line of s.
func oneLine(s string) string {
	for i, c := range s {
		if c == '\n' || c == '\r' {
			return s[:i]
		}
	}
	return s
}

// Server limits.
const (
	readHeaderTimeout = 5 * time.Second
	readTimeout       = 10 * time.Second
	writeTimeout      = 30 * time.Second
	idleTimeout       = 60 * time.Second
	maxHeaderBytes    = 16 << 10
)

// Server is the HTTP server of a node's metrics.
type Server struct {
	srv  *http.Server
	ln   net.Listener
	done chan struct{}
	once sync.Once
}

// Listen serves m's handler on addr (host:port) over network ("tcp",
// "tcp4": see transport.TCPNetwork) until Close.
func (m *Metrics) Listen(network, addr string, log *slog.Logger) (*Server, error) {
	ln, err := net.Listen(network, addr)
	if err != nil {
		return nil, err
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	s := &Server{ln: ln, done: make(chan struct{}), srv: &http.Server{
		Handler:           m.Handler(),
		ReadHeaderTimeout: readHeaderTimeout,
		ReadTimeout:       readTimeout,
		WriteTimeout:      writeTimeout,
		IdleTimeout:       idleTimeout,
		MaxHeaderBytes:    maxHeaderBytes,
		ErrorLog:          slog.NewLogLogger(log.Handler(), slog.LevelDebug),
	}}
	go func() {
		defer close(s.done)
		if err := s.srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Error("metrics: server stopped", "err", err)
		}
	}()
	return s, nil
}

// Addr is the address the server listens on (with the port bound).
func (s *Server) Addr() net.Addr { return s.ln.Addr() }

// Close stops the server, closing its connections, and waits for it.
func (s *Server) Close() error {
	var err error
	s.once.Do(func() {
		err = s.srv.Close()
		<-s.done
	})
	return err
}
