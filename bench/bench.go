// Package bench is the harness of `meerkatd bench`: it measures
// throughput, latency, memory and startup of real `meerkatd run` processes
// and compares every figure with anchors measured in the same run, so that
// a noisy shared machine moves both sides alike.
//
// It is not the node, nor a library for one. The node under test is a
// child process in a temporary home; the calling process is its peers
// (with the project's comms.Router or raw frames) and the judge, and in
// space_broadcast its agent (through its control socket, comms/control)
// while two more nodes receive. Every
// other process is the meerkatd executable of [Options.Exe] too:
// `meerkatd init` makes a node's home, `meerkatd status --json` reads its
// counters, and the hidden `meerkatd bench echo` and `meerkatd bench
// flood` are the echo server of the anchors and the attacker of the flood
// scenarios, which that command implements by calling [RunEcho] and
// [RunFlood].
//
// # Output
//
// [Run] prints a table or, with [Options.JSON], one [Line] per scenario:
// the JSON of docs/performance.md, which the NATS baseline (bench/nats, a
// separate module) prints too.
//
// # Concurrency
//
// The package has no state: [Run], [RunEcho] and [RunFlood] own their
// goroutines and child processes. Run has stopped its children and
// removed its temporary files when it returns; RunEcho and RunFlood are
// the bodies of child processes, which exit after them.
package bench

import (
	"cmp"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"os"
	"os/exec"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/meerkatd/meerkatd/config"
	"github.com/meerkatd/meerkatd/transport"
)

// ErrUsage is matched (errors.Is) by the errors of [Run] about its
// [Options] and of [RunEcho] and [RunFlood] about their arguments. Their
// text is only the problem, in the terms of `meerkatd bench`'s flags
// (`--transport "x": want uds, tcp or both`), for the command to print
// with its [Usage].
var ErrUsage = errors.New("bench: usage")

// usageError is an error that matches ErrUsage.
type usageError string

func (e usageError) Error() string        { return string(e) }
func (e usageError) Is(target error) bool { return target == ErrUsage }

func usagef(format string, args ...any) error { return usageError(fmt.Sprintf(format, args...)) }

// Options are the knobs of one [Run], as the flags of `meerkatd bench` set
// them. Exe is required; the zero value of every other field means its
// default, which may depend on Quick. A negative value is an error.
type Options struct {
	// Exe is the meerkatd executable the run starts: the nodes, their
	// `status --json`, its echo and flood processes.
	Exe string

	Reps      int           // measured repetitions (default 5; Quick: 1)
	Transport string        // "uds", "tcp", "tls", "nats", "nats-unsealed", a comma-separated list of them, "both" (uds,tcp) or "all" (default all; Quick: uds)
	Duration  time.Duration // measured window of each throughput scenario (default 2s; Quick: 150ms)
	Msgs      int           // round trips of each latency scenario, at least 10; conn_per_msg: half (default 2000; Quick: 100)
	IdleConns int           // connections of idle_rss_1000 (default 1000; Quick: 50)
	Only      string        // comma-separated scenario groups to run, of [Groups]; "": all
	NATS      string        // the bench/nats binary to compare with over TCP; "": no NATS checks
	// NATSURL is a running NATS server (nats://host:port) that the nats
	// and nats-unsealed transports go through; "": they are not available.
	NATSURL string

	// HTML, when not "", is a file Run writes a self-contained HTML page
	// of the run to (charts and checks; no script, nothing fetched), as
	// well as printing the table or JSON. Run fails at once, before the
	// first repetition, when the file cannot be written there.
	HTML string

	JSON  bool // print one JSON [Line] per scenario instead of a table
	Gate  bool // a failed check makes Run fail
	Quick bool // smoke run of every code path in seconds, no warm-up repetition; its figures mean nothing
}

// settings are the knobs of one run once the defaults are applied.
type settings struct {
	reps       int           // measured repetitions
	warmup     bool          // one more repetition first, not counted
	transports []string      // of transport.SchemeUDS, SchemeTCP, SchemeTLS, trNATS, trNATSUnsealed, in that order
	duration   time.Duration // measured window of each throughput scenario
	msgs       int           // round trips of each latency scenario
	idleConns  int           // connections of idle_rss_1000
	starts     int           // node starts per repetition for startup
	inFlight   int           // pipelined: envelopes in flight on one connection
	flooders   int           // flood: concurrent attacking connections
	anchorTime time.Duration // per crypto anchor per repetition
	nats       string        // NATS bench binary, or ""
	natsURL    string        // NATS server of the nats transports, or ""
	json       bool
	gate       bool
	quick      bool
	only       map[string]bool // scenario groups to run; nil: all
}

