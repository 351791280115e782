// Package flagdoc prints a command's flags the way its usage line and
// the docs spell them: with two dashes (--wait DUR), which package flag
// accepts as well as one.
package flagdoc

import (
	"flag"
	"fmt"
	"io"
	"regexp"
	"slices"
	"strings"
	"time"
)

// Print writes a "flags:" section listing fs's flags, in lexical order,
// each as "  --name ARG" and its usage on the next line, with its default
// when that is not the zero value; nothing when fs has no flags. ARG is
// the back-quoted word of the usage ([flag.UnquoteUsage]).
func Print(w io.Writer, fs *flag.FlagSet) {
	var b strings.Builder
	fs.VisitAll(func(f *flag.Flag) {
		arg, usage := flag.UnquoteUsage(f)
		b.WriteString("  --" + f.Name)
		if arg != "" {
			b.WriteString(" " + arg)
		}
		b.WriteString("\n    \t" + strings.ReplaceAll(usage, "\n", "\n    \t"))
		if d := f.DefValue; d != "" && d != "0" && d != "false" && d != "0s" && d != "[]" {
			fmt.Fprintf(&b, " (default %s)", d)
		}
		b.WriteString("\n")
	})
	if b.Len() > 0 {
		fmt.Fprintf(w, "\nflags:\n%s", b.String())
	}
}

// Undefined returns the name of the flag err says is not defined, as
// [flag.FlagSet.Parse] reports it ("flag provided but not defined: -x"),
// or "" for any other error.
func Undefined(err error) string {
	name, ok := strings.CutPrefix(err.Error(), "flag provided but not defined: -")
	if !ok {
		return ""
	}
	return strings.TrimPrefix(name, "-")
}

// Nearest returns the candidate closest to name, if it is close enough to
// be a typing mistake of it: at most two edits (letters added, removed,
// changed or two neighbours swapped) for names of five or more letters,
// one for shorter ones. "" if none is.
func Nearest(name string, candidates []string) string {
	best, bestD := "", 3
	if len([]rune(name)) < 5 {
		bestD = 2
	}
	for _, c := range candidates {
		if d := distance(name, c); d < bestD {
			best, bestD = c, d
		}
	}
	return best
}

// Names returns the names of fs's flags.
func Names(fs *flag.FlagSet) []string {
	var out []string
	fs.VisitAll(func(f *flag.Flag) { out = append(out, f.Name) })
	return out
}

// distance is the optimal string alignment distance of a and b, in runes.
func distance(a, b string) int {
	x, y := []rune(a), []rune(b)
	if len(x) > 64 || len(y) > 64 {
		if a == b {
			return 0
		}
		return max(len(x), len(y)) // long input: no suggestion is worth the work
	}
	d := make([][]int, len(x)+1)
	for i := range d {
		d[i] = make([]int, len(y)+1)
		d[i][0] = i
	}
	for j := range d[0] {
		d[0][j] = j
	}
	for i := 1; i <= len(x); i++ {
		for j := 1; j <= len(y); j++ {
			cost := 1
			if x[i-1] == y[j-1] {
				cost = 0
			}
			d[i][j] = min(d[i-1][j]+1, d[i][j-1]+1, d[i-1][j-1]+cost)
			if i > 1 && j > 1 && x[i-1] == y[j-2] && x[i-2] == y[j-1] {
				d[i][j] = min(d[i][j], d[i-2][j-2]+1)
			}
		}
	}
	return d[len(x)][len(y)]
}

// bareNumber matches a duration flag's value given without a unit.
var bareNumber = regexp.MustCompile(`invalid value "([0-9.]+)" for flag -([a-z0-9-]+): (parse error|time: missing unit in duration .*)$`)

