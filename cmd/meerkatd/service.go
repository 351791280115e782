package main

import (
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"strings"

	"github.com/meerkatd/meerkatd/internal/completion"
	"github.com/meerkatd/meerkatd/internal/systemdunit"
)

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
		err := systemdunit.Uninstall(path)
		if err == nil {
			fmt.Fprintf(e.stdout, "removed %s\n", path)
		}
		return err
	default:
		return fmt.Errorf("%w: want a subcommand: install or uninstall", errUsage)
	}
	h, err := e.openHome(*homeFlag, false, nil)
	if err != nil {
		return err
	}
	exe, err := systemdunit.Executable()
	if err != nil {
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
		usage := e.commands[n].usage
		if n == "help" { // help takes a command's name
			usage = "meerkatd help " + strings.Join(names, " | help ")
		}
		p.Add(n, e.commands[n].summary, usage)
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
