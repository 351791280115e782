package audit

import "errors"

// Errors returned by this package.
var (
	// ErrNotRegular means the log path names a symbolic link, a directory,
	// a FIFO or anything else but a regular file; [Open] and [Read] refuse
	// it rather than follow or block on it.
	ErrNotRegular = errors.New("audit: not a regular file")
	// ErrMalformed matches every error of [ParseLine]: the line is not a
	// JSON object, a field has the wrong type or value, the time is
	// missing or invalid, or the line is longer than [MaxLineSize]. The
	// error never quotes the line.
	ErrMalformed = errors.New("audit: malformed line")
)
