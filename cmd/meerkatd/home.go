package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"path/filepath"
	"strings"
	"time"

	"github.com/meerkatd/meerkatd/comms/control"
	"github.com/meerkatd/meerkatd/comms/node"
	"github.com/meerkatd/meerkatd/config"
)

// homeDir resolves the node's home: the flag, then MEERKAT_HOME, then
// XDG_CONFIG_HOME/meerkat, then ~/.config/meerkat. A leading ~/ is the
// user's home directory (MCP client configurations pass it literally).
func (e *env) homeDir(flagValue string) (string, error) {
	expand := func(p string) (string, error) {
		if p == "~" || strings.HasPrefix(p, "~/") {
			home := e.getenv("HOME")
			if home == "" {
				return "", fmt.Errorf("cannot expand %q: HOME is not set", p)
			}
			p = filepath.Join(home, p[1:])
		}
		return filepath.Abs(p)
	}
	if flagValue != "" {
		return expand(flagValue)
	}
	if h := e.getenv("MEERKAT_HOME"); h != "" {
		return expand(h)
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

// backend is the node a command acts on: the daemon's, through its
// control socket, or one started in this process.
type backend struct {
	node.API
	local  *node.Node // nil when attached to a daemon
	daemon bool       // a daemon serves the home
}

func (b *backend) close() {
	if b.local != nil {
		b.local.Close()
	}
}

// backendFor returns h's daemon if one runs, else a node in this process
// (in mode, for a command that sends: ModeReplies to receive answers). A
// control socket that is there but may not be used (another user's) is an
// error, not a reason to act without the daemon.
func (e *env) backendFor(h *node.Home, mode node.Mode) (*backend, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	c, err := control.Dial(ctx, h.ControlPath())
	cancel()
	if err == nil {
		return &backend{API: c, daemon: true}, nil
	}
	if !errors.Is(err, control.ErrNoDaemon) {
		return nil, err
	}
	n, err := node.Start(h, node.Options{Mode: mode, Logger: e.warnLog()})
	if err != nil {
		return nil, err
	}
	return &backend{API: n, local: n}, nil
}

// warnLog is the logger of a node a command runs in its own process.
func (e *env) warnLog() *slog.Logger {
	return slog.New(slog.NewTextHandler(e.stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
}

// withBackend opens the home named by homeFlag, runs f on its backend
// (the daemon, or a send-only node in this process) and bounds it to
// bound.
func (e *env) withBackend(homeFlag string, bound time.Duration, f func(context.Context, *backend) error) error {
	h, err := e.openHome(homeFlag, false, node.OpenOptions{})
	if err != nil {
		return err
	}
	b, err := e.backendFor(h, node.ModeSend)
	if err != nil {
		return err
	}
	defer b.close()
	ctx, cancel := context.WithTimeout(context.Background(), bound)
	defer cancel()
	return f(ctx, b)
}

// runtimeDir is the local-discovery directory ($XDG_RUNTIME_DIR/meerkat).
func (e *env) runtimeDir() (string, error) {
	return node.RuntimeDir(e.getenv("XDG_RUNTIME_DIR"))
}

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
