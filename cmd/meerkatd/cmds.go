package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"runtime/pprof"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/meerkatd/meerkatd/config"
	"github.com/meerkatd/meerkatd/identity"
	"github.com/meerkatd/meerkatd/transport"
	"github.com/meerkatd/meerkatd/trust"
)

// parseArgs parses flags that may appear anywhere among the positional
// arguments (meerkatd send message bob hi --home X) and returns the
// positional ones.
func parseArgs(flags *flag.FlagSet, args []string) ([]string, error) {
	var pos []string
	for {
		if err := flags.Parse(args); err != nil {
			if errors.Is(err, flag.ErrHelp) {
				return nil, err
			}
			return nil, fmt.Errorf("%w: %v", errUsage, err)
		}
		args = flags.Args()
		if len(args) == 0 {
			return pos, nil
		}
		if args[0] == "--" {
			return append(pos, args[1:]...), nil
		}
		pos = append(pos, args[0])
		args = args[1:]
	}
}

// parseNoArgs parses flags and refuses positional arguments.
func parseNoArgs(flags *flag.FlagSet, args []string) error {
	pos, err := parseArgs(flags, args)
	if err != nil {
		return err
	}
	return wantArgs(pos, 0, "no arguments")
}

// wantArgs checks the number of positional arguments.
func wantArgs(pos []string, n int, names string) error {
	if len(pos) != n {
		return fmt.Errorf("%w: want %s, got %d argument(s)", errUsage, names, len(pos))
	}
	return nil
}

func printJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	enc.SetEscapeHTML(false)
	return enc.Encode(v)
}

// backendFor returns the daemon of h if one runs, else a node in this
// process (listening only if listen is set, to receive answers).
func (e *env) backendFor(h *home, listen bool) (backend, error) {
	if rb := dialControl(h); rb != nil {
		return rb, nil
	}
	log := e.warnLog()
	mode := nodeSendOnly
	if listen {
		mode = nodeReplies
	}
	n, err := startNode(h, log, mode)
	if err != nil {
		return nil, err
	}
	return &localBackend{n: n}, nil
}

