package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"runtime"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/meerkatd/meerkatd/identity"
)

// Exchanges per scenario and repetition, unless --msgs says otherwise.
const (
	defaultSequential = 2000
	defaultPipelined  = 20000
	quickSequential   = 50
	quickPipelined    = 500
)

// inFlight is how many requests the pipelined scenario keeps outstanding
// on its one connection, as in meerkatd's bench.
const inFlight = 128

// defaultTimeout bounds a whole run, child process included.
const defaultTimeout = 10 * time.Minute

// options are the command-line flags.
type options struct {
	json      bool
	once      bool
	quick     bool
	reps      int
	transport string
	msgs      int
	timeout   time.Duration
}

func parseFlags(args []string, stderr io.Writer) (options, error) {
	var o options
	fs := flag.NewFlagSet("natsbench", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprintln(fs.Output(), "usage: natsbench [--json] [--once | --reps N] [--quick] [--msgs N] [--transport tcp] [--timeout D]")
		fs.PrintDefaults()
	}
	fs.BoolVar(&o.json, "json", false, "print one JSON object per scenario instead of a table")
	fs.BoolVar(&o.once, "once", false, "one repetition and no warm-up (overrides --reps)")
	fs.BoolVar(&o.quick, "quick", false, "tiny counts, for a smoke run")
	fs.IntVar(&o.reps, "reps", 5, "measured repetitions, after one warm-up repetition")
	fs.StringVar(&o.transport, "transport", "tcp", "transport; NATS clients speak TCP, so only tcp")
	fs.IntVar(&o.msgs, "msgs", 0, fmt.Sprintf("exchanges per scenario and repetition (default %d sequential, %d pipelined; %d and %d with --quick)",
		defaultSequential, defaultPipelined, quickSequential, quickPipelined))
	fs.DurationVar(&o.timeout, "timeout", defaultTimeout, "bound on the whole run")
	if err := fs.Parse(args); err != nil {
		return o, err
	}
	switch {
	case fs.NArg() > 0:
		return o, fmt.Errorf("unexpected argument %q", fs.Arg(0))
	case o.transport != "tcp":
		return o, fmt.Errorf("--transport %q: only tcp is meaningful for NATS (nats.go speaks TCP)", o.transport)
	case o.reps < 1:
		return o, errors.New("--reps must be at least 1")
	case o.msgs < 0:
		return o, errors.New("--msgs must not be negative")
	case o.timeout <= 0:
		return o, errors.New("--timeout must be positive")
	}
	if o.once {
		o.reps = 1
	}
	return o, nil
}

// counts returns the exchanges per repetition of each scenario.
func (o options) counts() (sequential, pipelined int) {
	switch {
	case o.msgs > 0:
		return o.msgs, o.msgs
	case o.quick:
		return quickSequential, quickPipelined
	}
	return defaultSequential, defaultPipelined
}

// run is the requester: it starts the responder, runs the repetitions and
// prints the results. It returns only once the responder has exited.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) (err error) {
	o, err := parseFlags(args, stderr)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, o.timeout)
	defer cancel()

	kp, err := identity.GenerateKeypair()
	if err != nil {
		return err
	}
	peerKP, err := identity.GenerateKeypair()
	if err != nil {
		return err
	}
	child, err := startResponder(ctx, peerKP, kp.ID(), stderr)
	if err != nil {
		return err
	}
	defer func() {
		// Once ctx is done the responder was killed: that is no news.
		if stopErr := child.stop(); ctx.Err() == nil {
			err = errors.Join(err, stopErr)
		}
	}()

	nc, err := nats.Connect(child.url, nats.Name("natsbench requester"), nats.NoReconnect())
	if err != nil {
		return fmt.Errorf("connect to %s: %w", child.url, err)
	}
	defer nc.Close()
	// A cancelled run fails the requests in flight instead of waiting
	// for their timeouts.
	defer context.AfterFunc(ctx, nc.Close)()

	b := newRequester(nc, kp, peerKP.ID(), child)
	nSeq, nPipe := o.counts()
	seq := newResult("sequential", o.reps, "p50_us", "p99_us")
	pipe := newResult("pipelined", o.reps, "exchanges_per_s", "cpu_us_per_exchange")
	// fail names the scenario and, when the run was cancelled or timed
	// out, says so rather than how the connection failed.
	fail := func(scenario string, err error) error {
		if ctxErr := ctx.Err(); ctxErr != nil {
			err = ctxErr
		}
		return fmt.Errorf("%s: %w", scenario, err)
	}
	warmups := 1
	if o.once {
		warmups = 0
	}
	for rep := -warmups; rep < o.reps; rep++ {
		// Each scenario starts with a tenth of its count unmeasured, as
		// meerkatd's bench does, so a --once run is not a cold start.
		if _, err := b.sequential(ctx, max(nSeq/10, 1)); err != nil {
			return fail("sequential", err)
		}
		lat, err := b.sequential(ctx, nSeq)
		if err != nil {
			return fail("sequential", err)
		}
		if _, err := b.pipelined(ctx, max(nPipe/10, 1), inFlight); err != nil {
			return fail("pipelined", err)
		}
		p, err := b.pipelined(ctx, nPipe, inFlight)
		if err != nil {
			return fail("pipelined", err)
		}
		if rep < 0 {
			continue
		}
		seq.add("p50_us", micros(percentile(lat, 50)))
		seq.add("p99_us", micros(percentile(lat, 99)))
		pipe.add("exchanges_per_s", float64(p.exchanges)/p.elapsed.Seconds())
		pipe.add("cpu_us_per_exchange", micros(p.cpu)/float64(p.exchanges))
	}
	results := []*result{seq, pipe}
	if o.json {
		return writeJSON(stdout, results)
	}
	header := fmt.Sprintf("natsbench: nats-server %s embedded, nats.go %s, tcp 127.0.0.1, %d+%d exchanges, %d in flight, GOMAXPROCS %d, %d reps",
		serverVersion(), nats.Version, nSeq, nPipe, inFlight, runtime.GOMAXPROCS(0), o.reps)
	if warmups > 0 {
		header += " after a warm-up"
	}
	return writeTable(stdout, header, results)
}
