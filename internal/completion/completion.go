// Package completion writes shell completion scripts (bash, zsh, fish) for
// a command with subcommands, from a description of its commands: their
// names, one-line summaries, subcommands and flags. [FromUsage] reads the
// subcommands and flags out of a usage line.
//
// It knows nothing of meerkatd's commands: the caller passes them. Its
// functions are pure and safe for concurrent use.
package completion

import (
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strings"
)

// Command is one top-level command.
type Command struct {
	Name        string
	Summary     string
	Subcommands []string // words that may follow the command
	Flags       []string // its flags, "--json" and so on
	ValueFlags  []string // those of Flags that take a value ("--ttl DUR")
}

// Program is the program the script completes.
type Program struct {
	Name     string
	Flags    []string  // flags before the command ("--home", "--help")
	DirFlags []string  // flags whose value is a directory ("--home")
	Commands []Command // in the order they are offered
	// HelpCommand, if set, is the command whose argument is another
	// command's name ("help").
	HelpCommand string
}

// Shells are the shells Script writes for.
var Shells = []string{"bash", "zsh", "fish"}

// ErrShell means Script does not know the shell.
var ErrShell = errors.New("completion: unknown shell (want bash, zsh or fish)")

var (
	flagRE = regexp.MustCompile(`--[a-z][a-z0-9-]*`)
	// A flag's value is written in capitals, as an example or as the
	// choices: "--ttl DUR", "--since 1h|RFC3339", "--schema
	// JSON|@FILE|-", "--order priority|arrival".
	valueFlagRE = regexp.MustCompile(valueFlag)
	// valueAfterRE is valueFlagRE at the start of a text.
	valueAfterRE = regexp.MustCompile(`^` + valueFlag)
	subRE        = regexp.MustCompile(`^\[?([a-z][a-z0-9-]*)\]?$`)
	nameRE       = regexp.MustCompile(`^[A-Za-z0-9_][A-Za-z0-9_.-]*$`)
)

// FromUsage reads a command's subcommands and flags from its usage text:
// alternatives are separated by " | " or by lines, each may begin with the
// program and command names, and its first word in lower case (or in
// brackets, "[list]") is a subcommand; every --flag is a flag.
func FromUsage(program, name, usage string) (subcommands, flags []string) {
	for _, line := range strings.Split(usage, "\n") {
		for _, alt := range strings.Split(line, " | ") {
			words := strings.Fields(strings.TrimPrefix(strings.TrimSpace(alt), "| "))
			if len(words) > 0 && words[0] == program {
				words = words[1:]
			}
			if len(words) > 0 && words[0] == name {
				words = words[1:]
			}
			if len(words) > 0 {
				if m := subRE.FindStringSubmatch(words[0]); m != nil && !slices.Contains(subcommands, m[1]) {
					subcommands = append(subcommands, m[1])
				}
			}
		}
	}
	for _, f := range flagRE.FindAllString(usage, -1) {
		if !slices.Contains(flags, f) {
			flags = append(flags, f)
		}
	}
	return subcommands, flags
}

// valueFlag is a flag and the start of its value (valueFlagRE).
const valueFlag = `(--[a-z][a-z0-9-]*)[ =]([A-Z0-9@]|[a-z][a-z0-9,-]*\|)`

// valueLook is how far past a flag ValueFlags looks for its value.
const valueLook = 64

// ValueFlags reads from a usage text the flags that take a value: those
// followed by a word in capitals or an example ("--ttl DUR", "--wait
// 10s"). A flag written somewhere without a value ("[--no-wait|--local]"
// next to "--local NAME") is left out: its next word may be a command's.
func ValueFlags(usage string) []string {
	var flags []string
	for _, m := range valueFlagRE.FindAllStringSubmatch(usage, -1) {
		if !slices.Contains(flags, m[1]) {
			flags = append(flags, m[1])
		}
	}
	for _, loc := range flagRE.FindAllStringIndex(usage, -1) {
		if !valueAfterRE.MatchString(usage[loc[0]:min(len(usage), loc[1]+valueLook)]) {
			flags = slices.DeleteFunc(flags, func(f string) bool { return f == usage[loc[0]:loc[1]] })
		}
	}
	return flags
}