// settings applies the defaults to o and checks it.
func (o Options) settings() (settings, error) {
	s := settings{reps: 5, warmup: true, duration: 2 * time.Second, msgs: 2000, idleConns: 1000,
		starts: 5, inFlight: 128, flooders: 4, anchorTime: 300 * time.Millisecond,
		nats: o.NATS, natsURL: o.NATSURL, json: o.JSON, gate: o.Gate, quick: o.Quick}
	tr := cmp.Or(o.Transport, "all")
	if o.Quick {
		s.reps, s.warmup, s.duration, s.msgs, s.idleConns = 1, false, 150*time.Millisecond, 100, 50
		s.starts, s.anchorTime = 1, 20*time.Millisecond
		tr = cmp.Or(o.Transport, transport.SchemeUDS)
	}
	if o.Exe == "" {
		return s, errors.New("bench: Options.Exe is empty")
	}
	s.reps, s.duration = cmp.Or(o.Reps, s.reps), cmp.Or(o.Duration, s.duration)
	s.msgs, s.idleConns = cmp.Or(o.Msgs, s.msgs), cmp.Or(o.IdleConns, s.idleConns)
	var err error
	if s.transports, err = parseTransports(tr, o.NATSURL != ""); err != nil {
		return s, err
	}
	if o.NATSURL != "" {
		// The nodes take it as nats.servers, which takes no credentials;
		// its errors never repeat a password.
		if _, err := (config.NATS{Servers: []string{o.NATSURL}}).ServerURLs(); err != nil {
			return s, usagef("--nats-url: %v", err)
		}
	}
	if s.reps < 1 || s.msgs < 10 || s.duration <= 0 || s.idleConns < 1 {
		return s, usagef("--reps >= 1, --msgs >= 10, --duration > 0 and --idle-conns >= 1")
	}
	if s.only, err = parseOnly(o.Only); err != nil {
		return s, err
	}
	if o.NATS != "" {
		if err := checkExecutable(o.NATS); err != nil {
			return s, usagef("--nats %s", err)
		}
	}
	return s, nil
}

// checkExecutable reports why path cannot be run as a program, if it
// cannot: a path, or a name found in PATH, as the run will look it up.
func checkExecutable(path string) error {
	if _, err := exec.LookPath(path); err != nil {
		if errors.Is(err, exec.ErrNotFound) || errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("%s: no such program (build it with make bench, or: cd bench/nats && go build -o ../../bin/natsbench .)", path)
		}
		return fmt.Errorf("%s: cannot be run: %v", path, errors.Unwrap(err))
	}
	return nil
}

// Transports through a NATS server (--nats-url): the product's sealed
// envelopes, and the same unsealed (comms.Options.RelayUnsealed), which
// shows what sealing costs.
const (
	trNATS         = transport.SchemeNATS
	trNATSUnsealed = transport.SchemeNATS + "-unsealed"
)

// isNATS reports whether tr goes through the NATS server.
func isNATS(tr string) bool { return tr == trNATS || tr == trNATSUnsealed }

// parseTransports parses --transport into transports in the order they
// run: TLS and NATS after plaintext TCP, whose figures of the same
// repetition their ratios compare with. The NATS ones exist only with a
// server (withNATS: --nats-url given), and are then part of all.
func parseTransports(v string, withNATS bool) ([]string, error) {
	all := []string{transport.SchemeUDS, transport.SchemeTCP, transport.SchemeTLS}
	known := append(slices.Clone(all), trNATS, trNATSUnsealed)
	if withNATS {
		all = known
	}
	switch v {
	case "all":
		return all, nil
	case "both":
		return all[:2], nil
	}
	want := map[string]bool{}
	for _, t := range strings.Split(v, ",") {
		t = strings.TrimSpace(t)
		if !slices.Contains(known, t) {
			return nil, usagef("--transport %q: want uds, tcp, tls, nats, nats-unsealed, a comma-separated list of them, both (uds,tcp) or all", v)
		}
		if isNATS(t) && !withNATS {
			return nil, usagef("--transport %s needs a NATS server: start one (make nats-dev) and pass --nats-url nats://127.0.0.1:4222", t)
		}
		want[t] = true
	}
	var out []string
	for _, t := range all {
		if want[t] {
			out = append(out, t)
		}
	}
	return out, nil
}

