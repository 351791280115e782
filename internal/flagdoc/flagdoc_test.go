package flagdoc

import (
	"flag"
	"io"
	"slices"
	"strings"
	"testing"
	"time"
)

func TestPrint(t *testing.T) {
	tests := []struct {
		name  string
		flags func(fs *flag.FlagSet)
		want  string
	}{
		{"none", func(*flag.FlagSet) {}, ""},
		{"bool", func(fs *flag.FlagSet) { fs.Bool("json", false, "print JSON") },
			"\nflags:\n  --json\n    \tprint JSON\n"},
		{"argument and default", func(fs *flag.FlagSet) { fs.Duration("wait", time.Minute, "wait up to `DUR`") },
			"\nflags:\n  --wait DUR\n    \twait up to DUR (default 1m0s)\n"},
		{"zero defaults left out", func(fs *flag.FlagSet) {
			fs.Int("limit", 0, "at most `N`")
			fs.String("from", "", "only from `PEER`")
		}, "\nflags:\n  --from PEER\n    \tonly from PEER\n  --limit N\n    \tat most N\n"},
		{"a usage of two lines", func(fs *flag.FlagSet) { fs.Bool("x", true, "one\ntwo") },
			"\nflags:\n  --x\n    \tone\n    \ttwo (default true)\n"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			fs := flag.NewFlagSet("t", flag.ContinueOnError)
			tc.flags(fs)
			var b strings.Builder
			Print(&b, fs)
			if b.String() != tc.want {
				t.Errorf("got\n%q\nwant\n%q", b.String(), tc.want)
			}
		})
	}
}

func TestNearest(t *testing.T) {
	flags := []string{"reliable", "ttl", "no-wait", "home", "json", "interrupt", "idempotency-key", "wait"}
	tests := []struct{ name, want string }{
		{"relaible", "reliable"}, // two neighbours swapped
		{"reliabel", "reliable"},
		{"relable", "reliable"},    // a letter left out
		{"rellliable", "reliable"}, // two added
		{"reliablexyz", ""},        // three added: too far
		{"jsn", "json"},            // short: one edit
		{"jsx", ""},                // short: two edits are too many
		{"tll", "ttl"},
		{"hoem", "home"},
		{"nowait", "no-wait"},
		{"idempotency_key", "idempotency-key"},
		{"", ""},
		{"zzzzzzzz", ""},
		{string(make([]byte, 100)), ""}, // long input
	}
	for _, tc := range tests {
		if got := Nearest(tc.name, flags); got != tc.want {
			t.Errorf("Nearest(%q) = %q, want %q", tc.name, got, tc.want)
		}
	}
}

func TestUndefined(t *testing.T) {
	fs := flag.NewFlagSet("t", flag.ContinueOnError)
	fs.SetOutput(new(strings.Builder))
	fs.Bool("reliable", false, "")
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--relaible"}, "relaible"},
		{[]string{"-relaible"}, "relaible"},
		{[]string{"--reliable=maybe"}, ""}, // defined, bad value
	} {
		err := fs.Parse(tc.args)
		if err == nil {
			t.Fatalf("%q parsed", tc.args)
		}
		if got := Undefined(err); got != tc.want {
			t.Errorf("Undefined(%v) = %q, want %q", err, got, tc.want)
		}
	}
	if got := Names(fs); len(got) != 1 || got[0] != "reliable" {
		t.Errorf("Names = %q", got)
	}
}

func FuzzNearest(f *testing.F) {
	f.Add("relaible", "reliable")
	f.Add("", "x")
	f.Fuzz(func(t *testing.T, name, candidate string) {
		got := Nearest(name, []string{candidate})
		if got != "" && got != candidate {
			t.Fatalf("Nearest(%q, [%q]) = %q", name, candidate, got)
		}
		if name == candidate && len([]rune(name)) <= 64 && got != candidate {
			t.Fatalf("Nearest(%q, [itself]) = %q", name, got)
		}
		if d := distance(name, candidate); d != distance(candidate, name) {
			t.Fatalf("distance not symmetric: %q %q", name, candidate)
		}
	})
}

