package main

import (
	"cmp"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"time"

	"github.com/meerkatd/meerkatd/comms/control"
	"github.com/meerkatd/meerkatd/comms/node"
	"github.com/meerkatd/meerkatd/comms/node/nodetext"
	"github.com/meerkatd/meerkatd/config"
	"github.com/meerkatd/meerkatd/internal/flagdoc"
)

// parseArgs parses flags that may appear anywhere among the positional
// arguments (meerkatd send message bob hi --home X) and returns the
// positional ones. --help prints the command's help and returns
// flag.ErrHelp.
func parseArgs(e *env, flags *flag.FlagSet, args []string) ([]string, error) {
	var pos []string
	for {
		if err := flags.Parse(args); err != nil {
			if errors.Is(err, flag.ErrHelp) {
				e.printHelp(flags)
				return nil, err
			}
			return nil, fmt.Errorf("%w: %s", errUsage, flagdoc.Explain(err, flags))
		}
		args = flags.Args()
		if err := cmp.Or(flagdoc.GivenEmpty(flags, "idempotency-key", "task", "add-intent", "remove-intent"), flagdoc.GivenZero(flags, "ttl")); err != nil {
			return nil, fmt.Errorf("%w: %v", errUsage, err)
		}
		if len(args) == 0 {
			return pos, nil
		}
		if args[0] == "--" {
			return append(pos, args[1:]...), nil
		}
		pos = append(pos, args[0])
		args = args[1:]
	}
}

// parseNoArgs parses flags and refuses positional arguments.
func parseNoArgs(e *env, flags *flag.FlagSet, args []string) error {
	pos, err := parseArgs(e, flags, args)
	if err != nil {
		return err
	}
	return wantArgs(pos, 0, "no arguments")
}

// wantArgs checks the number of positional arguments.
func wantArgs(pos []string, n int, names string) error {
	if len(pos) != n {
		return fmt.Errorf("%w: want %s, got %d argument(s)", errUsage, names, len(pos))
	}
	return nil
}

// newCmd returns a command's flags with --home and --json registered;
// jsonUsage is --json's usage ("" for "print JSON").
func (e *env) newCmd(name, jsonUsage string) (flags *flag.FlagSet, home *string, asJSON *bool) {
	flags = e.newFlags(name)
	if jsonUsage == "" {
		jsonUsage = "print JSON"
	}
	return flags, e.homeFlag(flags), flags.Bool("json", false, jsonUsage)
}

// call runs f on the backend of the home named by homeFlag (withBackend,
// bounded to 30 seconds) and returns its result.
func call[T any](e *env, homeFlag string, f func(context.Context, node.API) (T, error)) (v T, err error) {
	err = e.withBackend(homeFlag, 30*time.Second, func(ctx context.Context, b *control.Backend) error {
		v, err = f(ctx, b)
		return err
	})
	return v, err
}

// jsonDone reports whether a command's outcome is settled: by err, or
// with asJSON by v printed as JSON. It returns the error to end with.
func (e *env) jsonDone(asJSON bool, v any, err error) (bool, error) {
	if err != nil {
		return true, err
	}
	if asJSON {
		return true, nodetext.PrintJSON(e.stdout, v)
	}
	return false, nil
}

// homeFlag registers --home, defaulting to a --home given before the
// command.
func (e *env) homeFlag(flags *flag.FlagSet) *string { return config.HomeFlag(flags, e.home) }

// readInput returns arg's content (see node.ReadInput).
func (e *env) readInput(what, arg string) (string, error) {
	return node.ReadInput(e.stdin, what, arg)
}

// printJSONError prints err as {"error": {"code", "message"}} for a
// command run with --json, so a script reads the same codes as MCP.
func printJSONError(w io.Writer, err error) {
	nodetext.PrintJSON(w, map[string]any{"error": jsonError(err)})
}

// jsonError is the {code, message} of err that --json prints.
func jsonError(err error) map[string]string {
	code := node.CodeOf(err)
	if errors.Is(err, errUsage) {
		code = node.CodeBadArgument
	}
	return map[string]string{"code": code, "message": strings.TrimPrefix(node.UserText(err), "usage: ")}
}

// shown marks an error whose outcome a command run with --json has
// already printed (a partial result, or the error itself), so that main
// does not print it again.
type shown struct{ error }

func (s shown) Unwrap() error { return s.error }

// noteReplayed says on stderr that a call with an idempotency key used
// before printed the first call's result (what: the call's name).
func (e *env) noteReplayed(replayed bool, what string) {
	if replayed {
		fmt.Fprintf(e.stderr, "replayed: the first %s with this idempotency key; nothing sent again\n", what)
	}
}