// SubcommandFirst returns a command's arguments with its subcommand first
// when flags come before it ("--home DIR retry ID" becomes "retry --home
// DIR ID"): the first argument that is neither a flag nor the value of
// one of valueFlags ("--flag", also written "-flag"), moved to the front
// if it is one of subcommands. Otherwise, and after "--", args is
// returned as it is.
func SubcommandFirst(args, subcommands, valueFlags []string) []string {
	for i := 0; i < len(args); i++ {
		a := args[i]
		switch {
		case a == "--":
			return args
		case strings.HasPrefix(a, "-"):
			name := "--" + strings.TrimLeft(a, "-")
			if !strings.Contains(name, "=") && slices.Contains(valueFlags, name) {
				i++ // its value
			}
		case i == 0 || !slices.Contains(subcommands, a):
			return args
		default:
			return slices.Concat([]string{a}, args[:i], args[i+1:])
		}
	}
	return args
}

// Add adds the command name, reading its subcommands, flags and flags that
// take a value from its usage text with FromUsage and ValueFlags.
func (p *Program) Add(name, summary, usage string) {
	c := Command{Name: name, Summary: summary, ValueFlags: ValueFlags(usage)}
	c.Subcommands, c.Flags = FromUsage(p.Name, name, usage)
	p.Commands = append(p.Commands, c)
}

// Script returns the completion script of p for shell.
func Script(shell string, p Program) (string, error) {
	p.Commands = slices.Clone(p.Commands)
	for i, c := range p.Commands {
		if c.Name == p.HelpCommand {
			p.Commands[i].Subcommands = strings.Fields(names(p))
		}
	}
	words := []string{p.Name}
	words = append(words, p.Flags...)
	words = append(words, p.DirFlags...)
	for _, c := range p.Commands {
		words = append(words, c.Name)
		words = append(words, c.Subcommands...)
		words = append(words, c.Flags...)
		words = append(words, c.ValueFlags...)
	}
	for _, w := range words {
		if !nameRE.MatchString(strings.TrimLeft(w, "-")) {
			return "", fmt.Errorf("completion: %q cannot be completed safely", w)
		}
	}
	switch shell {
	case "bash":
		return bash(p), nil
	case "zsh":
		return zsh(p), nil
	case "fish":
		return fish(p), nil
	}
	return "", fmt.Errorf("%w: %q", ErrShell, shell)
}

func names(p Program) string {
	var ns []string
	for _, c := range p.Commands {
		ns = append(ns, c.Name)
	}
	return strings.Join(ns, " ")
}

// dirCase is the case pattern of p's directory flags.
func dirCase(p Program) string { return pairCase(p, true, false) }

// valuePairs are "COMMAND --flag" for each flag of a command of p that
// takes a value, other than p's directory flags.
func valuePairs(p Program) []string {
	var ps []string
	for _, c := range p.Commands {
		for _, f := range c.ValueFlags {
			if !slices.Contains(p.DirFlags, f) {
				ps = append(ps, c.Name+" "+f)
			}
		}
	}
	return ps
}

// pairCase is the case pattern, over "$cmd $word", of the words that are
// a flag taking a value: a directory flag anywhere, or a value flag of
// the command.
func pairCase(p Program, dirs bool, values bool) string {
	var alts []string
	if dirs {
		for _, f := range p.DirFlags {
			alts = append(alts, `*" `+f+`"`)
		}
	}
	if values {
		for _, pair := range valuePairs(p) {
			alts = append(alts, `"`+pair+`"`)
		}
	}
	return casePattern(alts)
}

// casePattern is a shell case pattern matching each of flags.
func casePattern(flags []string) string {
	if len(flags) == 0 {
		return "--@none" // no word typed matches it
	}
	return strings.Join(flags, "|")
}

func fn(p Program) string { return "_" + strings.NewReplacer("-", "_", ".", "_").Replace(p.Name) }

