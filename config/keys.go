package config

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
)

// Key describes one configuration key. [Keys] returns the full table, which
// also drives [Config.ApplyEnv], [Config.Set], [Marshal] and the key table
// in docs/config.md.
type Key struct {
	Path    string // TOML key path: "name", "comms.listen_uds"
	Env     string // environment variable that overrides it
	Default string // default value in TOML syntax: "meerkat" (quoted), 30
	Doc     string // one-line description
}

// keyDef is a row of the table: the public description plus accessors for
// exactly one of a string, an integer, a boolean or a string-list field.
// A secret key's value is not shown by [Settings], nor the user
// information (a password) in a URL of a urls key.
type keyDef struct {
	path, env, doc string
	str            func(*Config) *string
	num            func(*Config) *int
	flag           func(*Config) *bool
	list           func(*Config) *[]string
	secret         bool
	urls           bool
}

// keys is the single table of configuration keys, in file order.
var keys = [...]keyDef{
	{path: "name", env: "MEERKAT_NAME",
		doc: `Node name, [A-Za-z0-9._-], at most 64 bytes; replaces {name} in comms.listen_uds.`,
		str: func(c *Config) *string { return &c.Name }},
	{path: "comms.listen_uds", env: "MEERKAT_COMMS_LISTEN_UDS",
		doc: `Unix socket to listen on: an absolute path ({name} is replaced by the node name); "" means meerkat.sock in the home directory; "off" disables it.`,
		str: func(c *Config) *string { return &c.Comms.ListenUDS }},
	{path: "comms.listen_tcp", env: "MEERKAT_COMMS_LISTEN_TCP",
		doc: `TCP address to listen on as host:port (IPv6 in brackets, 0.0.0.0:4200 for all IPv4 interfaces); "" disables it.`,
		str: func(c *Config) *string { return &c.Comms.ListenTCP }},
	{path: "comms.advertise_tcp", env: "MEERKAT_COMMS_ADVERTISE_TCP",
		doc: `TCP address other nodes reach this one at, as host:port (a name or IP, not 0.0.0.0 or ::); pairing lines and discovery announcements carry it instead of comms.listen_tcp. Needed to pair over TCP when listening on all interfaces; "" uses the listen address; unused without comms.listen_tcp.`,
		str: func(c *Config) *string { return &c.Comms.AdvertiseTCP }},
	{path: "comms.tcp_plaintext", env: "MEERKAT_COMMS_TCP_PLAINTEXT",
		doc: `"allow" or "refuse": whether this node speaks plaintext TCP at all. Nodes reached at tls:// addresses talk over TLS 1.3 with pinned keys on the same port either way; "allow" also accepts plaintext connections and dials tcp:// peers (what the reference implementation speaks), "refuse" closes plaintext TCP connections and reports sends to tcp:// peers as failed. Unix sockets and pairing are not affected.`,
		str: func(c *Config) *string { return &c.Comms.TCPPlaintext }},
	{path: "comms.ack_timeout_secs", env: "MEERKAT_COMMS_ACK_TIMEOUT",
		doc: `Seconds a send waits for the peer's ack before reporting the peer offline.`,
		num: func(c *Config) *int { return &c.Comms.AckTimeoutSecs }},
	{path: "comms.max_message_bytes", env: "MEERKAT_COMMS_MAX_MESSAGE_BYTES",
		doc: `Largest frame payload accepted or sent, in bytes; from 1024 (every node takes a frame that small) to 1048576, the protocol maximum.`,
		num: func(c *Config) *int { return &c.Comms.MaxMessageBytes }},
	{path: "comms.frame_timeout_secs", env: "MEERKAT_COMMS_FRAME_TIMEOUT_SECS",
		doc: `Seconds a frame may take to arrive, counted from its first byte.`,
		num: func(c *Config) *int { return &c.Comms.FrameTimeoutSecs }},
	{path: "comms.idle_timeout_secs", env: "MEERKAT_COMMS_IDLE_TIMEOUT_SECS",
		doc: `Seconds an inbound connection may stay idle before it is closed; acks alone are not activity that keeps it.`,
		num: func(c *Config) *int { return &c.Comms.IdleTimeoutSecs }},
	{path: "comms.max_connections", env: "MEERKAT_COMMS_MAX_CONNECTIONS",
		doc: `Concurrent inbound connections; at the limit the oldest connection that has not yet delivered a valid envelope makes room, else the new one is refused.`,
		num: func(c *Config) *int { return &c.Comms.MaxConnections }},
	{path: "comms.inbox_max", env: "MEERKAT_COMMS_INBOX_MAX",
		doc: `Messages the inbox holds; when full, new messages are refused (not acked), never dropped.`,
		num: func(c *Config) *int { return &c.Comms.InboxMax }},
	{path: "comms.inbox_max_bytes", env: "MEERKAT_COMMS_INBOX_MAX_BYTES",
		doc: `Total size, in bytes, of the messages the inbox holds (with the memory inbox, what they take in memory once decoded); when full, new messages are refused (not acked), never dropped.`,
		num: func(c *Config) *int { return &c.Comms.InboxMaxBytes }},
	{path: "comms.peer_inbox_share", env: "MEERKAT_COMMS_PEER_INBOX_SHARE",
		doc: `Percentage (1-100) of the inbox, by items and by bytes, that the peers holding items in it share once it is over half full: each may then hold at most this percentage divided by their number, and its new messages are refused (not acked) past it while other peers are still admitted. 100 lets a lone peer fill the inbox.`,
		num: func(c *Config) *int { return &c.Comms.PeerInboxShare }},
	{path: "comms.peer_max_connections", env: "MEERKAT_COMMS_PEER_MAX_CONNECTIONS",
		doc: `Authenticated inbound connections one peer may hold at once; a connection whose first new envelope would exceed it is closed without an ack.`,
		num: func(c *Config) *int { return &c.Comms.PeerMaxConnections }},
	{path: "store.mode", env: "MEERKAT_STORE_MODE",
		doc: `Where received items are kept: "sqlite" (meerkat.db in the home: an ack means the item is on disk, items survive restarts, duplicates are recognised across restarts) or "memory" (ephemeral nodes).`,
		str: func(c *Config) *string { return &c.Store.Mode }},
	{path: "store.dedup_window_hours", env: "MEERKAT_STORE_DEDUP_WINDOW_HOURS",
		doc: `Hours a (sender, id) pair is remembered so a repeat is acknowledged but not delivered again (sqlite mode).`,
		num: func(c *Config) *int { return &c.Store.DedupWindowHours }},
	{path: "store.history_hours", env: "MEERKAT_STORE_HISTORY_HOURS",
		doc: `Hours acknowledged items are kept as history (sqlite mode).`,
		num: func(c *Config) *int { return &c.Store.HistoryHours }},
	{path: "store.history_max_bytes", env: "MEERKAT_STORE_HISTORY_MAX_BYTES",
		doc: `Total size, in bytes, of the acknowledged items kept as history (sqlite mode); past it the oldest acknowledged items are deleted (down to 90%) and the space is given back to the file system. Unacknowledged items are never deleted for room.`,
		num: func(c *Config) *int { return &c.Store.HistoryMaxBytes }},
	{path: "outbox.backoff", env: "MEERKAT_OUTBOX_BACKOFF",
		doc: `Waits before retrying a reliable send after its 1st, 2nd, … failed attempt, comma-separated Go durations; the last one repeats.`,
		str: func(c *Config) *string { return &c.Outbox.Backoff }},
	{path: "outbox.max_attempts", env: "MEERKAT_OUTBOX_MAX_ATTEMPTS",
		doc: `Failed attempts after which a reliable send becomes a dead letter.`,
		num: func(c *Config) *int { return &c.Outbox.MaxAttempts }},
	{path: "outbox.breaker_failures", env: "MEERKAT_OUTBOX_BREAKER_FAILURES",
		doc: `Consecutive failed attempts that open a peer's circuit breaker (reliable sends then queue without dialling).`,
		num: func(c *Config) *int { return &c.Outbox.BreakerFailures }},
	{path: "outbox.breaker_open_secs", env: "MEERKAT_OUTBOX_BREAKER_OPEN_SECS",
		doc: `Seconds an open circuit breaker waits before one probe; an ack closes it, a failure opens it again.`,
		num: func(c *Config) *int { return &c.Outbox.BreakerOpenSecs }},
	{path: "outbox.max_entries", env: "MEERKAT_OUTBOX_MAX_ENTRIES",
		doc: `Reliable sends queued at most; beyond it a reliable send is refused (nothing is dropped).`,
		num: func(c *Config) *int { return &c.Outbox.MaxEntries }},
	{path: "outbox.max_bytes", env: "MEERKAT_OUTBOX_MAX_BYTES",
		doc: `Total size, in bytes, of the queued reliable sends; beyond it a reliable send is refused.`,
		num: func(c *Config) *int { return &c.Outbox.MaxBytes }},
	{path: "outbox.default_ttl_secs", env: "MEERKAT_OUTBOX_DEFAULT_TTL_SECS",
		doc: `Time-to-live, in seconds, of reliable sends that give none; an envelope unacknowledged when it passes becomes a dead letter. 0 means none.`,
		num: func(c *Config) *int { return &c.Outbox.DefaultTTLSecs }},
	{path: "outbox.dead_letters_max", env: "MEERKAT_OUTBOX_DEAD_LETTERS_MAX",
		doc: `Dead letters kept at most; beyond it the oldest are deleted (checked hourly), each deletion recorded in the audit log.`,
		num: func(c *Config) *int { return &c.Outbox.DeadLettersMax }},
	{path: "outbox.dead_letter_hours", env: "MEERKAT_OUTBOX_DEAD_LETTER_HOURS",
		doc: `Hours a dead letter is kept before it is deleted (checked hourly), each deletion recorded in the audit log.`,
		num: func(c *Config) *int { return &c.Outbox.DeadLetterHours }},
	{path: "audit.enabled", env: "MEERKAT_AUDIT_ENABLED",
		doc:  `Record every envelope the running node (the daemon, or meerkatd mcp running its own) sends, receives, acks, refuses, retries, expires and dead-letters in audit.log in the home; a command run without a daemon writes no rows.`,
		flag: func(c *Config) *bool { return &c.Audit.Enabled }},
	{path: "audit.bodies", env: "MEERKAT_AUDIT_BODIES",
		doc:  `Record message bodies, request params and response results in the audit log too (off: only metadata).`,
		flag: func(c *Config) *bool { return &c.Audit.Bodies }},
	{path: "audit.max_bytes", env: "MEERKAT_AUDIT_MAX_BYTES",
		doc: `Size in bytes at which audit.log is renamed to audit.log.1 (replacing the older one) and a new file started.`,
		num: func(c *Config) *int { return &c.Audit.MaxBytes }},
	{path: "meup.protocol", env: "MEERKAT_MEUP_PROTOCOL",
		doc: `Protocol id written in the MEUP envelopes this node sends to its spaces: meup/v0.1, meup/v0.2, mew/v0.3 or mew/v0.4 (all of them, and mcpx/v0.1, are read).`,
		str: func(c *Config) *string { return &c.MEUP.Protocol }},
	{path: "meup.proposal_ttl_secs", env: "MEERKAT_MEUP_PROPOSAL_TTL_SECS",
		doc: `Seconds a proposal in a space stays pending before it expires.`,
		num: func(c *Config) *int { return &c.MEUP.ProposalTTLSecs }},
	{path: "mcp.pairing", env: "MEERKAT_MCP_PAIRING",
		doc: `"on" or "off": whether meerkatd mcp offers the pairing tools (pair_offer, pair_accept); with "off" they are not listed and calls to them are refused (pair with meerkatd pair instead).`,
		str: func(c *Config) *string { return &c.MCP.Pairing }},
	{path: "metrics.listen", env: "MEERKAT_METRICS_LISTEN",
		doc: `host:port the daemon serves Prometheus metrics (/metrics) and health checks (/healthz, /readyz) on over plain HTTP, e.g. 127.0.0.1:9464; "" serves nothing. The metrics carry peer names and counts, never message contents: keep it on loopback or a trusted network.`,
		str: func(c *Config) *string { return &c.Metrics.Listen }},
	{path: "log.level", env: "MEERKAT_LOG_LEVEL",
		doc: `Least severe log level written to standard error: "debug", "info", "warn" or "error". meerkatd run and meerkatd mcp take --log-level, which wins.`,
		str: func(c *Config) *string { return &c.Log.Level }},
	{path: "log.format", env: "MEERKAT_LOG_FORMAT",
		doc: `Log line format: "text" (key=value) or "json" (one JSON object per line). meerkatd run and meerkatd mcp take --log-format, which wins.`,
		str: func(c *Config) *string { return &c.Log.Format }},
	{path: "agent.idempotency_window_secs", env: "MEERKAT_AGENT_IDEMPOTENCY_WINDOW_SECS",
		doc: `Seconds a send's idempotency key is remembered (across restarts): a send with the same key within it returns the first send's result without sending again.`,
		num: func(c *Config) *int { return &c.Agent.IdempotencyWindowSecs }},
	{path: "agent.sent_history_hours", env: "MEERKAT_AGENT_SENT_HISTORY_HOURS",
		doc: `Hours the record of each send (queued, acknowledged, dead, answered) is kept for meerkatd sent and message_status.`,
		num: func(c *Config) *int { return &c.Agent.SentHistoryHours }},
	{path: "agent.notify_interval_ms", env: "MEERKAT_AGENT_NOTIFY_INTERVAL_MS",
		doc: `Shortest time, in milliseconds, between two arrival notifications to one MCP client; arrivals in between are coalesced into one notification sent when the interval ends. 0 notifies every arrival.`,
		num: func(c *Config) *int { return &c.Agent.NotifyIntervalMS }},
	{path: "agent.loop_max_exchanges", env: "MEERKAT_AGENT_LOOP_MAX_EXCHANGES",
		doc: `Fast replies in a row to one peer, with no user item in between, after which the loop guard holds further sends to that peer. 0 turns the guard off.`,
		num: func(c *Config) *int { return &c.Agent.LoopMaxExchanges }},
	{path: "agent.loop_fast_ms", env: "MEERKAT_AGENT_LOOP_FAST_MS",
		doc: `A send to a peer within this many milliseconds of receiving from it counts as a fast reply for the loop guard; a slower reply starts the count again.`,
		num: func(c *Config) *int { return &c.Agent.LoopFastMS }},
	{path: "agent.loop_hold_secs", env: "MEERKAT_AGENT_LOOP_HOLD_SECS",
		doc: `Seconds the loop guard holds sends to a peer once it trips, unless a person releases it first (meerkatd release PEER).`,
		num: func(c *Config) *int { return &c.Agent.LoopHoldSecs }},
	{path: "nats.servers", env: "MEERKAT_NATS_SERVERS",
		doc:  `NATS servers to connect to, as a list of nats://host:port or tls://host:port URLs (host:port means nats://), at most 64; in the environment, comma-separated. [] (empty) turns NATS off.`,
		list: func(c *Config) *[]string { return &c.NATS.Servers }, urls: true},
	{path: "nats.creds_file", env: "MEERKAT_NATS_CREDS_FILE",
		doc: `NATS credentials file (user JWT and nkey seed) to authenticate with; a relative path is relative to the home directory; not readable by others nor writable by its group (mode 0600 or 0640, or the node does not start). "" means none. Use at most one of creds_file, nkey_seed_file and user with password.`,
		str: func(c *Config) *string { return &c.NATS.CredsFile }},
	{path: "nats.nkey_seed_file", env: "MEERKAT_NATS_NKEY_SEED_FILE",
		doc: `File holding an nkey user seed to authenticate with; a relative path is relative to the home directory; not readable by others nor writable by its group (mode 0600 or 0640, or the node does not start). "" means none.`,
		str: func(c *Config) *string { return &c.NATS.NKeySeedFile }},
	{path: "nats.user", env: "MEERKAT_NATS_USER",
		doc: `User name to authenticate with, together with nats.password. "" means none.`,
		str: func(c *Config) *string { return &c.NATS.User }},
	{path: "nats.password", env: "MEERKAT_NATS_PASSWORD",
		doc: `Password for nats.user; better given in the environment than in the file. meerkatd config show does not print it. "" means none.`,
		str: func(c *Config) *string { return &c.NATS.Password }, secret: true},
	{path: "nats.tls_ca", env: "MEERKAT_NATS_TLS_CA",
		doc: `PEM file of the certificate authorities that verify the NATS servers; a relative path is relative to the home directory. "" uses the system's.`,
		str: func(c *Config) *string { return &c.NATS.TLSCA }},
	{path: "nats.tls_cert", env: "MEERKAT_NATS_TLS_CERT",
		doc: `PEM client certificate presented to the NATS servers, together with nats.tls_key; a relative path is relative to the home directory. "" means none.`,
		str: func(c *Config) *string { return &c.NATS.TLSCert }},
	{path: "nats.tls_key", env: "MEERKAT_NATS_TLS_KEY",
		doc: `PEM private key of nats.tls_cert; a relative path is relative to the home directory; others may not read it nor its group write it (0600, or 0640). "" means none.`,
		str: func(c *Config) *string { return &c.NATS.TLSKey }},
	{path: "nats.subject_prefix", env: "MEERKAT_NATS_SUBJECT_PREFIX",
		doc: `First tokens of every NATS subject this node uses: one or more tokens of [A-Za-z0-9_-] joined by '.', at most 128 bytes. Nodes that talk to each other use the same prefix.`,
		str: func(c *Config) *string { return &c.NATS.SubjectPrefix }},
	{path: "nats.jetstream", env: "MEERKAT_NATS_JETSTREAM",
		doc:  `Store frames in a JetStream stream (nats.stream), so that peers that are offline receive them when they come back; off sends them to connected peers only.`,
		flag: func(c *Config) *bool { return &c.NATS.JetStream }},
	{path: "nats.stream", env: "MEERKAT_NATS_STREAM",
		doc: `Name of the JetStream stream, [A-Za-z0-9_-], at most 64 bytes (used with nats.jetstream).`,
		str: func(c *Config) *string { return &c.NATS.Stream }},
	{path: "nats.stream_max_age_secs", env: "MEERKAT_NATS_STREAM_MAX_AGE_SECS",
		doc: `Seconds the stream keeps a frame before discarding it (the default is 7 days); at most 10 years.`,
		num: func(c *Config) *int { return &c.NATS.StreamMaxAgeSecs }},
	{path: "nats.stream_max_bytes", env: "MEERKAT_NATS_STREAM_MAX_BYTES",
		doc: `Total size, in bytes, of the frames the stream keeps (the default is 1 GiB); past it the stream refuses new frames (it keeps those it holds; a reliable send then stays queued and is retried). -1 means no limit.`,
		num: func(c *Config) *int { return &c.NATS.StreamMaxBytes }},
	{path: "nats.stream_max_msgs", env: "MEERKAT_NATS_STREAM_MAX_MSGS",
		doc: `Frames the stream keeps; past it the stream refuses new frames (it keeps those it holds; a reliable send then stays queued and is retried). -1 means no limit.`,
		num: func(c *Config) *int { return &c.NATS.StreamMaxMsgs }},
	{path: "nats.stream_replicas", env: "MEERKAT_NATS_STREAM_REPLICAS",
		doc: `Servers that hold a copy of the stream, 1 to 5 (at most the servers of the NATS cluster).`,
		num: func(c *Config) *int { return &c.NATS.StreamReplicas }},
	{path: "nats.dedup_window_secs", env: "MEERKAT_NATS_DEDUP_WINDOW_SECS",
		doc: `Seconds the stream remembers an envelope id, so that a frame sent again within it is stored once; at most nats.stream_max_age_secs and one week.`,
		num: func(c *Config) *int { return &c.NATS.DedupWindowSecs }},
	{path: "nats.reconnect_wait_ms", env: "MEERKAT_NATS_RECONNECT_WAIT_MS",
		doc: `Milliseconds between attempts to reconnect after the connection to the NATS servers is lost.`,
		num: func(c *Config) *int { return &c.NATS.ReconnectWaitMS }},
	{path: "nats.connect_timeout_ms", env: "MEERKAT_NATS_CONNECT_TIMEOUT_MS",
		doc: `Milliseconds a connection attempt to one NATS server may take.`,
		num: func(c *Config) *int { return &c.NATS.ConnectTimeoutMS }},
}

