package completion

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

func TestFromUsage(t *testing.T) {
	for _, tc := range []struct {
		name, usage string
		subs, flags []string
	}{
		{"id", "meerkatd id [--home DIR] [--json]", nil, []string{"--home", "--json"}},
		{"peers", "meerkatd peers list | peers add NAME KEY ADDR [--meta JSON] | peers remove NAME | peers discover   [--home DIR] [--json]",
			[]string{"list", "add", "remove", "discover"}, []string{"--meta", "--home", "--json"}},
		{"deadletters", "meerkatd deadletters [list] | deadletters retry ID...|--all | deadletters drop ID...|--all   [--home DIR]",
			[]string{"list", "retry", "drop"}, []string{"--all", "--home"}},
		// "uds|tcp" is a flag's value, not a list of subcommands.
		{"bench", "meerkatd bench [--reps N] [--transport uds|tcp|tls,...|both|all] [--quick]", nil, []string{"--reps", "--transport", "--quick"}},
		// Continuation lines begin with "|"; lines of prose do not add subcommands.
		{"space", "meerkatd space list | show SPACE --as ID [--delivery all|addressed]\n       | add SPACE PEER ID\n       [--to ID]... [--json]\n       CAP is a kind pattern (chat, mcp/*)",
			[]string{"list", "show", "add"}, []string{"--as", "--delivery", "--to", "--json"}},
		{"help", "meerkatd help [COMMAND [SUBCOMMAND]]", nil, nil},
	} {
		subs, flags := FromUsage("meerkatd", tc.name, tc.usage)
		if !slices.Equal(subs, tc.subs) || !slices.Equal(flags, tc.flags) {
			t.Errorf("FromUsage(%s) = %q, %q; want %q, %q", tc.name, subs, flags, tc.subs, tc.flags)
		}
	}
}

func TestValueFlags(t *testing.T) {
	for _, tc := range []struct {
		usage string
		want  []string
	}{
		{"meerkatd id [--home DIR] [--json]", []string{"--home"}},
		{"meerkatd pair offer [--ttl DUR] [--name-for-peer NAME] [--no-wait|--local] [--nats]", []string{"--ttl", "--name-for-peer"}},
		{"meerkatd audit [--since 1h|RFC3339] [--follow]", []string{"--since"}},
		{"meerkatd card edit [--schema JSON|@FILE|-] [--add-intent NAME]", []string{"--schema", "--add-intent"}},
		{"meerkatd deadletters retry ID...|--all", nil},
		{"meerkatd send --ttl=DUR --reliable [--wait 10s]", []string{"--ttl", "--wait"}},
		// Choices in lower case are a value too.
		{"meerkatd inbox [--order priority|arrival] [--ack] [--transport uds,tcp|both]", []string{"--order", "--transport"}},
		// Without a value in one place, with one in another: left out.
		{"meerkatd pair offer [--no-wait|--local] | pair accept --local NAME [--ttl DUR]", []string{"--ttl"}},
	} {
		if got := ValueFlags(tc.usage); !slices.Equal(got, tc.want) {
			t.Errorf("ValueFlags(%q) = %q, want %q", tc.usage, got, tc.want)
		}
	}
}

var testProgram = Program{
	Name:        "mk",
	HelpCommand: "help",
	Flags:       []string{"--help"},
	DirFlags:    []string{"--home"},
	Commands: []Command{
		{Name: "peers", Summary: "list peers: it's theirs", Subcommands: []string{"list", "add"}, Flags: []string{"--json", "--home"}},
		{Name: "pair", Summary: "pair", Subcommands: []string{"offer"}, Flags: []string{"--ttl", "--local"}, ValueFlags: []string{"--ttl"}},
		{Name: "id", Summary: "show the id", Flags: []string{"--json"}},
		{Name: "help", Summary: "help"},
	},
}

func TestScript(t *testing.T) {
	for _, shell := range Shells {
		s, err := Script(shell, testProgram)
		if err != nil {
			t.Fatal(err)
		}
		for _, w := range []string{"peers", "pair", "id", "list", "offer", "ttl", "json"} {
			if !strings.Contains(s, w) {
				t.Errorf("%s script lacks %q:\n%s", shell, w, s)
			}
		}
	}
	if _, err := Script("tcsh", testProgram); !errors.Is(err, ErrShell) {
		t.Errorf("Script(tcsh): %v, want ErrShell", err)
	}
	bad := testProgram
	bad.Commands = []Command{{Name: "x; rm -rf /"}}
	if _, err := Script("bash", bad); err == nil {
		t.Error("Script accepted a command name that is not a word")
	}
}