func bash(p Program) string {
	var b strings.Builder
	f := fn(p)
	fmt.Fprintf(&b, `# bash completion for %[1]s: source it, or save it as
# ~/.local/share/bash-completion/completions/%[1]s
%[2]s() {
	local cur=${COMP_WORDS[COMP_CWORD]} prev=${COMP_WORDS[COMP_CWORD-1]}
	local cmd="" sub="" i
	for ((i = 1; i < COMP_CWORD; i++)); do
		case "$cmd ${COMP_WORDS[i]}" in
		%[6]s)
			((i++))
			continue
			;;
		esac
		case ${COMP_WORDS[i]} in
		-*) ;;
		*)
			if [[ -z $cmd ]]; then cmd=${COMP_WORDS[i]}; elif [[ -z $sub ]]; then sub=${COMP_WORDS[i]}; fi
			;;
		esac
	done
	case "$cmd $prev" in
	%[3]s)
		COMPREPLY=($(compgen -d -- "$cur"))
		return
		;;
	%[7]s)
		COMPREPLY=($(compgen -f -- "$cur"))
		return
		;;
	esac
	local subs="" flags=""
	case $cmd in
	"")
		subs="%[4]s"
		flags="%[5]s"
		;;
`, p.Name, f, dirCase(p), names(p), strings.Join(append(slices.Clone(p.Flags), p.DirFlags...), " "), pairCase(p, true, true), pairCase(p, false, true))
	for _, c := range p.Commands {
		fmt.Fprintf(&b, "\t%s)\n\t\tsubs=\"%s\"\n\t\tflags=\"%s\"\n\t\t;;\n", c.Name, strings.Join(c.Subcommands, " "), strings.Join(c.Flags, " "))
	}
	fmt.Fprintf(&b, `	esac
	if [[ $cur == -* ]]; then
		COMPREPLY=($(compgen -W "$flags" -- "$cur"))
	elif [[ -n $subs && ( -z $cmd || -z $sub ) ]]; then
		COMPREPLY=($(compgen -W "$subs" -- "$cur"))
	else
		COMPREPLY=($(compgen -f -- "$cur"))
	fi
}
complete -F %s %s
`, f, p.Name)
	return b.String()
}

