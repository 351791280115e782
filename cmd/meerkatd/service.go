package main

import (
	"errors"
	"flag"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"

	"github.com/meerkatd/meerkatd/bench"
	"github.com/meerkatd/meerkatd/comms/node"
	"github.com/meerkatd/meerkatd/internal/completion"
	"github.com/meerkatd/meerkatd/internal/flagdoc"
	"github.com/meerkatd/meerkatd/internal/systemdunit"
)

// runService is `meerkatd service install|print|uninstall`.
func runService(e *env, args []string) error {
	sub, args := flagdoc.SplitSub(args)
	flags := e.newFlags("service")
	homeFlag := e.homeFlag(flags)
	force := flags.Bool("force", false, "with install: replace a different unit; with uninstall: remove the unit even if install did not write it, it runs another home or it is enabled (with the links that enable it)")
	name := systemdunit.DefaultName
	flags.Func("unit", "the unit's `NAME` (default meerkatd): another for each further home", func(s string) error { _, err := systemdunit.FileName(s); name = s; return err })
	if err := parseNoArgs(e, flags, args); err != nil {
		return err
	}
	path, err := systemdunit.Path(e.getenv("XDG_CONFIG_HOME"), e.getenv("HOME"), name)
	if err != nil {
		return err
	}
	switch sub {
	case "install":
	case "print":
		if *force {
			return fmt.Errorf("%w: print takes no --force", errUsage)
		}
	case "uninstall":
		home := "" // with --home: only that home's unit
		flags.Visit(func(f *flag.Flag) {
			if f.Name == "home" {
				home, err = e.homeDir(*homeFlag)
			}
		})
		if err != nil {
			return err
		}
		return systemdunit.Uninstall(path, home, *force, e.stdout)
	default:
		return fmt.Errorf("%w: want a subcommand: install, print or uninstall", errUsage)
	}
	dir, err := e.homeDir(*homeFlag)
	if err != nil {
		return err
	}
	// As the service will see it: meerkat.toml, not this shell's MEERKAT_*.
	h, _, err := node.OpenHome(dir, node.OpenOptions{})
	if err != nil {
		return err
	}
	u := systemdunit.Unit{Home: h.Dir} // runs this executable
	if ls, err := h.Config.Resolve(h.Dir); err == nil && ls.UDS.Path != "" {
		u.Writable = append(u.Writable, filepath.Dir(ls.UDS.Path))
	}
	if sub == "print" {
		return u.Print(e.stdout)
	}
	if err := u.Install(path, *force); err != nil {
		return err
	}
	fmt.Fprint(e.stdout, systemdunit.Installed(path))
	return nil
}

// runCompletion is `meerkatd completion bash|zsh|fish`: a script made
// from the command table.
func runCompletion(e *env, args []string) error {
	sub, args := flagdoc.SplitSub(args)
	flags := e.newFlags("completion")
	if err := parseNoArgs(e, flags, args); err != nil {
		return err
	}
	p := completion.Program{Name: "meerkatd", Flags: []string{"--help", "--version"}, DirFlags: []string{"--home"}, HelpCommand: "help"}
	names := slices.Sorted(maps.Keys(e.commands))
	for _, n := range names {
		p.Add(n, e.commands[n].summary, e.commands[n].usage)
	}
	s, err := completion.Script(sub, p)
	if errors.Is(err, completion.ErrShell) {
		return fmt.Errorf("%w: want bash, zsh or fish", errUsage)
	}
	if err != nil {
		return err
	}
	fmt.Fprint(e.stdout, s)
	return nil
}

// runBench is `meerkatd bench`: its flags set bench.Options; the suite is
// package bench. "bench echo" and "bench flood" are the children a run
// starts.
func runBench(e *env, args []string) error {
	if len(args) > 0 {
		switch args[0] {
		case "echo":
			return benchErr(bench.RunEcho(args[1:], e.stdin, e.stdout, e.stderr))
		case "flood":
			return benchErr(bench.RunFlood(args[1:], e.stdin, e.stdout))
		}
	}
	var o bench.Options
	flags := e.newFlags("bench")
	o.Flags(flags)
	if err := parseNoArgs(e, flags, args); err != nil {
		return err
	}
	exe, err := os.Executable()
	if err != nil {
		return fmt.Errorf("find own executable: %w", err)
	}
	o.Exe = exe
	ctx, stop := interruptible()
	defer stop()
	if err = bench.Run(ctx, o, e.stdout, e.stderr); ctx.Err() != nil {
		return errInterrupted // its children are gone: Run cleans up first
	}
	return benchErr(err)
}

// benchErr makes bench's usage errors this command's.
func benchErr(err error) error {
	if errors.Is(err, bench.ErrUsage) {
		return fmt.Errorf("%w: %v", errUsage, err)
	}
	return err
}