// TestBashCompletes runs the bash script's function on command lines and
// checks what it offers.
func TestBashCompletes(t *testing.T) {
	bash, err := exec.LookPath("bash")
	if err != nil {
		t.Skip("bash is not installed")
	}
	s, err := Script("bash", testProgram)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	script := filepath.Join(dir, "mk.bash")
	if err := os.WriteFile(script, []byte(s), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		line string // the words typed; the last one is being completed
		want []string
	}{
		{"mk p", []string{"pair", "peers"}},
		{"mk ", []string{"help", "id", "pair", "peers"}},
		{"mk help p", []string{"pair", "peers"}},
		{"mk --home /x p", []string{"pair", "peers"}},
		{"mk --h", []string{"--help", "--home"}},
		{"mk peers ", []string{"add", "list"}},
		{"mk peers --", []string{"--home", "--json"}},
		{"mk pair o", []string{"offer"}},
		{"mk id --j", []string{"--json"}},
		// A flag's value is neither the command nor its subcommand.
		{"mk pair --ttl 5m o", []string{"offer"}},
		{"mk --home /x pair --ttl 5m ", []string{"offer"}},
		{"mk pair --local o", []string{"offer"}}, // --local takes no value
		{"mk pair --ttl o", nil},                 // the value: files, and none here starts with "o"
	} {
		words := strings.Split(tc.line, " ")
		prog := `source "$1"; shift; COMP_WORDS=("$@"); COMP_CWORD=$((${#COMP_WORDS[@]} - 1)); _mk; printf '%s\n' "${COMPREPLY[@]}" | sort`
		out, err := exec.Command(bash, append([]string{"--norc", "-c", prog, "bash", script}, words...)...).CombinedOutput()
		if err != nil {
			t.Fatalf("%q: %v\n%s", tc.line, err, out)
		}
		if got := strings.Fields(string(out)); !slices.Equal(got, tc.want) {
			t.Errorf("completing %q: %q, want %q", tc.line, got, tc.want)
		}
	}
}

// TestSyntax has each shell that is installed parse its script.
func TestSyntax(t *testing.T) {
	for _, shell := range Shells {
		t.Run(shell, func(t *testing.T) {
			path, err := exec.LookPath(shell)
			if err != nil {
				t.Skipf("%s is not installed, so its script cannot be parsed here", shell)
			}
			s, err := Script(shell, testProgram)
			if err != nil {
				t.Fatal(err)
			}
			f := filepath.Join(t.TempDir(), "script")
			if err := os.WriteFile(f, []byte(s), 0o600); err != nil {
				t.Fatal(err)
			}
			if out, err := exec.Command(path, "-n", f).CombinedOutput(); err != nil {
				t.Errorf("%s -n: %v\n%s\n%s", shell, err, out, s)
			}
		})
	}
}

// TestFishCompletes asks fish what the script offers on command lines.
func TestFishCompletes(t *testing.T) {
	fish, err := exec.LookPath("fish")
	if err != nil {
		t.Skip("fish is not installed")
	}
	s, err := Script("fish", testProgram)
	if err != nil {
		t.Fatal(err)
	}
	script := filepath.Join(t.TempDir(), "mk.fish")
	if err := os.WriteFile(script, []byte(s), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		line string
		want []string
	}{
		{"mk p", []string{"pair", "peers"}},
		{"mk peers ", []string{"add", "list"}},
		{"mk peers list --j", []string{"--json"}},
		{"mk pair o", []string{"offer"}},
		{"mk --home /tmp p", []string{"pair", "peers"}},
		{"mk --home /tmp peers l", []string{"list"}},
		{"mk peers list ", nil}, // the subcommand is there: files (none offered, -f)
		{"mk pair --ttl 5m o", []string{"offer"}},
	} {
		cmd := exec.Command(fish, "--no-config", "-c", `source $argv[1]; complete -C $argv[2]`, script, tc.line)
		cmd.Env = append(os.Environ(), "HOME="+t.TempDir())
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("%q: %v\n%s", tc.line, err, out)
		}
		var got []string
		for _, l := range strings.Split(strings.TrimSpace(string(out)), "\n") {
			if w, _, _ := strings.Cut(l, "\t"); w != "" {
				got = append(got, w)
			}
		}
		slices.Sort(got)
		if !slices.Equal(got, tc.want) {
			t.Errorf("completing %q: %q, want %q", tc.line, got, tc.want)
		}
	}
}

