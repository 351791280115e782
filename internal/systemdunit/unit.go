// Package systemdunit writes the systemd user unit that runs a meerkatd
// node as a service: the unit's text, where it goes, and installing and
// removing the file without clobbering a unit someone else wrote.
//
// It does not talk to systemd (the user runs systemctl) and does not read
// the environment: callers pass the directories they resolved. Its
// functions are safe for concurrent use; two installs racing for one file
// are not coordinated.
package systemdunit

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"unicode/utf8"
)

// descriptionPrefix starts the Description line of the units install
// writes: uninstall recognises its own by it.
const descriptionPrefix = "Description=meerkatd agent messaging node"

// Name is the default unit's file name, and the name systemctl knows it
// by; [DefaultName] without the suffix.
const Name = DefaultName + ".service"

// DefaultName is the unit's name unless another is given: one user's
// first node. A second node (another home) needs a unit of its own name.
const DefaultName = "meerkatd"

// Help is what "meerkatd service --help" says of the unit.
const Help = `install writes a systemd user unit, ` + Name + ` (or NAME.service
with --unit NAME), to $XDG_CONFIG_HOME/systemd/user (default
~/.config/systemd/user). It runs this executable as
"meerkatd run --home HOME" for the home (which must exist: meerkatd init
creates it), tells systemd when its sockets accept connections, restarts
it if it fails, and lets it write only its home, its Unix socket's
directory and the runtime directory. A different unit already there is
kept unless --force is given. Then enable it with:

  systemctl --user daemon-reload
  systemctl --user enable --now meerkatd

print writes the unit install would write to standard output, and
writes no file.

A unit runs one home. To run a second node (another home) as a service
too, give its unit another name, the same with every subcommand:

  meerkatd service install --home ~/.config/meerkat-work --unit meerkatd-work
  systemctl --user daemon-reload
  systemctl --user enable --now meerkatd-work

uninstall removes the unit (one install wrote; --force removes another);
with --home, only if it runs that home. Run "systemctl --user disable
--now meerkatd" (or the unit's name) first.
meerkat.toml is read when the daemon starts; MEERKAT_* variables of the
shell that installs the unit do not reach it (nor the socket directory
the unit lets it write, which comes from meerkat.toml).`

// StopTimeout is how long systemd waits after SIGTERM before it kills the
// daemon (TimeoutStopSec).
const StopTimeout = "20s"

var (
	// ErrExists means a different unit file is already installed.
	ErrExists = errors.New("systemdunit: a different unit is installed")
	// ErrOtherHome means the unit there runs another home's node.
	ErrOtherHome = errors.New("systemdunit: the unit there is another home's")
	// ErrEnabled means the unit to remove is enabled: systemctl would no
	// longer find it to disable it.
	ErrEnabled = errors.New("systemdunit: the unit is enabled")
	// ErrNotInstalled means there is no unit file to remove.
	ErrNotInstalled = errors.New("systemdunit: no unit is installed")
	// ErrNotOurs means the unit there was not written by install: it is
	// removed only with force.
	ErrNotOurs = errors.New("systemdunit: the unit there was not written by meerkatd service install (remove it yourself, or use --force)")
	// ErrName means a unit name systemd would not take for a user's
	// service unit of its own.
	ErrName = errors.New("systemdunit: bad unit name")
)

// Unit is what the unit runs. Its zero value is not valid: Exec and Home
// are required.
type Unit struct {
	// Exec is the absolute path of the meerkatd executable; empty means
	// the running one ([Executable]).
	Exec string
	// Home is the absolute path of the node's home; the unit runs
	// "Exec run --home Home" and lets it write there.
	Home string
	// Writable are further absolute paths the daemon writes (say the
	// directory of a Unix socket outside the home).
	Writable []string
}

// Path is where the unit called name goes (name.service; "" is
// [DefaultName]): $XDG_CONFIG_HOME/systemd/user/NAME.service, with
// ~/.config for XDG_CONFIG_HOME when xdgConfigHome is empty. A name
// systemd would not take (see [FileName]) is an error wrapping ErrName.
func Path(xdgConfigHome, userHome, name string) (string, error) {
	file, err := FileName(name)
	if err != nil {
		return "", err
	}
	if xdgConfigHome == "" {
		if userHome == "" {
			return "", errors.New("systemdunit: neither XDG_CONFIG_HOME nor HOME is set")
		}
		xdgConfigHome = filepath.Join(userHome, ".config")
	}
	return filepath.Join(xdgConfigHome, "systemd", "user", file), nil
}