// printPartial prints, with --json, the outcome of a call that may give
// a result and an error together (a send that failed after its envelope
// got an id, a broadcast with a failed copy, a wait that timed out): the
// result if ok (there is one), with the error's {code, message} as its
// "error" member if the call failed, else the error alone. main then does
// not print the error again.
func (e *env) printPartial(v any, ok bool, err error) error {
	if !ok {
		printJSONError(e.stdout, err)
		return jsonShown(err)
	}
	if err != nil {
		if v, ok = nodetext.WithError(v, jsonError(err)); !ok {
			printJSONError(e.stdout, err) // not an object: the error alone
			return jsonShown(err)
		}
	}
	if perr := nodetext.PrintJSON(e.stdout, v); perr != nil {
		return perr
	}
	return jsonShown(err)
}

// jsonShown wraps err (nil stays nil) as shown.
func jsonShown(err error) error {
	if err == nil {
		return nil
	}
	return shown{err}
}

// wantsJSON reports whether the command line asks for --json.
func wantsJSON(args []string) bool {
	for _, a := range args {
		switch a {
		case "--":
			return false
		case "--json", "-json", "--json=true", "-json=true":
			return true
		}
	}
	return false
}

// homeDir resolves the node's home from the --home flag and the
// environment (node.ResolveHome).
func (e *env) homeDir(flagValue string) (string, error) { return node.ResolveHome(flagValue, e.getenv) }

// openHome opens the home named by the flag with the configuration in
// effect: defaults < meerkat.toml < MEERKAT_* variables < overrides (key
// path → value). Only create (init, run, mcp) makes a missing home: for
// any other command a mistyped --home must not mint a new identity.
func (e *env) openHome(flagHome string, create bool, opts node.OpenOptions) (*node.Home, error) {
	dir, err := e.homeDir(flagHome)
	if err != nil {
		return nil, err
	}
	opts.Create, opts.LookupEnv = create, e.lookupEnv
	h, created, err := node.OpenHome(dir, opts)
	if err != nil {
		return nil, err
	}
	if len(created) > 0 {
		fmt.Fprintf(e.stderr, "initialised %s (%s)\n", dir, strings.Join(created, ", "))
	}
	for _, err := range e.unknownEnv() { // run and mcp log them instead
		if !create {
			fmt.Fprintf(e.stderr, "warning: %s\n", strings.TrimPrefix(err.Error(), "config: "))
		}
	}
	return h, nil
}

// backendFor returns h's daemon if one runs, else a node in this process
// in mode (control.Open), logging warnings to stderr.
func (e *env) backendFor(h *node.Home, mode node.Mode) (*control.Backend, error) {
	return control.Open(h, mode, slog.New(slog.NewTextHandler(e.stderr, &slog.HandlerOptions{Level: slog.LevelWarn})))
}

// openBackend opens the home named by homeFlag and its backend in mode
// (backendFor). A home whose configuration does not load (meerkat.toml
// cut short by an edit) is served by its daemon if one answers, on the
// configuration it started with (control.DaemonDespite, node.DespiteHome).
func (e *env) openBackend(homeFlag string, mode node.Mode) (*node.Home, *control.Backend, error) {
	h, err := e.openHome(homeFlag, false, node.OpenOptions{})
	if dir, derr := e.homeDir(homeFlag); err != nil && derr == nil {
		b, err := control.DaemonDespite(dir, err, e.stderr)
		return node.DespiteHome(dir), b, err
	} else if err != nil {
		return nil, nil, err
	}
	b, err := e.backendFor(h, mode)
	return h, b, err
}

// withBackend opens the home named by homeFlag, runs f on its backend
// (the daemon, or a send-only node in this process) and bounds it to
// bound.
func (e *env) withBackend(homeFlag string, bound time.Duration, f func(context.Context, *control.Backend) error) error {
	_, b, err := e.openBackend(homeFlag, node.ModeSend) // status while meerkat.toml is being edited: the daemon's
	if err != nil {
		return err
	}
	defer b.Close()
	ctx, cancel := context.WithTimeout(context.Background(), bound)
	defer cancel()
	return f(ctx, b)
}

// runtimeDir is the local-discovery directory ($XDG_RUNTIME_DIR/meerkat).
func (e *env) runtimeDir() (string, error) { return node.RuntimeDir(e.getenv("XDG_RUNTIME_DIR")) }

// settings returns the setting flags given on the command line (they win
// over meerkat.toml and the environment).
func settings(flags *flag.FlagSet) (node.OpenOptions, error) {
	values, names, err := config.FlagOverrides(flags)
	if err != nil {
		return node.OpenOptions{}, fmt.Errorf("%w: %v", errUsage, err)
	}
	return node.OpenOptions{Overrides: values, OverrideFlags: names}, nil
}

// unknownEnv returns a problem for each MEERKAT_* variable that is not a
// setting (nor MEERKAT_HOME, which this command reads itself).
func (e *env) unknownEnv() []error {
	if e.environ == nil {
		return nil
	}
	return config.UnknownEnv(e.environ(), "MEERKAT_HOME")
}

// warnUnknownEnv logs unknown MEERKAT_* variables as warnings.
func (e *env) warnUnknownEnv(log *slog.Logger) {
	for _, err := range e.unknownEnv() {
		log.Warn(strings.TrimPrefix(err.Error(), "config: "))
	}
}