func TestExplain(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--relaible"}, "unknown flag --relaible (did you mean --reliable?)"},
		{[]string{"--frobnicate"}, "unknown flag --frobnicate (an argument that starts with - goes after --)"},
		{[]string{"-x"}, "unknown flag --x (an argument that starts with - goes after --)"},
		{[]string{"-5"}, `"-5" is read as a flag: an argument that starts with - goes after -- (-- "-5")`},
		{[]string{"-dash body"}, `"-dash body" is read as a flag: an argument that starts with - goes after -- (-- "-dash body")`},
		{[]string{"--5"}, `"-5" is read as a flag: an argument that starts with - goes after -- (-- "-5")`},
		{[]string{"--wait"}, "--wait needs a value"},
		{[]string{"-limit"}, "--limit needs a value"},
		{[]string{"--wait", "5"}, `--wait "5": a duration needs a unit: 5s, 5m`},
		{[]string{"--wait", "soon"}, `--wait "soon": not a duration: want a number and a unit, such as 90s, 5m or 2h (units ms, s, m, h)`},
		{[]string{"--wait", "9d"}, `--wait "9d": not a duration: want a number and a unit, such as 90s, 5m or 2h (units ms, s, m, h)`},
		{[]string{"--limit", "abc"}, `--limit "abc": not a whole number`},
		{[]string{"--ratio", "x"}, `--ratio "x": not a number`},
		{[]string{"--reliable=maybe"}, `--reliable "maybe": want true or false`},
	} {
		fs := flag.NewFlagSet("t", flag.ContinueOnError)
		fs.SetOutput(new(strings.Builder))
		fs.Bool("reliable", false, "")
		fs.Duration("wait", 0, "")
		fs.Int("limit", 0, "")
		fs.Float64("ratio", 0, "")
		err := fs.Parse(tc.args)
		if err == nil {
			t.Fatalf("%q parsed", tc.args)
		}
		if got := Explain(err, fs); got != tc.want {
			t.Errorf("Explain(%q) = %q, want %q", tc.args, got, tc.want)
		}
	}
}

func TestGivenEmpty(t *testing.T) {
	for _, c := range []struct {
		args []string
		want string
	}{
		{nil, ""},
		{[]string{"--key", "k1"}, ""},
		{[]string{"--key", ""}, "--key must not be empty"},
		{[]string{"--key="}, "--key must not be empty"},
		{[]string{"--other", ""}, ""},
	} {
		fs := flag.NewFlagSet("t", flag.ContinueOnError)
		fs.String("key", "", "")
		fs.String("other", "", "")
		if err := fs.Parse(c.args); err != nil {
			t.Fatal(err)
		}
		got := ""
		if err := GivenEmpty(fs, "key"); err != nil {
			got = err.Error()
		}
		if got != c.want {
			t.Errorf("%q: %q, want %q", c.args, got, c.want)
		}
	}
}

func TestGivenZero(t *testing.T) {
	for _, c := range []struct {
		args []string
		want string
	}{
		{nil, ""},
		{[]string{"--ttl", "1s"}, ""},
		{[]string{"--ttl", "0"}, "--ttl must be positive (leave it out for the default)"},
		{[]string{"--ttl=0s"}, "--ttl must be positive (leave it out for the default)"},
		{[]string{"--ttl", "0m"}, "--ttl must be positive (leave it out for the default)"},
		{[]string{"--wait", "0s"}, ""}, // not named
		{[]string{"--name", ""}, ""},   // not a duration
	} {
		fs := flag.NewFlagSet("t", flag.ContinueOnError)
		fs.Duration("ttl", time.Hour, "")
		fs.Duration("wait", 0, "")
		fs.String("name", "x", "")
		if err := fs.Parse(c.args); err != nil {
			t.Fatal(err)
		}
		got := ""
		if err := GivenZero(fs, "ttl", "name"); err != nil {
			got = err.Error()
		}
		if got != c.want {
			t.Errorf("%q: %q, want %q", c.args, got, c.want)
		}
	}
}

