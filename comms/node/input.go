package node

import (
	"fmt"
	"io"
	"os"
	"strings"
	"unicode/utf8"
)

// MaxInput bounds a body, params or result a command reads from a file or
// standard input ([ReadInput]): the envelope limit, as the node refuses
// what does not fit.
const MaxInput = 1 << 20

// ReadInput returns a command-line argument's content: arg itself, or for
// "-" what stdin holds and for "@path" the file's content, at most
// MaxInput bytes of UTF-8 text. what names the argument in errors
// (CodeBadArgument for a file that cannot be read or text that is not
// UTF-8, CodeBodyTooLarge beyond MaxInput).
func ReadInput(stdin io.Reader, what, arg string) (string, error) {
	var r io.Reader
	switch {
	case arg == "-":
		r = stdin
	case arg == "@":
		return "", errorf(CodeBadArgument, "%s: @ needs a file name (@FILE)", what)
	case strings.HasPrefix(arg, "@"):
		f, err := os.Open(arg[1:])
		if err != nil {
			return "", errorf(CodeBadArgument, "%s: %v", what, err)
		}
		defer f.Close()
		if fi, err := f.Stat(); err == nil && fi.IsDir() {
			return "", errorf(CodeBadArgument, "%s: %s is a directory, not a file", what, arg[1:])
		}
		r = f
	default:
		return arg, nil
	}
	b, err := io.ReadAll(io.LimitReader(r, MaxInput+1))
	if err != nil && arg != "-" {
		return "", errorf(CodeBadArgument, "%s: %s cannot be read: %v", what, arg[1:], err)
	}
	if err != nil {
		return "", fmt.Errorf("%s: standard input: %w", what, err)
	}
	if len(b) > MaxInput {
		return "", errorf(CodeBodyTooLarge, "%s is longer than %d bytes, the envelope limit", what, MaxInput)
	}
	if !utf8.Valid(b) {
		return "", errorf(CodeBadArgument, "%s is not UTF-8 text", what)
	}
	return string(b), nil
}
