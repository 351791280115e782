// Package flagdoc prints a command's flags the way its usage line and
// the docs spell them: with two dashes (--wait DUR), which package flag
// accepts as well as one.
package flagdoc

import (
	"flag"
	"fmt"
	"io"
	"strings"
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
