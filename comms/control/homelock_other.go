//go:build !(darwin || dragonfly || freebsd || linux || netbsd || openbsd)

package control

import "errors"

// errHomeLocked means another process holds the home's lock.
var errHomeLocked = errors.New("control: the home is locked by another process")

// lockHome does nothing where flock(2) is missing: the control socket
// alone says who serves the home (two processes racing to replace a
// stale one can both end up serving).
func lockHome(string) (unlock func(), err error) { return func() {}, nil }
