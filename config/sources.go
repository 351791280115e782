package config

import (
	"errors"
	"fmt"
	"io/fs"
	"slices"
	"strings"

	"github.com/BurntSushi/toml"
)

// SourceDefault is the [Sources] entry of a key that nothing set.
const SourceDefault = "default"

// Sources says where each key's value came from, by key path:
// [SourceDefault], the path of the file that set it, the name of the
// environment variable that set it, or a command-line flag ("--listen-tcp").
// A key that is absent counts as [SourceDefault].
type Sources map[string]string

// Of returns the source of the key at path.
func (s Sources) Of(path string) string {
	if src, ok := s[path]; ok {
		return src
	}
	return SourceDefault
}

// LoadWithSources is [LoadOrDefault], and it also returns the source of
// every key: the file's path for the keys the file sets, [SourceDefault]
// for the others.
func LoadWithSources(path string) (Config, Sources, error) {
	src := Sources{}
	data, err := readFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return Default(), src, nil
	}
	if err != nil {
		return Config{}, nil, err
	}
	c, md, err := parseMeta(path, data)
	if err != nil {
		return Config{}, nil, err
	}
	if err := checkPasswordFile(path, c); err != nil {
		return Config{}, nil, err
	}
	for _, k := range keys {
		if md.IsDefined(strings.Split(k.path, ".")...) {
			src[k.path] = path
		}
	}
	return c, src, nil
}

// ApplyEnvSources is [Config.ApplyEnv] that also records, in src, the
// variables that set keys.
func (c *Config) ApplyEnvSources(lookup func(string) (string, bool), src Sources) error {
	if err := c.ApplyEnv(lookup); err != nil || lookup == nil {
		return err
	}
	for _, k := range keys {
		if _, ok := lookup(k.env); ok {
			src[k.path] = k.env
		}
	}
	return nil
}

// Attribute returns err with each [*Error] in it (err itself, or one of
// the errors joined in it) that names a key but no source given the
// source of that key in s: the file, variable or flag the bad value came
// from ("MEERKAT_COMMS_ACK_TIMEOUT: comms.ack_timeout_secs: must be …").
// A key at its default keeps no source. Other errors are kept as they
// are; nil stays nil.
func (s Sources) Attribute(err error) error {
	if ce, ok := err.(*Error); ok {
		if ce.Source != "" || ce.Key == "" || s.Of(ce.Key) == SourceDefault {
			return err
		}
		return &Error{Source: s.Of(ce.Key), Key: ce.Key, Err: ce.Err}
	}
	j, ok := err.(interface{ Unwrap() []error })
	if !ok {
		return err
	}
	errs := j.Unwrap()
	out := make([]error, len(errs))
	for i, e := range errs {
		out[i] = s.Attribute(e)
	}
	return errors.Join(out...)
}

// ValidateSources is [Config.Validate] with each problem naming where the
// bad value came from, by src ([Sources.Attribute]).
func (c Config) ValidateSources(src Sources) error { return src.Attribute(c.Validate()) }

// Setting is one key of an effective configuration, for
// `meerkatd config show`.
type Setting struct {
	Key    string `json:"key"`    // key path: "comms.listen_tcp"
	Env    string `json:"env"`    // its environment variable
	Value  string `json:"value"`  // in TOML syntax: "meerkat" (quoted), 30, true, ["a", "b"]
	Source string `json:"source"` // see [Sources]
}

// HiddenValue is the [Setting] value of a secret key (nats.password) that
// is set: [Settings] does not show secrets.
const HiddenValue = `"(hidden)"`

// Settings returns every key of c in file order with its value and its
// source in src. The value of a secret key (nats.password) that is set is
// [HiddenValue]; a password in a server URL (nats.servers) is "***", as
// errors show it.
func Settings(c *Config, src Sources) []Setting {
	out := make([]Setting, len(keys))
	for i, k := range keys {
		v := k.format(c)
		switch {
		case k.secret && *k.str(c) != "":
			v = HiddenValue
		case k.urls:
			shown := slices.Clone(*k.list(c))
			for i, u := range shown {
				shown[i] = withoutUserinfo(u)
			}
			v = formatList(shown)
		}
		out[i] = Setting{Key: k.path, Env: k.env, Value: v, Source: src.Of(k.path)}
	}
	return out
}

// EnvPrefix starts the name of every environment variable of a key.
const EnvPrefix = "MEERKAT_"

// ErrUnknownSetting means a MEERKAT_* environment variable names no
// configuration key.
var ErrUnknownSetting = errors.New("unknown setting")

// UnknownEnv checks the names of environment variables ("NAME" or
// "NAME=value", as os.Environ gives them; values are never looked at or
// reported) for MEERKAT_* variables that are not a key's variable nor one
// of also, the variables the caller reads itself (MEERKAT_HOME). It
// returns one [*Error] per unknown variable, whose Source is its name and
// which wraps [ErrUnknownSetting], suggesting the nearest known variable
// when one is close; nil if there is none. The names are reported sorted.
func UnknownEnv(environ []string, also ...string) []error {
	var names []string
	for _, kv := range environ {
		name, _, _ := strings.Cut(kv, "=")
		if !strings.HasPrefix(name, EnvPrefix) || slices.Contains(also, name) || slices.Contains(names, name) {
			continue
		}
		if _, ok := envKey(name); ok {
			continue
		}
		names = append(names, name)
	}
	slices.Sort(names)
	var errs []error
	for _, name := range names {
		err := ErrUnknownSetting
		if s := suggestEnv(name, also); s != "" {
			err = fmt.Errorf("%w; did you mean %s?", ErrUnknownSetting, s)
		}
		errs = append(errs, &Error{Source: name, Err: err})
	}
	return errs
}

func envKey(name string) (keyDef, bool) {
	for _, k := range keys {
		if k.env == name {
			return k, true
		}
	}
	return keyDef{}, false
}

// suggestEnv returns the known variable nearest to name: one that name
// holds or that holds name once the MEERKAT_ prefix is set aside
// (MEERKAT_INBOX_MAX for MEERKAT_COMMS_INBOX_MAX, MEERKAT_HOME_DIR for
// MEERKAT_HOME), else the one fewest edits away if that is near enough
// to be a typo; "" if none is.
func suggestEnv(name string, also []string) string {
	candidates := slices.Clone(also)
	for _, k := range keys {
		candidates = append(candidates, k.env)
	}
	upper := strings.ToUpper(name)
	tail := strings.TrimPrefix(upper, EnvPrefix)
	best, bestHeld, bestDist := "", false, -1
	for _, c := range candidates {
		ctail := strings.TrimPrefix(c, EnvPrefix)
		// One holding the other is the likeliest slip (a table left out
		// or a word added), then the fewest edits.
		held := len(tail) >= 4 && (strings.Contains(ctail, tail) || strings.Contains(tail, ctail))
		d := distance(upper, c)
		if !held && d > max(2, len(c)/5) {
			continue // too far to be a slip
		}
		if bestDist < 0 || held && !bestHeld || held == bestHeld && d < bestDist {
			best, bestHeld, bestDist = c, held, d
		}
	}
	return best
}

// parseMeta is parse that also returns the document's metadata.
func parseMeta(source string, data []byte) (Config, toml.MetaData, error) {
	var md toml.MetaData
	c, err := parseInto(source, data, &md)
	return c, md, err
}
