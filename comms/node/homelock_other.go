//go:build !(darwin || dragonfly || freebsd || linux || netbsd || openbsd)

package node

import (
	"net"
	"os"
	"path/filepath"
	"time"
)

// LockHome takes no lock where flock(2) is missing: it fails with
// ErrHomeServed if the home's control socket answers, with an error
// matching fs.ErrNotExist if dir does not exist.
func LockHome(dir string) (unlock func(), err error) {
	if _, err := os.Stat(dir); err != nil {
		return nil, err
	}
	c, err := net.DialTimeout("unix", filepath.Join(dir, ControlSocketName), time.Second)
	if err == nil {
		c.Close()
		return nil, ErrHomeServed
	}
	return func() {}, nil
}