// Scenario groups of --only; flood, durable and space are ratios to
// pipelined, and conn_per_msg to sequential, which they bring along.
var groups = []string{"sequential", "pipelined", "closed_loop_16", "conn_per_msg", "flood", "durable", "space", "resources"}

// Groups returns the scenario groups [Options.Only] may name.
func Groups() []string { return slices.Clone(groups) }

// want reports whether the scenario group runs.
func (o settings) want(group string) bool { return o.only == nil || o.only[group] }

// parseOnly parses --only's comma-separated groups.
func parseOnly(v string) (map[string]bool, error) {
	if v == "" {
		return nil, nil
	}
	only := map[string]bool{}
	for g := range strings.SplitSeq(v, ",") {
		g = strings.TrimSpace(g)
		if !slices.Contains(groups, g) {
			return nil, usagef("--only %q: want some of %s", g, strings.Join(groups, ","))
		}
		only[g] = true
	}
	if only["flood"] || only["durable"] || only["space"] {
		only["pipelined"] = true
	}
	if only["conn_per_msg"] {
		only["sequential"] = true
	}
	return only, nil
}

// Usage is the synopsis of `meerkatd bench`.
const Usage = "meerkatd bench [--reps N] [--transport uds|tcp|tls|nats|nats-unsealed,...|both|all] [--duration DUR] [--msgs N] [--idle-conns N] [--only GROUPS] [--nats PATH] [--nats-url URL] [--json] [--html FILE] [--gate] [--quick]"

