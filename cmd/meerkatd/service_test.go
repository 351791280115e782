package main

import (
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/meerkatd/meerkatd/comms/node"
	"github.com/meerkatd/meerkatd/internal/systemdunit"
	"github.com/meerkatd/meerkatd/internal/testutil"
)

// The daemon tells the service manager it is ready only once its sockets
// accept connections, and that it is stopping when SIGTERM comes; it then
// exits 0 within the unit's stop timeout, its sockets removed.
func TestNotifyReadyAndSIGTERM(t *testing.T) {
	testutil.CheckGoroutines(t)
	n := newNode(t, "alice")
	sockPath := filepath.Join(n.home, "notify.sock")
	ns, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Net: "unixgram", Name: sockPath})
	if err != nil {
		t.Fatal(err)
	}
	defer ns.Close()
	receive := func(want string) string {
		t.Helper()
		ns.SetReadDeadline(time.Now().Add(readyTimeout))
		buf := make([]byte, 4096)
		k, err := ns.Read(buf)
		if err != nil {
			t.Fatalf("waiting for %s: %v", want, err)
		}
		return string(buf[:k])
	}
	cmd := exec.Command(binary(t), "run", "--home", n.home)
	cmd.Env = append(append(baseEnv(), n.env...), "NOTIFY_SOCKET="+sockPath)
	logf, err := os.Create(filepath.Join(t.TempDir(), "daemon.log"))
	if err != nil {
		t.Fatal(err)
	}
	defer logf.Close()
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	exited := false
	defer func() {
		if !exited {
			cmd.Process.Kill()
			<-done
		}
		if t.Failed() {
			b, _ := os.ReadFile(logf.Name())
			t.Logf("daemon log:\n%s", b)
		}
	}()

	msg := receive("READY=1")
	want := "READY=1\nMAINPID=" + strconv.Itoa(cmd.Process.Pid)
	if msg != want {
		t.Fatalf("first notification %q, want %q", msg, want)
	}
	// At once, no retries: the node's socket and the control socket accept.
	for _, p := range []string{filepath.Join(n.home, "meerkat.sock"), filepath.Join(n.home, node.ControlSocketName)} {
		c, err := net.Dial("unix", p)
		if err != nil {
			t.Fatalf("READY=1 came before %s accepted connections: %v", p, err)
		}
		c.Close()
	}
	if s := n.status(); !s.Daemon {
		t.Fatalf("status after READY=1: %+v", s)
	}

	stop, err := time.ParseDuration(systemdunit.StopTimeout)
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if msg := receive("STOPPING=1"); msg != "STOPPING=1" {
		t.Fatalf("notification after SIGTERM %q, want STOPPING=1", msg)
	}
	select {
	case err := <-done:
		exited = true
		if err != nil {
			t.Fatalf("daemon exit after SIGTERM: %v, want status 0", err)
		}
	case <-time.After(stop):
		t.Fatalf("daemon still running %v after SIGTERM, the unit's TimeoutStopSec", stop)
	}
	for _, f := range []string{"meerkat.sock", node.ControlSocketName} {
		if _, err := os.Lstat(filepath.Join(n.home, f)); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("after SIGTERM, %s remains (%v)", f, err)
		}
	}
}

