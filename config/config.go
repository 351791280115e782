package config

import (
	"fmt"
	"path/filepath"
	"reflect"
	"strings"
	"time"

	"github.com/meerkatd/meerkatd/transport"
)

// FileName is the configuration file's name inside a node's home.
const FileName = "meerkat.toml"

// Defaults and limits. The defaults are those of [Default]; docs/config.md
// lists them through [Keys].
const (
	DefaultName             = "meerkat"
	DefaultAckTimeoutSecs   = 30
	DefaultMaxMessageBytes  = transport.MaxFrameSize
	DefaultFrameTimeoutSecs = 10
	DefaultIdleTimeoutSecs  = 60
	DefaultMaxConnections   = 1024
	DefaultInboxMax         = 10000
	DefaultInboxMaxBytes    = 256 << 20
	DefaultPeerInboxShare   = 50
	DefaultPeerMaxConns     = 8
	DefaultStoreMode        = StoreSQLite
	DefaultDedupWindowHours = 7 * 24
	DefaultHistoryHours     = 7 * 24
	DefaultHistoryMaxBytes  = 256 << 20

	DefaultOutboxBackoff         = "0s,5s,15s,1m,5m"
	DefaultOutboxMaxAttempts     = 50
	DefaultOutboxBreakerFailures = 3
	DefaultOutboxBreakerOpenSecs = 60
	DefaultOutboxMaxEntries      = 10000
	DefaultOutboxMaxBytes        = 256 << 20
	DefaultDeadLettersMax        = 10000
	DefaultDeadLetterHours       = 30 * 24
	DefaultAuditMaxBytes         = 64 << 20
	DefaultMEUPProtocol          = "meup/v0.1"
	DefaultProposalTTLSecs       = 3600
	DefaultIdempotencyWindowSecs = 24 * 3600
	DefaultSentHistoryHours      = 7 * 24
	DefaultNotifyIntervalMS      = 1000
	DefaultLoopMaxExchanges      = 20
	DefaultLoopFastMS            = 3000
	DefaultLoopHoldSecs          = 600
	DefaultMCPPairing            = On
	DefaultMetricsListen         = "" // off
	DefaultTCPPlaintext          = Allow
	DefaultLogLevel              = "info"
	DefaultLogFormat             = LogText

	DefaultNATSSubjectPrefix    = "meerkat"
	DefaultNATSStream           = "MEERKAT"
	DefaultNATSStreamMaxAgeSecs = 7 * 24 * 3600
	DefaultNATSStreamMaxBytes   = 1 << 30
	DefaultNATSStreamMaxMsgs    = 1_000_000
	DefaultNATSStreamReplicas   = 1
	DefaultNATSDedupWindowSecs  = 120
	DefaultNATSReconnectWaitMS  = 2000
	DefaultNATSConnectTimeoutMS = 5000

	// MaxBackoffSteps bounds the outbox.backoff list.
	MaxBackoffSteps = 32

	// StoreSQLite keeps the inbox in <home>/meerkat.db; StoreMemory keeps
	// it in memory only (ephemeral nodes).
	StoreSQLite = "sqlite"
	StoreMemory = "memory"

	// DefaultSocketName is the UDS listener inside the home when
	// comms.listen_uds is empty.
	DefaultSocketName = "meerkat.sock"

	// UDSOff as comms.listen_uds disables the Unix socket listener.
	UDSOff = "off"

	// On and Off are the values of on/off switches such as mcp.pairing.
	On  = "on"
	Off = "off"

	// LogText and LogJSON are the values of log.format.
	LogText = "text"
	LogJSON = "json"

	// Allow and Refuse are the values of comms.tcp_plaintext.
	Allow  = "allow"
	Refuse = "refuse"

	// NamePlaceholder in comms.listen_uds is replaced by the node name.
	NamePlaceholder = "{name}"

	// MaxNameLen is the longest node name.
	MaxNameLen = 64
	// MaxTimeoutSecs bounds every *_timeout_secs key (one week), which
	// also keeps the durations far from overflowing.
	MaxTimeoutSecs = 7 * 24 * 60 * 60
	// MaxHistoryHours bounds the settings counted in hours of history
	// (one year).
	MaxHistoryHours = 24 * 365
	// MaxFileSize bounds the configuration file, in bytes.
	MaxFileSize = 1 << 20

	// MaxNATSServers bounds nats.servers.
	MaxNATSServers = 64
	// MaxNATSSubjectPrefixLen bounds nats.subject_prefix, in bytes.
	MaxNATSSubjectPrefixLen = 128
	// MaxNATSStreamLen bounds nats.stream, in bytes.
	MaxNATSStreamLen = 64
	// MaxNATSStreamMaxAgeSecs bounds nats.stream_max_age_secs (ten
	// years), which keeps the duration far from overflowing.
	MaxNATSStreamMaxAgeSecs = 10 * 365 * 24 * 3600
	// MaxNATSStreamReplicas bounds nats.stream_replicas, as JetStream does.
	MaxNATSStreamReplicas = 5
	// NATSUnlimited as nats.stream_max_bytes or nats.stream_max_msgs
	// means no limit.
	NATSUnlimited = -1
)

