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
	"runtime/debug"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"

	"github.com/meerkatd/meerkatd/comms/node"
)

// version is set at build time with -ldflags "-X main.version=…"; otherwise
// it comes from the module build info.
var version = ""

// command is one subcommand: a one-line summary, its usage and its body.
type command struct {
	summary string
	usage   string
	run     func(e *env, args []string) error
}

// env is what a command may touch: its streams and the process environment.
// Tests build their own.
type env struct {
	stdin          io.Reader
	stdout, stderr io.Writer
	lookupEnv      func(string) (string, bool)
	environ        func() []string // the variables' names for unknown-setting checks; nil: none
	commands       map[string]command
	home           string // --home given before the command
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
			usage:   "meerkatd init [--home DIR] [--name NAME] [--json]",
			run:     runInit,
		},
		"id": {
			summary: "print this node's name, public key, peer UUID and listen addresses",
			usage:   "meerkatd id [--home DIR] [--json]",
			run:     runID,
		},
		"keygen": {
			summary: "create a new identity (refuses to replace an existing one without --force)",
			usage:   "meerkatd keygen [--home DIR] [--force] [--json]",
			run:     runKeygen,
		},
		"peers": {
			summary: "list, add or remove trusted peers; discover the nodes running on this host",
			usage:   "meerkatd peers list | peers add NAME KEY ADDR [--nats] [--meta JSON] | peers remove NAME | peers discover   [--home DIR] [--json]",
			run:     runPeers,
		},
		"run": {
			summary: "run the node in the foreground until SIGINT or SIGTERM (SIGHUP reloads trusted peers)",
			usage:   "meerkatd run [--home DIR] [--listen-uds PATH|off] [--listen-tcp HOST:PORT] [--log-level LEVEL] [--log-format text|json]",
			run:     runDaemon,
		},
		"send": {
			summary: "send a message, request or response (through the daemon if it runs)",
			usage: "meerkatd send message PEER BODY | send request PEER INTENT [PARAMS_JSON] [--wait DUR] [--deadline DUR|RFC3339] | send response PEER REQUEST_ID STATUS [RESULT_JSON]\n" +
				"       [--body-file FILE] [--reliable [--ttl DUR] [--no-wait]] [--interrupt] [--idempotency-key KEY] [--task ID] [--home DIR] [--json]\n" +
				"       BODY, PARAMS_JSON and RESULT_JSON may be - (standard input) or @FILE",
			run: runSend,
		},
		"outbox": {
			summary: "list reliable sends not yet acknowledged and each peer's circuit breaker, or try them now",
			usage:   "meerkatd outbox [list] | outbox retry [PEER]   [--home DIR] [--json]",
			run:     runOutbox,
		},
		"deadletters": {
			summary: "list, requeue or drop reliable sends that expired or ran out of retries",
			usage:   "meerkatd deadletters [list] | deadletters retry ID...|--all | deadletters drop ID...|--all   [--home DIR] [--json]",
			run:     runDeadLetters,
		},
		"audit": {
			summary: "show the audit log: every envelope sent, received, acked, refused, retried, expired or dead-lettered",
			usage:   "meerkatd audit [--home DIR] [--since 1h|RFC3339] [--peer NAME|KEY] [--event EVENT] [--id ID] [--limit N] [--follow] [--json]",
			run:     runAudit,
		},
		"pair": {
			summary: "make this node and another trust each other in one step, with a one-time code",
			usage:   "meerkatd pair offer [--ttl DUR] [--name-for-peer NAME] [--no-wait|--local] [--nats] | pair accept LINE | pair accept --local NAME   [--name NAME] [--home DIR] [--json]",
			run:     runPair,
		},
		"space": {
			summary: "take part in MEUP spaces: rosters, chat, proposals, grants (capabilities enforced by every node)",
			usage:   spaceUsage,
			run:     runSpace,
		},
		// Broadcast and tasks slice.
		"broadcast": {
			summary: "send one message to every trusted peer, or to a group of them (one signed copy each)",
			usage:   "meerkatd broadcast BODY [--group G | --peer PEER...] [--direct | --ttl DUR] [--task ID] [--home DIR] [--json]",
			run:     runBroadcast,
		},
		"task": {
			summary: "list tasks, complete one (telling its participants) or wait for its completion",
			usage:   "meerkatd task [list] [--state open|completed] | task complete ID [RESULT_JSON] | task wait ID [--wait DUR]   [--home DIR] [--json]",
			run:     runTask,
		},
		"card": { // slice E: agent cards
			summary: "show or edit this node's agent card (signed with its key); fetch and show a peer's verified card",
			usage:   cardUsage,
			run:     runCard,
		},
		"mcp": {
			summary: "serve MCP on stdin/stdout for an LLM client (attaches to the daemon, or runs the node itself)",
			usage:   "meerkatd mcp [--home DIR] [--log-level LEVEL] [--log-format text|json]",
			run:     runMCP,
		},
		"inbox": {
			summary: "list received items by class (system, user, interrupt, broadcast, normal), then oldest first, page by page (from the daemon, or read-only from the home's database)",
			usage:   "meerkatd inbox [--home DIR] [--json] [--after SEQ] [--limit N] [--kind KIND] [--from PEER] [--wait DUR] [--ack] [--order priority|arrival]",
			run:     runInbox,
		},
		// Slice C: search.
		"search": {
			summary: "search received items, history included, by words, phrases and prefixes (newest first, paged)",
			usage:   "meerkatd search QUERY... [--peer PEER] [--kind KIND] [--since WHEN] [--until WHEN] [--limit N] [--cursor C] [--home DIR] [--json]",
			run:     runSearch,
		},
		"status": {
			summary: "show whether a node serves the home, its addresses and counters (exit 5 if none runs)",
			usage:   "meerkatd status [--home DIR] [--wait DUR] [--json]",
			run:     runStatus,
		},
		"config": {
			summary: "check meerkat.toml, the MEERKAT_* variables and trusted_peers.json, or show the configuration in effect",
			usage:   "meerkatd config check | config show [--listen-uds PATH|off] [--listen-tcp HOST:PORT] [--log-level LEVEL] [--log-format text|json]   [--home DIR] [--json]",
			run:     runConfig,
		},
		"service": {
			summary: "install or remove the systemd user unit that runs the daemon",
			usage:   "meerkatd service install [--home DIR] [--force] | service uninstall",
			run:     runService,
		},
		"completion": {
			summary: "print a shell completion script (bash, zsh or fish)",
			usage:   "meerkatd completion bash | completion zsh | completion fish",
			run:     runCompletion,
		},
		"version": {
			summary: "print the version",
			usage:   "meerkatd version [--json]",
			run:     runVersion,
		},
		"bench": {
			summary: "measure throughput, latency, memory and startup of real nodes against same-run anchors",
			usage:   benchUsage,
			run:     runBench,
		},
		// Item classes: a person's note to the agent.
		"tell": {
			summary: "add a note from you to your agent's inbox, read before anything a peer sent (needs the daemon)",
			usage:   "meerkatd tell BODY [--home DIR] [--json]   (BODY may be - or @FILE)",
			run:     runTell,
		},
		// Delivery status of what this node sent.
		"sent": {
			summary: "show what became of the envelopes this node sent: queued, acked, dead, answered",
			usage:   "meerkatd sent [ID...] [--peer PEER] [--limit N] [--home DIR] [--json]",
			run:     runSent,
		},
		// Slice F: the request lifecycle (lifecyclecmd.go).
		"requests": {
			summary: "list the requests this node sent and their states (open, answered, timed_out, cancelled)",
			usage:   "meerkatd requests [--state STATES] [--peer PEER] [--limit N] [--home DIR] [--json]",
			run:     runRequests,
		},
		"cancel": {
			summary: "cancel an open request this node sent, and tell the peer",
			usage:   "meerkatd cancel ID [--reason TEXT] [--home DIR] [--json]",
			run:     runCancel,
		},
		// Slice G: the loop guard.
		"release": {
			summary: "list the peers the loop guard counts or holds, or release one (a person's decision, not an agent's)",
			usage:   "meerkatd release [PEER] [--home DIR] [--json]",
			run:     runRelease,
		},
		"help": {
			summary: "show the commands, or one command's usage",
			usage:   "meerkatd help [COMMAND [SUBCOMMAND]]",
			run:     runHelp,
		},
	}
}