func TestSplitSub(t *testing.T) {
	for _, c := range []struct {
		args []string
		sub  string
		rest []string
	}{
		{nil, "", nil},
		{[]string{"list"}, "list", []string{}},
		{[]string{"show", "s", "--json"}, "show", []string{"s", "--json"}},
		{[]string{"--json", "bogus"}, "bogus", []string{"--json"}},
		{[]string{"-json", "show", "s"}, "show", []string{"-json", "s"}},
		{[]string{"--json=false", "show"}, "show", []string{"--json=false"}},
		{[]string{"--home", "/h", "show", "s"}, "show", []string{"--home", "/h", "s"}},
		{[]string{"--home=/h", "--json", "list"}, "list", []string{"--home=/h", "--json"}},
		{[]string{"--home"}, "", []string{"--home"}},
		{[]string{"--home="}, "", []string{"--home="}},
		{[]string{"--help"}, "", []string{"--help"}},
		{[]string{"-h", "list"}, "list", []string{"-h"}},
		{[]string{"--state", "pending", "proposals"}, "", []string{"--state", "pending", "proposals"}},
		{[]string{"--", "list"}, "", []string{"--", "list"}},
		{[]string{"-", "x"}, "-", []string{"x"}},
		{[]string{"", "list"}, "", []string{"", "list"}},
	} {
		sub, rest := SplitSub(c.args)
		if sub != c.sub || !slices.Equal(rest, c.rest) {
			t.Errorf("SplitSub(%q) = %q, %q; want %q, %q", c.args, sub, rest, c.sub, c.rest)
		}
	}
}

// FuzzSplitSub: the subcommand SplitSub finds is the first positional
// argument that parsing the whole command line with flags anywhere (as
// the commands do) finds, and the rest parses to the same flags and the
// other positional arguments (when the command line parses at all); the
// arguments are not changed.
func FuzzSplitSub(f *testing.F) {
	for _, s := range []string{"list", "--json\x00bogus", "--home\x00/h\x00show\x00s", "--home=/h\x00-json\x00x", "--state\x00p\x00x", "--\x00x", "-\x00x", "--home"} {
		f.Add(s)
	}
	parse := func(args []string) (home string, asJSON bool, pos []string, err error) {
		fs := flag.NewFlagSet("t", flag.ContinueOnError)
		fs.SetOutput(io.Discard)
		h := fs.String("home", "", "")
		j := fs.Bool("json", false, "")
		for {
			if err := fs.Parse(args); err != nil {
				return "", false, nil, err
			}
			args = fs.Args()
			if len(args) == 0 || args[0] == "--" {
				return *h, *j, pos, nil
			}
			pos, args = append(pos, args[0]), args[1:]
		}
	}
	f.Fuzz(func(t *testing.T, in string) {
		args := strings.Split(in, "\x00")
		orig := slices.Clone(args)
		sub, rest := SplitSub(args)
		if !slices.Equal(args, orig) {
			t.Fatalf("SplitSub changed its argument: %q", args)
		}
		if sub == "" {
			if !slices.Equal(rest, args) {
				t.Fatalf("no subcommand, yet rest %q differs from %q", rest, args)
			}
			return
		}
		home, asJSON, pos, err := parse(args)
		if err != nil {
			return // the command refuses it either way
		}
		if len(pos) == 0 || pos[0] != sub {
			t.Fatalf("SplitSub(%q) = %q; parsing finds %q", args, sub, pos)
		}
		home2, asJSON2, pos2, err := parse(rest)
		if err != nil || home2 != home || asJSON2 != asJSON || !slices.Equal(pos2, pos[1:]) {
			t.Fatalf("rest %q parses to %q %v %q (%v); want %q %v %q", rest, home2, asJSON2, pos2, err, home, asJSON, pos[1:])
		}
	})
}
