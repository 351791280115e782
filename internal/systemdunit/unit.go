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
	"os"
	"path/filepath"
	"strings"
	"unicode/utf8"
)

// descriptionPrefix starts the Description line of the units install
// writes: uninstall recognises its own by it.
const descriptionPrefix = "Description=meerkatd agent messaging node"

// Name is the unit's file name, and the name systemctl knows it by.
const Name = "meerkatd.service"

// Help is what "meerkatd service --help" says of the unit.
const Help = `install writes a systemd user unit, ` + Name + `, to
$XDG_CONFIG_HOME/systemd/user (default ~/.config/systemd/user). It runs
this executable as "meerkatd run --home HOME" for the home (which must
exist: meerkatd init creates it), tells systemd when its sockets accept
connections, restarts it if it fails, and lets it write only its home,
its Unix socket's directory and the runtime directory. A different unit
already there is kept unless --force is given. Then enable it with:

  systemctl --user daemon-reload
  systemctl --user enable --now meerkatd

uninstall removes the unit (one install wrote; --force removes another);
run "systemctl --user disable --now meerkatd" first. meerkat.toml is read when the daemon starts; MEERKAT_*
variables of the shell that installs the unit do not reach it.`

// StopTimeout is how long systemd waits after SIGTERM before it kills the
// daemon (TimeoutStopSec).
const StopTimeout = "20s"

var (
	// ErrExists means a different unit file is already installed.
	ErrExists = errors.New("systemdunit: a different unit is installed")
	// ErrNotInstalled means there is no unit file to remove.
	ErrNotInstalled = errors.New("systemdunit: no unit is installed")
	// ErrNotOurs means the unit there was not written by install: it is
	// removed only with force.
	ErrNotOurs = errors.New("systemdunit: the unit there was not written by meerkatd service install (remove it yourself, or use --force)")
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

// Path is where the unit goes: $XDG_CONFIG_HOME/systemd/user/meerkatd.service,
// with ~/.config for XDG_CONFIG_HOME when xdgConfigHome is empty.
func Path(xdgConfigHome, userHome string) (string, error) {
	if xdgConfigHome == "" {
		if userHome == "" {
			return "", errors.New("systemdunit: neither XDG_CONFIG_HOME nor HOME is set")
		}
		xdgConfigHome = filepath.Join(userHome, ".config")
	}
	return filepath.Join(xdgConfigHome, "systemd", "user", Name), nil
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
	// A private /tmp would hide a home or socket in the real one.
	privateTmp := "PrivateTmp=yes\n"
	for _, p := range append([]string{u.Home}, u.Writable...) {
		if p != u.Home && !within(p, u.Home) {
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

// Install writes the unit to path, as WriteFile does.
func (u Unit) Install(path string, force bool) error {
	text, err := u.Text()
	if err != nil {
		return err
	}
	return WriteFile(path, text, force)
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

// Uninstall removes the unit file at path; it returns an error wrapping
// ErrNotInstalled when there is none.
func Uninstall(path string, force bool) error {
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
	return os.Remove(path)
}
