// Command natsbench is the NATS baseline of meerkatd bench: it runs the envelopes
// meerkatd's bench sends (a 100-byte message, sealed and opened with the
// project's own comms/wire and identity code) through an embedded
// nats-server on 127.0.0.1 with nats.go request/reply, and prints the same
// JSON objects as `meerkatd bench`, so that bench can state its targets as
// ratios to this one ("p50 round trip ≤ 0.6× NATS, pipelined throughput ≥
// 1.0× NATS").
//
// It lives in its own module so the product does not depend on NATS. Build
// and run it from this directory:
//
//	go build -o ../../bin/natsbench .
//	go run . --reps 5
//	go test ./...   # not reached by the root's go test ./...
//
// # Layout
//
// Two processes, like meerkatd's bench. The requester (the process you
// start) generates both keypairs and re-executes itself as the responder,
// handing it the responder's seed and the requester's public key over an
// inherited pipe (never argv or the environment). The responder runs the
// nats-server (random port, no logging, no signal handlers) and a nats.go
// connection subscribed to [subject]; for each request it does what a
// meerkatd node does with an inbound envelope (decode, addressed to us,
// sender is the one trusted peer, signature) and replies with a signed ack.
// It prints the server URL on stdout, answers "cpu" on stdin with its own
// CPU time, and exits when stdin closes. The requester seals a fresh
// message per exchange, sends it with nats.go Request, opens the ack and
// checks it acknowledges that message.
//
// # Scenarios
//
//   - sequential: round trips one at a time; p50_us and p99_us, each round
//     trip timed from before sealing to after the ack is checked.
//   - pipelined: 128 requests in flight on one connection; exchanges_per_s
//     and cpu_us_per_exchange, the user+system CPU time of both processes
//     divided by the exchanges.
//
// Every repetition runs both scenarios, each after an unmeasured tenth of
// its count (as meerkatd's bench warms up its scenarios). A warm-up
// repetition is run first and dropped, except with --once (one repetition,
// no warm-up repetition), which meerkatd's bench uses to interleave runs of
// this program with its own.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"
)

func main() {
	if len(os.Args) > 1 && os.Args[1] == responderArg {
		os.Exit(responderMain())
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	switch {
	case errors.Is(err, flag.ErrHelp):
		os.Exit(2)
	case err != nil:
		fmt.Fprintln(os.Stderr, "natsbench:", err)
		os.Exit(1)
	}
}
