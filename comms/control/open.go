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

// DaemonDespite returns the daemon of the home in dir when one answers
// although the home cannot be opened for cfgErr, a bad_config error (a
// meerkatd.toml cut short by an edit, a file others may write): the
// daemon runs on the configuration it read when it started, and a
// command that only asks it (status above all, a health check) need not
// fail. The problem is written to warn. Without a daemon, or for another
// error, it returns cfgErr.
func DaemonDespite(dir string, cfgErr error, warn io.Writer) (*Backend, error) {
	if node.CodeOf(cfgErr) != node.CodeBadConfig {
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