// service install writes the unit for this executable and the home,
// refuses to replace a different one without --force, and service
// uninstall removes it.
func TestServiceInstall(t *testing.T) {
	t.Parallel()
	n := newNode(t, "alice")
	cfg := t.TempDir()
	n.env = append(n.env, "XDG_CONFIG_HOME="+cfg)
	path := filepath.Join(cfg, "systemd", "user", systemdunit.Name)

	out := n.ok("service", "install")
	for _, want := range []string{path, "systemctl --user daemon-reload", "systemctl --user enable --now meerkatd"} {
		if !strings.Contains(out, want) {
			t.Errorf("service install output lacks %q:\n%s", want, out)
		}
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	exe, err := filepath.EvalSymlinks(binary(t))
	if err != nil {
		t.Fatal(err)
	}
	unit := string(b)
	for _, want := range []string{
		"ExecStart=" + exe + " run --home " + n.home + "\n",
		"Type=notify\n",
		"ReadWritePaths=" + n.home + " %t\n",
		"WantedBy=default.target\n",
	} {
		if !strings.Contains(unit, want) {
			t.Errorf("unit lacks %q:\n%s", want, unit)
		}
	}
	if analyze, err := exec.LookPath("systemd-analyze"); err == nil {
		// User mode with a runtime directory of its own: no user manager
		// need run (internal/systemdunit's TestVerify shows it finds errors).
		cmd := exec.Command(analyze, "--user", "verify", "--man=no", path)
		cmd.Env = append(os.Environ(), "XDG_RUNTIME_DIR="+t.TempDir())
		if out, err := cmd.CombinedOutput(); err != nil || len(strings.TrimSpace(string(out))) > 0 {
			t.Errorf("systemd-analyze verify %s: %v\n%s", path, err, out)
		}
	}
	n.ok("service", "install") // the same unit again: nothing to refuse

	mine := strings.Replace(unit, "RestartSec=2", "RestartSec=9", 1)
	if err := os.WriteFile(path, []byte(mine), 0o644); err != nil {
		t.Fatal(err)
	}
	n.wantCode(exitError, []string{"different unit", "--force"}, "service", "install")
	if b, _ := os.ReadFile(path); string(b) != mine {
		t.Fatal("a refused install changed the unit")
	}
	n.ok("service", "install", "--force")
	if b, _ := os.ReadFile(path); string(b) != unit {
		t.Fatalf("after --force the unit is:\n%s", b)
	}

	// Enabled (as systemctl --user enable links it): kept, with what to
	// run first, since systemctl disables a unit by its file.
	wants := filepath.Join(filepath.Dir(path), "default.target.wants")
	if err := os.MkdirAll(wants, 0o755); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(wants, systemdunit.Name)
	if err := os.Symlink(path, link); err != nil {
		t.Fatal(err)
	}
	n.wantCode(exitError, []string{"enabled", "systemctl --user disable --now meerkatd", "--force"}, "service", "uninstall")
	if _, err := os.Stat(path); err != nil {
		t.Fatalf("uninstall of an enabled unit removed it: %v", err)
	}
	r := n.wantCode(exitOK, nil, "service", "uninstall", "--force")
	if !strings.Contains(r.stdout, "removed "+path+" and the links that enabled it") || !strings.Contains(r.stdout, "daemon-reload") {
		t.Errorf("uninstall --force of an enabled unit: %s", r)
	}
	if _, err := os.Lstat(link); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("uninstall --force left the link in default.target.wants: %v", err)
	}
	if _, err := os.Stat(path); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("unit still there after uninstall: %v", err)
	}
	n.wantCode(exitError, []string{"no unit is installed"}, "service", "uninstall")
	n.wantCode(exitUsage, []string{"install, print or uninstall"}, "service", "start")
}

// service print shows the unit install would write and writes nothing;
// --unit names a second home's unit, which install writes beside the
// first home's, and uninstall removes by that name.
func TestServicePrintAndUnitName(t *testing.T) {
	t.Parallel()
	n := newNode(t, "alice")
	cfg := t.TempDir()
	n.env = append(n.env, "XDG_CONFIG_HOME="+cfg)
	dir := filepath.Join(cfg, "systemd", "user")

	printed := n.ok("service", "print")
	if !strings.Contains(printed, "ExecStart=") || !strings.Contains(printed, "run --home "+n.home+"\n") {
		t.Fatalf("service print:\n%s", printed)
	}
	if _, err := os.Stat(dir); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("service print made %s: %v", dir, err)
	}
	n.ok("service", "install")
	if b, _ := os.ReadFile(filepath.Join(dir, systemdunit.Name)); string(b) != printed {
		t.Fatalf("install wrote another unit than print showed:\n%s", b)
	}

	// A second home: refused over the first's unit, naming it; written
	// beside it under --unit.
	work := newNode(t, "work")
	work.env = append(work.env, "XDG_CONFIG_HOME="+cfg)
	work.wantCode(exitError, []string{"runs the node of home " + n.home, "--unit"}, "service", "install")
	out := work.ok("service", "install", "--unit", "meerkatd-work")
	second := filepath.Join(dir, "meerkatd-work.service")
	if !strings.Contains(out, "wrote "+second) || !strings.Contains(out, "systemctl --user enable --now meerkatd-work\n") {
		t.Errorf("install --unit: %s", out)
	}
	if b, _ := os.ReadFile(second); !strings.Contains(string(b), "run --home "+work.home+"\n") {
		t.Fatalf("%s:\n%s", second, b)
	}
	if b, _ := os.ReadFile(filepath.Join(dir, systemdunit.Name)); string(b) != printed {
		t.Fatal("install --unit changed the first home's unit")
	}
	work.wantCode(exitUsage, []string{"--unit", "bad unit name"}, "service", "print", "--unit", "../x")
	r := work.wantCode(exitOK, nil, "service", "uninstall", "--unit", "meerkatd-work")
	if !strings.Contains(r.stdout, "removed "+second) || !strings.Contains(r.stdout, "systemctl --user stop meerkatd-work") {
		t.Errorf("uninstall --unit: %s", r)
	}
	if _, err := os.Stat(filepath.Join(dir, systemdunit.Name)); err != nil {
		t.Fatalf("uninstall --unit removed the first unit: %v", err)
	}
}

