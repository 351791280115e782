package config

import (
	"errors"
	"strings"
)

// Errors that callers may branch on. They are returned wrapped in an
// [*Error], which supplies the "config: " prefix and names the key (as
// strconv.ErrSyntax travels inside *strconv.NumError); test with errors.Is.
var (
	// ErrUnknownKey means the file sets a key that meerkatd does not know.
	ErrUnknownKey = errors.New("unknown key")
	// ErrFileTooLarge means the file is larger than [MaxFileSize].
	ErrFileTooLarge = errors.New("file too large")
)

// Error is a problem with one configuration key, or with the file as a
// whole when Key is empty (a TOML syntax error). Each problem reported by
// [Config.Validate], [Config.ApplyEnv], [Parse] and [Load] is an *Error.
type Error struct {
	// Source is where the value came from: the file path given to [Load],
	// an environment variable name, or "" when unknown ([Parse], [Config.Validate]).
	Source string
	// Key is the key path, such as "comms.ack_timeout_secs".
	Key string
	// Err is the underlying problem.
	Err error
}

// Error returns "config: [source: ][key: ]problem".
func (e *Error) Error() string {
	var b strings.Builder
	b.WriteString("config: ")
	if e.Source != "" {
		b.WriteString(e.Source)
		b.WriteString(": ")
	}
	if e.Key != "" {
		b.WriteString(e.Key)
		b.WriteString(": ")
	}
	if e.Err != nil {
		b.WriteString(e.Err.Error())
	}
	return b.String()
}

// Unwrap returns e.Err.
func (e *Error) Unwrap() error { return e.Err }