// Help explains the scenarios, anchors and checks of `meerkatd bench`.
const Help = `Runs the performance suite against real "meerkatd run" processes
in temporary homes, over UDS, TCP and TLS on 127.0.0.1 (and, with --nats-url,
through a NATS server), and compares every figure
with anchors measured in the same run. Each repetition runs every scenario
once (interleaved); a warm-up repetition comes first and is not counted.
Figures are the median and [min-max] over the repetitions.

Anchors (every crypto anchor signs and verifies with the node's own
primitives, those of package identity, so that they measure what the node
uses; the crypto anchors are CPU time of this process, as the scenarios'
CPU per exchange is, so that a busy machine does not stretch them):
  anchor_sign       the node's signing primitive on the real signing inputs of
                    100-byte messages, 256 in turn, each with its own id (CPU µs)
  anchor_batch_sign the same signing primitive called by 16 goroutines at once,
                    which it signs in batches: CPU µs per signature
  anchor_verify     the node's verifying primitive on the same 256 in turn: its
                    time follows the signature, so one repeated would flatter it
                    (CPU µs)
  anchor_batch_verify  the node's batch verification of 64 envelopes of one
                    peer, per signature (CPU µs)
  anchor_exchange   one exchange on one goroutine with the project's code: seal the
                    message, encode its frame, decode+verify, seal the ack, encode,
                    decode+verify the ack (CPU µs; wall_us: the same on the
                    clock, for comparison). Crypto ceiling = cores / this.
  anchor_pingpong   200-byte 4-byte-length-prefixed frames echoed by another
                    process over the transport, no crypto (p50 µs)
  anchor_raw_sequential  the crypto of one exchange (sign, verify, sign, verify the
                    real signing input of a message, each message with its own id)
                    between this process and the echo process over the transport,
                    with no other code between: what two processes reach at all
                    on this machine (p50, p99 µs). It takes turns with the
                    sequential scenario, 20 round trips each, on connections
                    open at once, so that both meet the same load
  anchor_raw_pipelined   the same with 128 in flight: signing goroutines, one
                    verifying reader, the echo process verifying and signing in
                    order (exchanges/s; CPU µs per exchange of both processes)
  anchor_raw_batched  the crypto of the protocol two meerkatd nodes speak, with a
                    node's batching rules, 128 in flight: signing goroutines
                    writing together; the echo process verifying what arrives
                    together as one batch (at most 64) and answering each batch
                    with one signature; one verifying reader (exchanges/s; CPU
                    µs per exchange of both processes). Not a bound: what the
                    bare protocol reaches here
  anchor_raw_closed_loop_16  16 connections, one raw exchange at a time each

Scenarios (per transport; the node keeps its inbox in memory unless said):
  sequential        send a message, wait for its ack, repeat (p50, p99 µs)
  pipelined         one connection, 128 in flight (exchanges/s; CPU µs per exchange
                    of both processes, from getrusage and /proc/PID/stat)
  closed_loop_16    16 peers (own keys, own connections), one in flight each
  conn_per_msg      dial, write one envelope, read its ack, close (p50 µs)
  flood_bad_signature  pipelined while connections flood envelopes from a trusted
                    key with corrupted signatures (ratio to pipelined; refused_per_s:
                    flood envelopes sent per second in the window, each of which
                    the check requires refused)
  flood_untrusted   the same with envelopes from an unknown key (also with a
                    corrupted signature: counted "untrusted", not "bad_signature",
                    shows the trust check comes before the signature check)
  durable           pipelined with the SQLite inbox (ratio to pipelined memory)
  space_broadcast   a MEUP space of three real nodes (each a member in the others'
                    rosters): the node under test broadcasts chat envelopes to the
                    other two through its control socket (space send, direct: one
                    attempt per copy, each send returns once both copies are acked),
                    32 sends in flight. envelopes/s, copies/s (2 x envelopes/s),
                    CPU µs per copy (this process and the three nodes); ratio =
                    copies/s / pipelined exchanges/s and cpu_ratio = CPU per copy /
                    pipelined's CPU per exchange, both of the same repetition.
                    Every copy must reach a receiver's inbox once (copies_received;
                    the check fails otherwise, and a note names the receiver)
  startup           exec to the listener accepting a connection (ms, median of
                    several starts; default store, SQLite)
  idle_rss          VmRSS of the idle daemon after start (MB: here 2^20 bytes)
  idle_rss_1000     VmRSS with 1000 idle connections, each authenticated by one
                    acknowledged envelope (MB, 2^20 bytes; the name keeps 1000
                    whatever --idle-conns says)

Over tls (the node's TCP port reached at a tls:// address, TLS 1.3 with
pinned keys, the node refusing plaintext) only sequential and pipelined
run, each right after the same scenario over plaintext TCP; each prints vs_tcp, its
figure over plaintext TCP's of that repetition (p50 / TCP p50;
exchanges/s / TCP exchanges/s).

Over nats and nats-unsealed (only with --nats-url URL: a running NATS
server, e.g. make nats-dev; the bench starts none) the node under test and
the bench's peer both connect to that server and trust each other at the
address nats:, so every envelope and its ack go through the server (NATS
request/reply, no JetStream). nats seals each envelope to its recipient
(HPKE, then an outer signed envelope), as every node does; nats-unsealed
sends the signed envelopes as they are, only to show what sealing costs.
Only sequential and pipelined run, each right after the same scenario
over plaintext TCP, printing vs_tcp as tls does; nats also prints
vs_unsealed, its figure over nats-unsealed's of that repetition (when
both run). Their cpu_us_per_exchange is the two meerkatd processes' only,
not the server's. They have no checks: they are not performance targets.
With --nats-url, all includes them.

Checks (the performance targets; ratios per repetition, then the median;
"ceiling" is the crypto ceiling, cores / anchor_exchange). Over uds and tcp:
  sequential p50 <= 1.10 x anchor_raw_sequential p50 (the raw crypto between
  the same processes), p99 <= 2 x p50;
  pipelined >= 0.95 x anchor_raw_pipelined, >= 2.0 x ceiling; CPU per
  delivered message <= 0.50 x anchor_exchange (both processes together:
  the exchange anchor holds both sides' crypto);
  closed_loop_16 >= 1.6 x ceiling; conn_per_msg p50 <= 2 x sequential p50;
  flood: trusted throughput >= 0.50 x pipelined, every flood envelope refused
  for its reason (untrusted ones never reach the signature check);
  durable >= 0.75 x pipelined with the memory inbox;
  space_broadcast: every copy received, once (not a performance target);
  idle_rss <= 20 MB, idle_rss_1000 <= 80 MB, startup <= 50 ms.
  tls: sequential p50 <= 1.15 x plaintext TCP p50, pipelined >= 0.90 x
  plaintext TCP (omitted when --transport leaves out tcp).
  With --nats PATH (the bench/nats binary; TCP): sequential p50 <= 0.50 x
  NATS p50, pipelined >= 1.5 x NATS. Without --nats those checks are omitted.

Some checks also print the best value within reach in the same run.
"unreachable here" marks a bound that follows from the crypto and raw
anchors alone: closed_loop_16 (16 peers, one envelope in flight each, so
each exchange needs its own two signatures, the ack's at best in a batch,
its ack verified alone, and its two frames moved as the raw closed loop
moves them: exchange / the raw closed loop's CPU per exchange less what
signing the ack and verifying the message in batches would save, and
never above exchange / (sign + batch_sign + verify + batch_verify)) and
the NATS p50 check
((raw sequential p50 - sign) / NATS p50: the round trip and its crypto in
a row, less the ack's signature). "limited by its own CPU cost" marks a
bound from the node's measured CPU per exchange (pipelined, durable): what
it would reach with every core busy.

--only runs some scenario groups (the anchors always run, each raw one
with its scenario): sequential, pipelined, closed_loop_16,
conn_per_msg, flood (both floods), durable, space (space_broadcast),
resources (startup and both RSS figures); conn_per_msg brings sequential;
flood, durable and space bring
pipelined, their reference. Checks whose figures were not run are left
out.

sequential, pipelined and closed_loop_16 also print vs_raw: their figure
over the raw anchor's (p50 / raw p50; exchanges/s / raw exchanges/s), and
pipelined and closed_loop_16 print cpu_vs_raw (CPU per exchange / the raw
anchor's). Those of sequential and pipelined are the figures of their
checks against the raw anchors; the others are not targets: they show how
much of a miss is this machine's and how much is meerkatd's own work.
pipelined also prints vs_raw_batched and cpu_vs_raw_batched, the same
against anchor_raw_batched.

Output: a table, or with --json one JSON object per scenario per line.
--html FILE also writes one self-contained HTML page of the run to FILE:
the machine and options, the sequential p50 and p99 of every repetition per
transport and the distribution of every round trip (with the raw anchor's),
the pipelined throughput against the raw anchors, the crypto
ceiling and NATS, and the checks (inline SVG and CSS; no script, nothing
fetched). A path that cannot be written fails before the first repetition;
the page replaces FILE only once the run is over, so a run that fails
leaves FILE as it was.
--gate exits 1 (failed checks on stderr) when a check fails, or when no
check was computed; otherwise the
exit status is 0 whatever the figures. A run is stopped after 60 minutes
(3 with --quick), reporting nothing: size --reps, --duration and --msgs
to fit. Ctrl-C stops a run (exit 130), its processes and temporary files
gone. --quick is a smoke run of every code
path in a few seconds (one repetition, tiny counts, UDS unless --transport):
its figures mean nothing.`

