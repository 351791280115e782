package node

import (
	"context"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/meerkatd/meerkatd/config"
	"github.com/meerkatd/meerkatd/internal/testutil"
	"github.com/meerkatd/meerkatd/transport"
)

// get fetches path from the metrics server at addr.
func get(t *testing.T, addr, path string) (int, string) {
	t.Helper()
	c := &http.Client{Timeout: 10 * time.Second}
	resp, err := c.Get("http://" + addr + path)
	if err != nil {
		t.Fatalf("GET %s: %v", path, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// /healthz answers while the node runs; /readyz while its listeners serve
// and its store takes writes, and with a one-line reason once the store
// does not; the server stops with the node.
func TestMetricsHealthAndReadiness(t *testing.T) {
	h, _ := testHome(t, "alice", func(c *config.Config) { c.Metrics.Listen = "127.0.0.1:0" })
	n := startTest(t, h, ModeServe)
	a := n.MetricsAddr()
	if a == nil {
		t.Fatal("metrics.listen is set but the node serves no metrics")
	}
	addr := a.String()
	if code, body := get(t, addr, "/healthz"); code != http.StatusOK {
		t.Fatalf("/healthz: %d %q", code, body)
	}
	if code, body := get(t, addr, "/readyz"); code != http.StatusOK {
		t.Fatalf("/readyz of a serving node: %d %q", code, body)
	}
	if code, body := get(t, addr, "/metrics"); code != http.StatusOK || !strings.Contains(body, "meerkatd_envelopes_received_total") {
		t.Fatalf("/metrics: %d %q", code, body)
	}
	// A trusted peer with nothing queued still has its breaker and queue.
	if _, body := get(t, addr, "/metrics"); !strings.Contains(body, `meerkatd_outbox_breaker{peer="bob",state="closed"} 1`) ||
		!strings.Contains(body, `meerkatd_outbox_queued{peer="bob"} 0`) {
		t.Fatalf("/metrics lacks bob's series: %s", body)
	}
	// Every refusal reason has its series before any refusal, to alert on.
	if _, body := get(t, addr, "/metrics"); !strings.Contains(body, `meerkatd_envelopes_refused_total{reason="bad_signature"} 0`) ||
		!strings.Contains(body, `meerkatd_envelopes_refused_total{reason="untrusted"} 0`) {
		t.Fatalf("/metrics lacks the refusal series at 0: %s", body)
	}
	// So has every send outcome.
	_, sends := get(t, addr, "/metrics")
	for _, o := range []string{"acked", "written", "failed", "retry", "expired", "dead_letter"} {
		if !strings.Contains(sends, `meerkatd_sends_total{outcome="`+o+`"} 0`) {
			t.Errorf("/metrics lacks meerkatd_sends_total{outcome=%q} at 0", o)
		}
	}
	// The store stops taking writes: not ready, and says why in a line
	// (once the readiness kept from the last check has run out).
	n.mail.(*durableMail).st.Close()
	var code int
	var body string
	testutil.WaitFor(t, 10*time.Second, "/readyz to see the closed store", func() bool {
		code, body = get(t, addr, "/readyz")
		return code != http.StatusOK
	})
	if code != http.StatusServiceUnavailable || strings.Count(strings.TrimSpace(body), "\n") != 0 || !strings.Contains(body, "closed") {
		t.Fatalf("/readyz with the store closed: %d %q", code, body)
	}
	if code, _ := get(t, addr, "/healthz"); code != http.StatusOK {
		t.Fatalf("/healthz with the store closed: %d", code)
	}
	n.Close()
	if _, err := (&http.Client{Timeout: 5 * time.Second}).Get("http://" + addr + "/healthz"); err == nil {
		t.Fatal("the metrics server still answers after the node closed")
	}
}

// Without metrics.listen nothing is served; an address that is taken
// fails the start.
func TestMetricsOffAndTaken(t *testing.T) {
	h, _ := testHome(t, "alice", nil)
	n := startTest(t, h, ModeServe)
	if n.MetricsAddr() != nil {
		t.Fatalf("metrics served at %v without metrics.listen", n.MetricsAddr())
	}
	h1, _ := testHome(t, "one", func(c *config.Config) { c.Metrics.Listen = "127.0.0.1:0"; c.Store.Mode = config.StoreMemory })
	one := startTest(t, h1, ModeServe)
	h2, _ := testHome(t, "two", func(c *config.Config) {
		c.Metrics.Listen = one.MetricsAddr().String()
		c.Store.Mode = config.StoreMemory
	})
	if two, err := Start(h2, Options{Mode: ModeServe}); err == nil {
		two.Close()
		t.Fatal("a second node started on a metrics address already taken")
	} else if !strings.Contains(err.Error(), "metrics.listen") {
		t.Fatalf("error %q does not name metrics.listen", err)
	}
	// The node embedded in meerkatd mcp leaves the daemon's address alone.
	emb, err := Start(h2, Options{Mode: ModeServe, Embedded: true})
	if err != nil {
		t.Fatal(err)
	}
	defer emb.Close()
	if emb.MetricsAddr() != nil {
		t.Fatal("an embedded node serves metrics")
	}
}

// metrics.listen on 0.0.0.0 serves over IPv4 only, as the address says:
// the endpoint names peers, and an operator who firewalls IPv4 must not
// find it open over IPv6.
func TestMetricsOnAllIPv4IsIPv4Only(t *testing.T) {
	h, _ := testHome(t, "alice", func(c *config.Config) { c.Metrics.Listen = "0.0.0.0:0"; c.Store.Mode = config.StoreMemory })
	n := startTest(t, h, ModeServe)
	testutil.CheckIPv4Only(t, n.MetricsAddr().(*net.TCPAddr).Port)
}

// A socket file removed (say by a cleaner of /tmp) or replaced while the
// node runs is a problem status names and /readyz fails with: the
// listener goes on serving a file nothing can reach; pairing refuses to
// give it out.
func TestSocketFileGone(t *testing.T) {
	m, _ := mcpTestNode(t)
	ctx := context.Background()
	var path string
	for _, a := range m.Addrs() {
		if a.Scheme == transport.SchemeUDS {
			path = a.Path
		}
	}
	if path == "" {
		t.Fatalf("the node listens on no Unix socket: %v", m.Addrs())
	}
	check := func(want string) {
		t.Helper()
		st, err := m.Status(ctx)
		if err != nil {
			t.Fatal(err)
		}
		ready := metricsSource{m}.Ready(ctx)
		if want == "" {
			if len(st.Problems) != 0 || ready != nil {
				t.Fatalf("problems %q, ready %v; want none", st.Problems, ready)
			}
			return
		}
		if len(st.Problems) != 1 || !strings.Contains(st.Problems[0], path+" was "+want) || ready == nil || ready.Error() != st.Problems[0] {
			t.Fatalf("problems %q, ready %v; want the socket file %s", st.Problems, ready, want)
		}
	}
	check("")
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	check("removed")
	// Nor does the node hand that address to a node pairing with it.
	if _, err := m.PairOffer(ctx, PairOptions{}); CodeOf(err) != CodeUnavailable || !strings.Contains(err.Error(), path+" was removed") {
		t.Errorf("an offer with the socket removed: %v", err)
	}
	if _, err := m.selfAddrFor(transport.Addr{Scheme: transport.SchemeUDS, Path: "/elsewhere.sock"}); CodeOf(err) != CodeUnavailable {
		t.Errorf("an answer to an offer with the socket removed: %v", err)
	}
	if err := os.WriteFile(path, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	check("replaced")
}
