package control

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"

	"github.com/meerkatd/meerkatd/comms/node"
	"github.com/meerkatd/meerkatd/internal/sdnotify"
)

// DaemonOptions are RunDaemon's.
type DaemonOptions struct {
	HostOptions
	Version string // logged at start
	// Reload reloads the trusted peers on each value (SIGHUP).
	Reload <-chan os.Signal
	// NotifySocket is the service manager's socket (NOTIFY_SOCKET): it is
	// told when the node is ready and when it stops. "": none.
	NotifySocket string
	// Stopping is called once ctx has ended, before the node stops.
	Stopping func()
}

// RunDaemon serves h as the daemon until ctx ends (ServeHome), then stops
// the node, finishing acks in flight.
func RunDaemon(ctx context.Context, h *node.Home, o DaemonOptions) error {
	sv, err := ServeHome(h, o.HostOptions)
	if errors.Is(err, ErrServing) {
		if _, serr := os.Lstat(h.ControlPath()); errors.Is(serr, fs.ErrNotExist) {
			return fmt.Errorf("a node already serves %s (its process holds the home), but its control socket %s is not there: it may be starting or stopping (try again); if this lasts, no command reaches it: stop that process (its service, or kill it) and start again", h.Dir, h.ControlPath())
		}
		return fmt.Errorf("a node already serves %s (meerkatd status --home %s)", h.Dir, h.Dir)
	}
	if err != nil {
		return err
	}
	log := o.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	sv.Node.LogStart(log, "meerkatd running", o.Version)
	// Every listener accepts connections now.
	if err := sdnotify.Notify(o.NotifySocket, sdnotify.Ready(os.Getpid())); err != nil {
		log.Warn("could not tell the service manager the node is ready", "err", err)
	}
	for done := false; !done; {
		select {
		case <-o.Reload:
			log.Info("SIGHUP: reloading trusted peers and spaces")
			sv.Node.ReloadTrust()
			if keys, err := h.ConfigChanges(); err != nil {
				log.Warn("meerkat.toml does not load; the daemon keeps the configuration it started with", "err", err)
			} else if len(keys) > 0 {
				log.Warn("meerkat.toml changed; restart the daemon to apply it (SIGHUP reloads the trusted peers and spaces only)", "keys", keys)
			}
		case <-ctx.Done():
			done = true
		}
	}
	if o.Stopping != nil {
		o.Stopping()
	}
	log.Info("shutting down")
	if err := sdnotify.Notify(o.NotifySocket, sdnotify.Stopping); err != nil {
		log.Warn("could not tell the service manager the node is stopping", "err", err)
	}
	sv.Close()
	log.Info("stopped")
	return nil
}
