package flagdoc

import (
	"errors"
	"flag"
	"io"
	"strconv"
	"strings"
	"testing"
	"time"
)

// FuzzExplain: for any command line, parsing and GivenZero/GivenEmpty never
// panic, GivenZero reports exactly a duration flag given as zero, and
// Explain names an unknown flag as the user gave it, after "unknown flag
// --", or an argument read as a flag, quoted.
func FuzzExplain(f *testing.F) {
	for _, s := range []string{"--relaible", "--wait\x005", "-limit", "--wait=0s", "--name=x\x00--wait\x000", "--frob=1", "-x", "--reliable=maybe", "--limit\x00abc", "-wait\x009d", "-0", "-a b", "--5"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, in string) {
		args := strings.Split(in, "\x00")
		fs := flag.NewFlagSet("t", flag.ContinueOnError)
		fs.SetOutput(io.Discard)
		fs.String("name", "", "")
		wait := fs.Duration("wait", time.Second, "")
		fs.Bool("reliable", false, "")
		fs.Int("limit", 0, "")
		err := fs.Parse(args)
		zerr := GivenZero(fs, "wait", "name", "limit")
		givenWait := false
		fs.Visit(func(fl *flag.Flag) {
			if fl.Name == "wait" {
				givenWait = true
			}
		})
		if err == nil && (zerr != nil) != (givenWait && *wait == 0) {
			t.Fatalf("GivenZero = %v, wait given %v = %v", zerr, givenWait, *wait)
		}
		_ = GivenEmpty(fs, "name", "wait")
		if err == nil || errors.Is(err, flag.ErrHelp) {
			return
		}
		text := Explain(err, fs)
		// The unknown flag's name, worked out from the argument the
		// flag package stopped at.
		if strings.HasPrefix(err.Error(), "flag provided but not defined: ") {
			var name string
			for i := 0; i < len(args); i++ {
				a := args[i]
				if len(a) < 2 || a[0] != '-' || a == "--" {
					break
				}
				n := a[1:]
				if n[0] == '-' {
					n = n[1:]
				}
				n, _, hasEq := strings.Cut(n, "=")
				fl := fs.Lookup(n)
				if fl == nil {
					name = n
					break
				}
				if fl.Name != "reliable" && !hasEq {
					i++
				}
			}
			if name == "" {
				t.Fatalf("could not find the unknown flag in %q (%v)", args, err)
			}
			// A name that could be a flag's is a flag mistyped; another
			// (-5, "-a b") an argument the flag package took for one,
			// named quoted, unless it is near a flag's name.
			mistyped := strings.HasPrefix(text, "unknown flag --"+name+" (")
			readAsFlag := strings.HasPrefix(text, strconv.Quote("-"+name)+" is read as a flag: ")
			if !mistyped && !readAsFlag || readAsFlag && flagLike.MatchString(name) {
				t.Fatalf("Explain(%v) = %q: does not name %q as it should", err, text, name)
			}
		}
	})
}
