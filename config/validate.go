package config

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/meerkatd/meerkatd/transport"
)

// Validate checks every key and returns all problems joined with
// errors.Join, each an [*Error] naming its key, or nil. Once a Config
// validates, [Config.Resolve] can fail only because of the home it is given.
func (c Config) Validate() error {
	var errs []error
	add := func(key string, err error) {
		if err != nil {
			errs = append(errs, &Error{Key: key, Err: err})
		}
	}
	add("name", checkName(c.Name))
	_, err := c.udsPath("/")
	add("comms.listen_uds", err)
	_, err = c.tcpAddr()
	add("comms.listen_tcp", err)
	_, err = c.AdvertiseTCPAddr()
	add("comms.advertise_tcp", err)
	if c.Comms.TCPPlaintext != Allow && c.Comms.TCPPlaintext != Refuse {
		add("comms.tcp_plaintext", fmt.Errorf("must be %q or %q, got %q", Allow, Refuse, c.Comms.TCPPlaintext))
	}
	add("comms.ack_timeout_secs", checkRange(c.Comms.AckTimeoutSecs, 1, MaxTimeoutSecs))
	add("comms.max_message_bytes", checkRange(c.Comms.MaxMessageBytes, 1, transport.MaxFrameSize))
	add("comms.frame_timeout_secs", checkRange(c.Comms.FrameTimeoutSecs, 1, MaxTimeoutSecs))
	add("comms.idle_timeout_secs", checkRange(c.Comms.IdleTimeoutSecs, 1, MaxTimeoutSecs))
	add("comms.max_connections", checkMin(c.Comms.MaxConnections, 1))
	add("comms.inbox_max", checkMin(c.Comms.InboxMax, 1))
	add("comms.inbox_max_bytes", checkMin(c.Comms.InboxMaxBytes, 1))
	add("comms.peer_inbox_share", checkRange(c.Comms.PeerInboxShare, 1, 100))
	add("comms.peer_max_connections", checkMin(c.Comms.PeerMaxConnections, 1))
	if c.Store.Mode != StoreSQLite && c.Store.Mode != StoreMemory {
		add("store.mode", fmt.Errorf("must be %q or %q, got %q", StoreSQLite, StoreMemory, c.Store.Mode))
	}
	add("store.dedup_window_hours", checkRange(c.Store.DedupWindowHours, 1, 24*365))
	add("store.history_hours", checkRange(c.Store.HistoryHours, 1, 24*365))
	add("store.history_max_bytes", checkMin(c.Store.HistoryMaxBytes, 1))
	_, err = c.Outbox.BackoffDurations()
	add("outbox.backoff", err)
	add("outbox.max_attempts", checkRange(c.Outbox.MaxAttempts, 1, 1_000_000))
	add("outbox.breaker_failures", checkRange(c.Outbox.BreakerFailures, 1, 1_000_000))
	add("outbox.breaker_open_secs", checkRange(c.Outbox.BreakerOpenSecs, 1, MaxTimeoutSecs))
	add("outbox.max_entries", checkMin(c.Outbox.MaxEntries, 1))
	add("outbox.max_bytes", checkMin(c.Outbox.MaxBytes, 1))
	add("outbox.default_ttl_secs", checkRange(c.Outbox.DefaultTTLSecs, 0, MaxTimeoutSecs))
	add("outbox.dead_letters_max", checkMin(c.Outbox.DeadLettersMax, 1))
	add("outbox.dead_letter_hours", checkRange(c.Outbox.DeadLetterHours, 1, 24*365))
	add("audit.max_bytes", checkMin(c.Audit.MaxBytes, 4096))
	if !slices.Contains(MEUPProtocols, c.MEUP.Protocol) {
		add("meup.protocol", fmt.Errorf("must be one of %s, got %q", strings.Join(MEUPProtocols, ", "), c.MEUP.Protocol))
	}
	add("meup.proposal_ttl_secs", checkRange(c.MEUP.ProposalTTLSecs, 1, MaxTimeoutSecs))
	if c.MCP.Pairing != On && c.MCP.Pairing != Off {
		add("mcp.pairing", fmt.Errorf("must be %q or %q, got %q", On, Off, c.MCP.Pairing))
	}
	add("metrics.listen", checkMetricsListen(c.Metrics.Listen))
	if !slices.Contains(LogLevels, c.Log.Level) {
		add("log.level", fmt.Errorf("must be one of %s, got %q", strings.Join(LogLevels, ", "), c.Log.Level))
	}
	if c.Log.Format != LogText && c.Log.Format != LogJSON {
		add("log.format", fmt.Errorf("must be %q or %q, got %q", LogText, LogJSON, c.Log.Format))
	}
	add("agent.idempotency_window_secs", checkRange(c.Agent.IdempotencyWindowSecs, 60, MaxTimeoutSecs))
	add("agent.sent_history_hours", checkRange(c.Agent.SentHistoryHours, 1, MaxHistoryHours))
	add("agent.notify_interval_ms", checkRange(c.Agent.NotifyIntervalMS, 0, 60_000))
	add("agent.loop_max_exchanges", checkRange(c.Agent.LoopMaxExchanges, 0, 1_000_000))
	add("agent.loop_fast_ms", checkRange(c.Agent.LoopFastMS, 1, 600_000))
	add("agent.loop_hold_secs", checkRange(c.Agent.LoopHoldSecs, 1, MaxTimeoutSecs))
	return errors.Join(errs...)
}