// Run runs the suite against the meerkatd of o.Exe: a warm-up repetition
// (not with Quick), then o.Reps repetitions of every scenario. It prints
// its progress to stderr and the results to stdout, and returns after the
// last repetition, when ctx is done, or after an hour (Quick: three
// minutes), its child processes and temporary files gone. With o.Gate, a
// failed check is an error, after one FAIL line per failed check on
// stderr.
func Run(ctx context.Context, o Options, stdout, stderr io.Writer) error {
	s, err := o.settings()
	if err != nil {
		return err
	}
	bound := 60 * time.Minute
	if s.quick {
		bound = 3 * time.Minute
	}
	ctx, cancel := context.WithTimeout(ctx, bound)
	defer cancel()
	page, err := openHTML(o.HTML)
	if err != nil {
		return err
	}
	if s.want("resources") {
		if err := checkFiles(s.idleConns); err != nil {
			return err
		}
	}
	b, err := newRunner(s, o.Exe, stderr)
	if err != nil {
		return err
	}
	defer b.cleanup()
	meta := htmlMeta{Date: time.Now(), GOOS: runtime.GOOS, GOARCH: runtime.GOARCH, GoVersion: runtime.Version()}
	res, err := b.run(ctx)
	if err != nil {
		return err
	}
	if s.json {
		err = res.writeJSON(stdout)
	} else {
		err = res.writeTable(stdout, s)
	}
	if err != nil {
		return err
	}
	if err := page.write(res, s, meta); err != nil {
		return err
	}
	if s.gate && res.nchecks() == 0 {
		return errors.New("--gate: no check was computed (see the notes): nothing was gated")
	}
	if failed := res.failed(); s.gate && len(failed) > 0 {
		for _, f := range failed {
			fmt.Fprintf(stderr, "FAIL %s\n", f)
		}
		return fmt.Errorf("%d of %d checks failed", len(failed), res.nchecks())
	}
	return nil
}