// Config is a node's configuration, as read from meerkat.toml. The zero
// Config is not valid; start from [Default], [Parse] or [Load]. Config is
// not comparable with == (nats.servers is a list): use [Config.Equal].
type Config struct {
	// Name is the node name; it replaces {name} in comms.listen_uds.
	Name string `toml:"name"`
	// Comms is the [comms] table.
	Comms Comms `toml:"comms"`
	// Store is the [store] table.
	Store Store `toml:"store"`
	// Outbox is the [outbox] table.
	Outbox Outbox `toml:"outbox"`
	// Audit is the [audit] table.
	Audit Audit `toml:"audit"`
	// MEUP is the [meup] table.
	MEUP MEUP `toml:"meup"`
	// MCP is the [mcp] table.
	MCP MCP `toml:"mcp"`
	// Metrics is the [metrics] table.
	Metrics Metrics `toml:"metrics"`
	// Log is the [log] table.
	Log Log `toml:"log"`
	// Agent is the [agent] table.
	Agent Agent `toml:"agent"`
	// NATS is the [nats] table.
	NATS NATS `toml:"nats"`
}

// Equal reports whether c and o hold the same settings. A nil and an
// empty nats.servers are equal (both mean NATS is off).
func (c Config) Equal(o Config) bool {
	if len(c.NATS.Servers) == 0 {
		c.NATS.Servers = nil
	}
	if len(o.NATS.Servers) == 0 {
		o.NATS.Servers = nil
	}
	return reflect.DeepEqual(c, o)
}

// Agent is the [agent] table: how the node serves the agent that works
// from its inbox (safe retries, the record of sends, wake-ups, the loop
// guard).
type Agent struct {
	// IdempotencyWindowSecs is how long a send's idempotency key is
	// remembered: the same key within it returns the first result
	// without sending again.
	IdempotencyWindowSecs int `toml:"idempotency_window_secs"`
	// SentHistoryHours is how long the record of a send (its delivery
	// status) is kept.
	SentHistoryHours int `toml:"sent_history_hours"`
	// NotifyIntervalMS is the shortest time between two arrival
	// notifications to one MCP client; arrivals in between are
	// coalesced into the next one (0: one per arrival).
	NotifyIntervalMS int `toml:"notify_interval_ms"`
	// LoopMaxExchanges is how many fast replies in a row to one peer,
	// with no person in between, trip the loop guard (0: no guard).
	LoopMaxExchanges int `toml:"loop_max_exchanges"`
	// LoopFastMS is the reply time below which a reply counts as faster
	// than a person could write it.
	LoopFastMS int `toml:"loop_fast_ms"`
	// LoopHoldSecs is how long the loop guard holds sends to a peer once
	// it trips, unless a person releases it first.
	LoopHoldSecs int `toml:"loop_hold_secs"`
}

// IdempotencyWindow returns idempotency_window_secs as a duration.
func (a Agent) IdempotencyWindow() time.Duration { return seconds(a.IdempotencyWindowSecs) }

// SentHistory returns sent_history_hours as a duration.
func (a Agent) SentHistory() time.Duration {
	return time.Duration(max(0, min(a.SentHistoryHours, MaxHistoryHours))) * time.Hour
}