// zshStubs stand in for the completion system's functions: each prints
// the candidates that match the word being completed.
const zshStubs = `
compdef() { :; }
compadd() { [[ $1 == -- ]] && shift; local w; for w; do [[ $w == $PREFIX* ]] && print -r -- $w; done; return 0; }
_describe() { local -a arr; arr=("${(@P)2}"); compadd -- "${arr[@]%%:*}"; }
_files() { print -r -- "<files>"; }
source $1; shift
words=("$@"); CURRENT=$#words; PREFIX=${words[CURRENT]}
_mk
`

// TestZshCompletes runs the zsh script's function with stand-ins for the
// completion system and checks what it offers.
func TestZshCompletes(t *testing.T) {
	zsh, err := exec.LookPath("zsh")
	if err != nil {
		t.Skip("zsh is not installed")
	}
	s, err := Script("zsh", testProgram)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	script, stubs := filepath.Join(dir, "_mk"), filepath.Join(dir, "stubs.zsh")
	if err := os.WriteFile(script, []byte(s), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(stubs, []byte(zshStubs), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		line string
		want []string
	}{
		{"mk p", []string{"pair", "peers"}},
		{"mk --home /tmp p", []string{"pair", "peers"}},
		{"mk --h", []string{"--help", "--home"}},
		{"mk peers ", []string{"add", "list"}},
		{"mk peers --", []string{"--home", "--json"}},
		{"mk peers list ", []string{"<files>"}},
		{"mk --home ", []string{"<files>"}},
		{"mk pair --ttl 5m o", []string{"offer"}},
		{"mk pair --ttl ", []string{"<files>"}},
	} {
		out, err := exec.Command(zsh, append([]string{"-f", stubs, script}, strings.Split(tc.line, " ")...)...).CombinedOutput()
		if err != nil {
			t.Fatalf("%q: %v\n%s", tc.line, err, out)
		}
		got := strings.Fields(string(out))
		slices.Sort(got)
		if !slices.Equal(got, tc.want) {
			t.Errorf("completing %q: %q, want %q", tc.line, got, tc.want)
		}
	}
}

// TestSubcommandFirst: flags before the subcommand are stepped over, with
// their values; only a known subcommand moves to the front.
func TestSubcommandFirst(t *testing.T) {
	subs := []string{"list", "retry", "drop"}
	vals := []string{"--home", "--limit"}
	for _, tc := range []struct {
		in, want string
	}{
		{"retry ID --home A", "retry ID --home A"},
		{"--home A retry ID", "retry --home A ID"},
		{"-home A retry ID", "retry -home A ID"},
		{"--home=A retry ID", "retry --home=A ID"},
		{"--json list", "list --json"},
		{"--json --home A drop --all", "drop --json --home A --all"},
		{"--home retry list", "list --home retry"}, // retry is --home's value
		{"--json", "--json"},
		{"--home A bogus ID", "--home A bogus ID"}, // not a subcommand: left for the command to refuse
		{"--json -- retry", "--json -- retry"},
		{"", ""},
	} {
		got := strings.Join(SubcommandFirst(strings.Fields(tc.in), subs, vals), " ")
		if got != tc.want {
			t.Errorf("SubcommandFirst(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}

// FuzzSubcommandFirst: the result is the arguments reordered, nothing lost
// or added, and either unchanged or with a subcommand first.
func FuzzSubcommandFirst(f *testing.F) {
	f.Add("--home\x00A\x00retry\x00ID")
	f.Add("--\x00retry")
	f.Fuzz(func(t *testing.T, joined string) {
		args := strings.Split(joined, "\x00")
		got := SubcommandFirst(slices.Clone(args), []string{"list", "retry"}, []string{"--home"})
		if a, b := slices.Sorted(slices.Values(args)), slices.Sorted(slices.Values(got)); !slices.Equal(a, b) {
			t.Fatalf("%q became %q", args, got)
		}
		if !slices.Equal(got, args) && got[0] != "list" && got[0] != "retry" {
			t.Fatalf("%q became %q: not a subcommand first", args, got)
		}
	})
}