// checkFiles makes sure this process may hold the idle connections (Go
// raises the soft limit to the hard one at start; the hard one must be
// high enough).
func checkFiles(conns int) error {
	var rl syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &rl); err != nil {
		return nil
	}
	need := uint64(conns) + 256
	if rl.Cur >= need {
		return nil
	}
	if rl.Max < need {
		return fmt.Errorf("open file limit %d is too low for %d idle connections (raise ulimit -n, or --idle-conns)", rl.Max, conns)
	}
	rl.Cur = need
	return syscall.Setrlimit(syscall.RLIMIT_NOFILE, &rl)
}

// Flags registers the command line's options on fs, setting o.
func (o *Options) Flags(fs *flag.FlagSet) {
	fs.Var(atLeast{&o.Reps, 1}, "reps", "`N` measured repetitions, after a warm-up one (default 5; --quick 1)")
	fs.StringVar(&o.Transport, "transport", "", "`transports`: uds, tcp, tls, nats, nats-unsealed, a comma-separated list, both (uds,tcp) or all (default all, with nats and nats-unsealed when --nats-url is given; --quick uds); over tls and nats only sequential and pipelined run, compared with tcp")
	fs.Var(positiveDuration{&o.Duration}, "duration", "the measured window (`DUR`) of each throughput scenario (default 2s; --quick 150ms)")
	fs.Var(atLeast{&o.Msgs, 10}, "msgs", "`N` round trips of each latency scenario, conn_per_msg half (at least 10; default 2000; --quick 100)")
	fs.Var(atLeast{&o.IdleConns, 1}, "idle-conns", "`N` connections of idle_rss_1000 (default 1000; --quick 50)")
	fs.StringVar(&o.NATS, "nats", "", "NATS bench `binary` (bench/nats) to compare with, over TCP")
	fs.StringVar(&o.NATSURL, "nats-url", "", "running NATS server `URL` (e.g. make nats-dev: nats://127.0.0.1:4222) for the transports nats and nats-unsealed, which go through it")
	fs.BoolVar(&o.JSON, "json", false, "print one JSON object per scenario per line")
	fs.Var(pathFlag{&o.HTML}, "html", "also write a self-contained HTML page of the run (charts, checks) to `FILE`")
	fs.BoolVar(&o.Gate, "gate", false, "exit 1 when a check fails, or when no check was computed")
	fs.BoolVar(&o.Quick, "quick", false, "smoke run: one repetition, tiny counts, UDS unless --transport says otherwise")
	fs.StringVar(&o.Only, "only", "", "comma-separated scenario `groups` to run (default all): "+strings.Join(Groups(), ", "))
}

// atLeast is an int flag that refuses values below min (0 would read as
// "not given": the default).
type atLeast struct {
	p   *int
	min int
}

func (a atLeast) String() string {
	if a.p == nil || *a.p == 0 {
		return ""
	}
	return strconv.Itoa(*a.p)
}

func (a atLeast) Set(s string) error {
	n, err := strconv.Atoi(s)
	if err != nil || n > math.MaxInt32 {
		return fmt.Errorf("not a whole number from %d to %d", a.min, math.MaxInt32)
	}
	if n < a.min {
		return fmt.Errorf("at least %d", a.min)
	}
	*a.p = n
	return nil
}

// pathFlag is a file path flag that refuses an empty value, which would
// read as "not given".
type pathFlag struct{ p *string }

func (f pathFlag) String() string {
	if f.p == nil {
		return ""
	}
	return *f.p
}

func (f pathFlag) Set(s string) error {
	if s == "" {
		return errors.New("needs a file name")
	}
	*f.p = s
	return nil
}

// positiveDuration is a duration flag that refuses zero and less.
type positiveDuration struct{ p *time.Duration }

func (d positiveDuration) String() string {
	if d.p == nil || *d.p == 0 {
		return ""
	}
	return d.p.String()
}

func (d positiveDuration) Set(s string) error {
	v, err := time.ParseDuration(s)
	if err != nil {
		return errors.New("not a duration (2s, 500ms)")
	}
	if v <= 0 {
		return errors.New("must be positive")
	}
	*d.p = v
	return nil
}