// tables are the TOML tables that hold keys.
var tables = [...]string{"comms", "store", "outbox", "audit", "meup", "mcp", "metrics", "log", "agent", "nats"}

// Keys returns the table of configuration keys, in file order. The slice
// is a fresh copy: changing it changes nothing else.
func Keys() []Key {
	def := Default()
	out := make([]Key, len(keys))
	for i, k := range keys {
		out[i] = Key{Path: k.path, Env: k.env, Default: k.format(&def), Doc: k.doc}
	}
	return out
}

// Changed returns the paths of the keys whose values differ between a and
// b, in file order.
func Changed(a, b *Config) []string {
	var out []string
	for _, k := range keys {
		if k.format(a) != k.format(b) {
			out = append(out, k.path)
		}
	}
	return out
}

func lookupKey(path string) (keyDef, bool) {
	for _, k := range keys {
		if k.path == path {
			return k, true
		}
	}
	return keyDef{}, false
}

// format returns the key's value in c in TOML syntax.
func (k keyDef) format(c *Config) string {
	switch {
	case k.str != nil:
		return quoteTOML(*k.str(c))
	case k.flag != nil:
		return strconv.FormatBool(*k.flag(c))
	case k.list != nil:
		return formatList(*k.list(c))
	}
	return strconv.Itoa(*k.num(c))
}