// A socket outside the home (meerkat.toml's) is writable by the service
// too; a MEERKAT_* variable of the installing shell, which the service
// will not see, does not count.
func TestServiceInstallSocketElsewhere(t *testing.T) {
	t.Parallel()
	n := newNode(t, "alice")
	cfg, sockDir, shellDir := t.TempDir(), t.TempDir(), t.TempDir()
	path := filepath.Join(n.home, "meerkat.toml")
	orig, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	conf := strings.Replace(string(orig), "listen_uds = \"\"", fmt.Sprintf("listen_uds = %q", filepath.Join(sockDir, "mk.sock")), 1)
	if err := os.WriteFile(path, []byte(conf), 0o600); err != nil {
		t.Fatal(err)
	}
	n.env = append(n.env, "XDG_CONFIG_HOME="+cfg, "MEERKAT_COMMS_LISTEN_UDS="+filepath.Join(shellDir, "mk.sock"))
	n.ok("service", "install")
	b, err := os.ReadFile(filepath.Join(cfg, "systemd", "user", systemdunit.Name))
	if err != nil {
		t.Fatal(err)
	}
	if want := "ReadWritePaths=" + n.home + " " + sockDir + " %t\n"; !strings.Contains(string(b), want) || strings.Contains(string(b), shellDir) {
		t.Errorf("unit lacks %q, or names the shell's socket directory %s:\n%s", want, shellDir, b)
	}
}

// uninstall with --home removes only that home's unit; print takes no
// --force.
func TestServiceUninstallOtherHome(t *testing.T) {
	t.Parallel()
	n, other := newNode(t, "alice"), newNode(t, "bob")
	cfg := t.TempDir()
	n.env = append(n.env, "XDG_CONFIG_HOME="+cfg)
	other.env = append(other.env, "XDG_CONFIG_HOME="+cfg)
	n.ok("service", "install")
	r := other.wantCode(exitError, []string{"runs the node of home " + n.home, "not " + other.home}, "service", "uninstall") // the helper gives --home
	if strings.Contains(r.stderr, "disable --now") {
		t.Errorf("uninstall that removed nothing says to disable the service:\n%s", r)
	}
	if _, err := os.Stat(filepath.Join(cfg, "systemd", "user", systemdunit.Name)); err != nil {
		t.Fatalf("uninstall --home of another home removed the unit: %v", err)
	}
	n.wantCode(exitUsage, []string{"print takes no --force"}, "service", "print", "--force")
	n.ok("service", "uninstall")
}

// Every shell's script names every top-level command, and the shells
// that are installed parse it.
func TestCompletion(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	for _, shell := range []string{"bash", "zsh", "fish"} {
		t.Run(shell, func(t *testing.T) {
			r := runIn(nil, "", nil, "completion", shell)
			if r.code != exitOK {
				t.Fatalf("%s", r)
			}
			for name := range commandTable() {
				if !strings.Contains(r.stdout, name) {
					t.Errorf("the %s script does not name %s", shell, name)
				}
			}
			for _, sub := range []string{"discover", "accept", "uninstall"} { // subcommands
				if !strings.Contains(r.stdout, sub) {
					t.Errorf("the %s script does not name the subcommand %s", shell, sub)
				}
			}
			path, err := exec.LookPath(shell)
			if err != nil {
				t.Skipf("%s is not installed, so its script cannot be parsed here", shell)
			}
			f := filepath.Join(dir, shell)
			if err := os.WriteFile(f, []byte(r.stdout), 0o600); err != nil {
				t.Fatal(err)
			}
			if out, err := exec.Command(path, "-n", f).CombinedOutput(); err != nil {
				t.Errorf("%s -n rejects the script: %v\n%s", shell, err, out)
			}
		})
	}
	if r := runIn(nil, "", nil, "completion", "tcsh"); r.code != exitUsage {
		t.Errorf("completion tcsh: %s", r)
	}
}
