// Command meerkatd gives an AI agent an Ed25519 identity and a signed inbox,
// and links agents over Unix sockets and TCP with the Meerkat comms
// protocol.
//
// Run "meerkatd help" for the commands.
package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime/debug"
	"sort"
	"strconv"
	"strings"
)

// version is set at build time with -ldflags "-X main.version=…"; otherwise
// it comes from the module build info.
var version = ""

// command is one subcommand: a name, a one-line summary, and its body.
type command struct {
	summary string
	usage   string
	run     func(env *env, args []string) error
}

// env is what a command may touch: its streams and the process environment.
// Tests build their own.
type env struct {
	stdin          io.Reader
	stdout, stderr io.Writer
	lookupEnv      func(string) (string, bool)
	commands       map[string]command
}

func newEnv(stdout, stderr io.Writer, lookupEnv func(string) (string, bool)) *env {
	return &env{stdin: os.Stdin, stdout: stdout, stderr: stderr, lookupEnv: lookupEnv, commands: commandTable()}
}

func (e *env) getenv(k string) string {
	v, _ := e.lookupEnv(k)
	return v
}

// commandTable returns the subcommands. It is a function rather than a
// package variable because "help" refers to the table.
func commandTable() map[string]command {
	return map[string]command{
		"init": {
			summary: "create the home: identity, meerkat.toml, empty trusted_peers.json",
			usage:   "meerkatd init [--home DIR] [--name NAME]",
			run:     runInit,
		},
		"id": {
			summary: "print this node's name, public key, peer UUID and listen addresses",
			usage:   "meerkatd id [--home DIR] [--json]",
			run:     runID,
		},
		"keygen": {
			summary: "create a new identity (refuses to replace an existing one without --force)",
			usage:   "meerkatd keygen [--home DIR] [--force]",
			run:     runKeygen,
		},
		"peers": {
			summary: "list, add or remove trusted peers; discover the nodes running on this host",
			usage:   "meerkatd peers list [--json] | peers add NAME KEY ADDR [--meta JSON] | peers remove NAME | peers discover [--json]   [--home DIR]",
			run:     runPeers,
		},
		"run": {
			summary: "run the node in the foreground until SIGINT or SIGTERM (SIGHUP reloads trusted peers)",
			usage:   "meerkatd run [--home DIR] [--listen-uds PATH|off] [--listen-tcp HOST:PORT] [--log-level LEVEL]",
			run:     runDaemon,
		},
		"send": {
			summary: "send a message, request or response (through the daemon if it runs)",
			usage:   "meerkatd send message PEER BODY | send request PEER INTENT PARAMS_JSON [--wait DUR] | send response PEER REQUEST_ID STATUS RESULT_JSON   [--reliable [--ttl DUR] [--no-wait]] [--home DIR] [--json]",
			run:     runSend,
		},
		"outbox": {
			summary: "list reliable sends not yet acknowledged, and each peer's circuit breaker",
			usage:   "meerkatd outbox [--home DIR] [--json]",
			run:     runOutbox,
		},
		"deadletters": {
			summary: "list, requeue or drop reliable sends that expired or ran out of retries",
			usage:   "meerkatd deadletters [list] [--json] | deadletters retry ID...|--all | deadletters drop ID...|--all   [--home DIR]",
			run:     runDeadLetters,
		},
		"audit": {
			summary: "show the audit log: every envelope sent, received, acked, refused, retried, expired or dead-lettered",
			usage:   "meerkatd audit [--home DIR] [--since 1h|RFC3339] [--peer NAME|KEY] [--event EVENT] [--id ID] [--limit N] [--json]",
			run:     runAudit,
		},
		"pair": {
			summary: "make this node and another trust each other in one step, with a one-time code",
			usage:   "meerkatd pair offer [--ttl DUR] [--name-for-peer NAME] [--no-wait|--local] | pair accept LINE | pair accept --local NAME   [--name NAME] [--home DIR] [--json]",
			run:     runPair,
		},
		"mcp": {
			summary: "serve MCP on stdin/stdout for an LLM client (attaches to the daemon, or runs the node itself)",
			usage:   "meerkatd mcp [--home DIR] [--log-level LEVEL]",
			run:     runMCP,
		},
		"inbox": {
			summary: "list received items, oldest first (from the running daemon)",
			usage:   "meerkatd inbox [--home DIR] [--json] [--wait DUR] [--after SEQ] [--ack]",
			run:     runInbox,
		},
		"status": {
			summary: "show whether the daemon runs, its addresses and counters",
			usage:   "meerkatd status [--home DIR] [--json]",
			run:     runStatus,
		},
		"config": {
			summary: "check meerkat.toml, the MEERKAT_* variables and trusted_peers.json",
			usage:   "meerkatd config check [--home DIR]",
			run:     runConfig,
		},
		"version": {
			summary: "print the version",
			usage:   "meerkatd version",
			run: func(e *env, _ []string) error {
				fmt.Fprintln(e.stdout, "meerkatd", buildVersion())
				return nil
			},
		},
		"bench": {
			summary: "measure throughput, latency, memory and startup of real nodes against same-run anchors (issue 6)",
			usage:   benchUsage,
			run:     runBench,
		},
		"help": {
			summary: "show the commands, or one command's usage",
			usage:   "meerkatd help [COMMAND]",
			run:     runHelp,
		},
	}
}