// NotifyInterval returns notify_interval_ms as a duration.
func (a Agent) NotifyInterval() time.Duration { return millis(a.NotifyIntervalMS) }

// LoopFast returns loop_fast_ms as a duration.
func (a Agent) LoopFast() time.Duration { return millis(a.LoopFastMS) }

// LoopHold returns loop_hold_secs as a duration.
func (a Agent) LoopHold() time.Duration { return seconds(a.LoopHoldSecs) }

// NATS is the [nats] table: reaching other nodes through a NATS
// deployment (docs/nats.md). With no servers (the default) NATS is off.
// File paths that are not absolute are relative to the node's home
// directory: see [NATS.Path].
type NATS struct {
	// Servers are the URLs of the NATS servers: nats://host:port,
	// tls://host:port, or host:port for nats://. Empty means NATS is off.
	// [NATS.ServerURLs] returns them with their scheme.
	Servers []string `toml:"servers"`
	// CredsFile is a NATS credentials file (user JWT and nkey seed).
	CredsFile string `toml:"creds_file"`
	// NKeySeedFile is a file holding an nkey user seed.
	NKeySeedFile string `toml:"nkey_seed_file"`
	// User and Password authenticate with a user name and password.
	// At most one of CredsFile, NKeySeedFile and User/Password is set.
	User     string `toml:"user"`
	Password string `toml:"password"`
	// TLSCA is a PEM file of the CAs that verify the servers; "" uses
	// the system's.
	TLSCA string `toml:"tls_ca"`
	// TLSCert and TLSKey are a PEM client certificate and its key, both
	// or neither.
	TLSCert string `toml:"tls_cert"`
	TLSKey  string `toml:"tls_key"`
	// SubjectPrefix starts every subject the node uses: dot-separated
	// tokens of [A-Za-z0-9_-].
	SubjectPrefix string `toml:"subject_prefix"`
	// JetStream stores frames in a JetStream stream, so that peers that
	// are offline receive them later.
	JetStream bool `toml:"jetstream"`
	// Stream is the JetStream stream's name.
	Stream string `toml:"stream"`
	// StreamMaxAgeSecs is how long the stream keeps a frame.
	StreamMaxAgeSecs int `toml:"stream_max_age_secs"`
	// StreamMaxBytes and StreamMaxMsgs bound the stream; -1
	// ([NATSUnlimited]) means no limit.
	StreamMaxBytes int `toml:"stream_max_bytes"`
	StreamMaxMsgs  int `toml:"stream_max_msgs"`
	// StreamReplicas is how many servers hold a copy of the stream (1-5).
	StreamReplicas int `toml:"stream_replicas"`
	// DedupWindowSecs is the stream's duplicate window: a frame whose
	// envelope id the stream saw within it is not stored again.
	DedupWindowSecs int `toml:"dedup_window_secs"`
	// ReconnectWaitMS is the wait between attempts to reconnect to a
	// server.
	ReconnectWaitMS int `toml:"reconnect_wait_ms"`
	// ConnectTimeoutMS bounds connecting to one server.
	ConnectTimeoutMS int `toml:"connect_timeout_ms"`
}

// Enabled reports whether NATS is on: whether servers are given.
func (n NATS) Enabled() bool { return len(n.Servers) > 0 }

// Path resolves a file key of the table (CredsFile, NKeySeedFile, TLSCA,
// TLSCert, TLSKey) against the node's home directory: "" stays "" (not
// set), an absolute path is cleaned, a relative one is joined to home.
func (n NATS) Path(home, p string) string {
	switch {
	case p == "":
		return ""
	case filepath.IsAbs(p):
		return filepath.Clean(p)
	}
	return filepath.Join(home, p)
}

// StreamMaxAge returns stream_max_age_secs as a duration, clamped into
// 0..MaxNATSStreamMaxAgeSecs seconds.
func (n NATS) StreamMaxAge() time.Duration {
	return time.Duration(max(0, min(n.StreamMaxAgeSecs, MaxNATSStreamMaxAgeSecs))) * time.Second
}

// DedupWindow returns dedup_window_secs as a duration.
func (n NATS) DedupWindow() time.Duration { return seconds(n.DedupWindowSecs) }

// ReconnectWait returns reconnect_wait_ms as a duration.
func (n NATS) ReconnectWait() time.Duration { return millis(n.ReconnectWaitMS) }

