// Command meerkatd gives an AI agent an Ed25519 identity and a signed inbox,
// and links agents over Unix sockets and TCP with the Meerkat comms
// protocol.
//
// Run "meerkatd help" for the commands.
package main

import (
	_ "embed"
	"errors"
	"flag"
	"fmt"
	"io"
	"maps"
	"os"
	"runtime/debug"
	"slices"
	"strings"

	"github.com/meerkatd/meerkatd/bench"
	"github.com/meerkatd/meerkatd/comms/node"
	"github.com/meerkatd/meerkatd/comms/node/nodetext"
	"github.com/meerkatd/meerkatd/config"
	"github.com/meerkatd/meerkatd/internal/completion"
	"github.com/meerkatd/meerkatd/internal/flagdoc"
	"github.com/meerkatd/meerkatd/internal/systemdunit"
)

// version is set at build time with -ldflags "-X main.version=…"; otherwise
// it comes from the module build info.
var version = ""

// command is one subcommand: a one-line summary, its usage, its help and
// its body.
type command struct {
	summary, usage, help string
	run                  func(e *env, args []string) error
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

//go:embed commands.txt
var commandsText string

// commandRuns are the commands' bodies; commands.txt holds their texts.
var commandRuns = map[string]func(*env, []string) error{
	"init": runInit, "id": runID, "keygen": runKeygen, "peers": runPeers, "run": runDaemon,
	"send": runSend, "outbox": runOutbox, "deadletters": runDeadLetters, "audit": runAudit,
	"pair": runPair, "space": runSpace, "broadcast": runBroadcast, "task": runTask, "card": runCard,
	"mcp": runMCP, "inbox": runInbox, "search": runSearch, "status": runStatus, "config": runConfig,
	"service": runService, "completion": runCompletion, "version": runVersion, "bench": runBench,
	"tell": runTell, "sent": runSent, "requests": runRequests, "cancel": runCancel,
	"release": runRelease, "help": runHelp,
}

// commandTable returns the subcommands: their texts from commands.txt
// (bench, completion and service take theirs from the packages that do
// the work), their bodies from commandRuns.
func commandTable() map[string]command {
	t := parseCommands(commandsText)
	for name, c := range t {
		c.run = commandRuns[name]
		switch name {
		case "bench":
			c.usage, c.help = bench.Usage, bench.Help
		case "completion":
			c.help = completion.Help("meerkatd")
		case "service":
			c.help = systemdunit.Help
		}
		t[name] = c
	}
	return t
}

// parseCommands reads commands.txt (its first lines say how).
func parseCommands(text string) map[string]command {
	t := map[string]command{}
	for _, sec := range strings.Split(text, "\n== ")[1:] {
		lines := append(strings.Split(strings.TrimRight(sec, "\n"), "\n"), "")
		c := command{summary: lines[1]}
		i := 2
		if i < len(lines) && strings.HasPrefix(lines[i], "usage: ") {
			c.usage = strings.TrimPrefix(lines[i], "usage: ")
			for i++; i < len(lines) && strings.HasPrefix(lines[i], "       "); i++ {
				c.usage += "\n" + lines[i]
			}
		}
		c.help = strings.TrimSpace(strings.Join(lines[i:], "\n"))
		t[lines[0]] = c
	}
	return t
}

func main() {
	e := newEnv(os.Stdout, os.Stderr, os.LookupEnv)
	e.environ = os.Environ
	os.Exit(e.main(os.Args[1:]))
}

// Exit codes (docs/cli.md).
const (
	exitOK          = 0
	exitError       = 1   // anything not listed below
	exitUsage       = 2   // bad command line or arguments
	exitPeerOffline = 3   // the peer did not acknowledge
	exitUnknownPeer = 4   // no trusted peer by that name, key or UUID
	exitNoDaemon    = 5   // the command needs a running node, and none runs
	exitPairFailed  = 6   // pairing failed: wrong, used or expired code, a failed proof, rate limited
	exitInterrupted = 130 // SIGINT, SIGTERM or SIGHUP ended a wait (128 + SIGINT, as a shell reports it)
)

// errUsage marks a bad command line; errInterrupted, a wait SIGINT ended.
var errUsage, errInterrupted = errors.New("usage"), node.ErrInterrupted

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
		case a == "--home" || a == "-home" || strings.HasPrefix(a, "--home=") || strings.HasPrefix(a, "-home="):
			if _, v, ok := strings.Cut(a, "="); ok {
				e.home, args = v, args[1:]
			} else if len(args) >= 2 {
				e.home, args = args[1], args[2:]
			} else {
				e.home, args = "", nil
			}
			if e.home == "" {
				fmt.Fprintf(e.stderr, "meerkatd: --home %s\n", config.ErrEmptyHome)
				return nil, true, exitUsage
			}
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
		if wantsJSON(args[1:]) {
			printJSONError(e.stdout, fmt.Errorf("%w: unknown command %q", errUsage, name))
		}
		if s := flagdoc.Nearest(name, slices.Collect(maps.Keys(e.commands))); s != "" {
			fmt.Fprintf(e.stderr, "meerkatd: unknown command %q: did you mean %s? (meerkatd help lists the commands)\n", name, s)
			return exitUsage
		}
		fmt.Fprintf(e.stderr, "meerkatd: unknown command %q\n\n", name)
		e.usage(e.stderr)
		return exitUsage
	}
	if path := e.getenv("MEERKATD_CPUPROFILE"); path != "" {
		stopProfile, err := bench.StartCPUProfile(path) // docs/performance.md

		if err != nil {
			fmt.Fprintf(e.stderr, "meerkatd: MEERKATD_CPUPROFILE: %v\n", err)
			return exitError
		}
		defer stopProfile()
	}
	if subs, _ := completion.FromUsage("meerkatd", name, cmd.usage); len(subs) > 0 { // "X --home A sub" is "X sub --home A"
		args = slices.Concat(args[:1], completion.SubcommandFirst(args[1:], subs, append(completion.ValueFlags(cmd.usage), "--home")))
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
	fmt.Fprintf(e.stderr, "meerkatd %s: %s\n", name, nodetext.Line(errorText(name, err)))
	return exitCode(err)
}