func main() {
	e := newEnv(os.Stdout, os.Stderr, os.LookupEnv)
	e.environ = os.Environ
	os.Exit(e.main(os.Args[1:]))
}

// Exit codes (docs/cli.md).
const (
	exitOK          = 0
	exitError       = 1 // anything not listed below
	exitUsage       = 2 // bad command line or arguments
	exitPeerOffline = 3 // the peer did not acknowledge
	exitUnknownPeer = 4 // no trusted peer by that name, key or UUID
	exitNoDaemon    = 5 // the command needs a running node, and none runs
	exitPairFailed  = 6 // pairing failed: wrong, used or expired code, a failed proof, rate limited
)

// errUsage marks a bad command line.
var errUsage = errors.New("usage")

// isHelp reports whether arg asks for help.
func isHelp(arg string) bool { return arg == "-h" || arg == "--help" || arg == "-help" }

// globalFlags takes the flags given before the command: --home, and
// --help and --version, which are answered at once.
func (e *env) globalFlags(args []string) (rest []string, done bool, code int) {
	for len(args) > 0 && strings.HasPrefix(args[0], "-") {
		a := args[0]
		switch {
		case isHelp(a):
			e.usage(e.stdout)
			return nil, true, exitOK
		case a == "-V" || a == "--version" || a == "-version":
			fmt.Fprintln(e.stdout, "meerkatd", buildVersion())
			return nil, true, exitOK
		case a == "--home" || a == "-home":
			if len(args) < 2 {
				fmt.Fprintln(e.stderr, "meerkatd: --home needs a directory")
				return nil, true, exitUsage
			}
			e.home, args = args[1], args[2:]
		case strings.HasPrefix(a, "--home=") || strings.HasPrefix(a, "-home="):
			e.home, args = a[strings.IndexByte(a, '=')+1:], args[1:]
		default:
			fmt.Fprintf(e.stderr, "meerkatd: unknown flag %s before the command (only --home, --help and --version go there)\n\n", a)
			e.usage(e.stderr)
			return nil, true, exitUsage
		}
	}
	return args, false, 0
}