// set parses value (plain text, not TOML: no quotes) into the key's field.
func (k keyDef) set(c *Config, value string) error {
	if k.str != nil {
		*k.str(c) = value
		return nil
	}
	if k.list != nil {
		l, err := ParseList(value)
		if err != nil {
			return err
		}
		*k.list(c) = l
		return nil
	}
	if k.flag != nil {
		switch value {
		case "true":
			*k.flag(c) = true
		case "false":
			*k.flag(c) = false
		default:
			return fmt.Errorf("not true or false: %q", value)
		}
		return nil
	}
	n, err := strconv.Atoi(value)
	if err != nil {
		return fmt.Errorf("not an integer: %q", value)
	}
	*k.num(c) = n
	return nil
}

// Set sets the key at path from its text form (a string as is, an integer
// in decimal, a list comma-separated as [ParseList] reads it), as a
// command-line flag would. It does not validate the
// value beyond its type; call [Config.Validate] afterwards. Unknown paths
// wrap [ErrUnknownKey].
func (c *Config) Set(path, value string) error {
	k, ok := lookupKey(path)
	if !ok {
		return &Error{Key: path, Err: unknownKey(path)}
	}
	if err := k.set(c, value); err != nil {
		return &Error{Key: path, Err: err}
	}
	return nil
}

