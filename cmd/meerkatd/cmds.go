package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/meerkatd/meerkatd/bench"
	"github.com/meerkatd/meerkatd/comms/control"
	"github.com/meerkatd/meerkatd/comms/node"
	"github.com/meerkatd/meerkatd/config"
	"github.com/meerkatd/meerkatd/identity"
	"github.com/meerkatd/meerkatd/internal/completion"
	"github.com/meerkatd/meerkatd/internal/sdnotify"
	"github.com/meerkatd/meerkatd/internal/systemdunit"
)

// commandHelp is more about a command than its usage line says.
var commandHelp = map[string]string{
	"service":    systemdunit.Help,
	"completion": completion.Help("meerkatd"),
	"bench":      bench.Help,
	"search":     searchHelp,    // slice C: search
	"broadcast":  broadcastHelp, // broadcast and tasks slice
	"task":       taskHelp,
	"send": `A direct send is one attempt: it returns once the peer acknowledged it,
or fails (exit 3). --reliable stores it in the outbox first; the daemon
retries it until the peer acknowledges it or its time-to-live passes.
A response must answer a request this node received from that peer,
and a request can be answered finally (completed, failed) only once.
--interrupt marks a message or request handling_mode "steer": the
peer's agent reads it before its queued items.
Without a daemon the command runs the node itself for the send.
With --wait, an accepted response is progress: the wait goes on for the
final one, and then every response is printed. --deadline (30s, or an RFC 3339
time; needs the daemon) times the request out if no final response has
come by then: see meerkatd requests.
--idempotency-key KEY makes a retry safe: a send with a key used before
(within agent.idempotency_window_secs, also after a restart) prints the
first send's result and sends nothing; the key with other arguments fails.
meerkatd sent ID shows what became of a send.`,
	"sent": `With IDs, shows each one's state; without, the newest sends (--peer,
--limit). States: queued (in the outbox, waiting for its next attempt),
in_flight, acked (the peer acknowledged it), written (a response),
dead (a reliable send given up on: see meerkatd deadletters), failed (a
direct send whose one attempt failed), answered (a request with a final
response, named in DETAIL), unknown (no record: not sent from this home,
or older than agent.sent_history_hours). "accepted" responses are
progress: the request stays acked. Without a daemon the home's database
is read.`,
	"tell":     tellHelp,
	"requests": lifecycleHelp,
	"cancel":   lifecycleHelp,
	"inbox": `Items are listed by class, then oldest first: system (notices of this
node: a dead letter, a peer's breaker opened, a pairing), user (notes
added with meerkatd tell), interrupt (sent with --interrupt, or
handling_mode "steer"), broadcast, normal; --order arrival lists them
oldest first, classes aside. Each item's line ends with its class.
They come a page at a time (--page per call to the node, all pages
unless --limit is given), and stay in the inbox until acknowledged:
--ack acknowledges each page once it is printed. Without --ack, a
priority listing longer than a page may stop early (it says so): the
items of higher classes that came first are shown once, and the rest
follow once they are acknowledged, or with --order arrival. With no
daemon running, the home's database is read (read only; --ack needs
the daemon). Text from peers is shown with control characters escaped.`,
	"peers": `ADDR is where the peer listens: uds:///abs/path.sock on this host,
tls://host[:port] for a meerkatd node over TCP (TLS 1.3; the connection
accepts only the peer's KEY), or tcp://host[:port] for a peer that speaks
only the plaintext reference protocol (refused with comms.tcp_plaintext =
"refuse"). The port defaults to 4200; IPv6 literals go in brackets.`,
	"release": releaseHelp, // slice G
	"status": `Exits 0 when a node (meerkatd run, or meerkatd mcp running the node
itself) serves the home; otherwise it shows what is stored on disk and
exits 5. --wait 10s first waits up to ten seconds for a node to serve the
home, so a script can go on once a daemon it started is ready.`,
}

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
	flags := e.newFlags("id")
	homeFlag := e.homeFlag(flags)
	asJSON := flags.Bool("json", false, "print JSON")
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
	if ls, err := h.Config.Resolve(h.Dir); err == nil {
		for _, a := range ls.All() {
			listen = append(listen, a.String())
		}
	}
	id := h.Key.ID()
	self := node.Self{Name: h.Config.Name, PubKey: id.String(), PeerUUID: id.UUID().String(), Home: h.Dir, Listen: listen}
	if asJSON {
		return printJSON(e.stdout, self)
	}
	fmt.Fprintf(e.stdout, "name       %s\npubkey     %s\npeer_uuid  %s\nhome       %s\n", self.Name, self.PubKey, self.PeerUUID, self.Home)
	for _, l := range listen {
		fmt.Fprintf(e.stdout, "listen     %s\n", l)
	}
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
	keyPath := filepath.Join(dir, identity.KeyFile)
	if _, err := os.Stat(keyPath); err == nil && !*force {
		return fmt.Errorf("%s already holds an identity; use --force to replace it (peers that trust the old key will refuse this node)", keyPath)
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	kp, err := identity.GenerateKeypair()
	if err != nil {
		return err
	}
	if err := kp.Save(dir); err != nil {
		return err
	}
	if _, err := node.InitHome(dir, ""); err != nil {
		return err
	}
	h, err := e.openHome(dir, false, node.OpenOptions{})
	if err != nil {
		return err
	}
	return e.printIdentity(h, *asJSON)
}

