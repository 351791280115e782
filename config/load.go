package config

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"strings"
	"unicode/utf8"

	"github.com/BurntSushi/toml"

	"github.com/meerkatd/meerkatd/internal/filemode"
)

// Parse decodes a meerkat.toml document on top of [Default]: keys absent
// from data keep their defaults. Decoding is strict: unknown keys, wrong
// types and syntax errors are [*Error]s (see [Load]). Parse does not
// validate values; call [Config.Validate].
func Parse(data []byte) (Config, error) {
	return parse("", data)
}

// Load reads and parses the file at path like [Parse]; errors name the
// file. A missing file is an error matching fs.ErrNotExist (see
// [LoadOrDefault]); a file over [MaxFileSize] wraps [ErrFileTooLarge]; a
// symbolic link, a file another user owns or one that group or others may
// write is an [*Error] wrapping filemode.ErrUnsafe, whose text gives the
// fix.
//
// A file that holds nats.password must not be readable by group or
// others either.
func Load(path string) (Config, error) {
	data, err := readFile(path)
	if err != nil {
		return Config{}, err
	}
	c, err := parse(path, data)
	if err != nil {
		return Config{}, err
	}
	if err := checkPasswordFile(path, c); err != nil {
		return Config{}, err
	}
	return c, nil
}

// checkPasswordFile refuses a file at path that holds nats.password (in
// c, parsed from it) when group or others may read it.
func checkPasswordFile(path string, c Config) error {
	if c.NATS.Password == "" {
		return nil
	}
	if fi, err := os.Stat(path); err == nil && fi.Mode().Perm()&0o044 != 0 {
		return &Error{Source: path, Key: "nats.password", Err: fmt.Errorf("the file holds a password and group or others may read it (mode %04o): chmod 600 %s, or give the password in MEERKAT_NATS_PASSWORD", fi.Mode().Perm(), path)}
	}
	return nil
}

// LoadOrDefault is [Load], except that a missing file yields [Default] and
// no error: a node needs no configuration file.
func LoadOrDefault(path string) (Config, error) {
	c, err := Load(path)
	if errors.Is(err, fs.ErrNotExist) {
		return Default(), nil
	}
	return c, err
}

// readFile reads at most MaxFileSize bytes of a regular file that is the
// user's own and that group and others may not write (internal/filemode):
// whoever can write meerkat.toml decides where the node listens and what
// it stores.
func readFile(path string) ([]byte, error) {
	if err := filemode.File(path); errors.Is(err, filemode.ErrUnsafe) {
		return nil, &Error{Err: err} // its text names path
	} else if err != nil {
		return nil, fmt.Errorf("config: %w", err)
	}
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("config: %w", err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("config: %w", err)
	}
	if !fi.Mode().IsRegular() { // a FIFO or device could block or never end
		return nil, &Error{Source: path, Err: fmt.Errorf("not a regular file (%s)", fi.Mode().Type())}
	}
	data, err := io.ReadAll(io.LimitReader(f, MaxFileSize+1))
	if err != nil {
		return nil, fmt.Errorf("config: %w", err)
	}
	if len(data) > MaxFileSize {
		return nil, tooLarge(path)
	}
	return data, nil
}

func tooLarge(source string) error {
	return &Error{Source: source, Err: fmt.Errorf("%w (more than %d bytes)", ErrFileTooLarge, MaxFileSize)}
}

// parse decodes data; source names it in errors ("" for Parse).
func parse(source string, data []byte) (Config, error) {
	return parseInto(source, data, nil)
}

// parseInto is parse that stores the document's metadata in md, if not nil.
func parseInto(source string, data []byte, mdOut *toml.MetaData) (Config, error) {
	if len(data) > MaxFileSize {
		return Config{}, tooLarge(source)
	}
	if !utf8.Valid(data) { // TOML documents are UTF-8; do not rely on the decoder to check
		return Config{}, &Error{Source: source, Err: errors.New("not valid UTF-8")}
	}
	c := Default()
	md, err := toml.NewDecoder(bytes.NewReader(data)).Decode(&c)
	if err != nil {
		// toml's messages carry "line N (last key ...)"; keep them whole,
		// unless they may quote a secret.
		return Config{}, &Error{Source: source, Err: hideSecretSyntax(data, err)}
	}
	if err := checkKeys(source, md); err != nil {
		return Config{}, err
	}
	for _, k := range keys {
		if k.list != nil && len(*k.list(&c)) == 0 {
			*k.list(&c) = nil // "servers = []" is the default, nil
		}
	}
	if mdOut != nil {
		*mdOut = md
	}
	return c, nil
}