// ConnectTimeout returns connect_timeout_ms as a duration.
func (n NATS) ConnectTimeout() time.Duration { return millis(n.ConnectTimeoutMS) }

// Metrics is the [metrics] table: the daemon's HTTP endpoint for
// Prometheus metrics and health checks.
type Metrics struct {
	// Listen is the host:port the daemon serves /metrics, /healthz and
	// /readyz on; "" (the default) serves nothing.
	Listen string `toml:"listen"`
}

// Log is the [log] table: what the node logs (to standard error) and how.
type Log struct {
	// Level is the least severe level logged: "debug", "info" (the
	// default), "warn" or "error".
	Level string `toml:"level"`
	// Format is "text" (the default: key=value lines) or "json" (one
	// JSON object per line).
	Format string `toml:"format"`
}

// LogLevels are the values of log.level, most verbose first.
var LogLevels = []string{"debug", "info", "warn", "error"}

// MCP is the [mcp] table: what `meerkatd mcp` offers its client.
type MCP struct {
	// Pairing is "on" (the default) to offer the pairing tools
	// (pair_offer, pair_accept), "off" to leave them out: pairing adds a
	// key to the trust list, which a user may want to keep out of a
	// model's reach.
	Pairing string `toml:"pairing"`
}

// PairingOn reports whether the pairing tools are offered.
func (m MCP) PairingOn() bool { return m.Pairing != Off }

// MEUP is the [meup] table: MEUP spaces (docs/meup.md).
type MEUP struct {
	// Protocol is the protocol id written in the MEUP envelopes this
	// node sends (any accepted one is read).
	Protocol string `toml:"protocol"`
	// ProposalTTLSecs is how long a proposal stays pending before it
	// expires.
	ProposalTTLSecs int `toml:"proposal_ttl_secs"`
}

// MEUPProtocols are the protocol ids a node may emit ([meup] protocol).
var MEUPProtocols = []string{"meup/v0.1", "meup/v0.2", "mew/v0.3", "mew/v0.4"}

// ProposalTTL returns proposal_ttl_secs as a duration.
func (m MEUP) ProposalTTL() time.Duration { return seconds(m.ProposalTTLSecs) }

// Outbox is the [outbox] table: reliable sends (retries, circuit breaker,
// dead letters).
type Outbox struct {
	// Backoff is the comma-separated waits after the 1st, 2nd, …
	// failed attempt of an envelope; the last repeats.
	Backoff string `toml:"backoff"`
	// MaxAttempts failed attempts make an envelope a dead letter.
	MaxAttempts int `toml:"max_attempts"`
	// BreakerFailures consecutive failed rounds open a peer's breaker.
	BreakerFailures int `toml:"breaker_failures"`
	// BreakerOpenSecs is how long an open breaker waits before its probe.
	BreakerOpenSecs int `toml:"breaker_open_secs"`
	// MaxEntries and MaxBytes bound the queued envelopes.
	MaxEntries int `toml:"max_entries"`
	MaxBytes   int `toml:"max_bytes"`
	// DefaultTTLSecs is the time-to-live of reliable sends that give
	// none; 0 means none.
	DefaultTTLSecs int `toml:"default_ttl_secs"`
	// DeadLettersMax is how many dead letters are kept (the oldest go
	// first); DeadLetterHours how long each is kept.
	DeadLettersMax  int `toml:"dead_letters_max"`
	DeadLetterHours int `toml:"dead_letter_hours"`
}

// Audit is the [audit] table: the audit log (audit.log in the home).
type Audit struct {
	// Enabled turns the audit log on.
	Enabled bool `toml:"enabled"`
	// Bodies records message bodies, request params and results too.
	Bodies bool `toml:"bodies"`
	// MaxBytes is the size at which audit.log is rotated to audit.log.1.
	MaxBytes int `toml:"max_bytes"`
}