func runPeers(e *env, args []string) error {
	sub, args := splitSub(args)
	flags := e.newFlags("peers")
	homeFlag := e.homeFlag(flags)
	asJSON := flags.Bool("json", false, "print JSON")
	meta := flags.String("meta", "", "with add: a JSON `object` stored with the peer")
	alsoNATS := flags.Bool("nats", false, "with add: the peer is also reachable through NATS, tried when ADDR cannot be connected to (ADDR nats: means only through NATS)")
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
		err = wantArgs(pos, 1, "NAME")
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
		return e.withBackend(h.Dir, 30*time.Second, func(ctx context.Context, b *backend) error {
			peers, err := b.Peers(ctx)
			if err != nil {
				return err
			}
			if *asJSON {
				return printJSON(e.stdout, peers)
			}
			if len(peers) == 0 {
				fmt.Fprintln(e.stderr, "no trusted peers; add one with: meerkatd peers add NAME KEY ADDR")
				return nil
			}
			tw := tabwriter.NewWriter(e.stdout, 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "NAME\tPUBKEY\tADDR\tLAST SEEN\tCARD")
			for _, p := range peers {
				addr := safeText(p.Addr, "")
				if p.NATS {
					addr += " or nats:"
				}
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", p.Name, p.PubKey, addr, timeText(p.LastSeen), cardColumn(p.Card))
			}
			return tw.Flush()
		})
	case "add":
		p, err := node.AddPeer(h, pos[0], pos[1], pos[2], *alsoNATS, *meta)
		if err != nil {
			return err
		}
		if *asJSON {
			return printJSON(e.stdout, p)
		}
		via := ""
		if p.NATS {
			via = " (or through NATS)"
		}
		fmt.Fprintf(e.stdout, "added %s %s %s%s\n", p.Name, p.PubKey, p.Addr, via)
		return nil
	}
	if err := node.RemovePeer(h, pos[0]); err != nil { // remove
		return err
	}
	if *asJSON {
		return printJSON(e.stdout, map[string]string{"removed": pos[0]})
	}
	fmt.Fprintf(e.stdout, "removed %s\n", pos[0])
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
	if asJSON {
		if as == nil {
			as = []node.Announcement{}
		}
		return printJSON(e.stdout, as)
	}
	if len(as) == 0 {
		fmt.Fprintln(e.stderr, "no other running nodes on this host")
		return nil
	}
	tw := tabwriter.NewWriter(e.stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "NAME\tKEY\tADDRESS\tPID")
	for _, a := range as {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d\n", safeText(a.Name, ""), a.Key, safeText(a.Addr, ""), a.PID)
	}
	return tw.Flush()
}

func runConfig(e *env, args []string) error {
	sub, args := splitSub(args)
	flags := e.newFlags("config")
	homeFlag := e.homeFlag(flags)
	asJSON := flags.Bool("json", false, "print JSON")
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
	path, err := node.CheckConfig(dir, e.lookupEnv, environ, "MEERKAT_HOME")
	if err != nil {
		return err
	}
	if *asJSON {
		return printJSON(e.stdout, map[string]any{"ok": true, "config": path})
	}
	fmt.Fprintf(e.stdout, "ok: %s\n", path)
	return nil
}

func runDaemon(e *env, args []string) error {
	flags := e.newFlags("run")
	homeFlag := e.homeFlag(flags)
	config.ListenFlags(flags)
	config.LogFlags(flags)
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
	hup := make(chan os.Signal, 1) // before the node starts: an early SIGHUP must not kill it
	signal.Notify(hup, syscall.SIGHUP)
	defer signal.Stop(hup)
	sv, err := e.serveHome(h, log)
	if err != nil {
		return err
	}
	n := sv.Node
	n.LogStart(log, "meerkatd running", buildVersion())
	notify := e.getenv("NOTIFY_SOCKET") // every listener accepts connections now
	if err := sdnotify.Notify(notify, sdnotify.Ready(os.Getpid())); err != nil {
		log.Warn("could not tell the service manager the node is ready", "err", err)
	}
	for {
		select {
		case <-hup:
			log.Info("SIGHUP: reloading trusted peers")
			n.ReloadTrust()
			continue
		case <-ctx.Done():
		}
		break
	}
	stop() // a second SIGINT or SIGTERM now kills the process at once
	log.Info("shutting down")
	if err := sdnotify.Notify(notify, sdnotify.Stopping); err != nil {
		log.Warn("could not tell the service manager the node is stopping", "err", err)
	}
	sv.Close()
	log.Info("stopped")
	return nil
}

