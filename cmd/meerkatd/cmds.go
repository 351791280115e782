package main

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/meerkatd/meerkatd/comms/control"
	"github.com/meerkatd/meerkatd/comms/node"
	"github.com/meerkatd/meerkatd/comms/node/nodetext"
	"github.com/meerkatd/meerkatd/config"
	"github.com/meerkatd/meerkatd/identity"
	"github.com/meerkatd/meerkatd/internal/flagdoc"
	"github.com/meerkatd/meerkatd/mcpserver"
	"github.com/meerkatd/meerkatd/trust"
)

func runInit(e *env, args []string) error {
	flags := e.newFlags("init")
	homeFlag := e.homeFlag(flags)
	name := flags.String("name", "", "node `name` (default \"meerkat\")")
	asJSON := flags.Bool("json", false, "print JSON")
	if err := parseNoArgs(e, flags, args); err != nil {
		return err
	}
	dir, err := e.homeDir(*homeFlag)
	if err != nil {
		return err
	}
	created, err := node.InitHome(dir, *name)
	if err != nil {
		return err
	}
	if len(created) == 0 {
		fmt.Fprintf(e.stderr, "%s already initialised\n", dir)
	} else {
		fmt.Fprintf(e.stderr, "created %s in %s\n", strings.Join(created, ", "), dir)
	}
	h, err := e.openHome(dir, false, node.OpenOptions{})
	if err != nil {
		return err
	}
	if *name != "" && *name != h.Config.Name && !slices.Contains(created, config.FileName) {
		fmt.Fprintf(e.stderr, "warning: --name %s not used: %s exists and names the node %s (edit it, or use meerkatd config show)\n", *name, filepath.Join(dir, config.FileName), h.Config.Name)
	}
	if err := e.printIdentity(h, *asJSON); err != nil || *asJSON || len(created) == 0 {
		return err
	}
	e.printNextSteps(h)
	return nil
}

// printNextSteps tells the user of a new home what to do with it.
func (e *env) printNextSteps(h *node.Home) {
	home := "'" + strings.ReplaceAll(h.Dir, "'", `'\''`) + "'" // quoted for the shell
	fmt.Fprintf(e.stdout, "\nnext steps (other nodes trust this one by the pubkey above):\n"+
		"  run it:  meerkatd run --home %[1]s   (or as a service: meerkatd service install --home %[1]s)\n"+
		"  pair on this host (both running):  meerkatd pair offer --local --home %[1]s\n"+
		"    then on the other node:  meerkatd pair accept --local %[2]s --home OTHER_HOME\n"+
		"  pair with any node:  meerkatd pair offer --home %[1]s; on the other: meerkatd pair accept LINE\n", home, h.Config.Name)
}

func runID(e *env, args []string) error {
	flags, homeFlag, asJSON := e.newCmd("id", "")
	if err := parseNoArgs(e, flags, args); err != nil {
		return err
	}
	h, err := e.openHome(*homeFlag, false, node.OpenOptions{})
	if err != nil {
		return err
	}
	return e.printIdentity(h, *asJSON)
}

func (e *env) printIdentity(h *node.Home, asJSON bool) error {
	listen := []string{}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if st, err := control.NewClient(h.ControlPath()).Status(ctx); err == nil && st.Running {
		listen = st.Listen // the running daemon's, its --listen flags included
	} else if ls, err := h.Config.Resolve(h.Dir); err == nil {
		for _, a := range ls.All() {
			listen = append(listen, a.String())
		}
	}
	id := h.Key.ID()
	self := node.Self{Name: h.Config.Name, PubKey: id.String(), PeerUUID: id.UUID().String(), Home: h.Dir, Listen: listen}
	if asJSON {
		return nodetext.PrintJSON(e.stdout, self)
	}
	nodetext.Self(e.stdout, self)
	return nil
}

func runKeygen(e *env, args []string) error {
	flags := e.newFlags("keygen")
	homeFlag := e.homeFlag(flags)
	force := flags.Bool("force", false, "replace an existing identity (peers that trust the old key will refuse this node)")
	asJSON := flags.Bool("json", false, "print JSON")
	if err := parseNoArgs(e, flags, args); err != nil {
		return err
	}
	dir, err := e.homeDir(*homeFlag)
	if err != nil {
		return err
	}
	old, oldErr := identity.LoadKeypair(dir) // the identity --force replaces, if any
	if err := node.Keygen(dir, *force); err != nil {
		return err
	}
	h, err := e.openHome(dir, false, node.OpenOptions{})
	if err != nil {
		return err
	}
	if oldErr == nil && old.ID() != h.Key.ID() {
		fmt.Fprintf(e.stderr, "meerkatd keygen: replaced the identity %s: peers that trust it refuse this node until they trust the new key (pair again, or meerkatd peers add on their side)\n", old.ID())
	}
	return e.printIdentity(h, *asJSON)
}