// checkMetricsListen accepts "" (off) or host:port with a port from 0
// (any free one) to 65535; the host may be empty (every interface), a
// name or an IP.
func checkMetricsListen(s string) error {
	if s == "" {
		return nil
	}
	host, port, err := net.SplitHostPort(s)
	if err != nil {
		return fmt.Errorf("must be host:port, e.g. 127.0.0.1:9464: %w", err)
	}
	if strings.ContainsAny(host, "/ ") {
		return fmt.Errorf("must be host:port, e.g. 127.0.0.1:9464, got %q", s)
	}
	if p, err := strconv.Atoi(port); err != nil || p < 0 || p > 65535 {
		return fmt.Errorf("port must be a number from 0 to 65535, got %q", port)
	}
	return nil
}

func checkRange(n, lo, hi int) error {
	if n < lo || n > hi {
		return fmt.Errorf("must be between %d and %d, got %d", lo, hi, n)
	}
	return nil
}

func checkMin(n, lo int) error {
	if n < lo {
		return fmt.Errorf("must be at least %d, got %d", lo, n)
	}
	return nil
}

// checkName accepts a safe token: it is used in file names.
func checkName(name string) error {
	switch {
	case name == "":
		return errors.New("must not be empty")
	case len(name) > MaxNameLen:
		return fmt.Errorf("longer than %d bytes", MaxNameLen)
	case name == "." || name == "..":
		return fmt.Errorf("%q is not a usable name", name)
	}
	for _, r := range name {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '.' || r == '_' || r == '-') {
			return fmt.Errorf("%q may contain only letters, digits, '.', '_' and '-'", name)
		}
	}
	return nil
}

// Listeners are the effective listen addresses of a [Config] for one home.
// A zero [transport.Addr] (Scheme "") means that listener is off.
type Listeners struct {
	UDS transport.Addr // uds:///abs/path, or zero when listen_uds is "off"
	TCP transport.Addr // tcp://host:port, or zero when listen_tcp is ""
}

// All returns the enabled addresses, UDS first.
func (l Listeners) All() []transport.Addr {
	var out []transport.Addr
	for _, a := range [...]transport.Addr{l.UDS, l.TCP} {
		if a.Scheme != "" {
			out = append(out, a)
		}
	}
	return out
}