// zshQuote quotes s for zsh in single quotes.
func zshQuote(s string) string { return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'" }

func zsh(p Program) string {
	var b strings.Builder
	f := fn(p)
	fmt.Fprintf(&b, `#compdef %[1]s
# zsh completion for %[1]s: save it as _%[1]s in a directory of $fpath,
# or source it after compinit.
compdef %[2]s %[1]s

%[2]s() {
	local cmd="" sub="" i
	local -a cmds subs flags
	for ((i = 2; i < CURRENT; i++)); do
		case "$cmd ${words[i]}" in
		%[4]s)
			((i++))
			continue
			;;
		esac
		case ${words[i]} in
		-*) ;;
		*)
			if [[ -z $cmd ]]; then cmd=${words[i]}; elif [[ -z $sub ]]; then sub=${words[i]}; fi
			;;
		esac
	done
	case "$cmd ${words[CURRENT-1]}" in
	%[3]s)
		_files -/
		return
		;;
	%[5]s)
		_files
		return
		;;
	esac
	cmds=(
`, p.Name, f, dirCase(p), pairCase(p, true, true), pairCase(p, false, true))
	for _, c := range p.Commands {
		fmt.Fprintf(&b, "\t\t%s\n", zshQuote(c.Name+":"+strings.ReplaceAll(c.Summary, ":", `\:`)))
	}
	fmt.Fprintf(&b, "\t)\n\tcase $cmd in\n\t\"\")\n\t\tflags=(%s)\n\t\t;;\n", strings.Join(append(slices.Clone(p.Flags), p.DirFlags...), " "))
	for _, c := range p.Commands {
		fmt.Fprintf(&b, "\t%s)\n\t\tsubs=(%s)\n\t\tflags=(%s)\n\t\t;;\n", c.Name, strings.Join(c.Subcommands, " "), strings.Join(c.Flags, " "))
	}
	fmt.Fprintf(&b, `	esac
	if [[ $PREFIX == -* ]]; then
		compadd -- $flags
	elif [[ -z $cmd ]]; then
		_describe command cmds
	elif [[ -z $sub ]] && (( ${#subs} )); then
		compadd -- $subs
	else
		_files
	fi
}

if [[ $funcstack[1] == %[1]s ]]; then
	%[1]s "$@"
fi
`, f)
	return b.String()
}

// fishQuote quotes s for fish in single quotes.
func fishQuote(s string) string {
	return "'" + strings.NewReplacer(`\`, `\\`, "'", `\'`).Replace(s) + "'"
}

// fishWords quotes each of ws for fish, "”" for none.
func fishWords(ws []string) string {
	if len(ws) == 0 {
		return "''"
	}
	q := make([]string, len(ws))
	for i, w := range ws {
		q[i] = fishQuote(w)
	}
	return strings.Join(q, " ")
}

func fish(p Program) string {
	var b strings.Builder
	f := "_" + fn(p) // __meerkatd
	fmt.Fprintf(&b, `# fish completion for %[1]s: source it, or save it as
# ~/.config/fish/completions/%[1]s.fish

# %[2]s_words prints the words typed that are neither flags nor their values.
function %[2]s_words
	set -l skip 0
	set -l cmd ""
	for w in (commandline -opc)[2..]
		if test $skip -eq 1
			set skip 0
		else if contains -- $w %[3]s; or contains -- "$cmd $w" %[4]s
			set skip 1
		else if not string match -q -- '-*' $w
			test -z "$cmd"; and set cmd $w
			echo $w
		end
	end
end

# %[2]s_on: no command typed yet; %[2]s_on CMD: the command is CMD;
# %[2]s_on CMD -: the command is CMD and nothing follows it yet.
function %[2]s_on
	set -l w (%[2]s_words)
	switch (count $argv)
		case 0
			test (count $w) -eq 0
		case 1
			test "$w[1]" = $argv[1]
		case '*'
			test "$w[1]" = $argv[1]; and test (count $w) -eq 1
	end
end

complete -c %[1]s -f
`, p.Name, f, strings.Join(append([]string{"--no-dir-flag"}, p.DirFlags...), " "), fishWords(valuePairs(p)))
	for _, fl := range p.Flags {
		fmt.Fprintf(&b, "complete -c %s -n %s_on -l %s\n", p.Name, f, strings.TrimLeft(fl, "-"))
	}
	for _, fl := range p.DirFlags {
		fmt.Fprintf(&b, "complete -c %s -l %s -x -a '(__fish_complete_directories)'\n", p.Name, strings.TrimLeft(fl, "-"))
	}
	for _, c := range p.Commands {
		fmt.Fprintf(&b, "complete -c %s -n %s_on -a %s -d %s\n", p.Name, f, c.Name, fishQuote(c.Summary))
		if len(c.Subcommands) > 0 {
			fmt.Fprintf(&b, "complete -c %s -n %s -a %s\n", p.Name, fishQuote(f+"_on "+c.Name+" -"), fishQuote(strings.Join(c.Subcommands, " ")))
		}
		for _, fl := range c.Flags {
			if slices.Contains(p.DirFlags, fl) {
				continue // completed for every command above
			}
			fmt.Fprintf(&b, "complete -c %s -n %s -l %s\n", p.Name, fishQuote(f+"_on "+c.Name), strings.TrimLeft(fl, "-"))
		}
	}
	return b.String()
}

// Help says where each shell's script goes, for the program's help.
func Help(program string) string {
	return fmt.Sprintf(`bash: source <(%[1]s completion bash), or save the script as
~/.local/share/bash-completion/completions/%[1]s.
zsh: save it as _%[1]s in a directory of $fpath (or source it after
compinit). fish: save it as ~/.config/fish/completions/%[1]s.fish.`, program)
}