// serveHome runs the node of h with its control socket, announced for
// local discovery.
func (e *env) serveHome(h *node.Home, log *slog.Logger) (*control.Served, error) {
	dir, err := e.runtimeDir()
	if err != nil {
		log.Warn("not announced for local discovery", "err", err)
	}
	sv, err := control.ServeHome(h, control.HostOptions{Logger: log, RuntimeDir: dir})
	if errors.Is(err, control.ErrServing) {
		return nil, fmt.Errorf("a node already serves %s (meerkatd status --home %s)", h.Dir, h.Dir)
	}
	return sv, err
}

func runStatus(e *env, args []string) error {
	flags := e.newFlags("status")
	homeFlag := e.homeFlag(flags)
	asJSON := flags.Bool("json", false, "print JSON")
	wait := flags.Duration("wait", 0, "wait up to `duration` for a node to serve the home (a daemon just started, say)")
	if err := parseNoArgs(e, flags, args); err != nil {
		return err
	}
	if dir, err := e.homeDir(*homeFlag); err == nil && *wait > 0 {
		control.WaitServing(filepath.Join(dir, node.ControlSocketName), *wait)
	}
	var s node.Status
	if err := e.withBackend(*homeFlag, 30*time.Second, func(ctx context.Context, b *backend) (err error) {
		s, err = b.Status(ctx)
		return err
	}); err != nil {
		return err
	}
	var notRunning error
	if !s.Running {
		notRunning = &node.Error{Code: node.CodeNoDaemon, Msg: "no daemon is running for " + s.Home + " (start it with: meerkatd run --home " + s.Home + ")"}
	}
	if *asJSON {
		if err := printJSON(e.stdout, s); err != nil {
			return err
		}
		return jsonShown(notRunning)
	}
	state := "not running: showing what is stored on disk"
	if s.Running {
		state = "running since " + s.StartedAt.Local().Format(time.RFC3339)
	}
	fmt.Fprintf(e.stdout, "node       %s\nname       %s\npubkey     %s\nhome       %s\n", state, s.Name, s.PubKey, s.Home)
	for _, l := range s.Listen {
		fmt.Fprintf(e.stdout, "listen     %s\n", l)
	}
	fmt.Fprintf(e.stdout, "peers      %d\ninbox      %d (%d pending)\n", s.Peers, s.Inbox, s.Pending)
	if s.Running {
		fmt.Fprintf(e.stdout, "accepted   %d\nacks sent  %d\nconns      %d\n", s.Accepted, s.AcksSent, s.Connections)
		for reason, k := range s.Rejected {
			fmt.Fprintf(e.stdout, "rejected   %s %d\n", reason, k)
		}
	}
	fmt.Fprintf(e.stdout, "outbox     %d\ndead       %d\n", s.Outbox, s.DeadLetters)
	if s.DBBytes > 0 {
		fmt.Fprintf(e.stdout, "database   %d bytes\n", s.DBBytes)
	}
	if s.NATS != nil {
		fmt.Fprintf(e.stdout, "nats       %s\n", safeLine(s.NATS.Summary()))
	}
	for _, p := range s.SendPeers {
		fmt.Fprintf(e.stdout, "peer       %s: %d queued, breaker %s", orKey(p.Peer, p.PubKey), p.Queued, breakerText(p))
		if p.LastError != "" {
			fmt.Fprintf(e.stdout, ", last error: %s", safeLine(p.LastError))
		}
		fmt.Fprintln(e.stdout)
	}
	for _, g := range s.LoopGuards { // slice G
		fmt.Fprintf(e.stdout, "held       %s: loop guard, %d fast replies in a row, until %s (meerkatd release)\n", orKey(g.Peer, g.PubKey), g.Exchanges, timeText(g.HeldUntil))
	}
	return notRunning
}

// configShow prints every key's value in effect and where it came from.
func (e *env) configShow(dir string, overrides node.OpenOptions, asJSON bool) error {
	if err := node.CheckHome(dir); err != nil {
		return err
	}
	overrides.LookupEnv = e.lookupEnv
	cfg, src, err := node.LoadConfig(dir, overrides)
	if err != nil {
		return err
	}
	for _, err := range e.unknownEnv() {
		fmt.Fprintf(e.stderr, "warning: %s\n", strings.TrimPrefix(err.Error(), "config: "))
	}
	settings := config.Settings(&cfg, src)
	if asJSON {
		return printJSON(e.stdout, map[string]any{"config": filepath.Join(dir, config.FileName), "settings": settings})
	}
	tw := tabwriter.NewWriter(e.stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "KEY\tVALUE\tSOURCE")
	for _, s := range settings {
		fmt.Fprintf(tw, "%s\t%s\t%s\n", s.Key, safeText(s.Value, ""), s.Source)
	}
	return tw.Flush()
}