// checkKeys reports every key of the document that is not exactly a known
// key path or table. That is MetaData.Undecoded plus more: the decoder
// matches struct fields case-insensitively, so "LISTEN_UDS" does not show
// up as undecoded but lands in ListenUDS (and, next to "listen_uds", wins
// or loses at random). Of an unknown table only the table itself is
// reported, not each key inside it.
func checkKeys(source string, md toml.MetaData) error {
	var errs []error
	var unknown []string
	for _, k := range md.Keys() {
		path := k.String()
		if isKnownPath(path) {
			continue
		}
		if under(path, unknown) {
			continue
		}
		unknown = append(unknown, path) // keys inside it are not reported again
		errs = append(errs, &Error{Source: source, Key: path, Err: unknownKey(path)})
	}
	return errors.Join(errs...)
}

// under reports whether path is one of prefixes or inside one of them.
func under(path string, prefixes []string) bool {
	for _, p := range prefixes {
		if path == p || strings.HasPrefix(path, p+".") {
			return true
		}
	}
	return false
}

func isKnownPath(path string) bool {
	if _, ok := lookupKey(path); ok {
		return true
	}
	for _, t := range tables {
		if path == t {
			return true
		}
	}
	return false
}

// unknownKey returns ErrUnknownKey, with a suggestion when path is a near
// miss of a known key: a typo, different case, or a key in the wrong table.
func unknownKey(path string) error {
	if s := suggest(path); s != "" {
		if strings.Trim(path, `"'`) == s {
			// "comms.listen_tcp" = … quoted is one key named with a dot.
			return fmt.Errorf("%w (a quoted key is one key, dots and all: write %s unquoted, or set it under its [table])", ErrUnknownKey, s)
		}
		return fmt.Errorf("%w (did you mean %q?)", ErrUnknownKey, s)
	}
	return ErrUnknownKey
}

func suggest(path string) string {
	var candidates []string
	for _, k := range keys {
		candidates = append(candidates, k.path)
	}
	candidates = append(candidates, tables[:]...)

	// The right key in the wrong table: "listen_tcp" at the top level.
	leaf := path[strings.LastIndexByte(path, '.')+1:]
	for _, c := range candidates {
		if c != path && c[strings.LastIndexByte(c, '.')+1:] == leaf {
			return c
		}
	}
	best, bestDist := "", -1
	lower := strings.ToLower(path)
	for _, c := range candidates {
		d := distance(lower, c)
		// d < len(c)-1: a short name such as "log" is not a typo of any
		// other three letters.
		if d <= max(2, len(c)/3) && d < len(c)-1 && (bestDist < 0 || d < bestDist) {
			best, bestDist = c, d
		}
	}
	return best
}

// distance is the Levenshtein distance between a and b, in bytes.
func distance(a, b string) int {
	if len(a) > 256 { // keys are short; do not spend time on junk
		return len(a)
	}
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}

// hideSecretSyntax returns a TOML syntax error on the line of a secret
// (nats.password: the decoder's last key, or a line naming it) without
// the decoder's message, which may quote part of the value.
func hideSecretSyntax(data []byte, err error) error {
	var pe toml.ParseError
	if !errors.As(err, &pe) {
		return err
	}
	line := ""
	if n := pe.Position.Line; n > 0 {
		if lines := bytes.SplitN(data, []byte("\n"), n+1); len(lines) >= n {
			line = strings.ToLower(string(lines[n-1]))
		}
	}
	for _, k := range keys {
		if !k.secret {
			continue
		}
		name := k.path[strings.LastIndexByte(k.path, '.')+1:]
		if pe.LastKey == k.path || strings.Contains(line, name) {
			return fmt.Errorf("toml: line %d: a syntax error where %s is set (not shown: the line holds a secret)", pe.Position.Line, k.path)
		}
	}
	return err
}