// Resolve returns the listen addresses for the node whose home directory
// is home: {name} in comms.listen_uds is replaced by the node name, and an
// empty comms.listen_uds means home/meerkat.sock. home must be absolute
// when the default socket is used. Errors are [*Error]s naming the key;
// Resolve checks only the listener keys (use [Config.Validate] for all).
func (c Config) Resolve(home string) (Listeners, error) {
	var l Listeners
	var errs []error
	uds, err := c.udsPath(home)
	if err != nil {
		errs = append(errs, &Error{Key: "comms.listen_uds", Err: err})
	} else if uds != "" {
		if l.UDS, err = transport.ParseAddr("uds://" + uds); err != nil {
			errs = append(errs, &Error{Key: "comms.listen_uds", Err: err})
		}
	}
	if l.TCP, err = c.tcpAddr(); err != nil {
		errs = append(errs, &Error{Key: "comms.listen_tcp", Err: err})
	}
	if err := errors.Join(errs...); err != nil {
		return Listeners{}, err
	}
	return l, nil
}

// udsPath returns the socket path after substitution, or "" when the UDS
// listener is off.
func (c Config) udsPath(home string) (string, error) {
	p := c.Comms.ListenUDS
	switch p {
	case UDSOff:
		return "", nil
	case "":
		if !filepath.IsAbs(home) {
			return "", fmt.Errorf("the home directory %q is not absolute", home)
		}
		p = filepath.Join(home, DefaultSocketName)
	default:
		if strings.Contains(p, NamePlaceholder) {
			if err := checkName(c.Name); err != nil { // the name becomes part of a path
				return "", fmt.Errorf("{name}: %w", err)
			}
		}
		p = strings.ReplaceAll(p, NamePlaceholder, c.Name)
		if strings.HasPrefix(p, "~") {
			return "", fmt.Errorf("%q: '~' is not expanded; use an absolute path", p)
		}
		if !filepath.IsAbs(p) {
			return "", fmt.Errorf("%q is not an absolute path (or \"\" for the default, %q to disable)", p, UDSOff)
		}
	}
	if _, err := transport.ParseAddr("uds://" + p); err != nil {
		return "", err
	}
	return p, nil
}

// tcpAddr parses comms.listen_tcp; "" gives the zero Addr.
func (c Config) tcpAddr() (transport.Addr, error) {
	return parseHostPort(c.Comms.ListenTCP)
}

// AdvertiseTCPAddr returns comms.advertise_tcp as a tcp:// address, the
// zero Addr when it is "" (other nodes are given the listen address).
// It must name a host other nodes can dial, not a wildcard; without a
// TCP listener it is not used.
func (c Config) AdvertiseTCPAddr() (transport.Addr, error) {
	s := c.Comms.AdvertiseTCP
	if s == "" {
		return transport.Addr{}, nil
	}
	a, err := parseHostPort(s)
	if err != nil {
		return transport.Addr{}, err
	}
	if IsWildcard(a) {
		return transport.Addr{}, fmt.Errorf("%q is a wildcard address, which no other node can dial: give this host's name or IP address", s)
	}
	return a, nil
}

// IsWildcard reports whether a is a TCP address on all interfaces
// (0.0.0.0 or ::): good to listen on, useless to dial from elsewhere.
func IsWildcard(a transport.Addr) bool {
	if a.Scheme != transport.SchemeTCP {
		return false
	}
	ip, err := netip.ParseAddr(a.Host)
	return err == nil && ip.IsUnspecified()
}

// parseHostPort parses a host:port key; "" gives the zero Addr.
func parseHostPort(s string) (transport.Addr, error) {
	if s == "" {
		return transport.Addr{}, nil
	}
	host, port, err := net.SplitHostPort(s)
	if err != nil {
		return transport.Addr{}, fmt.Errorf("%q is not host:port (like 127.0.0.1:4200 or [::1]:4200): %v", s, err)
	}
	if host == "" {
		return transport.Addr{}, fmt.Errorf("%q has no host; use 0.0.0.0:%s or [::]:%s to listen on all interfaces", s, port, port)
	}
	if n, err := strconv.Atoi(port); err != nil || n < 1 || n > 65535 || port[0] < '0' || port[0] > '9' {
		return transport.Addr{}, fmt.Errorf("%q: port must be a number in 1-65535", s)
	}
	a, err := transport.ParseAddr("tcp://" + net.JoinHostPort(host, port))
	if err != nil {
		return transport.Addr{}, err
	}
	return a, nil
}