// warnLog is the logger of a node a command runs in its own process.
func (e *env) warnLog() *slog.Logger {
	return slog.New(slog.NewTextHandler(e.stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
}

func runInit(e *env, args []string) error {
	flags := e.newFlags("init")
	homeFlag := flags.String("home", "", "node home `directory`")
	name := flags.String("name", "", "node `name` (default \"meerkat\")")
	if err := parseNoArgs(flags, args); err != nil {
		return err
	}
	dir, err := e.homeDir(*homeFlag)
	if err != nil {
		return err
	}
	created, err := initHome(dir, *name)
	if err != nil {
		return err
	}
	if len(created) == 0 {
		fmt.Fprintf(e.stderr, "%s already initialised\n", dir)
	} else {
		fmt.Fprintf(e.stderr, "created %s in %s\n", strings.Join(created, ", "), dir)
	}
	h, err := e.openHome(dir, nil)
	if err != nil {
		return err
	}
	return e.printIdentity(h, false)
}

func runID(e *env, args []string) error {
	flags := e.newFlags("id")
	homeFlag := flags.String("home", "", "node home `directory`")
	asJSON := flags.Bool("json", false, "print JSON")
	h, err := e.openNoArgs(flags, homeFlag, args)
	if err != nil {
		return err
	}
	return e.printIdentity(h, *asJSON)
}

func (e *env) printIdentity(h *home, asJSON bool) error {
	var listen []string
	if ls, err := h.cfg.Resolve(h.dir); err == nil {
		for _, a := range ls.All() {
			listen = append(listen, a.String())
		}
	}
	id := h.kp.ID()
	if asJSON {
		return printJSON(e.stdout, map[string]any{
			"name": h.cfg.Name, "pubkey": id.String(), "peer_uuid": id.UUID().String(), "home": h.dir, "listen": listen,
		})
	}
	fmt.Fprintf(e.stdout, "name       %s\npubkey     %s\npeer_uuid  %s\nhome       %s\n", h.cfg.Name, id, id.UUID(), h.dir)
	for _, l := range listen {
		fmt.Fprintf(e.stdout, "listen     %s\n", l)
	}
	return nil
}

func runKeygen(e *env, args []string) error {
	flags := e.newFlags("keygen")
	homeFlag := flags.String("home", "", "node home `directory`")
	force := flags.Bool("force", false, "replace an existing identity (peers that trust the old key will refuse this node)")
	if err := parseNoArgs(flags, args); err != nil {
		return err
	}
	dir, err := e.homeDir(*homeFlag)
	if err != nil {
		return err
	}
	keyPath := dir + string(os.PathSeparator) + identity.KeyFile
	if _, err := os.Stat(keyPath); err == nil && !*force {
		return fmt.Errorf("%s already holds an identity; use --force to replace it (peers that trust the old key will refuse this node)", keyPath)
	}
	kp, err := identity.GenerateKeypair()
	if err != nil {
		return err
	}
	if err := kp.Save(dir); err != nil {
		return err
	}
	h, err := e.openHome(dir, nil)
	if err != nil {
		return err
	}
	return e.printIdentity(h, false)
}

func runPeers(e *env, args []string) error {
	if len(args) == 0 {
		return fmt.Errorf("%w: want a subcommand: list, add, remove or discover", errUsage)
	}
	sub, args := args[0], args[1:]
	flags := e.newFlags("peers")
	homeFlag := flags.String("home", "", "node home `directory`")
	asJSON := flags.Bool("json", false, "print JSON (list)")
	meta := flags.String("meta", "", "a JSON `object` stored with the peer (add)")
	pos, err := parseArgs(flags, args)
	if err != nil {
		return err
	}
	h, err := e.openHome(*homeFlag, nil)
	if err != nil {
		return err
	}
	if sub == "discover" {
		if len(pos) > 0 {
			return fmt.Errorf("%w: peers discover takes no arguments", errUsage)
		}
		return runPeersDiscover(e, h, *asJSON)
	}
	list, err := trust.LoadOrEmpty(h.trustPath())
	if err != nil {
		return err
	}
	switch sub {
	case "list":
		if err := wantArgs(pos, 0, "no arguments"); err != nil {
			return err
		}
		peers := list.Peers()
		if *asJSON {
			type row struct {
				Name     string          `json:"name"`
				PubKey   string          `json:"pubkey"`
				PeerUUID string          `json:"peer_uuid"`
				Addr     string          `json:"addr"`
				Meta     json.RawMessage `json:"meta,omitempty"`
			}
			rows := []row{}
			for _, p := range peers {
				rows = append(rows, row{p.Name, p.ID.String(), p.ID.UUID().String(), p.Addr.String(), p.Meta})
			}
			return printJSON(e.stdout, rows)
		}
		if len(peers) == 0 {
			fmt.Fprintln(e.stderr, "no trusted peers; add one with: meerkatd peers add NAME KEY ADDR")
			return nil
		}
		tw := tabwriter.NewWriter(e.stdout, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "NAME\tPUBKEY\tADDR")
		for _, p := range peers {
			fmt.Fprintf(tw, "%s\t%s\t%s\n", p.Name, p.ID, p.Addr)
		}
		return tw.Flush()
	case "add":
		if err := wantArgs(pos, 3, "NAME KEY ADDR"); err != nil {
			return err
		}
		id, err := identity.ParsePeerID(pos[1])
		if err != nil {
			return fmt.Errorf("%w: key %q: %v", errUsage, pos[1], err)
		}
		addr, err := transport.ParseAddr(pos[2])
		if err != nil {
			return fmt.Errorf("%w: %v", errUsage, err)
		}
		if id == h.kp.ID() {
			return fmt.Errorf("%w: %s is this node's own key", errUsage, id)
		}
		p := trust.Peer{Name: pos[0], ID: id, Addr: addr}
		if *meta != "" {
			p.Meta = json.RawMessage(*meta)
		}
		if _, err := trust.Update(h.trustPath(), func(l *trust.List) (*trust.List, error) {
			next, err := l.With(p)
			if err != nil {
				return nil, fmt.Errorf("%w: %v", errUsage, err)
			}
			return next, nil
		}); err != nil {
			return err
		}
		fmt.Fprintf(e.stdout, "added %s %s %s\n", p.Name, p.ID, p.Addr)
		return nil
	case "remove":
		if err := wantArgs(pos, 1, "NAME"); err != nil {
			return err
		}
		if _, err := trust.Update(h.trustPath(), func(l *trust.List) (*trust.List, error) {
			next, err := l.Without(pos[0])
			if err != nil {
				return nil, &codedError{codeUnknownPeer, err.Error()}
			}
			return next, nil
		}); err != nil {
			return err
		}
		fmt.Fprintf(e.stdout, "removed %s\n", pos[0])
		return nil
	}
	return fmt.Errorf("%w: unknown peers subcommand %q (want list, add or remove)", errUsage, sub)
}

func runSend(e *env, args []string) error {
	if len(args) == 0 {
		return fmt.Errorf("%w: want message, request or response", errUsage)
	}
	sub, args := args[0], args[1:]
	flags := e.newFlags("send")
	homeFlag := flags.String("home", "", "node home `directory`")
	asJSON := flags.Bool("json", false, "print JSON")
	wait := flags.Duration("wait", 0, "with request: wait this `long` for the final response and print it")
	reliable := flags.Bool("reliable", false, "store it in the outbox first and retry until the peer acks it (see meerkatd outbox)")
	ttl := flags.Duration("ttl", 0, "with --reliable: move it to the dead letters if not acked within this `long` (default outbox.default_ttl_secs)")
	noWait := flags.Bool("no-wait", false, "with --reliable: return once it is stored, without waiting for the first attempt")
	pos, err := parseArgs(flags, args)
	if err != nil {
		return err
	}
	if !*reliable && (*ttl != 0 || *noWait) {
		return fmt.Errorf("%w: --ttl and --no-wait apply to --reliable sends", errUsage)
	}
	if *ttl < 0 {
		return fmt.Errorf("%w: --ttl must be positive", errUsage)
	}
	d := deliveryOpts{reliable: *reliable, ttl: *ttl, noWait: *noWait}
	switch sub {
	case "message":
		err = wantArgs(pos, 2, "PEER BODY")
	case "request":
		err = wantArgs(pos, 3, "PEER INTENT PARAMS_JSON")
	case "response":
		err = wantArgs(pos, 4, "PEER REQUEST_ID STATUS RESULT_JSON")
	default:
		err = fmt.Errorf("%w: unknown send kind %q (want message, request or response)", errUsage, sub)
	}
	if err != nil {
		return err
	}
	if *wait < 0 || *wait > 0 && sub != "request" {
		return fmt.Errorf("%w: --wait applies to requests only and must be positive", errUsage)
	}
	// JSON arguments are checked here, so a bad one is the same usage
	// error whether or not a daemon runs.
	switch {
	case sub == "request" && !json.Valid([]byte(pos[2])):
		return fmt.Errorf("%w: PARAMS_JSON %q is not valid JSON", errUsage, pos[2])
	case sub == "response" && !json.Valid([]byte(pos[3])):
		return fmt.Errorf("%w: RESULT_JSON %q is not valid JSON", errUsage, pos[3])
	}
	h, err := e.openHome(*homeFlag, nil)
	if err != nil {
		return err
	}
	b, err := e.backendFor(h, sub == "request" && *wait > 0)
	if err != nil {
		return err
	}
	defer b.close()
	ctx, cancel := context.WithTimeout(context.Background(), h.cfg.Comms.AckTimeout()+10*time.Second+*wait)
	defer cancel()
	var res sendResult
	switch sub {
	case "message":
		res, err = b.sendMessage(ctx, pos[0], pos[1], d)
	case "request":
		res, err = b.sendRequest(ctx, pos[0], pos[1], json.RawMessage(pos[2]), *wait, d)
	case "response":
		res, err = b.sendResponse(ctx, pos[0], pos[1], pos[2], json.RawMessage(pos[3]), d)
	}
	if err != nil && res.ID == "" {
		return err
	}
	if *asJSON {
		if perr := printJSON(e.stdout, res); perr != nil {
			return perr
		}
		return err
	}
	fmt.Fprintln(e.stdout, res.ID)
	if res.Delivery == deliveryQueued {
		why := ""
		if res.LastError != "" {
			why = " (last attempt: " + res.LastError + ")"
		}
		fmt.Fprintf(e.stderr, "queued in the outbox; retrying until acked%s: see meerkatd outbox\n", why)
	}
	for _, r := range res.Responses {
		fmt.Fprintf(e.stdout, "%s %s\n", r.Status, r.Result)
	}
	return err
}

func runInbox(e *env, args []string) error {
	flags := e.newFlags("inbox")
	homeFlag := flags.String("home", "", "node home `directory`")
	asJSON := flags.Bool("json", false, "print JSON")
	wait := flags.Duration("wait", 0, "if the inbox is empty, wait this `long` for the first item")
	after := flags.Uint64("after", 0, "only items with a sequence number above `SEQ`")
	ack := flags.Bool("ack", false, "remove the listed items from the inbox")
	h, err := e.openNoArgs(flags, homeFlag, args)
	if err != nil {
		return err
	}
	if *wait < 0 {
		return fmt.Errorf("%w: --wait must not be negative", errUsage)
	}
	b, err := e.backendFor(h, false)
	if err != nil {
		return err
	}
	defer b.close()
	ctx, cancel := context.WithTimeout(context.Background(), *wait+30*time.Second)
	defer cancel()
	items, err := b.inbox(ctx, *after, *wait, *ack)
	if err != nil {
		return err
	}
	if *asJSON {
		if items == nil {
			items = []inboxItem{}
		}
		return printJSON(e.stdout, items)
	}
	if len(items) == 0 {
		fmt.Fprintln(e.stderr, "inbox empty")
		return nil
	}
	for _, it := range items {
		who := it.From
		if it.PeerName != "" {
			who = it.PeerName + " (" + it.From + ")"
		}
		fmt.Fprintf(e.stdout, "#%d %s %s from %s id %s\n", it.Seq, it.Received.Format(time.RFC3339), it.Kind, who, it.ID)
		switch it.Kind {
		case "message":
			fmt.Fprintf(e.stdout, "  %s\n", it.Body)
		case "request":
			fmt.Fprintf(e.stdout, "  %s %s\n", it.Intent, it.Params)
		case "response":
			fmt.Fprintf(e.stdout, "  %s to %s: %s\n", it.Status, it.InReplyTo, it.Result)
		default:
			fmt.Fprintf(e.stdout, "  %s\n", it.Fields)
		}
	}
	return nil
}

func runStatus(e *env, args []string) error {
	flags := e.newFlags("status")
	homeFlag := flags.String("home", "", "node home `directory`")
	asJSON := flags.Bool("json", false, "print JSON")
	h, err := e.openNoArgs(flags, homeFlag, args)
	if err != nil {
		return err
	}
	var s statusInfo
	if err := e.withBackend(h, func(ctx context.Context, b backend) (err error) { s, err = b.status(ctx); return err }); err != nil {
		return err
	}
	if *asJSON {
		return printJSON(e.stdout, s)
	}
	state := "not running (no daemon for this home)"
	if s.Daemon {
		state = "running since " + s.StartedAt.Format(time.RFC3339)
	}
	fmt.Fprintf(e.stdout, "daemon     %s\nname       %s\npubkey     %s\nhome       %s\n", state, s.Name, s.PubKey, s.Home)
	for _, l := range s.Listen {
		fmt.Fprintf(e.stdout, "listen     %s\n", l)
	}
	fmt.Fprintf(e.stdout, "peers      %d\ninbox      %d\naccepted   %d\nacks sent  %d\nconns      %d\n", s.Peers, s.Inbox, s.Accepted, s.AcksSent, s.Conns)
	for reason, n := range s.Rejected {
		fmt.Fprintf(e.stdout, "rejected   %s %d\n", reason, n)
	}
	if s.Daemon {
		fmt.Fprintf(e.stdout, "outbox     %d\ndead       %d\n", s.Outbox, s.DeadLetters)
	}
	for _, p := range s.SendPeers {
		fmt.Fprintf(e.stdout, "peer       %s: %d queued, breaker %s", orKey(p.Peer, p.Key), p.Queued, breakerText(p))
		if p.LastError != "" {
			fmt.Fprintf(e.stdout, ", last error: %s", p.LastError)
		}
		fmt.Fprintln(e.stdout)
	}
	return nil
}

func runConfig(e *env, args []string) error {
	if len(args) == 0 || args[0] != "check" {
		return fmt.Errorf("%w: want: config check", errUsage)
	}
	flags := e.newFlags("config")
	homeFlag := flags.String("home", "", "node home `directory`")
	if err := parseNoArgs(flags, args[1:]); err != nil {
		return err
	}
	dir, err := e.homeDir(*homeFlag)
	if err != nil {
		return err
	}
	path := dir + string(os.PathSeparator) + config.FileName
	cfg, err := config.LoadOrDefault(path)
	if err == nil {
		err = cfg.ApplyEnv(e.lookupEnv)
	}
	if err == nil {
		err = cfg.Validate()
	}
	if err == nil {
		_, err = cfg.Resolve(dir)
	}
	if err == nil {
		_, err = trust.LoadOrEmpty(dir + string(os.PathSeparator) + trust.FileName)
	}
	if err != nil {
		return err
	}
	fmt.Fprintf(e.stdout, "ok: %s\n", path)
	return nil
}

func runDaemon(e *env, args []string) error {
	flags := e.newFlags("run")
	homeFlag := flags.String("home", "", "node home `directory`")
	listenUDS := flags.String("listen-uds", "", "Unix socket `path` to listen on (overrides comms.listen_uds; \"off\" disables)")
	listenTCP := flags.String("listen-tcp", "", "`host:port` to listen on (overrides comms.listen_tcp)")
	logLevel := flags.String("log-level", "info", "log `level`: debug, info, warn or error")
	if err := parseNoArgs(flags, args); err != nil {
		return err
	}
	level, err := parseLevel(*logLevel)
	if err != nil {
		return err
	}
	overrides := map[string]string{}
	flags.Visit(func(f *flag.Flag) {
		switch f.Name {
		case "listen-uds":
			overrides["comms.listen_uds"] = *listenUDS
		case "listen-tcp":
			overrides["comms.listen_tcp"] = *listenTCP
		}
	})
	h, err := e.openHome(*homeFlag, overrides)
	if err != nil {
		return err
	}
	log := slog.New(slog.NewTextHandler(e.stderr, &slog.HandlerOptions{Level: level}))
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	hup := make(chan os.Signal, 1) // before the node starts: an early SIGHUP must not kill it
	signal.Notify(hup, syscall.SIGHUP)
	defer signal.Stop(hup)
	n, shutdown, err := e.startServing(ctx, h, log)
	if err != nil {
		return err
	}
	var listen []string
	for _, a := range n.addrs {
		listen = append(listen, a.String())
	}
	log.Info("meerkatd running", "name", h.cfg.Name, "pubkey", h.kp.ID().String(), "listen", strings.Join(listen, " "), "control", h.controlPath())
	for {
		select {
		case <-hup:
			log.Info("SIGHUP: reloading trusted peers")
			n.reload()
			continue
		case <-ctx.Done():
		}
		break
	}
	stop() // a second SIGINT or SIGTERM now kills the process at once
	log.Info("shutting down")
	shutdown()
	log.Info("stopped")
	return nil
}

// parseLevel parses a --log-level value.
func parseLevel(s string) (slog.Level, error) {
	var level slog.Level
	if err := level.UnmarshalText([]byte(s)); err != nil {
		return 0, fmt.Errorf("%w: --log-level %q: want debug, info, warn or error", errUsage, s)
	}
	return level, nil
}

// startServing runs the node of h with its listeners and its control
// socket, as the daemon and an embedded meerkatd mcp do. shutdown stops
// accepting, finishes acks in flight, removes the sockets and waits.
func (e *env) startServing(ctx context.Context, h *home, log *slog.Logger) (n *node, shutdown func(), err error) {
	ctl, err := listenControl(ctx, h)
	if err != nil {
		return nil, nil, err
	}
	if n, err = startNode(h, log, nodeFull); err != nil {
		ctl.Close()
		return nil, nil, err
	}
	// The control server has its own context, ended by shutdown, so
	// attached clients (and their waits) end with the node whatever
	// stopped it: a signal, or stdin closing for meerkatd mcp.
	sctx, cancel := context.WithCancel(ctx)
	srv := &controlServer{b: &localBackend{n: n, daemon: true, start: time.Now()}, log: log, ctx: sctx}
	srv.wg.Add(1)
	go srv.serve(ctl)
	unannounce, aerr := e.announce(n)
	if aerr != nil {
		log.Warn("not announced for local discovery", "err", aerr)
	}
	return n, func() {
		unannounce()
		cancel()
		ctl.Close()
		n.stop()
		srv.wg.Wait()
	}, nil
}

// startCPUProfile writes a CPU profile to path until the returned
// function is called.
func startCPUProfile(path string) (func(), error) {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o600)
	if err != nil {
		return nil, err
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		f.Close()
		return nil, err
	}
	return func() {
		pprof.StopCPUProfile()
		f.Close()
	}, nil
}

// withBackend runs f on h's backend (the daemon, or a node in this
// process), bounded to 30 seconds.
func (e *env) withBackend(h *home, f func(context.Context, backend) error) error {
	b, err := e.backendFor(h, false)
	if err != nil {
		return err
	}
	defer b.close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	return f(ctx, b)
}

// openNoArgs parses flags (refusing positional arguments) and opens the
// home they name (homeFlag is read after parsing).
func (e *env) openNoArgs(flags *flag.FlagSet, homeFlag *string, args []string) (*home, error) {
	if err := parseNoArgs(flags, args); err != nil {
		return nil, err
	}
	return e.openHome(*homeFlag, nil)
}