// BackoffDurations parses Backoff. [Config.Validate] reports the same
// errors.
func (o Outbox) BackoffDurations() ([]time.Duration, error) {
	parts := strings.Split(o.Backoff, ",")
	if len(parts) > MaxBackoffSteps {
		return nil, fmt.Errorf("at most %d steps, got %d", MaxBackoffSteps, len(parts))
	}
	out := make([]time.Duration, 0, len(parts))
	for _, p := range parts {
		d, err := time.ParseDuration(strings.TrimSpace(p))
		if err != nil {
			return nil, fmt.Errorf("step %q: want a duration such as 0s, 5s, 1m or 1h", strings.TrimSpace(p))
		}
		if d < 0 || d > MaxTimeoutSecs*time.Second {
			return nil, fmt.Errorf("step %s: must be between 0s and one week", d)
		}
		out = append(out, d)
	}
	return out, nil
}

// BreakerOpen returns breaker_open_secs as a duration.
func (o Outbox) BreakerOpen() time.Duration { return seconds(o.BreakerOpenSecs) }

// DefaultTTL returns default_ttl_secs as a duration (0: none).
func (o Outbox) DefaultTTL() time.Duration { return seconds(o.DefaultTTLSecs) }

// Store is the [store] table: where received items are kept.
type Store struct {
	// Mode is "sqlite" (durable, the default) or "memory".
	Mode string `toml:"mode"`
	// DedupWindowHours is how long (sender, id) pairs are remembered to
	// drop repeats, across restarts.
	DedupWindowHours int `toml:"dedup_window_hours"`
	// HistoryHours is how long acknowledged items are kept.
	HistoryHours int `toml:"history_hours"`
	// HistoryMaxBytes bounds the payload bytes of acknowledged items
	// kept; the oldest go first.
	HistoryMaxBytes int `toml:"history_max_bytes"`
}

// Comms is the [comms] table: listeners and the limits of the links.
type Comms struct {
	// ListenUDS is the Unix socket path: "" means <home>/meerkat.sock,
	// "off" disables the Unix socket listener; {name} is substituted.
	ListenUDS string `toml:"listen_uds"`
	// ListenTCP is "host:port", or "" for no TCP listener.
	ListenTCP string `toml:"listen_tcp"`
	// AdvertiseTCP is the "host:port" other nodes reach the TCP listener
	// at, carried by pairing lines and discovery announcements instead
	// of the listen address; "" means the listen address. A listener on
	// all interfaces (0.0.0.0, ::) needs it for pairing over TCP.
	AdvertiseTCP string `toml:"advertise_tcp"`
	// TCPPlaintext is "allow" (the default) or "refuse": whether plaintext
	// TCP (tcp:// peers, which speak the reference protocol) is accepted
	// and dialled. TLS (tls://) and Unix sockets are not affected.
	TCPPlaintext string `toml:"tcp_plaintext"`
	// AckTimeoutSecs is how long a send waits for the peer's ack.
	AckTimeoutSecs int `toml:"ack_timeout_secs"`
	// MaxMessageBytes is the largest frame payload accepted or sent.
	MaxMessageBytes int `toml:"max_message_bytes"`
	// FrameTimeoutSecs is how long a frame may take from its first byte.
	FrameTimeoutSecs int `toml:"frame_timeout_secs"`
	// IdleTimeoutSecs is how long an inbound connection may stay idle.
	IdleTimeoutSecs int `toml:"idle_timeout_secs"`
	// MaxConnections bounds concurrent inbound connections.
	MaxConnections int `toml:"max_connections"`
	// InboxMax bounds the inbox; a full inbox refuses admission (no ack).
	InboxMax int `toml:"inbox_max"`
	// InboxMaxBytes bounds the inbox by size as well.
	InboxMaxBytes int `toml:"inbox_max_bytes"`
	// PeerInboxShare is the percentage of the inbox (items and bytes)
	// that the peers holding items in it share once it is over half
	// full: each may then hold at most PeerInboxShare% divided by their
	// number.
	PeerInboxShare int `toml:"peer_inbox_share"`
	// PeerMaxConnections bounds one peer's authenticated inbound
	// connections.
	PeerMaxConnections int `toml:"peer_max_connections"`
}

// RefusePlaintext reports whether tcp_plaintext is "refuse".
func (c Comms) RefusePlaintext() bool { return c.TCPPlaintext == Refuse }

