package flagdoc

import (
	"flag"
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