// Explain returns the text of err, an error of fs's Parse, for a user: an
// undefined flag is "unknown flag --x", with the nearest defined one if
// it is close ("did you mean --y?"); a duration given without a unit says
// it needs one.
func Explain(err error, fs *flag.FlagSet) string {
	if name := Undefined(err); name != "" {
		if s := Nearest(name, Names(fs)); s != "" {
			return fmt.Sprintf("unknown flag --%s (did you mean --%s?)", name, s)
		}
		if !flagLike.MatchString(name) {
			// Not a flag mistyped but an argument read as one (-5,
			// "-dash body"): named as it was most likely written.
			return fmt.Sprintf("%q is read as a flag: an argument that starts with - goes after -- (-- %q)", "-"+name, "-"+name)
		}
		return "unknown flag --" + name + " (an argument that starts with - goes after --)"
	}
	if m := needsValue.FindStringSubmatch(err.Error()); m != nil {
		return fmt.Sprintf("--%s needs a value", m[1])
	}
	if m := bareNumber.FindStringSubmatch(err.Error()); m != nil {
		return fmt.Sprintf("--%s %q: a duration needs a unit: %ss, %sm", m[2], m[1], m[1], m[1])
	}
	if m := invalidBool.FindStringSubmatch(err.Error()); m != nil {
		return fmt.Sprintf("--%s %q: want true or false", m[2], m[1])
	}
	if m := invalidValue.FindStringSubmatch(err.Error()); m != nil {
		why := m[3]
		if f := fs.Lookup(m[2]); why == "parse error" && f != nil {
			// The flag package says no more than that: say what it takes.
			if g, ok := f.Value.(flag.Getter); ok {
				switch g.Get().(type) {
				case time.Duration:
					why = "not a duration: want a number and a unit, such as 90s, 5m or 2h (units ms, s, m, h)"
				case int, int64, uint, uint64:
					why = "not a whole number"
				case float64:
					why = "not a number"
				}
			}
		}
		return fmt.Sprintf("--%s %q: %s", m[2], m[1], why)
	}
	return err.Error()
}

// flagLike matches what could be a flag's name: a letter, then letters,
// digits, dashes and underscores.
var flagLike = regexp.MustCompile(`^[A-Za-z][A-Za-z0-9_-]*$`)

// needsValue matches the flag package's error for a flag given last with
// no value, to name it as it is written (--name).
var needsValue = regexp.MustCompile(`^flag needs an argument: -+([a-z0-9-]+)$`)

// invalidValue matches the flag package's error for a value its flag
// refused, to name the flag as it is written (--name).
var invalidValue = regexp.MustCompile(`^invalid value "(.*)" for flag -([a-z0-9-]+): (.*)$`)

// invalidBool matches the flag package's error for a boolean flag's value.
var invalidBool = regexp.MustCompile(`^invalid boolean value "(.*)" for -([a-z0-9-]+): (.*)$`)

// GivenEmpty returns an error for the first of names that was given on
// the command line with an empty value (--key=): for flags whose
// empty value would otherwise read as not given at all.
func GivenEmpty(fs *flag.FlagSet, names ...string) error {
	var err error
	fs.Visit(func(f *flag.Flag) {
		if err == nil && f.Value.String() == "" && slices.Contains(names, f.Name) {
			err = fmt.Errorf("--%s must not be empty", f.Name)
		}
	})
	return err
}

// GivenZero reports the first of the named duration flags given on the
// command line as zero: where leaving a flag out means a default, a zero
// given is a mistake, not a way to ask for the default.
func GivenZero(fs *flag.FlagSet, names ...string) error {
	var err error
	fs.Visit(func(f *flag.Flag) {
		if g, ok := f.Value.(flag.Getter); err == nil && ok && slices.Contains(names, f.Name) {
			if d, ok := g.Get().(time.Duration); ok && d == 0 {
				err = fmt.Errorf("--%s must be positive (leave it out for the default)", f.Name)
			}
		}
	})
	return err
}

// SplitSub takes a subcommand off a command's arguments: the first that
// is not a flag, passing over only the flags every command has (--json,
// --help, and --home with its value), so that "space --json show S"
// names the subcommand "show". Any other flag first, or none at all,
// (or an empty argument) leaves the subcommand empty for the caller to
// report after parsing the flags. rest is args without the subcommand.
func SplitSub(args []string) (sub string, rest []string) {
	for i := 0; i < len(args); i++ {
		name, value, hasValue := strings.Cut(strings.TrimPrefix(strings.TrimPrefix(args[i], "-"), "-"), "=")
		switch {
		case args[i] == "":
			return "", args
		case !strings.HasPrefix(args[i], "-") || args[i] == "-":
			return args[i], slices.Concat(args[:i], args[i+1:])
		case name == "home" && !hasValue:
			i++ // its value
		case name == "home" && value != "", name == "json" || name == "help" || name == "h":
		default:
			return "", args
		}
	}
	return "", args
}
