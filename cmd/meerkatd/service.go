package main

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"

	"github.com/meerkatd/meerkatd/internal/completion"
	"github.com/meerkatd/meerkatd/internal/systemdunit"
)

const serviceHelp = `install writes a systemd user unit, ` + systemdunit.Name + `, to
$XDG_CONFIG_HOME/systemd/user (default ~/.config/systemd/user). It runs
this executable as "meerkatd run --home HOME" for the home (which must
exist: meerkatd init creates it), tells systemd when its sockets accept
connections, restarts it if it fails, and lets it write only its home,
its Unix socket's directory and the runtime directory. A different unit
already there is kept unless --force is given. Then enable it with:

  systemctl --user daemon-reload
  systemctl --user enable --now meerkatd

uninstall removes the unit; run "systemctl --user disable --now
meerkatd" first. meerkat.toml is read when the daemon starts; MEERKAT_*
variables of the shell that installs the unit do not reach it.`

// runService is `meerkatd service install|uninstall`.
func runService(e *env, args []string) error {
	sub, args := splitSub(args)
	flags := e.newFlags("service")
	homeFlag := e.homeFlag(flags)
	force := flags.Bool("force", false, "with install: replace a different unit")
	if err := parseNoArgs(e, flags, args); err != nil {
		return err
	}
	dir, err := systemdunit.Dir(e.getenv("XDG_CONFIG_HOME"), e.getenv("HOME"))
	if err != nil {
		return err
	}
	path := filepath.Join(dir, systemdunit.Name)
	switch sub {
	case "install":
	case "uninstall":
		fmt.Fprintln(e.stderr, "stop and disable the service first, if it is enabled:\n  systemctl --user disable --now meerkatd")
		if err := systemdunit.Uninstall(path); err != nil {
			return err
		}
		fmt.Fprintf(e.stdout, "removed %s\n", path)
		return nil
	case "":
		return fmt.Errorf("%w: want a subcommand: install or uninstall", errUsage)
	default:
		return fmt.Errorf("%w: unknown service subcommand %q (want install or uninstall)", errUsage, sub)
	}
	h, err := e.openHome(*homeFlag, false, nil)
	if err != nil {
		return err
	}
	exe, err := os.Executable()
	if err != nil {
		return err
	}
	if exe, err = filepath.EvalSymlinks(exe); err != nil {
		return err
	}
	u := systemdunit.Unit{Exec: exe, Home: h.Dir}
	if ls, err := h.Config.Resolve(h.Dir); err == nil && ls.UDS.Path != "" {
		u.Writable = append(u.Writable, filepath.Dir(ls.UDS.Path))
	}
	text, err := u.Text()
	if err != nil {
		return err
	}
	if err := systemdunit.Install(path, text, *force); err != nil {
		if errors.Is(err, systemdunit.ErrExists) {
			return fmt.Errorf("%s holds a different unit; --force replaces it", path)
		}
		return err
	}
	fmt.Fprintf(e.stdout, "wrote %s\nstart it now and at every login with:\n  systemctl --user daemon-reload\n  systemctl --user enable --now meerkatd\n", path)
	return nil
}

// runCompletion is `meerkatd completion bash|zsh|fish`: a script made
// from the command table.
func runCompletion(e *env, args []string) error {
	sub, args := splitSub(args)
	flags := e.newFlags("completion")
	if err := parseNoArgs(e, flags, args); err != nil {
		return err
	}
	p := completion.Program{Name: "meerkatd", Flags: []string{"--help", "--version"}, DirFlags: []string{"--home"}}
	var names []string
	for n := range e.commands {
		names = append(names, n)
	}
	slices.Sort(names)
	for _, n := range names {
		c := completion.Command{Name: n, Summary: e.commands[n].summary}
		c.Subcommands, c.Flags = completion.FromUsage("meerkatd", n, e.commands[n].usage)
		if n == "help" {
			c.Subcommands = names
		}
		p.Commands = append(p.Commands, c)
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