// FileName returns the file name of the unit called name: name with
// ".service" added unless it has it ("" is [DefaultName]). The name is
// letters, digits and ":-_." only (no "@": a template is not a node's
// unit), at most 64 bytes; anything else is an error wrapping ErrName.
func FileName(name string) (string, error) {
	name = strings.TrimSuffix(name, ".service")
	if name == "" {
		name = DefaultName
	}
	bad := strings.ContainsFunc(name, func(r rune) bool {
		return !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune(":-_.", r))
	})
	if bad || len(name) > 64 || name[0] == '-' || name[0] == '.' {
		return "", fmt.Errorf("%w %q: use letters, digits and - _ . : (at most 64), say meerkatd-work", ErrName, name)
	}
	return name + ".service", nil
}

// Installed is what install prints: where it wrote the unit and how to
// start it.
func Installed(path string) string {
	return fmt.Sprintf("wrote %s\nstart it now and at every login with:\n  systemctl --user daemon-reload\n  systemctl --user enable --now %s\n", path, strings.TrimSuffix(filepath.Base(path), ".service"))
}

// StopFirst is why uninstall refuses to remove the enabled unit at path:
// systemctl disables a unit by its file, so that goes first.
func StopFirst(path string) string {
	return "stop and disable it first: systemctl --user disable --now " + strings.TrimSuffix(filepath.Base(path), ".service") + " (or remove it anyway with --force)"
}

// Removed is what uninstall says once it removed the unit at path (and,
// when wasEnabled, the links that enabled it).
func Removed(path string, wasEnabled bool) string {
	name := strings.TrimSuffix(filepath.Base(path), ".service")
	if wasEnabled {
		return "removed " + path + " and the links that enabled it\nif it still runs, stop it: systemctl --user stop " + name + "\nthen: systemctl --user daemon-reload"
	}
	return "removed " + path + "\nif it still runs, stop it: systemctl --user stop " + name
}

// enabledLinks are the links by which the unit at path is enabled in its
// directory: `systemctl --user enable` makes one in the .wants (or
// .requires) directory of each target its [Install] section names
// (default.target for the unit install writes; an edited unit may name
// others).
func enabledLinks(path string) []string {
	dir, name := filepath.Split(path)
	ents, _ := os.ReadDir(dir)
	var links []string
	for _, e := range ents {
		if !e.IsDir() || !strings.HasSuffix(e.Name(), ".wants") && !strings.HasSuffix(e.Name(), ".requires") {
			continue
		}
		l := filepath.Join(dir, e.Name(), name)
		if _, err := os.Lstat(l); err == nil {
			links = append(links, l)
		}
	}
	return links
}

// Executable is the absolute path of the running executable, symbolic
// links resolved: what the unit should run.
func Executable() (string, error) {
	exe, err := os.Executable()
	if err != nil {
		return "", err
	}
	return filepath.EvalSymlinks(exe)
}

// Text returns the unit file.
func (u Unit) Text() (string, error) {
	if u.Exec == "" {
		exe, err := Executable()
		if err != nil {
			return "", err
		}
		u.Exec = exe
	}
	for _, p := range append([]string{u.Exec, u.Home}, u.Writable...) {
		if !filepath.IsAbs(p) {
			return "", fmt.Errorf("systemdunit: %q is not an absolute path", p)
		}
		if strings.ContainsFunc(p, func(r rune) bool { return r < 0x20 || r == 0x7f }) {
			return "", fmt.Errorf("systemdunit: %q holds a control character", p)
		}
		if !utf8.ValidString(p) {
			return "", fmt.Errorf("systemdunit: %q is not valid UTF-8, which systemd refuses in a unit", p)
		}
	}
	// systemd takes the executable's name literally: no quotes, no
	// backslash (it refuses them), no $ escaped as in an argument.
	if strings.ContainsAny(u.Exec, "\"'\\") {
		return "", fmt.Errorf("systemdunit: the executable's path %q holds a quote or a backslash, which systemd refuses in a command's name: install meerkatd at a path without them", u.Exec)
	}
	writable := []string{quote(u.Home, false)}
	// A private /tmp would hide a home, a socket or the executable in the
	// real one.
	privateTmp := "PrivateTmp=yes\n"
	for _, p := range append([]string{u.Home, u.Exec}, u.Writable...) {
		if p != u.Home && p != u.Exec && !within(p, u.Home) {
			writable = append(writable, quote(p, false))
		}
		if within(p, "/tmp") || within(p, "/var/tmp") {
			privateTmp = ""
		}
	}
	// %t is the user's runtime directory ($XDG_RUNTIME_DIR), where the node
	// announces itself for local discovery.
	writable = append(writable, "%t")
	var b strings.Builder
	fmt.Fprintf(&b, `[Unit]
`+descriptionPrefix+` (home %s)

[Service]
Type=notify
NotifyAccess=main
ExecStart=%s run --home %s
Restart=on-failure
RestartSec=2
TimeoutStopSec=%s
NoNewPrivileges=yes
ProtectSystem=strict
ProtectHome=read-only
%sReadWritePaths=%s

[Install]
WantedBy=default.target
`, escapeSpecifiers(u.Home), quote(u.Exec, false), quote(u.Home, true), StopTimeout, privateTmp, strings.Join(writable, " "))
	return b.String(), nil
}

