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
	"io/fs"
	"os"
	"path/filepath"
	"runtime/debug"
	"sort"
	"strings"

	"github.com/meerkatd/meerkatd/identity"
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
	stdout, stderr io.Writer
	getenv         func(string) string
	commands       map[string]command
}

func newEnv(stdout, stderr io.Writer, getenv func(string) string) *env {
	return &env{stdout: stdout, stderr: stderr, getenv: getenv, commands: commandTable()}
}

// commandTable returns the subcommands. It is a function rather than a
// package variable because "help" refers to the table.
func commandTable() map[string]command {
	return map[string]command{
		"id": {
			summary: "print this node's public key and peer UUID, creating the identity on first use",
			usage:   "meerkatd id [--home DIR]",
			run:     runID,
		},
		"keygen": {
			summary: "create a new identity (refuses to replace an existing one without --force)",
			usage:   "meerkatd keygen [--home DIR] [--force]",
			run:     runKeygen,
		},
		"version": {
			summary: "print the version",
			usage:   "meerkatd version",
			run: func(e *env, _ []string) error {
				fmt.Fprintln(e.stdout, "meerkatd", buildVersion())
				return nil
			},
		},
		"help": {
			summary: "show the commands, or one command's flags",
			usage:   "meerkatd help [COMMAND]",
			run:     runHelp,
		},
	}
}

func main() {
	e := newEnv(os.Stdout, os.Stderr, os.Getenv)
	os.Exit(e.main(os.Args[1:]))
}

// exit codes
const (
	exitOK    = 0
	exitError = 1
	exitUsage = 2
)

// errUsage marks an error in how the command was called.
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
	err := cmd.run(e, args[1:])
	switch {
	case err == nil:
		return exitOK
	case errors.Is(err, flag.ErrHelp):
		return exitOK
	case errors.Is(err, errUsage):
		fmt.Fprintf(e.stderr, "meerkatd %s: %s\nusage: %s\n", name, strings.TrimPrefix(err.Error(), "usage: "), cmd.usage)
		return exitUsage
	default:
		fmt.Fprintf(e.stderr, "meerkatd %s: %v\n", name, err)
		return exitError
	}
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
	fmt.Fprintln(w, "\nThe node's home holds its identity; it is --home, else $MEERKAT_HOME,")
	fmt.Fprintln(w, "else $XDG_CONFIG_HOME/meerkat, else ~/.config/meerkat.")
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

// parse parses flags and refuses positional arguments.
func parse(flags *flag.FlagSet, args []string) error {
	if err := flags.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return err
		}
		return fmt.Errorf("%w: %v", errUsage, err)
	}
	if flags.NArg() > 0 {
		return fmt.Errorf("%w: unexpected argument %q", errUsage, flags.Arg(0))
	}
	return nil
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

func runID(e *env, args []string) error {
	flags := e.newFlags("id")
	home := flags.String("home", "", "node home `directory`")
	if err := parse(flags, args); err != nil {
		return err
	}
	dir, err := e.homeDir(*home)
	if err != nil {
		return err
	}
	kp, err := identity.LoadKeypair(dir)
	if errors.Is(err, fs.ErrNotExist) {
		if kp, err = identity.GenerateKeypair(); err == nil {
			err = kp.Save(dir)
		}
		if err == nil {
			fmt.Fprintf(e.stderr, "created a new identity in %s\n", dir)
		}
	}
	if err != nil {
		return err
	}
	printID(e.stdout, kp.ID(), dir)
	return nil
}

func runKeygen(e *env, args []string) error {
	flags := e.newFlags("keygen")
	home := flags.String("home", "", "node home `directory`")
	force := flags.Bool("force", false, "replace an existing identity (peers that trust the old key will refuse this node)")
	if err := parse(flags, args); err != nil {
		return err
	}
	dir, err := e.homeDir(*home)
	if err != nil {
		return err
	}
	if _, err := os.Stat(filepath.Join(dir, identity.KeyFile)); err == nil && !*force {
		return fmt.Errorf("%s already holds an identity; use --force to replace it (peers that trust the old key will refuse this node)",
			filepath.Join(dir, identity.KeyFile))
	}
	kp, err := identity.GenerateKeypair()
	if err != nil {
		return err
	}
	if err := kp.Save(dir); err != nil {
		return err
	}
	printID(e.stdout, kp.ID(), dir)
	return nil
}

func printID(w io.Writer, id identity.PeerID, dir string) {
	fmt.Fprintf(w, "pubkey     %s\npeer_uuid  %s\nhome       %s\n", id, id.UUID(), dir)
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
