package config

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"net/url"
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
	add("comms.max_message_bytes", checkRange(c.Comms.MaxMessageBytes, transport.MinFrameLimit, transport.MaxFrameSize))
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
	errs = append(errs, c.NATS.validate()...)
	return errors.Join(errs...)
}

// CheckPassword returns an [*Error] for nats.password when nats.user is
// set without it. It is not part of [Config.Validate]: the password is
// often given only to the daemon (MEERKAT_NATS_PASSWORD in its
// environment), and commands that reach the daemon, or run no node of
// their own that connects to NATS, do not need it; the node that
// connects, and config check, ask for it.
func (n NATS) CheckPassword() error {
	if n.Enabled() && n.User != "" && n.Password == "" {
		return &Error{Key: "nats.password", Err: errors.New("must be set with nats.user (or in MEERKAT_NATS_PASSWORD)")}
	}
	return nil
}

// validate checks the [nats] table; each error is an [*Error] naming its
// key. The files are not opened: their paths are only checked for form.
func (n NATS) validate() []error {
	var errs []error
	add := func(key string, err error) {
		if err != nil {
			errs = append(errs, &Error{Key: "nats." + key, Err: err})
		}
	}
	_, err := n.ServerURLs()
	add("servers", err)

	// One authentication method at most; the later ones are reported.
	var methods []string
	for _, m := range []struct {
		key string
		set bool
	}{
		{"creds_file", n.CredsFile != ""},
		{"nkey_seed_file", n.NKeySeedFile != ""},
		{"user", n.User != "" || n.Password != ""},
	} {
		if !m.set {
			continue
		}
		if len(methods) > 0 {
			add(m.key, fmt.Errorf("nats.%s is set too: use one of creds_file, nkey_seed_file, or user with password", methods[0]))
		}
		methods = append(methods, m.key)
	}
	if n.User == "" && n.Password != "" {
		// Under the key that is set, so that the error names where it
		// came from (the file, or MEERKAT_NATS_PASSWORD).
		add("password", errors.New("needs nats.user too"))
	}
	add("creds_file", checkFilePath(n.CredsFile))
	add("nkey_seed_file", checkFilePath(n.NKeySeedFile))
	add("tls_ca", checkFilePath(n.TLSCA))
	add("tls_cert", checkFilePath(n.TLSCert))
	add("tls_key", checkFilePath(n.TLSKey))
	switch { // under the key that is set: the error names where it came from
	case n.TLSCert != "" && n.TLSKey == "":
		add("tls_cert", errors.New("needs nats.tls_key (its private key) too"))
	case n.TLSCert == "" && n.TLSKey != "":
		add("tls_key", errors.New("needs nats.tls_cert (the client certificate) too"))
	}
	add("subject_prefix", checkSubjectPrefix(n.SubjectPrefix))
	add("stream", checkStreamName(n.Stream))
	add("stream_max_age_secs", checkRange(n.StreamMaxAgeSecs, 1, MaxNATSStreamMaxAgeSecs))
	add("stream_max_bytes", checkLimit(n.StreamMaxBytes))
	add("stream_max_msgs", checkLimit(n.StreamMaxMsgs))
	add("stream_replicas", checkRange(n.StreamReplicas, 1, MaxNATSStreamReplicas))
	if err := checkRange(n.DedupWindowSecs, 1, MaxTimeoutSecs); err != nil {
		add("dedup_window_secs", err)
	} else if n.DedupWindowSecs > n.StreamMaxAgeSecs && n.StreamMaxAgeSecs > 0 {
		add("dedup_window_secs", fmt.Errorf("must be at most nats.stream_max_age_secs (%d), got %d", n.StreamMaxAgeSecs, n.DedupWindowSecs))
	}
	add("reconnect_wait_ms", checkRange(n.ReconnectWaitMS, 1, MaxTimeoutSecs*1000))
	add("connect_timeout_ms", checkRange(n.ConnectTimeoutMS, 1, MaxTimeoutSecs*1000))
	return errs
}

// ServerURLs returns nats.servers with their scheme: host:port becomes
// nats://host:port. Each must be nats://host:port or tls://host:port with
// a port from 1 to 65535 and nothing else (no user, path, query or
// fragment); at most [MaxNATSServers], no repeats. [Config.Validate]
// reports the same errors. No servers gives nil: NATS is off.
func (n NATS) ServerURLs() ([]string, error) {
	if len(n.Servers) > MaxNATSServers {
		return nil, fmt.Errorf("at most %d servers, got %d", MaxNATSServers, len(n.Servers))
	}
	var out, bad []string
	for _, s := range n.Servers {
		u, err := parseNATSURL(s)
		if err != nil {
			bad = append(bad, err.Error())
			continue
		}
		if slices.Contains(out, u) {
			bad = append(bad, fmt.Sprintf("%q is listed twice", s))
			continue
		}
		out = append(out, u)
	}
	if len(bad) > 0 {
		return nil, errors.New(strings.Join(bad, "; "))
	}
	return out, nil
}