// quote writes s as one word of a unit setting: specifiers (%) escaped,
// in double quotes if it holds a space, a quote or a backslash. In a
// command's argument (exec) a $ is escaped too, or systemd would expand
// it; not in the command's name, which systemd does not expand.
func quote(s string, exec bool) string {
	s = escapeSpecifiers(s)
	if exec {
		s = strings.ReplaceAll(s, "$", "$$")
	}
	if !strings.ContainsAny(s, " \t\"'\\;") {
		return s
	}
	s = strings.ReplaceAll(s, `\`, `\\`)
	s = strings.ReplaceAll(s, `"`, `\"`)
	return `"` + s + `"`
}

// within reports whether path is dir or inside it.
func within(path, dir string) bool { return path == dir || strings.HasPrefix(path, dir+"/") }

func escapeSpecifiers(s string) string { return strings.ReplaceAll(s, "%", "%%") }

// Print writes the unit to w: what Install would write.
func (u Unit) Print(w io.Writer) error {
	text, err := u.Text()
	if err != nil {
		return err
	}
	_, err = io.WriteString(w, text)
	return err
}

// Install writes the unit to path, as WriteFile does. When the unit
// there is one install wrote for another home, the error says so and how
// to install this home's unit beside it.
func (u Unit) Install(path string, force bool) error {
	text, err := u.Text()
	if err != nil {
		return err
	}
	err = WriteFile(path, text, force)
	if errors.Is(err, ErrExists) {
		if b, rerr := os.ReadFile(path); rerr == nil {
			if other, ok := homeOf(string(b)); ok && other != u.Home {
				return fmt.Errorf("%w at %s: it runs the node of home %s; give this home's unit a name of its own with --unit (say --unit %s-%s), or replace that one with --force", ErrExists, path, other, DefaultName, suggest(u.Home))
			}
		}
	}
	return err
}

// homeOf returns the home of a unit install wrote, from its Description.
func homeOf(text string) (string, bool) {
	for line := range strings.Lines(text) {
		h, ok := strings.CutPrefix(strings.TrimRight(line, "\n"), descriptionPrefix+" (home ")
		if h, ok2 := strings.CutSuffix(h, ")"); ok && ok2 {
			return strings.ReplaceAll(h, "%%", "%"), true
		}
	}
	return "", false
}

// suggest makes a unit name's tail from the home's last element.
func suggest(home string) string {
	s := strings.Map(func(r rune) rune {
		if r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-' || r == '_' {
			return r
		}
		return -1
	}, filepath.Base(home))
	if s == "" || len(s) > 40 {
		return "2"
	}
	return s
}

// WriteFile writes text to path (creating its directory). A file already
// there is kept when it holds the same text, and replaced only with force;
// otherwise WriteFile returns an error wrapping ErrExists.
func WriteFile(path, text string, force bool) error {
	old, err := os.ReadFile(path)
	switch {
	case err == nil && bytes.Equal(old, []byte(text)):
		return nil
	case err == nil && !force:
		return fmt.Errorf("%w at %s (--force replaces it)", ErrExists, path)
	case err != nil && !errors.Is(err, os.ErrNotExist):
		return err
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	tmp, err := os.CreateTemp(filepath.Dir(path), "."+Name+".*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	if _, err := tmp.WriteString(text); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Chmod(0o644); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), path)
}

// Uninstall removes the unit file at path and writes Removed to w; it
// returns an error wrapping ErrNotInstalled when there is none. With
// home (not ""), a unit install wrote for another home is kept unless
// force: the error wraps ErrOtherHome and names both. An enabled unit
// (linked from a target's .wants or .requires directory beside it) is
// kept unless force, which also removes the links: the error wraps
// ErrEnabled, names them and says to disable it.
func Uninstall(path, home string, force bool, w io.Writer) error {
	b, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("%w: %s", ErrNotInstalled, path)
	}
	if err != nil {
		return err
	}
	if !force && !bytes.Contains(b, []byte("\n"+descriptionPrefix)) {
		return fmt.Errorf("%w: %s", ErrNotOurs, path)
	}
	if other, ok := homeOf(string(b)); ok && !force && home != "" && other != home {
		return fmt.Errorf("%w: %s runs the node of home %s, not %s; name this home's unit with --unit, or remove that one with --force", ErrOtherHome, path, other, home)
	}
	links := enabledLinks(path)
	if len(links) > 0 && !force {
		return fmt.Errorf("%w (%s): %s; %s", ErrEnabled, strings.Join(links, ", "), path, StopFirst(path))
	}
	if err := os.Remove(path); err != nil {
		return err
	}
	for _, l := range links {
		if err := os.Remove(l); err != nil && !errors.Is(err, os.ErrNotExist) {
			return err
		}
	}
	fmt.Fprintln(w, Removed(path, len(links) > 0))
	return nil
}
