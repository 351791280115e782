package config

import (
	"errors"
	"flag"
	"fmt"
	"slices"
	"strings"
)

// Setting flags are command-line flags that set a key for one command,
// winning over meerkat.toml and the environment.
var settingFlags = map[string]string{
	"listen-uds": "comms.listen_uds",
	"listen-tcp": "comms.listen_tcp",
	"log-level":  "log.level",
	"log-format": "log.format",
}

// HomeFlag registers --home on fs, defaulting to def, and returns its
// value. An empty --home is refused (ErrEmptyHome): --home "$DIR" with
// DIR unset must not fall back to the default home, where a command that
// creates one would mint an identity.
func HomeFlag(fs *flag.FlagSet, def string) *string {
	h := homeValue{new(string)}
	*h.p = def
	fs.Var(h, "home", "node home `directory` (default $MEERKAT_HOME, else $XDG_CONFIG_HOME/meerkat, else ~/.config/meerkat)")
	return h.p
}

// ErrEmptyHome is the error of an empty --home.
var ErrEmptyHome = errors.New("needs a directory, not an empty string")

// homeValue is --home's flag.Value.
type homeValue struct{ p *string }

func (h homeValue) String() string {
	if h.p == nil {
		return ""
	}
	return *h.p
}

func (h homeValue) Set(s string) error {
	if s == "" {
		return ErrEmptyHome
	}
	*h.p = s
	return nil
}

// ListenFlags registers --listen-uds and --listen-tcp on fs.
func ListenFlags(fs *flag.FlagSet) {
	fs.String("listen-uds", "", "Unix socket `path` to listen on (overrides comms.listen_uds; \"off\" disables)")
	fs.String("listen-tcp", "", "`host:port` to listen on for TLS and plaintext TCP (overrides comms.listen_tcp)")
}

// LogFlags registers --log-level and --log-format on fs.
func LogFlags(fs *flag.FlagSet) {
	fs.String("log-level", "", "log `level`: debug, info, warn or error (overrides log.level, default info)")
	fs.String("log-format", "", "log line `format`: text or json (overrides log.format, default text)")
}

// FlagOverrides returns the setting flags given on fs's command line: the
// values by key path, and the flag that set each key ("--log-level"), for
// reporting where a value came from. A log flag's value is checked here;
// the rest are checked with the configuration.
func FlagOverrides(fs *flag.FlagSet) (values, flags map[string]string, err error) {
	values, flags = map[string]string{}, map[string]string{}
	fs.Visit(func(f *flag.Flag) {
		key, ok := settingFlags[f.Name]
		if !ok {
			return
		}
		v := f.Value.String()
		values[key], flags[key] = v, "--"+f.Name
		switch {
		case err != nil:
		case f.Name == "log-level" && !slices.Contains(LogLevels, v):
			err = fmt.Errorf("--log-level %q: want %s", v, strings.Join(LogLevels, ", "))
		case f.Name == "log-format" && v != LogText && v != LogJSON:
			err = fmt.Errorf("--log-format %q: want %s or %s", v, LogText, LogJSON)
		}
	})
	return values, flags, err
}