// errorText is err's message for a user: without package prefixes, which
// would stack ("meerkatd pair: pair: …"), and with the API's error code.
func errorText(name string, err error) string {
	msg := strings.TrimPrefix(node.UserText(err), name+": ")
	if code := node.CodeOf(err); code != node.CodeInternal && code != node.CodeInterrupted { // "interrupted" says it
		msg += " (" + code + ")"
	}
	return msg
}

// exitCode maps an error to the exit status.
func exitCode(err error) int {
	if errors.Is(err, errInterrupted) {
		return exitInterrupted
	}
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

// usageText is meerkatd --help; its "{commands}" line is the commands.
//
//go:embed usage.txt
var usageText string

func (e *env) usage(w io.Writer) {
	var list strings.Builder
	for _, n := range slices.Sorted(maps.Keys(e.commands)) {
		fmt.Fprintf(&list, "  %-11s %s\n", n, e.commands[n].summary)
	}
	fmt.Fprint(w, strings.Replace(usageText, "{commands}\n", list.String(), 1))
}

// runHelp shows the commands, or one command's help (as COMMAND --help; an unknown SUBCOMMAND is bad_argument).
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
	subs, _ := completion.FromUsage("meerkatd", args[0], cmd.usage)
	if sub, _ := flagdoc.SplitSub(args[1:]); sub != "" && !slices.Contains(subs, sub) {
		return fmt.Errorf("%w: %s", errUsage, nodetext.UnknownSubcommand(args[0], sub, subs))
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
	if cmd.help != "" {
		fmt.Fprintf(e.stdout, "\n%s\n", cmd.help)
	}
	flagdoc.Print(e.stdout, flags)
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
		return nodetext.PrintJSON(e.stdout, v)
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