func runPeers(e *env, args []string) error {
	sub, args := flagdoc.SplitSub(args)
	flags, homeFlag, asJSON := e.newCmd("peers", "")
	meta := flags.String("meta", "", "with add: a JSON `object` stored with the peer")
	alsoNATS := flags.Bool("nats", false, "with add: the peer is also reachable through NATS, tried when ADDR cannot be connected to (ADDR nats: means only through NATS)")
	replace := flags.Bool("replace", false, "with add: NAME is trusted with KEY already; it is reached at ADDR (and --nats) from now on, its --meta kept unless given")
	pos, err := parseArgs(e, flags, args)
	if err != nil {
		return err
	}
	switch sub {
	case "list", "discover":
		err = wantArgs(pos, 0, "no arguments")
	case "add":
		err = wantArgs(pos, 3, "NAME KEY ADDR")
	case "remove":
		err = wantArgs(pos, 1, "NAME, KEY or UUID")
	case "":
		err = fmt.Errorf("%w: want a subcommand: list, add, remove or discover", errUsage)
	default:
		err = fmt.Errorf("%w: unknown peers subcommand %q (want list, add, remove or discover)", errUsage, sub)
	}
	if err != nil {
		return err
	}
	h, err := e.openHome(*homeFlag, false, node.OpenOptions{})
	if err != nil {
		return err
	}
	switch sub {
	case "discover":
		return e.peersDiscover(h, *asJSON)
	case "list":
		peers, err := call(e, h.Dir, func(ctx context.Context, b node.API) ([]node.Peer, error) { return b.Peers(ctx) })
		if err != nil {
			return err
		}
		if _, err := trust.LoadOrEmpty(filepath.Join(h.Dir, trust.FileName)); err != nil { // a daemon answered with what it kept
			fmt.Fprintf(e.stderr, "warning: %s does not load (%s): these are the peers the running node kept\n", trust.FileName, node.UserText(err))
		}
		return nodetext.List(e.stdout, e.stderr, *asJSON, peers, "no trusted peers; add one with: meerkatd peers add NAME KEY ADDR", nodetext.Peers)
	case "add":
		add, verb := control.AddPeer, "added"
		if *replace {
			add, verb = control.ReplacePeer, "changed"
		}
		p, err := add(h, pos[0], pos[1], pos[2], *alsoNATS, *meta)
		if done, err := e.jsonDone(*asJSON, p, err); done {
			return err
		}
		via := map[bool]string{true: " (or through NATS)"}[p.NATS]
		fmt.Fprintf(e.stdout, "%s %s %s %s%s\n", verb, p.Name, p.PubKey, p.Addr, via)
		return nil
	}
	p, err := control.RemovePeer(h, pos[0]) // remove
	if done, err := e.jsonDone(*asJSON, map[string]string{"removed": p.Name, "pubkey": p.PubKey}, err); done {
		return err
	}
	fmt.Fprintf(e.stdout, "removed %s %s\n", nodetext.Escape(p.Name, ""), p.PubKey)
	return nil
}

func (e *env) peersDiscover(h *node.Home, asJSON bool) error {
	dir, err := e.runtimeDir()
	if err != nil {
		return err
	}
	as, err := node.Discover(dir, h)
	if err != nil {
		return err
	}
	return nodetext.List(e.stdout, e.stderr, asJSON, as, "no other running nodes on this host", nodetext.Announcements)
}

func runConfig(e *env, args []string) error {
	sub, args := flagdoc.SplitSub(args)
	flags, homeFlag, asJSON := e.newCmd("config", "")
	config.ListenFlags(flags)
	config.LogFlags(flags)
	if err := parseNoArgs(e, flags, args); err != nil {
		return err
	}
	overrides, err := settings(flags)
	if err != nil {
		return err
	}
	if sub != "check" && sub != "show" {
		return fmt.Errorf("%w: want: config check, or config show", errUsage)
	}
	if sub == "check" && len(overrides.Overrides) > 0 {
		return fmt.Errorf("%w: config check takes no setting flags (config show does)", errUsage)
	}
	dir, err := e.homeDir(*homeFlag)
	if err != nil {
		return err
	}
	if sub == "show" {
		return e.configShow(dir, overrides, *asJSON)
	}
	var environ []string
	if e.environ != nil {
		environ = e.environ()
	}
	ck, err := node.CheckConfig(dir, e.lookupEnv, environ, "MEERKAT_HOME")
	out := map[string]any{"ok": true, "config": ck.Config}
	if ck.Note != "" {
		out["note"] = ck.Note
	}
	if done, err := e.jsonDone(*asJSON, out, err); done {
		return err
	}
	absent := ""
	if _, err := os.Stat(ck.Config); errors.Is(err, fs.ErrNotExist) {
		absent = " (absent: the defaults apply)"
	}
	fmt.Fprintf(e.stdout, "ok: %s%s\n", ck.Config, absent)
	if ck.Note != "" {
		fmt.Fprintf(e.stdout, "note: %s\n", ck.Note)
	}
	return nil
}