func (e *env) main(args []string) int {
	args, done, code := e.globalFlags(args)
	if done {
		return code
	}
	if len(args) == 0 {
		e.usage(e.stderr)
		return exitUsage
	}
	name := args[0]
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
	var printed shown
	if wantsJSON(args[1:]) && !errors.As(err, &printed) {
		printJSONError(e.stdout, err)
	}
	if errors.Is(err, errUsage) {
		msg := strings.TrimPrefix(node.UserText(err), "usage: ")
		fmt.Fprintf(e.stderr, "meerkatd %s: %s\nusage: %s\n(meerkatd %s --help for more)\n", name, msg, cmd.usage, name)
		return exitUsage
	}
	// An error may quote a peer (a pairing peer's refusal, an address it
	// gave in a dial error): escaped like any text from peers.
	fmt.Fprintf(e.stderr, "meerkatd %s: %s\n", name, safeLine(errorText(name, err)))
	return exitCode(err)
}

// errorText is err's message for a user: without package prefixes, which
// would stack ("meerkatd pair: pair: …"), and with the API's error code.
func errorText(name string, err error) string {
	msg := strings.TrimPrefix(node.UserText(err), name+": ")
	if code := node.CodeOf(err); code != node.CodeInternal {
		msg += " (" + code + ")"
	}
	return msg
}

// exitCode maps an error to the exit status.
func exitCode(err error) int {
	switch node.CodeOf(err) {
	case node.CodeBadArgument, node.CodeBadStatus, node.CodeUnknownRequest, node.CodeAlreadyAnswered, node.CodeBodyTooLarge, node.CodeNoHome:
		return exitUsage
	case node.CodePeerOffline:
		return exitPeerOffline
	case node.CodeUnknownPeer:
		return exitUnknownPeer
	case node.CodeNoDaemon:
		return exitNoDaemon
	case node.CodePairFailed:
		return exitPairFailed
	}
	return exitError
}

