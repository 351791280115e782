package systemdunit

import (
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

func TestText(t *testing.T) {
	for _, tc := range []struct {
		name   string
		u      Unit
		want   []string // lines the unit must hold
		absent string   // text it must not hold
	}{{
		name: "plain",
		u:    Unit{Exec: "/usr/local/bin/meerkatd", Home: "/home/ann/.config/meerkat"},
		want: []string{
			"[Unit]",
			"Description=meerkatd agent messaging node (home /home/ann/.config/meerkat)",
			"[Service]",
			"Type=notify",
			"NotifyAccess=main",
			"ExecStart=/usr/local/bin/meerkatd run --home /home/ann/.config/meerkat",
			"Restart=on-failure",
			"RestartSec=2",
			"TimeoutStopSec=20s",
			"NoNewPrivileges=yes",
			"ProtectSystem=strict",
			"ProtectHome=read-only",
			"PrivateTmp=yes",
			"ReadWritePaths=/home/ann/.config/meerkat %t",
			"[Install]",
			"WantedBy=default.target",
		},
	}, {
		name: "spaces and specials",
		u:    Unit{Exec: "/opt/my tools/meerkatd", Home: `/home/ann/100% "agents"/$HOME`},
		want: []string{
			`ExecStart="/opt/my tools/meerkatd" run --home "/home/ann/100%% \"agents\"/$$HOME"`,
			`ReadWritePaths="/home/ann/100%% \"agents\"/$HOME" %t`,
		},
	}, {
		name: "a $ in the executable's path",
		u:    Unit{Exec: "/opt/a$b/meerkatd", Home: "/srv/mk"},
		want: []string{`ExecStart=/opt/a$b/meerkatd run --home /srv/mk`}, // systemd does not expand the command's name
	}, {
		name: "socket outside the home",
		u:    Unit{Exec: "/bin/meerkatd", Home: "/srv/mk", Writable: []string{"/srv/mk/sub", "/run/agents dir"}},
		want: []string{`ReadWritePaths=/srv/mk "/run/agents dir" %t`, "PrivateTmp=yes"},
	}, {
		name:   "home in /tmp",
		u:      Unit{Exec: "/bin/meerkatd", Home: "/tmp/mk"},
		want:   []string{"ReadWritePaths=/tmp/mk %t"},
		absent: "PrivateTmp=",
	}, {
		name:   "executable in /tmp",
		u:      Unit{Exec: "/tmp/build/meerkatd", Home: "/srv/mk"},
		want:   []string{"ExecStart=/tmp/build/meerkatd run --home /srv/mk", "ReadWritePaths=/srv/mk %t"},
		absent: "PrivateTmp=",
	}, {
		name:   "socket in /var/tmp",
		u:      Unit{Exec: "/bin/meerkatd", Home: "/srv/mk", Writable: []string{"/var/tmp/s"}},
		want:   []string{"ReadWritePaths=/srv/mk /var/tmp/s %t"},
		absent: "PrivateTmp=",
	}} {
		t.Run(tc.name, func(t *testing.T) {
			text, err := tc.u.Text()
			if err != nil {
				t.Fatal(err)
			}
			if tc.absent != "" && strings.Contains(text, tc.absent) {
				t.Errorf("unit holds %q:\n%s", tc.absent, text)
			}
			lines := strings.Split(text, "\n")
			for _, w := range tc.want {
				found := false
				for _, l := range lines {
					found = found || l == w
				}
				if !found {
					t.Errorf("unit lacks the line %q:\n%s", w, text)
				}
			}
		})
	}
}

func TestTextRefuses(t *testing.T) {
	for _, u := range []Unit{
		{Exec: "meerkatd", Home: "/h"},
		{Exec: "/bin/meerkatd", Home: "h"},
		{Exec: "/bin/meerkatd", Home: "/h\nExecStartPre=/bin/evil"},
		{Exec: "/bin/meerkatd", Home: "/h", Writable: []string{"rel"}},
		{Exec: `/opt/"q"/meerkatd`, Home: "/h"},
		{Exec: `/opt/it's/meerkatd`, Home: "/h"},
		{Exec: `/opt/a\b/meerkatd`, Home: "/h"},
		{Exec: "/bin/meerkatd", Home: "/h/\xff"},
	} {
		if text, err := u.Text(); err == nil {
			t.Errorf("%+v: no error; unit:\n%s", u, text)
		}
	}
}

func TestPath(t *testing.T) {
	if d, _ := Path("/x/cfg", "/home/ann", ""); d != "/x/cfg/systemd/user/meerkatd.service" {
		t.Errorf("Path with XDG_CONFIG_HOME = %q", d)
	}
	if d, _ := Path("", "/home/ann", ""); d != "/home/ann/.config/systemd/user/meerkatd.service" {
		t.Errorf("Path without XDG_CONFIG_HOME = %q", d)
	}
	if _, err := Path("", "", ""); err == nil {
		t.Error("Path with neither: no error")
	}
	for name, want := range map[string]string{"meerkatd-work": "meerkatd-work.service", "work.service": "work.service", "a:b_c.d": "a:b_c.d.service"} {
		if d, err := Path("/x", "", name); err != nil || d != "/x/systemd/user/"+want {
			t.Errorf("Path for unit %q = %q, %v", name, d, err)
		}
	}
	for _, name := range []string{"a/b", "../x", "-x", ".x", "tmpl@", "a b", "é", strings.Repeat("x", 65)} {
		if d, err := Path("/x", "", name); !errors.Is(err, ErrName) {
			t.Errorf("Path for unit %q = %q, %v; want ErrName", name, d, err)
		}
	}
}

// Install and uninstall speak of the unit by its name.
func TestInstalledNames(t *testing.T) {
	if s := Installed("/c/systemd/user/meerkatd-work.service"); !strings.Contains(s, "wrote /c/systemd/user/meerkatd-work.service\n") || !strings.HasSuffix(s, "enable --now meerkatd-work\n") {
		t.Errorf("Installed: %q", s)
	}
	if s := StopFirst("/c/systemd/user/meerkatd.service"); !strings.Contains(s, "disable --now meerkatd ") {
		t.Errorf("StopFirst: %q", s)
	}
	if s := Removed("/c/systemd/user/meerkatd-work.service", false); !strings.HasSuffix(s, "stop meerkatd-work") {
		t.Errorf("Removed: %q", s)
	}
}

// Installing a second home's unit where the first home's is names the
// first home and the way to keep both; the same home's changed unit gets
// the plain refusal.
func TestInstallAnotherHome(t *testing.T) {
	path := filepath.Join(t.TempDir(), Name)
	first := Unit{Exec: "/bin/meerkatd", Home: "/home/ann/.config/meerkat"}
	if err := first.Install(path, false); err != nil {
		t.Fatal(err)
	}
	second := Unit{Exec: "/bin/meerkatd", Home: "/home/ann/100%/meerkat-work"}
	err := second.Install(path, false)
	if !errors.Is(err, ErrExists) || !strings.Contains(err.Error(), "home /home/ann/.config/meerkat;") || !strings.Contains(err.Error(), "--unit meerkatd-meerkat-work") {
		t.Fatalf("install of a second home over the first's: %v", err)
	}
	if err := second.Install(path, true); err != nil {
		t.Fatal(err)
	}
	err = first.Install(path, false) // a home with % reads back
	if !errors.Is(err, ErrExists) || !strings.Contains(err.Error(), "home /home/ann/100%/meerkat-work;") {
		t.Fatalf("install over a home with %%: %v", err)
	}
	moved := Unit{Exec: "/usr/bin/meerkatd", Home: second.Home}
	if err := moved.Install(path, false); !errors.Is(err, ErrExists) || strings.Contains(err.Error(), "--unit") {
		t.Fatalf("install of the same home's changed unit: %v", err)
	}
}

// A unit without Exec runs the running executable.
func TestTextExecutable(t *testing.T) {
	exe, err := Executable()
	if err != nil {
		t.Fatal(err)
	}
	text, err := Unit{Home: "/h"}.Text()
	if err != nil || !strings.Contains(text, "\nExecStart="+quote(exe, true)+" run --home /h\n") {
		t.Errorf("unit for the running executable %s: %v\n%s", exe, err, text)
	}
}

func TestWriteFileUninstall(t *testing.T) {
	path := filepath.Join(t.TempDir(), "systemd", "user", Name)
	if err := WriteFile(path, "one\n", false); err != nil {
		t.Fatal(err)
	}
	if err := WriteFile(path, "one\n", false); err != nil {
		t.Errorf("installing the same unit again: %v", err)
	}
	if err := WriteFile(path, "two\n", false); !errors.Is(err, ErrExists) {
		t.Errorf("writing a different unit without force: %v, want ErrExists", err)
	}
	if b, _ := os.ReadFile(path); string(b) != "one\n" {
		t.Errorf("after a refused install the file holds %q", b)
	}
	if err := WriteFile(path, "two\n", true); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(path); string(b) != "two\n" {
		t.Errorf("after a forced install the file holds %q", b)
	}
	if fi, err := os.Stat(path); err != nil || fi.Mode().Perm() != 0o644 {
		t.Errorf("unit file mode: %v %v", fi.Mode(), err)
	}
	// Someone else's unit is removed only with force.
	if err := Uninstall(path, "", false, io.Discard); !errors.Is(err, ErrNotOurs) {
		t.Fatalf("Uninstall of a unit install did not write: %v, want ErrNotOurs", err)
	}
	if err := Uninstall(path, "", true, io.Discard); err != nil {
		t.Fatal(err)
	}
	ours, err := Unit{Exec: "/usr/bin/meerkatd", Home: "/home/a/.config/meerkat"}.Text()
	if err != nil {
		t.Fatal(err)
	}
	if err := WriteFile(path, ours, false); err != nil {
		t.Fatal(err)
	}
	// Asked for another home's unit: kept, and nothing said about
	// disabling it.
	var said strings.Builder
	if err := Uninstall(path, "/home/b/.config/meerkat", false, &said); !errors.Is(err, ErrOtherHome) || said.Len() != 0 {
		t.Fatalf("Uninstall for another home: %v, said %q; want ErrOtherHome, nothing said", err, said.String())
	}
	// Enabled: kept unless force, which removes the links too (one
	// from default.target, one from a target an edited unit named).
	link := filepath.Join(filepath.Dir(path), "default.target.wants", Name)
	other := filepath.Join(filepath.Dir(path), "graphical-session.target.wants", Name)
	for _, l := range []string{link, other} {
		if err := os.MkdirAll(filepath.Dir(l), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.Symlink(path, l); err != nil {
			t.Fatal(err)
		}
	}
	// Only the other target's link: still enabled.
	os.Remove(link)
	if err := Uninstall(path, "/home/a/.config/meerkat", false, &said); !errors.Is(err, ErrEnabled) || !strings.Contains(err.Error(), "graphical-session.target.wants") {
		t.Fatalf("Uninstall of a unit enabled under another target: %v", err)
	}
	if err := os.Symlink(path, link); err != nil {
		t.Fatal(err)
	}
	if err := Uninstall(path, "/home/a/.config/meerkat", false, &said); !errors.Is(err, ErrEnabled) || !strings.Contains(err.Error(), "disable --now meerkatd") || said.Len() != 0 {
		t.Fatalf("Uninstall of an enabled unit: %v, said %q; want ErrEnabled saying to disable it", err, said.String())
	}
	if err := Uninstall(path, "/home/a/.config/meerkat", true, &said); err != nil || !strings.Contains(said.String(), "daemon-reload") {
		t.Fatalf("Uninstall --force of an enabled unit: %v, said %q", err, said.String())
	}
	for _, l := range []string{link, other} {
		if _, err := os.Lstat(l); !errors.Is(err, os.ErrNotExist) {
			t.Fatalf("the link %s is left: %v", l, err)
		}
		os.Remove(filepath.Dir(l))
	}
	if err := WriteFile(path, ours, false); err != nil {
		t.Fatal(err)
	}
	said.Reset()
	if err := Uninstall(path, "/home/a/.config/meerkat", false, &said); err != nil || !strings.Contains(said.String(), "systemctl --user stop meerkatd") {
		t.Fatalf("Uninstall for its own home: %v, said %q", err, said.String())
	}
	if err := WriteFile(path, ours, false); err != nil {
		t.Fatal(err)
	}
	if err := Uninstall(path, "", false, io.Discard); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(path); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("after Uninstall: %v", err)
	}
	if err := Uninstall(path, "", false, io.Discard); !errors.Is(err, ErrNotInstalled) {
		t.Errorf("second Uninstall: %v, want ErrNotInstalled", err)
	}
	if ents, _ := os.ReadDir(filepath.Dir(path)); len(ents) != 0 {
		t.Errorf("left behind: %v", ents)
	}
}

// TestVerify has systemd-analyze check the unit. It runs in user mode with
// a runtime directory of its own, so no user manager need be running.
func TestVerify(t *testing.T) {
	analyze, err := exec.LookPath("systemd-analyze")
	if err != nil {
		t.Skip("systemd-analyze is not installed")
	}
	dir, err := os.MkdirTemp("", "sdu") // short paths
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	exe := filepath.Join(dir, "bin dir", "meerkatd")
	home := filepath.Join(dir, "home 100%")
	for _, d := range []string{filepath.Dir(exe), home, filepath.Join(dir, "run"), filepath.Join(dir, "units")} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(exe, []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	verify := func(text string) (string, error) {
		path := filepath.Join(dir, "units", Name)
		if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
		cmd := exec.Command(analyze, "--user", "verify", "--man=no", path)
		cmd.Env = append(os.Environ(), "XDG_RUNTIME_DIR="+filepath.Join(dir, "run"), "SYSTEMD_LOG_COLOR=0")
		out, err := cmd.CombinedOutput()
		return string(out), err
	}
	text, err := Unit{Exec: exe, Home: home}.Text()
	if err != nil {
		t.Fatal(err)
	}
	// First a unit with a mistake, to show that systemd-analyze checks
	// units here at all (it fails without a runtime directory, say).
	out, err := verify(strings.Replace(text, "RestartSec=2", "RestartSec=2\nNoSuchSetting=1", 1))
	if !strings.Contains(out, "NoSuchSetting") {
		t.Skipf("systemd-analyze --user verify does not work here (%v): %s", err, out)
	}
	out, err = verify(text)
	if err != nil || strings.TrimSpace(out) != "" {
		t.Errorf("systemd-analyze verify: %v\n%s\nunit:\n%s", err, out, text)
	}
}