func runDaemon(e *env, args []string) error {
	h, log, ctx, stop, err := e.hostHome("run", args)
	if err != nil {
		return err
	}
	defer stop()
	hup := make(chan os.Signal, 1) // before the node starts: an early SIGHUP must not kill it
	signal.Notify(hup, syscall.SIGHUP)
	defer signal.Stop(hup)
	dir, err := e.runtimeDir()
	if err != nil {
		log.Warn("not announced for local discovery", "err", err)
	}
	return control.RunDaemon(ctx, h, control.DaemonOptions{
		HostOptions: control.HostOptions{Logger: log, RuntimeDir: dir}, Version: buildVersion(), Reload: hup,
		NotifySocket: e.getenv("NOTIFY_SOCKET"),
		Stopping:     stop, // a second SIGINT or SIGTERM now kills the process at once
	})
}

func runStatus(e *env, args []string) error {
	flags, homeFlag, asJSON := e.newCmd("status", "")
	wait := flags.Duration("wait", 0, "wait up to `duration` for a node to serve the home (a daemon just started, say)")
	if err := parseNoArgs(e, flags, args); err != nil {
		return err
	}
	if *wait < 0 {
		return fmt.Errorf("%w: --wait must not be negative", errUsage)
	}
	if dir, err := e.homeDir(*homeFlag); err == nil && *wait > 0 {
		control.WaitServing(filepath.Join(dir, node.ControlSocketName), *wait)
	}
	s, err := call(e, *homeFlag, func(ctx context.Context, b node.API) (node.Status, error) { return b.Status(ctx) })
	if err != nil {
		return err
	}
	var notRunning error
	if !s.Running {
		notRunning = &node.Error{Code: node.CodeNoDaemon, Msg: "no daemon is running for " + s.Home + " (start it with: meerkatd run --home " + s.Home + ")"}
	}
	if *asJSON {
		return e.printPartial(s, true, notRunning)
	}
	nodetext.Status(e.stdout, s)
	return notRunning
}

// configShow prints every key's value in effect and where it came from,
// also when they do not validate (then it fails after printing them).
func (e *env) configShow(dir string, overrides node.OpenOptions, asJSON bool) error {
	overrides.LookupEnv = e.lookupEnv
	settings, err := node.ShowConfig(dir, overrides)
	if settings == nil {
		return err
	}
	for _, err := range e.unknownEnv() {
		fmt.Fprintf(e.stderr, "warning: %s\n", strings.TrimPrefix(err.Error(), "config: "))
	}
	if asJSON {
		return e.printPartial(map[string]any{"config": filepath.Join(dir, config.FileName), "settings": settings}, true, err) // with "error" when a value is bad
	}
	return cmp.Or(nodetext.Table(e.stdout, "KEY\tVALUE\tSOURCE", settings, func(s config.Setting) []any { return []any{s.Key, nodetext.Escape(s.Value, ""), s.Source} }), err)
}

// runMCP serves MCP on stdin/stdout: attached to the home's daemon if one
// runs, else with the node in this process for as long as stdin is open.
func runMCP(e *env, args []string) error {
	h, log, ctx, stop, err := e.hostHome("mcp", args)
	if err != nil {
		return err
	}
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

// hostHome is what run and mcp share: their flags (and run's listen
// flags), the home opened (or created) with them, a logger as its
// configuration says (to stderr: mcp's stdout carries the protocol) and
// a context that ends on SIGINT or SIGTERM (stop it).
func (e *env) hostHome(name string, args []string) (*node.Home, *slog.Logger, context.Context, context.CancelFunc, error) {
	flags := e.newFlags(name)
	homeFlag := e.homeFlag(flags)
	if name == "run" {
		config.ListenFlags(flags)
	}
	config.LogFlags(flags)
	if err := parseNoArgs(e, flags, args); err != nil {
		return nil, nil, nil, nil, err
	}
	overrides, err := settings(flags)
	if err != nil {
		return nil, nil, nil, nil, err
	}
	h, err := e.openHome(*homeFlag, true, overrides)
	if err != nil {
		return nil, nil, nil, nil, err
	}
	log := node.NewLogger(e.stderr, h.Config.Log)
	e.warnUnknownEnv(log)
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM) // SIGHUP reloads
	return h, log, ctx, stop, nil
}

// interruptible returns a context that SIGINT, SIGTERM or SIGHUP (a closed terminal) cancels.
func interruptible() (context.Context, context.CancelFunc) {
	return signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM, syscall.SIGHUP)
}

// interruptibleIf is interruptible if on, else a context no signal ends.
func interruptibleIf(on bool) (context.Context, context.CancelFunc) {
	if !on {
		return context.WithCancel(context.Background())
	}
	return interruptible()
}