// withoutUserinfo is the server URL s with everything from after its
// scheme up to its last "@" replaced by "***": user information
// ("user:password@") whatever characters the password holds. (A URL
// with an "@" elsewhere is refused anyway.)
func withoutUserinfo(s string) string {
	at := strings.LastIndex(s, "@")
	if at < 0 {
		return s
	}
	scheme := ""
	if i := strings.Index(s, "://"); i >= 0 && i < at {
		scheme = s[:i+3]
	}
	return scheme + "***" + s[at:]
}

// parseNATSURL checks one server URL and returns it as scheme://host:port.
func parseNATSURL(s string) (string, error) {
	const want = "want nats://host:port, tls://host:port or host:port"
	shown := withoutUserinfo(s) // messages never repeat a password
	if s == "" {
		return "", fmt.Errorf("an empty server: %s", want)
	}
	if strings.IndexFunc(s, func(r rune) bool { return r <= ' ' || r == 0x7f }) >= 0 {
		return "", fmt.Errorf("%q contains white space or a control character", shown)
	}
	full := s
	if !strings.Contains(s, "://") {
		full = "nats://" + s
	}
	u, err := url.Parse(full)
	if err != nil {
		return "", fmt.Errorf("%q: %s", shown, want)
	}
	switch {
	case u.Scheme != "nats" && u.Scheme != "tls":
		return "", fmt.Errorf("%q: scheme %q is not nats or tls; %s", shown, u.Scheme, want)
	case u.User != nil:
		return "", fmt.Errorf("%q: credentials do not belong in the URL; use nats.user and nats.password, nats.creds_file or nats.nkey_seed_file", shown)
	case u.Opaque != "" || u.Path != "" || u.RawQuery != "" || u.ForceQuery || u.Fragment != "" || strings.Contains(full, "#"):
		return "", fmt.Errorf("%q: no path, query or fragment; %s", shown, want)
	}
	host, port, err := net.SplitHostPort(u.Host)
	if err != nil {
		return "", fmt.Errorf("%q: %s", shown, want)
	}
	if host == "" {
		return "", fmt.Errorf("%q has no host; %s", shown, want)
	}
	if n, err := strconv.Atoi(port); err != nil || n < 1 || n > 65535 || port[0] < '0' || port[0] > '9' {
		return "", fmt.Errorf("%q: port must be a number in 1-65535", shown)
	}
	return u.Scheme + "://" + net.JoinHostPort(host, port), nil
}

// checkFilePath accepts "" (not set) or a path; '~' is not expanded.
func checkFilePath(p string) error {
	switch {
	case p == "":
		return nil
	case strings.HasPrefix(p, "~"):
		return fmt.Errorf("%q: '~' is not expanded; use an absolute path or one relative to the home directory", p)
	case strings.ContainsRune(p, 0):
		return fmt.Errorf("%q contains a NUL byte", p)
	}
	return nil
}

// checkSubjectPrefix accepts NATS subject tokens of [A-Za-z0-9_-] joined
// by '.': no wildcards, white space or empty tokens.
func checkSubjectPrefix(s string) error {
	if s == "" {
		return errors.New("must not be empty")
	}
	if len(s) > MaxNATSSubjectPrefixLen {
		return fmt.Errorf("longer than %d bytes", MaxNATSSubjectPrefixLen)
	}
	for i, tok := range strings.Split(s, ".") {
		if tok == "" {
			return fmt.Errorf("%q: token %d is empty (a leading, trailing or doubled '.')", s, i+1)
		}
		if !isToken(tok) {
			return fmt.Errorf("%q: token %q may contain only letters, digits, '_' and '-'", s, tok)
		}
	}
	return nil
}

// checkStreamName accepts a JetStream stream name of [A-Za-z0-9_-].
func checkStreamName(s string) error {
	switch {
	case s == "":
		return errors.New("must not be empty")
	case len(s) > MaxNATSStreamLen:
		return fmt.Errorf("longer than %d bytes", MaxNATSStreamLen)
	case !isToken(s):
		return fmt.Errorf("%q may contain only letters, digits, '_' and '-'", s)
	}
	return nil
}

func isToken(s string) bool {
	for _, r := range s {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '_' || r == '-') {
			return false
		}
	}
	return s != ""
}

// checkLimit accepts a positive limit or -1 (no limit).
func checkLimit(n int) error {
	if n < 1 && n != NATSUnlimited {
		return fmt.Errorf("must be at least 1, or -1 for no limit, got %d", n)
	}
	return nil
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
	if host, port, err := net.SplitHostPort(s); err == nil && host == "" {
		return transport.Addr{}, fmt.Errorf("%q has no host: give the name or IP address other nodes reach this one at, like 192.0.2.10:%s", s, port)
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
	if scheme, _, ok := strings.Cut(s, "://"); ok {
		return transport.Addr{}, fmt.Errorf("%q: give host:port without %s:// (like 127.0.0.1:4200 or [::1]:4200)", s, scheme)
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