// ApplyEnv overrides keys from environment variables, one per key (see
// [Keys]): lookup is os.LookupEnv or a fake. A variable that is set, even
// to "", wins over the file; "" is a valid value only for string keys
// (MEERKAT_COMMS_LISTEN_TCP= turns the TCP listener off). Integers are
// decimal. Every bad variable is reported, as an [*Error] whose Source is
// the variable's name, joined with errors.Join; on error c is unchanged.
// A nil lookup applies nothing. ApplyEnv does not validate ranges; call
// [Config.Validate] afterwards.
func (c *Config) ApplyEnv(lookup func(string) (string, bool)) error {
	if lookup == nil {
		return nil
	}
	next := *c
	var errs []error
	for _, k := range keys {
		v, ok := lookup(k.env)
		if !ok {
			continue
		}
		if err := k.set(&next, v); err != nil {
			errs = append(errs, &Error{Source: k.env, Key: k.path, Err: err})
		}
	}
	if len(errs) > 0 {
		return errors.Join(errs...)
	}
	*c = next
	return nil
}

// ParseList reads the text form of a list key, as its environment
// variable and [Config.Set] give it: items separated by commas, each
// trimmed of surrounding white space. An empty or all-space string is the
// empty list (nil); an empty item ("a,,b", "a,") is an error. Items are
// not checked further: [Config.Validate] judges them.
func ParseList(s string) ([]string, error) {
	if strings.TrimSpace(s) == "" {
		return nil, nil
	}
	parts := strings.Split(s, ",")
	out := make([]string, 0, len(parts))
	for i, p := range parts {
		p = strings.TrimSpace(p)
		if p == "" {
			// The list is not quoted: a server URL in it may hold a password.
			return nil, fmt.Errorf("item %d of %d is empty: separate items with single commas", i+1, len(parts))
		}
		out = append(out, p)
	}
	return out, nil
}

// formatList returns l as a TOML array of basic strings. Its items must
// be valid UTF-8.
func formatList(l []string) string {
	var b strings.Builder
	b.WriteByte('[')
	for i, s := range l {
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteString(quoteTOML(s))
	}
	b.WriteByte(']')
	return b.String()
}