func (e *env) usage(w io.Writer) {
	fmt.Fprintln(w, "meerkatd: signed agent-to-agent messaging (Meerkat comms protocol)")
	fmt.Fprintln(w, "\nusage: meerkatd [--home DIR] COMMAND [flags]\n\ncommands:")
	names := make([]string, 0, len(e.commands))
	for n := range e.commands {
		names = append(names, n)
	}
	slices.Sort(names)
	for _, n := range names {
		fmt.Fprintf(w, "  %-11s %s\n", n, e.commands[n].summary)
	}
	fmt.Fprintln(w, "\nThe node's home holds its identity, meerkat.toml and trusted_peers.json;")
	fmt.Fprintln(w, "it is --home, else $MEERKAT_HOME, else $XDG_CONFIG_HOME/meerkat, else")
	fmt.Fprintln(w, "~/.config/meerkat. init, run and mcp create it; other commands need it.")
	fmt.Fprintln(w, "Flags may come before or after the command's arguments; --json prints JSON.")
	fmt.Fprintln(w, "\nExit status: 0 ok, 1 error, 2 bad arguments, 3 peer offline,")
	fmt.Fprintln(w, "4 unknown peer, 5 no daemon running, 6 pairing failed.")
	fmt.Fprintln(w, "\nmeerkatd help COMMAND (or meerkatd COMMAND --help) shows a command's flags.")
}

// runHelp shows the commands, or one command's help (as COMMAND --help).
func runHelp(e *env, args []string) error {
	if len(args) == 0 || isHelp(args[0]) {
		e.usage(e.stdout)
		return nil
	}
	cmd, ok := e.commands[args[0]]
	if !ok || args[0] == "help" {
		if ok {
			fmt.Fprintf(e.stdout, "usage: %s\n\n%s\n", cmd.usage, cmd.summary)
			return nil
		}
		return fmt.Errorf("%w: unknown command %q", errUsage, args[0])
	}
	return cmd.run(e, append(slices.Clone(args[1:]), "--help"))
}

// newFlags returns the flag set of a command. Errors are returned, not
// printed; --help prints the command's usage and flags to stdout.
func (e *env) newFlags(name string) *flag.FlagSet {
	flags := flag.NewFlagSet("meerkatd "+name, flag.ContinueOnError)
	flags.SetOutput(io.Discard)
	flags.Usage = func() {}
	return flags
}

// printHelp prints a command's usage, summary and flags to stdout.
func (e *env) printHelp(flags *flag.FlagSet) {
	name, _ := strings.CutPrefix(flags.Name(), "meerkatd ")
	top, _, _ := strings.Cut(name, " ")
	cmd := e.commands[top]
	fmt.Fprintf(e.stdout, "usage: %s\n\n%s\n", cmd.usage, cmd.summary)
	if help := commandHelp[top]; help != "" {
		fmt.Fprintf(e.stdout, "\n%s\n", help)
	}
	fmt.Fprintln(e.stdout, "\nflags:")
	flags.SetOutput(e.stdout)
	flags.PrintDefaults()
	flags.SetOutput(io.Discard)
}

func runVersion(e *env, args []string) error {
	flags := e.newFlags("version")
	asJSON := flags.Bool("json", false, "print JSON")
	if err := parseNoArgs(e, flags, args); err != nil {
		return err
	}
	if *asJSON {
		v := map[string]string{"version": buildVersion()}
		if bi, ok := debug.ReadBuildInfo(); ok {
			v["go"] = bi.GoVersion
		}
		return printJSON(e.stdout, v)
	}
	fmt.Fprintln(e.stdout, "meerkatd", buildVersion())
	return nil
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

// startCPUProfile writes a CPU profile to path until the returned
// function is called.
func startCPUProfile(path string) (func(), error) {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o600)
	if err != nil {
		return nil, err
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		f.Close()
		return nil, err
	}
	return func() {
		pprof.StopCPUProfile()
		f.Close()
	}, nil
}
