package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
)

// startNATSServer runs a real nats-server in this process on 127.0.0.1
// and a random port, as comms/natsrelay's tests do. Only the test does:
// the bench itself never carries a server.
func startNATSServer(t *testing.T) *server.Server {
	t.Helper()
	s, err := server.NewServer(&server.Options{Host: "127.0.0.1", Port: server.RANDOM_PORT, NoLog: true, NoSigs: true})
	if err != nil {
		t.Fatalf("nats-server: %v", err)
	}
	go s.Start()
	if !s.ReadyForConnections(10 * time.Second) {
		s.Shutdown()
		t.Fatal("nats-server did not start")
	}
	t.Cleanup(func() {
		s.Shutdown()
		s.WaitForShutdown()
	})
	return s
}

// TestBenchQuickNATS runs the NATS scenarios as `meerkatd bench --quick
// --nats-url URL --transport tcp,nats,nats-unsealed --only
// sequential,pipelined --json` does, against a server of the test: each
// prints its figures and its ratio to plaintext TCP, nats its ratio to
// nats-unsealed, and they have no checks. It asserts no performance
// target.
func TestBenchQuickNATS(t *testing.T) {
	exe := meerkatdExe(t)
	s := startNATSServer(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	t.Setenv("TMPDIR", t.TempDir())
	var stdout, stderr bytes.Buffer
	o := Options{Exe: exe, Quick: true, JSON: true, Transport: "tcp,nats,nats-unsealed", Only: "sequential,pipelined",
		NATSURL: s.ClientURL()}
	start := time.Now()
	if err := Run(ctx, o, &stdout, &stderr); err != nil {
		t.Fatalf("bench: %v\nstderr:\n%s", err, stderr.String())
	}
	t.Logf("the run took %v", time.Since(start))
	got := map[string]Line{} // scenario/transport
	for _, text := range strings.Split(strings.TrimSpace(stdout.String()), "\n") {
		var l Line
		if err := json.Unmarshal([]byte(text), &l); err != nil {
			t.Fatalf("%v: %s", err, text)
		}
		got[l.Scenario+"/"+l.Transport] = l
	}
	want := map[string][]string{
		"sequential/nats":          {"p50_us", "p99_us", "vs_tcp", "vs_unsealed"},
		"sequential/nats-unsealed": {"p50_us", "p99_us", "vs_tcp"},
		"pipelined/nats":           {"exchanges_per_s", "vs_tcp", "vs_unsealed"},
		"pipelined/nats-unsealed":  {"exchanges_per_s", "vs_tcp"},
		"sequential/tcp":           {"p50_us"},
		"pipelined/tcp":            {"exchanges_per_s"},
	}
	for key, metrics := range want {
		l, ok := got[key]
		if !ok {
			t.Errorf("no %s line in:\n%s", key, stdout.String())
			continue
		}
		if l.Impl != "meerkatd" || l.Reps != 1 {
			t.Errorf("%s: impl %q, reps %d", key, l.Impl, l.Reps)
		}
		for _, name := range metrics {
			m, ok := l.Metrics[name]
			if !ok || len(m.Values) != 1 || m.Median <= 0 || math.IsNaN(m.Median) || math.IsInf(m.Median, 0) {
				t.Errorf("%s: metric %s missing or not sane: %+v", key, name, l.Metrics)
			}
		}
		if !strings.HasSuffix(key, "/tcp") {
			if _, ok := l.Metrics["cpu_us_per_exchange"]; strings.HasPrefix(key, "pipelined/") && !ok {
				t.Errorf("%s: no cpu_us_per_exchange: %+v", key, l.Metrics)
			}
			if _, ok := l.Metrics["vs_unsealed"]; strings.HasSuffix(key, "nats-unsealed") && ok {
				t.Errorf("%s: vs_unsealed on the unsealed line", key)
			}
			if len(l.Checks) != 0 {
				t.Errorf("%s: checks %+v, want none (not a target)", key, l.Checks)
			}
		}
	}
	// vs_tcp is the figure over TCP's of the same repetition.
	for _, sc := range []struct{ scenario, metric string }{{"sequential", "p50_us"}, {"pipelined", "exchanges_per_s"}} {
		tcp := got[sc.scenario+"/tcp"].Metrics[sc.metric].Median
		for _, tr := range []string{"nats", "nats-unsealed"} {
			l := got[sc.scenario+"/"+tr]
			v, ratio := l.Metrics[sc.metric].Median, l.Metrics["vs_tcp"].Median
			if tcp > 0 && math.Abs(ratio-v/tcp) > 0.01*ratio+0.002 {
				t.Errorf("%s/%s: vs_tcp %v, but %v / %v = %v", sc.scenario, tr, ratio, v, tcp, v/tcp)
			}
		}
	}
}

// Without --nats-url the nats transports are a usage error (parseTransports,
// TestParseTransports); with a URL where no server runs, the run fails at
// once saying so.
func TestBenchNATSNoServer(t *testing.T) {
	exe := meerkatdExe(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	t.Setenv("TMPDIR", t.TempDir())
	for _, tc := range []struct {
		url, transport, want string
		usage                bool
	}{
		{"", "nats", "--transport nats needs a NATS server: start one (make nats-dev) and pass --nats-url", true},
		{"nats://127.0.0.1:1", "tcp,nats", "--nats-url nats://127.0.0.1:1", false},
	} {
		var stdout, stderr bytes.Buffer
		start := time.Now()
		err := Run(ctx, Options{Exe: exe, Quick: true, Transport: tc.transport, Only: "sequential", NATSURL: tc.url}, &stdout, &stderr)
		if err == nil || !strings.Contains(err.Error(), tc.want) || errors.Is(err, ErrUsage) != tc.usage {
			t.Errorf("--nats-url %q --transport %s: %v; want an error with %q (usage: %v)", tc.url, tc.transport, err, tc.want, tc.usage)
		}
		if d := time.Since(start); d > 15*time.Second {
			t.Errorf("--nats-url %q: failed after %v", tc.url, d)
		}
	}
}