func main() {
	e := newEnv(os.Stdout, os.Stderr, os.LookupEnv)
	os.Exit(e.main(os.Args[1:]))
}

// Exit codes (docs/cli.md).
const (
	exitOK          = 0
	exitError       = 1 // anything not listed below
	exitUsage       = 2 // bad command line or arguments
	exitPeerOffline = 3 // the peer did not acknowledge
	exitUnknownPeer = 4 // no trusted peer by that name, key or UUID
	exitNoDaemon    = 5 // the command needs the daemon, which is not running
	exitPairFailed  = 6 // pairing failed: wrong, used or expired code, a failed proof, rate limited
)

var errUsage = errors.New("usage")

func (e *env) main(args []string) int {
	if len(args) == 0 {
		e.usage(e.stderr)
		return exitUsage
	}
	name := args[0]
	if name == "-h" || name == "--help" || name == "-help" {
		e.usage(e.stdout)
		return exitOK
	}
	cmd, ok := e.commands[name]
	if !ok {
		fmt.Fprintf(e.stderr, "meerkatd: unknown command %q\n\n", name)
		e.usage(e.stderr)
		return exitUsage
	}
	if path := e.getenv("MEERKATD_CPUPROFILE"); path != "" {
		// For profiling under load (docs/performance.md); %p is the pid,
		// so the processes of one bench run write separate files.
		stopProfile, err := startCPUProfile(strings.ReplaceAll(path, "%p", strconv.Itoa(os.Getpid())))
		if err != nil {
			fmt.Fprintf(e.stderr, "meerkatd: MEERKATD_CPUPROFILE: %v\n", err)
			return exitError
		}
		defer stopProfile()
	}
	err := cmd.run(e, args[1:])
	if err == nil || errors.Is(err, flag.ErrHelp) {
		return exitOK
	}
	if errors.Is(err, errUsage) {
		fmt.Fprintf(e.stderr, "meerkatd %s: %s\nusage: %s\n", name, strings.TrimPrefix(err.Error(), "usage: "), cmd.usage)
		return exitUsage
	}
	fmt.Fprintf(e.stderr, "meerkatd %s: %v\n", name, err)
	switch errorCode(err) {
	case codeBadArgs:
		return exitUsage
	case codePeerOffline:
		return exitPeerOffline
	case codeUnknownPeer:
		return exitUnknownPeer
	case codeNoDaemon:
		return exitNoDaemon
	case codePairFailed:
		return exitPairFailed
	}
	return exitError
}

func (e *env) usage(w io.Writer) {
	fmt.Fprintln(w, "meerkatd: signed agent-to-agent messaging (Meerkat comms protocol)")
	fmt.Fprintln(w, "\nusage: meerkatd COMMAND [flags]\n\ncommands:")
	names := make([]string, 0, len(e.commands))
	for n := range e.commands {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		fmt.Fprintf(w, "  %-8s %s\n", n, e.commands[n].summary)
	}
	fmt.Fprintln(w, "\nThe node's home holds its identity, meerkat.toml and trusted_peers.json;")
	fmt.Fprintln(w, "it is --home, else $MEERKAT_HOME, else $XDG_CONFIG_HOME/meerkat, else")
	fmt.Fprintln(w, "~/.config/meerkat, and is created on first use.")
	fmt.Fprintln(w, "\nExit status: 0 ok, 1 error, 2 bad arguments, 3 peer offline,")
	fmt.Fprintln(w, "4 unknown peer, 5 no daemon running.")
}

func runHelp(e *env, args []string) error {
	if len(args) == 0 {
		e.usage(e.stdout)
		return nil
	}
	cmd, ok := e.commands[args[0]]
	if !ok {
		return fmt.Errorf("%w: unknown command %q", errUsage, args[0])
	}
	fmt.Fprintf(e.stdout, "%s\n\n%s\n", cmd.usage, cmd.summary)
	return nil
}

// newFlags returns a flag set that prints its usage to stderr and returns
// errors instead of exiting.
func (e *env) newFlags(name string) *flag.FlagSet {
	flags := flag.NewFlagSet("meerkatd "+name, flag.ContinueOnError)
	flags.SetOutput(e.stderr)
	flags.Usage = func() {
		fmt.Fprintf(e.stderr, "usage: %s\n\n%s\n\nflags:\n", e.commands[name].usage, e.commands[name].summary)
		flags.PrintDefaults()
	}
	return flags
}

// homeDir resolves the node's home: the flag, then MEERKAT_HOME, then
// XDG_CONFIG_HOME/meerkat, then ~/.config/meerkat.
func (e *env) homeDir(flagValue string) (string, error) {
	if flagValue != "" {
		return filepath.Abs(flagValue)
	}
	if h := e.getenv("MEERKAT_HOME"); h != "" {
		return filepath.Abs(h)
	}
	if x := e.getenv("XDG_CONFIG_HOME"); x != "" {
		return filepath.Join(x, "meerkat"), nil
	}
	home := e.getenv("HOME")
	if home == "" {
		return "", errors.New("cannot find a home directory: set --home or MEERKAT_HOME")
	}
	return filepath.Join(home, ".config", "meerkat"), nil
}

func buildVersion() string {
	if version != "" {
		return version
	}
	if bi, ok := debug.ReadBuildInfo(); ok && bi.Main.Version != "" && bi.Main.Version != "(devel)" {
		return bi.Main.Version
	}
	return "devel"
}