// Default returns the built-in configuration: node "meerkat", a Unix socket
// in the home, no TCP listener, and the default limits.
func Default() Config {
	return Config{
		Name: DefaultName,
		Comms: Comms{
			AckTimeoutSecs:     DefaultAckTimeoutSecs,
			MaxMessageBytes:    DefaultMaxMessageBytes,
			FrameTimeoutSecs:   DefaultFrameTimeoutSecs,
			IdleTimeoutSecs:    DefaultIdleTimeoutSecs,
			MaxConnections:     DefaultMaxConnections,
			InboxMax:           DefaultInboxMax,
			InboxMaxBytes:      DefaultInboxMaxBytes,
			PeerInboxShare:     DefaultPeerInboxShare,
			PeerMaxConnections: DefaultPeerMaxConns,
			TCPPlaintext:       DefaultTCPPlaintext,
		},
		Store: Store{
			Mode:             DefaultStoreMode,
			DedupWindowHours: DefaultDedupWindowHours,
			HistoryHours:     DefaultHistoryHours,
			HistoryMaxBytes:  DefaultHistoryMaxBytes,
		},
		Outbox: Outbox{
			Backoff:         DefaultOutboxBackoff,
			MaxAttempts:     DefaultOutboxMaxAttempts,
			BreakerFailures: DefaultOutboxBreakerFailures,
			BreakerOpenSecs: DefaultOutboxBreakerOpenSecs,
			MaxEntries:      DefaultOutboxMaxEntries,
			MaxBytes:        DefaultOutboxMaxBytes,
			DeadLettersMax:  DefaultDeadLettersMax,
			DeadLetterHours: DefaultDeadLetterHours,
		},
		Audit:   Audit{Enabled: true, MaxBytes: DefaultAuditMaxBytes},
		MEUP:    MEUP{Protocol: DefaultMEUPProtocol, ProposalTTLSecs: DefaultProposalTTLSecs},
		MCP:     MCP{Pairing: DefaultMCPPairing},
		Metrics: Metrics{Listen: DefaultMetricsListen},
		Log:     Log{Level: DefaultLogLevel, Format: DefaultLogFormat},
		Agent: Agent{
			IdempotencyWindowSecs: DefaultIdempotencyWindowSecs,
			SentHistoryHours:      DefaultSentHistoryHours,
			NotifyIntervalMS:      DefaultNotifyIntervalMS,
			LoopMaxExchanges:      DefaultLoopMaxExchanges,
			LoopFastMS:            DefaultLoopFastMS,
			LoopHoldSecs:          DefaultLoopHoldSecs,
		},
		NATS: NATS{
			SubjectPrefix:    DefaultNATSSubjectPrefix,
			Stream:           DefaultNATSStream,
			StreamMaxAgeSecs: DefaultNATSStreamMaxAgeSecs,
			StreamMaxBytes:   DefaultNATSStreamMaxBytes,
			StreamMaxMsgs:    DefaultNATSStreamMaxMsgs,
			StreamReplicas:   DefaultNATSStreamReplicas,
			DedupWindowSecs:  DefaultNATSDedupWindowSecs,
			ReconnectWaitMS:  DefaultNATSReconnectWaitMS,
			ConnectTimeoutMS: DefaultNATSConnectTimeoutMS,
		},
	}
}

// AckTimeout returns ack_timeout_secs as a duration. Like the other
// duration helpers it clamps values that [Config.Validate] rejects into
// 0..MaxTimeoutSecs seconds instead of overflowing.
func (c Comms) AckTimeout() time.Duration { return seconds(c.AckTimeoutSecs) }

// FrameTimeout returns frame_timeout_secs as a duration.
func (c Comms) FrameTimeout() time.Duration { return seconds(c.FrameTimeoutSecs) }

// IdleTimeout returns idle_timeout_secs as a duration.
func (c Comms) IdleTimeout() time.Duration { return seconds(c.IdleTimeoutSecs) }

// seconds converts a validated timeout; out-of-range values (which
// Validate rejects) are clamped rather than overflowing.
// millis is n milliseconds, clamped like seconds.
func millis(n int) time.Duration {
	n = max(0, min(n, MaxTimeoutSecs*1000))
	return time.Duration(n) * time.Millisecond
}

func seconds(n int) time.Duration {
	n = max(0, min(n, MaxTimeoutSecs))
	return time.Duration(n) * time.Second
}
