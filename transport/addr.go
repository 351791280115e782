package transport

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"net/url"
	"path/filepath"
	"strconv"
	"strings"
)

// DefaultTCPPort is the port of a tcp:// address that names none.
const DefaultTCPPort = 4200

// Address schemes.
const (
	SchemeUDS = "uds"
	SchemeTCP = "tcp" // plaintext TCP (what the reference implementation speaks)
	SchemeTLS = "tls" // TCP carrying TLS 1.3 with pinned node keys (tls.go)
	// SchemeNATS: the peer is reached through this node's NATS
	// connection (the [nats] configuration), on the peer's own subject.
	// Its text form is "nats:"; it has no host, port or path.
	SchemeNATS = "nats"
)

// Errors from address parsing. The returned errors wrap them and quote the
// input.
var (
	// ErrUnsupportedScheme means the address has no scheme or one other
	// than uds://, tcp:// and tls://.
	ErrUnsupportedScheme = errors.New("transport: unsupported address scheme (want uds://, tcp://, tls:// or nats:)")
	// ErrBadAddr means the address has a known scheme but is malformed.
	ErrBadAddr = errors.New("transport: malformed address")
	// ErrPathTooLong means a Unix socket path is longer than this
	// system allows ([MaxUDSPath]). An error that wraps it also matches
	// ErrBadAddr.
	ErrPathTooLong = errors.New("transport: socket path too long")
)

// CheckUDSPath returns nil if path fits the system's limit on a Unix
// socket path, [MaxUDSPath] bytes, and otherwise an error that matches
// [ErrPathTooLong] and [ErrBadAddr] and says how long path is and what
// the limit is.
func CheckUDSPath(path string) error {
	if len(path) <= MaxUDSPath {
		return nil
	}
	return &pathTooLongError{path: path}
}

// pathTooLongError is CheckUDSPath's error.
type pathTooLongError struct{ path string }

func (e *pathTooLongError) Error() string {
	return fmt.Sprintf("transport: socket path too long: %q is %d bytes, over this system's limit of %d", e.path, len(e.path), MaxUDSPath)
}

func (e *pathTooLongError) Is(target error) bool {
	return target == ErrPathTooLong || target == ErrBadAddr
}

// Addr is a parsed peer or listener address: a Unix socket path, or a TCP
// host and port reached in plaintext (tcp) or over TLS (tls). The zero
// Addr is invalid. Addr is comparable.
type Addr struct {
	Scheme string // SchemeUDS, SchemeTCP or SchemeTLS
	Path   string // uds: absolute, cleaned socket path
	Host   string // tcp, tls: host name or IP literal, without brackets
	Port   uint16 // tcp, tls
}

// ParseAddr parses "uds:///abs/path.sock", "tcp://host[:port]" or
// "tls://host[:port]" (IPv6 literals in brackets; port 4200 when absent).
// Relative UDS paths, empty hosts, bad ports, and extra parts (user,
// query, fragment) are refused.
func ParseAddr(s string) (Addr, error) {
	bad := func(why string) (Addr, error) {
		return Addr{}, fmt.Errorf("%w %q: %s", ErrBadAddr, s, why)
	}
	if strings.EqualFold(s, SchemeNATS+":") {
		return Addr{Scheme: SchemeNATS}, nil
	}
	scheme, rest, ok := strings.Cut(s, "://")
	if strings.EqualFold(scheme, SchemeNATS) && ok {
		return bad(`a peer reached through NATS has the address "nats:" (the servers are this node's [nats] configuration)`)
	}
	if !ok {
		return Addr{}, fmt.Errorf("%w: %q", ErrUnsupportedScheme, s)
	}
	switch strings.ToLower(scheme) {
	case SchemeUDS:
		if rest == "" || !strings.HasPrefix(rest, "/") {
			return bad("a uds path must be absolute (uds:///path/to.sock)")
		}
		if strings.ContainsAny(rest, "?#\x00") {
			return bad("a uds path may not contain '?', '#' or NUL")
		}
		clean := filepath.Clean(rest)
		if clean == "/" {
			return bad("a uds path must name a socket file")
		}
		if err := CheckUDSPath(clean); err != nil {
			return Addr{}, err
		}
		return Addr{Scheme: SchemeUDS, Path: clean}, nil
	case SchemeTCP, SchemeTLS:
		scheme = strings.ToLower(scheme)
		u, err := url.Parse(scheme + "://" + rest)
		if err != nil {
			return bad(err.Error())
		}
		if u.User != nil || u.RawQuery != "" || u.Fragment != "" || (u.Path != "" && u.Path != "/") || u.Opaque != "" {
			return bad("a " + scheme + " address is only host and port")
		}
		host := u.Hostname()
		if host == "" {
			return bad("missing host")
		}
		if strings.Count(u.Host, ":") > 1 && !strings.HasPrefix(u.Host, "[") {
			return bad("an IPv6 address goes in brackets: " + scheme + "://[::1]:4200")
		}
		if strings.Contains(host, ":") {
			ip, err := netip.ParseAddr(host)
			if err != nil {
				return bad("bad IPv6 literal")
			}
			if ip.Zone() != "" {
				return bad("IPv6 zones are not supported")
			}
		}
		port := DefaultTCPPort
		if p := u.Port(); p != "" {
			n, err := strconv.Atoi(p)
			if err != nil || n < 1 || n > 65535 {
				return bad("port must be 1-65535")
			}
			port = n
		} else if strings.HasSuffix(u.Host, ":") {
			return bad("empty port")
		}
		return Addr{Scheme: scheme, Host: host, Port: uint16(port)}, nil
	}
	return Addr{}, fmt.Errorf("%w: %q", ErrUnsupportedScheme, s)
}

// String returns the canonical text form.
func (a Addr) String() string {
	switch a.Scheme {
	case SchemeUDS:
		return "uds://" + a.Path
	case SchemeTCP, SchemeTLS:
		return a.Scheme + "://" + net.JoinHostPort(a.Host, strconv.Itoa(int(a.Port)))
	case SchemeNATS:
		return "nats:"
	}
	return ""
}

// OverTCP reports whether a is reached over TCP: tcp:// or tls://.
func (a Addr) OverTCP() bool { return a.Scheme == SchemeTCP || a.Scheme == SchemeTLS }

// WithScheme returns a TCP address with the other TCP scheme: tcp:// and
// tls:// name the same port. Other addresses are returned unchanged.
func (a Addr) WithScheme(scheme string) Addr {
	if a.OverTCP() && (scheme == SchemeTCP || scheme == SchemeTLS) {
		a.Scheme = scheme
	}
	return a
}

// Network returns the net package's network name: "unix" or "tcp".
func (a Addr) Network() string {
	if a.Scheme == SchemeUDS {
		return "unix"
	}
	return "tcp"
}

// Address returns the address in the net package's form: the socket path
// or host:port.
func (a Addr) Address() string {
	if a.Scheme == SchemeUDS {
		return a.Path
	}
	return net.JoinHostPort(a.Host, strconv.Itoa(int(a.Port)))
}

// MarshalText implements encoding.TextMarshaler.
func (a Addr) MarshalText() ([]byte, error) {
	if a.Scheme == "" {
		return nil, fmt.Errorf("%w: empty address", ErrBadAddr)
	}
	return []byte(a.String()), nil
}

// UnmarshalText implements encoding.TextUnmarshaler with [ParseAddr].
func (a *Addr) UnmarshalText(b []byte) error {
	p, err := ParseAddr(string(b))
	if err != nil {
		return err
	}
	*a = p
	return nil
}
