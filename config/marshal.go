package config

import (
	"bytes"
	"errors"
	"fmt"
	"strings"
	"unicode/utf8"
)

// Marshal returns c as a meerkat.toml document in which every key is
// preceded by its description, environment variable and default as
// comments, as `meerkatd init` writes it. [Parse] reads
// the result back to c. It fails only when a string is not valid UTF-8
// (TOML cannot hold it), which can happen after [Config.ApplyEnv].
func Marshal(c Config) ([]byte, error) {
	var b bytes.Buffer
	b.WriteString("# meerkatd configuration (docs/config.md).\n")
	b.WriteString("# Precedence: defaults < this file < MEERKAT_* environment < flags.\n")
	table := ""
	var errs []error
	for _, k := range keys {
		t, leaf := "", k.path
		if i := strings.LastIndexByte(k.path, '.'); i >= 0 {
			t, leaf = k.path[:i], k.path[i+1:]
		}
		if t != table {
			fmt.Fprintf(&b, "\n[%s]\n", t)
			table = t
		}
		if k.str != nil && !utf8.ValidString(*k.str(&c)) || k.list != nil && !validList(*k.list(&c)) {
			errs = append(errs, &Error{Key: k.path, Err: errors.New("value is not valid UTF-8")})
			continue
		}
		b.WriteString("\n")
		for _, line := range wrap(k.doc, 74) {
			b.WriteString("# " + line + "\n")
		}
		def := Default()
		fmt.Fprintf(&b, "# Environment: %s. Default: %s.\n", k.env, k.format(&def))
		fmt.Fprintf(&b, "%s = %s\n", leaf, k.format(&c))
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	return b.Bytes(), nil
}

func validList(l []string) bool {
	for _, s := range l {
		if !utf8.ValidString(s) {
			return false
		}
	}
	return true
}

// wrap splits s into lines of at most width bytes at spaces.
func wrap(s string, width int) []string {
	var lines []string
	line := ""
	for _, w := range strings.Fields(s) {
		if line != "" && len(line)+1+len(w) > width {
			lines = append(lines, line)
			line = ""
		}
		if line != "" {
			line += " "
		}
		line += w
	}
	if line != "" {
		lines = append(lines, line)
	}
	return lines
}

// quoteTOML returns s as a TOML basic string. s must be valid UTF-8.
func quoteTOML(s string) string {
	var b strings.Builder
	b.WriteByte('"')
	for _, r := range s {
		switch r {
		case '"':
			b.WriteString(`\"`)
		case '\\':
			b.WriteString(`\\`)
		case '\b':
			b.WriteString(`\b`)
		case '\t':
			b.WriteString(`\t`)
		case '\n':
			b.WriteString(`\n`)
		case '\f':
			b.WriteString(`\f`)
		case '\r':
			b.WriteString(`\r`)
		default:
			if r < 0x20 || r == 0x7f {
				fmt.Fprintf(&b, `\u%04X`, r)
			} else {
				b.WriteRune(r)
			}
		}
	}
	b.WriteByte('"')
	return b.String()
}
