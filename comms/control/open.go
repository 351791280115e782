package control

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"path/filepath"
	"time"

	"github.com/meerkatd/meerkatd/comms/node"
	"github.com/meerkatd/meerkatd/internal/filemode"
)

// Backend is the node a one-shot command acts on: the home's daemon,
// through its control socket, or a node started in this process.
type Backend struct {
	node.API
	Daemon bool       // a daemon serves the home
	local  *node.Node // nil when attached to a daemon
}

// Close stops the node started in this process, if any.
func (b *Backend) Close() {
	if b.local != nil {
		b.local.Close()
	}
}

// Announce writes the node started in this process into the discovery
// directory dir for as long as the command runs, so that the user's
// other nodes find it (pair offer --local without a daemon); a daemon
// announces itself. The returned function removes the entry.
func (b *Backend) Announce(dir string) (func(), error) {
	if b.local == nil {
		return func() {}, nil
	}
	return b.local.Announce(dir)
}

// DaemonDespite returns the daemon of the home in dir when one answers
// although the home's configuration cannot be loaded for cfgErr, a
// bad_config error (a meerkat.toml cut short by an edit under way): the
// daemon runs on the configuration it read when it started, and a
// command that goes through it (status above all, a health check) need
// not fail. The problem is written to warn. Without a daemon, for another
// error, or for files or directories others could change (whoever can
// replace the home's files could put their own socket in the daemon's
// place), it returns cfgErr.
func DaemonDespite(dir string, cfgErr error, warn io.Writer) (*Backend, error) {
	if node.CodeOf(cfgErr) != node.CodeBadConfig || errors.Is(cfgErr, filemode.ErrUnsafe) {
		return nil, cfgErr
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	c, err := Dial(ctx, filepath.Join(dir, node.ControlSocketName))
	if err != nil {
		return nil, cfgErr
	}
	fmt.Fprintf(warn, "warning: %v; the daemon answering runs with the configuration it read when it started\n", cfgErr)
	return &Backend{API: c, Daemon: true}, nil
}

// Open returns h's daemon if one answers, else a node started in this
// process in mode (ModeReplies for a command that waits for answers),
// logging to log. A control socket that is there but may not be used
// (another user's) is an error, not a reason to act without the daemon.
func Open(h *node.Home, mode node.Mode, log *slog.Logger) (*Backend, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	c, err := Dial(ctx, h.ControlPath())
	cancel()
	if err == nil {
		return &Backend{API: c, Daemon: true}, nil
	}
	if !errors.Is(err, ErrNoDaemon) {
		return nil, err
	}
	n, err := node.Start(h, node.Options{Mode: mode, Logger: log})
	if err != nil {
		return nil, err
	}
	return &Backend{API: n, local: n}, nil
}
