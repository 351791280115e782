package main

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"github.com/meerkatd/meerkatd/internal/termtext"
	"io"
	"os"
	"regexp"
	"strings"
	"unicode/utf8"

	"github.com/meerkatd/meerkatd/comms/node"
)

// parseArgs parses flags that may appear anywhere among the positional
// arguments (meerkatd send message bob hi --home X) and returns the
// positional ones. --help prints the command's help and returns
// flag.ErrHelp.
func parseArgs(e *env, flags *flag.FlagSet, args []string) ([]string, error) {
	var pos []string
	for {
		if err := flags.Parse(args); err != nil {
			if errors.Is(err, flag.ErrHelp) {
				e.printHelp(flags)
				return nil, err
			}
			return nil, fmt.Errorf("%w: %v%s", errUsage, err, flagHint(err))
		}
		args = flags.Args()
		if len(args) == 0 {
			return pos, nil
		}
		if args[0] == "--" {
			return append(pos, args[1:]...), nil
		}
		pos = append(pos, args[0])
		args = args[1:]
	}
}

// bareNumber matches a duration flag's value given without a unit.
var bareNumber = regexp.MustCompile(`invalid value "([0-9.]+)" for flag -[a-z-]+: parse error`)

// flagHint adds a hint to a flag error where one helps.
func flagHint(err error) string {
	if m := bareNumber.FindStringSubmatch(err.Error()); m != nil {
		return fmt.Sprintf(" (a duration needs a unit: %ss, %sm)", m[1], m[1])
	}
	return ""
}

// parseNoArgs parses flags and refuses positional arguments.
func parseNoArgs(e *env, flags *flag.FlagSet, args []string) error {
	pos, err := parseArgs(e, flags, args)
	if err != nil {
		return err
	}
	return wantArgs(pos, 0, "no arguments")
}

// wantArgs checks the number of positional arguments.
func wantArgs(pos []string, n int, names string) error {
	if len(pos) != n {
		return fmt.Errorf("%w: want %s, got %d argument(s)", errUsage, names, len(pos))
	}
	return nil
}

// splitSub takes the subcommand off args; a first argument that is a flag
// (--help, say) leaves the subcommand empty for the caller to report
// after parsing the flags.
func splitSub(args []string) (sub string, rest []string) {
	if len(args) == 0 || strings.HasPrefix(args[0], "-") {
		return "", args
	}
	return args[0], args[1:]
}

// homeFlag registers --home, defaulting to a --home given before the
// command.
func (e *env) homeFlag(flags *flag.FlagSet) *string {
	return flags.String("home", e.home, "node home `directory` (default $MEERKAT_HOME, else ~/.config/meerkat)")
}

// maxInput bounds a body, params or result read from a file or stdin: the
// envelope limit; the node refuses what does not fit.
const maxInput = 1 << 20

// readInput returns arg, or for "-" standard input and for "@path" the
// file's content, at most maxInput bytes.
func (e *env) readInput(what, arg string) (string, error) {
	var r io.Reader
	switch {
	case arg == "-":
		r = e.stdin
	case strings.HasPrefix(arg, "@"):
		f, err := os.Open(arg[1:])
		if err != nil {
			return "", fmt.Errorf("%w: %s: %v", errUsage, what, err)
		}
		defer f.Close()
		r = f
	default:
		return arg, nil
	}
	b, err := io.ReadAll(io.LimitReader(r, maxInput+1))
	if err != nil {
		return "", fmt.Errorf("%s: %w", what, err)
	}
	if len(b) > maxInput {
		return "", &node.Error{Code: node.CodeBodyTooLarge, Msg: fmt.Sprintf("%s is longer than %d bytes, the envelope limit", what, maxInput)}
	}
	if !utf8.Valid(b) {
		return "", fmt.Errorf("%w: %s is not UTF-8 text", errUsage, what)
	}
	return string(b), nil
}

func printJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	enc.SetEscapeHTML(false)
	return enc.Encode(v)
}

// printJSONError prints err as {"error": {"code", "message"}} for a
// command run with --json, so a script reads the same codes as MCP.
func printJSONError(w io.Writer, err error) {
	code := node.CodeOf(err)
	if errors.Is(err, errUsage) {
		code = node.CodeBadArgument
	}
	msg := strings.TrimPrefix(node.UserText(err), "usage: ")
	printJSON(w, map[string]any{"error": map[string]string{"code": code, "message": msg}})
}

// shown marks an error whose outcome a command run with --json has
// already printed (a partial result, or the error itself), so that main
// does not print it again.
type shown struct{ error }

func (s shown) Unwrap() error { return s.error }

// jsonShown wraps err (nil stays nil) as shown.
func jsonShown(err error) error {
	if err == nil {
		return nil
	}
	return shown{err}
}

// wantsJSON reports whether the command line asks for --json.
func wantsJSON(args []string) bool {
	for _, a := range args {
		switch a {
		case "--":
			return false
		case "--json", "-json", "--json=true", "-json=true":
			return true
		}
	}
	return false
}

// safeText makes peer-controlled text safe to print on a terminal: control
// characters (escape sequences, carriage returns, …) and invalid UTF-8
// are shown escaped, and each new line is indented by indent, so a peer
// cannot draw lines that look like meerkatd's own.
func safeText(s, indent string) string { return termtext.Escape(s, indent, true) }

// safeLine is safeText for a line of meerkatd's own that carries text a
// peer may have chosen (an error message, a last error, a dead letter's
// reason): control characters escaped, continuation lines indented, but
// backslashes left as they are (the rest of the line is meerkatd's).
func safeLine(s string) string { return termtext.Escape(s, "  ", false) }
