package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"

	"github.com/meerkatd/meerkatd/comms/control"
	"github.com/meerkatd/meerkatd/comms/node"
	"github.com/meerkatd/meerkatd/config"
	"github.com/meerkatd/meerkatd/mcpserver"
)

// runMCP serves MCP on stdin/stdout: attached to the home's daemon if one
// runs, else with the node in this process for as long as stdin is open.
func runMCP(e *env, args []string) error {
	flags := e.newFlags("mcp")
	homeFlag := e.homeFlag(flags)
	config.LogFlags(flags) // stdout carries the protocol: logs go to stderr
	if err := parseNoArgs(e, flags, args); err != nil {
		return err
	}
	overrides, err := settings(flags)
	if err != nil {
		return err
	}
	h, err := e.openHome(*homeFlag, true, overrides)
	if err != nil {
		return err
	}
	log := node.NewLogger(e.stderr, h.Config.Log)
	e.warnUnknownEnv(log)
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	dir, err := e.runtimeDir()
	if err != nil {
		log.Warn("not announced for local discovery", "err", err)
	}
	sess, err := control.Attach(ctx, h, control.HostOptions{Logger: log, RuntimeDir: dir})
	if err != nil {
		return err
	}
	defer sess.Close()
	if sess.Serving() {
		log.Info("running the node in this process", "home", h.Dir)
	} else {
		log.Info("attached to the node serving the home", "home", h.Dir)
	}
	s := mcpserver.New(sess, mcpserver.Options{
		Version: buildVersion(),
		Logger:  log,
		// [mcp] pairing, as this process reads the home's configuration
		// (file and environment), also when attached to a daemon.
		NoPairing: !h.Config.MCP.PairingOn(),
		// agent.notify_interval_ms, likewise (slice G).
		NotifyInterval: h.Config.Agent.NotifyInterval(),
	})
	return s.ServeStdio(ctx, e.stdin, e.stdout)
}
