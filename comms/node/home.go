package node

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/meerkatd/meerkatd/comms/audit"
	"github.com/meerkatd/meerkatd/comms/natsrelay"
	"github.com/meerkatd/meerkatd/comms/space"
	"github.com/meerkatd/meerkatd/config"
	"github.com/meerkatd/meerkatd/identity"
	"github.com/meerkatd/meerkatd/inbox/store"
	"github.com/meerkatd/meerkatd/internal/filemode"
	"github.com/meerkatd/meerkatd/transport"
	"github.com/meerkatd/meerkatd/trust"
)

// Files in a node's home besides the identity, meerkat.toml and
// trusted_peers.json.
const (
	ControlSocketName = "control.sock" // the control socket
	DBFileName        = "meerkat.db"   // the durable inbox and outbox
)

// ErrNoHome is returned by OpenHome for a home that does not exist (or
// holds no identity) when it was not asked to create one.
var ErrNoHome = errors.New("node: no node home")

// Home is a node's home directory and what it holds: the configuration
// in effect and the identity. It is immutable once opened.
type Home struct {
	Dir    string
	Config config.Config
	// Sources says where each key of Config came from (config show).
	Sources config.Sources
	Key     *identity.Keypair
	load    OpenOptions // how Config was loaded (ConfigChanges loads it so again)
}

// DespiteHome is the home in dir for a command that goes through a
// daemon although the home's configuration does not load (see
// control.DaemonDespite): the default configuration, with a long ack
// timeout, as the daemon's own ends its sends and the command only waits
// for its answer.
func DespiteHome(dir string) *Home {
	h := &Home{Dir: dir, Config: config.Default()}
	h.Config.Comms.AckTimeoutSecs = 600
	return h
}

// ConfigChanges returns the keys whose value the home's meerkat.toml and
// the variables and flags it was opened with give now differs from
// h.Config, the configuration it was opened with: what a running node
// does not apply until it restarts. It returns an error when meerkat.toml
// does not load now.
func (h *Home) ConfigChanges() ([]string, error) {
	o := h.load
	o.Create = false
	cfg, _, err := LoadConfig(h.Dir, o)
	if err != nil {
		return nil, err
	}
	return config.Changed(&h.Config, &cfg), nil
}

// TrustPath is the home's trusted_peers.json.
func (h *Home) TrustPath() string { return filepath.Join(h.Dir, trust.FileName) }

// ControlPath is the home's control socket.
func (h *Home) ControlPath() string { return filepath.Join(h.Dir, ControlSocketName) }

// ResolveHome is the node's home as the commands find it: dir if given,
// else $MEERKAT_HOME, else $XDG_CONFIG_HOME/meerkat, else
// ~/.config/meerkat. A leading ~/ is the user's home directory (MCP
// client configurations pass it literally).
func ResolveHome(dir string, getenv func(string) string) (string, error) {
	expand := func(p string) (string, error) {
		if p == "~" || strings.HasPrefix(p, "~/") {
			home := getenv("HOME")
			if home == "" {
				return "", fmt.Errorf("cannot expand %q: HOME is not set", p)
			}
			p = filepath.Join(home, p[1:])
		}
		return filepath.Abs(p)
	}
	if dir != "" {
		return expand(dir)
	}
	if h := getenv("MEERKAT_HOME"); h != "" {
		return expand(h)
	}
	// The XDG spec has a relative $XDG_CONFIG_HOME ignored.
	if x := getenv("XDG_CONFIG_HOME"); x != "" && filepath.IsAbs(x) {
		return filepath.Join(x, "meerkat"), nil
	}
	home := getenv("HOME")
	if home == "" {
		return "", errors.New("cannot find a home directory: set --home or MEERKAT_HOME")
	}
	return filepath.Join(home, ".config", "meerkat"), nil
}

// Keygen gives the home dir a new identity, creating the home if need be.
// It refuses to replace an existing identity unless force is set: peers
// that trust the old key refuse the node afterwards. It refuses, force or
// not, while a node serves the home (a daemon, or meerkatd mcp running
// the node itself): that node would go on signing with the old key until
// its next start. It holds the home's lock while it writes, so no node
// starts on a half-made identity.
func Keygen(dir string, force bool) error {
	if err := CheckHomePath(dir); err != nil {
		return err
	}
	unlock, err := LockHome(dir)
	switch {
	case errors.Is(err, ErrHomeServed):
		return errorf(CodeUnavailable, "a node serves this home (%s): stop it first, as a running node keeps the identity it started with (meerkatd status --home %s shows it)", dir, dir)
	case errors.Is(err, fs.ErrNotExist): // nothing serves a home that does not exist
	case err != nil:
		return err
	default:
		defer unlock()
	}
	keyPath := filepath.Join(dir, identity.KeyFile)
	if _, err := os.Stat(keyPath); err == nil && !force {
		return &Error{Code: CodeBadArgument, Msg: keyPath + " already holds an identity; use --force to replace it (peers that trust the old key will refuse this node)"}
	}
	if err := lostKey(dir); err != nil && !force {
		return err
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
	_, err = InitHome(dir, "")
	return err
}

// CheckKey reports an error if the identity in the home's directory is no
// longer h.Key (a keygen replaced it since the home was opened).
func (h *Home) CheckKey() error {
	kp, err := identity.LoadKeypair(h.Dir)
	if err != nil {
		return fmt.Errorf("read the identity again: %w", err)
	}
	if h.Key == nil || kp.ID() != h.Key.ID() {
		return errorf(CodeUnavailable, "the identity in %s changed while the node was starting (keygen?): start it again", h.Dir)
	}
	return nil
}

// ErrHomeServed means a node serves the home: another process (or this
// one) holds the home's lock.
var ErrHomeServed = errors.New("node: a node serves this home")

// CheckHomePath returns an error with code bad_argument, naming the
// longest path the home may have, when the sockets a node of the home dir
// makes in it (its control socket, and its listener unless configured
// elsewhere) would not fit the system's limit on a Unix socket path: such
// a home can be created but never run.
func CheckHomePath(dir string) error {
	sock := filepath.Join(dir, ControlSocketName)
	if len(config.DefaultSocketName) > len(ControlSocketName) {
		sock = filepath.Join(dir, config.DefaultSocketName)
	}
	err := transport.CheckUDSPath(sock)
	if err == nil {
		return nil
	}
	room := transport.MaxUDSPath - (len(sock) - len(dir))
	return &Error{Code: CodeBadArgument, Err: err, Msg: fmt.Sprintf(
		"the home's path is too long for a node to run there: its socket %s would be %d bytes, over this system's limit of %d for a socket path; choose a home whose path is at most %d bytes (--home or MEERKAT_HOME)",
		sock, len(sock), transport.MaxUDSPath, room)}
}

// InitHome creates whatever the home dir lacks: the directory (0700), an
// identity, meerkat.toml with the defaults (and name, if not ""), an
// empty trusted_peers.json. It reports the files it created. It refuses,
// creating nothing, a home whose path is too long for a node to run there
// ([CheckHomePath]) and a new home under a directory another user could
// replace it in (filemode.Above).
func InitHome(dir, name string) (created []string, err error) {
	if err := CheckHomePath(dir); err != nil {
		return nil, err
	}
	if name != "" {
		// A bad name is refused before anything is created.
		cfg := config.Default()
		cfg.Name = name
		if err := cfg.Validate(); err != nil {
			return nil, &Error{Code: CodeBadArgument, Err: err, Msg: UserText(err)}
		}
	}
	if _, err := os.Stat(dir); errors.Is(err, fs.ErrNotExist) {
		// Nothing is created where another user could replace it: the
		// check the node's start makes of the directories above a home.
		if err := filemode.Above(dir); err != nil {
			return nil, badConfig(err)
		}
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	// Missing means no entry at all: a link to a key that is not there
	// (a volume not mounted) is an error, never a reason for a new
	// identity.
	if _, err := os.Lstat(filepath.Join(dir, identity.KeyFile)); errors.Is(err, fs.ErrNotExist) {
		if err := lostKey(dir); err != nil {
			return nil, err
		}
		kp, err := identity.GenerateKeypair()
		if err != nil {
			return nil, err
		}
		if err := kp.Save(dir); err != nil {
			return nil, err
		}
		created = append(created, identity.KeyFile, identity.PubFile)
	} else if err != nil {
		return nil, err
	} else if _, err := identity.LoadKeypair(dir); err != nil {
		return nil, badConfig(err)
	}
	cfgPath := filepath.Join(dir, config.FileName)
	if _, err := os.Stat(cfgPath); errors.Is(err, fs.ErrNotExist) {
		cfg := config.Default()
		if name != "" {
			cfg.Name = name
		}
		if err := cfg.Validate(); err != nil {
			return nil, err
		}
		b, err := config.Marshal(cfg)
		if err != nil {
			return nil, err
		}
		if err := os.WriteFile(cfgPath, b, 0o600); err != nil {
			return nil, err
		}
		created = append(created, config.FileName)
	}
	trustPath := filepath.Join(dir, trust.FileName)
	if _, err := os.Stat(trustPath); errors.Is(err, fs.ErrNotExist) {
		var empty *trust.List
		if err := empty.Save(trustPath); err != nil {
			return nil, err
		}
		created = append(created, trust.FileName)
	}
	return created, nil
}

// OpenOptions say how OpenHome opens a home.
type OpenOptions struct {
	// Create makes a missing home (InitHome); without it a missing home
	// is ErrNoHome.
	Create bool
	// LookupEnv reads the MEERKAT_* variables (nil: none apply).
	LookupEnv func(string) (string, bool)
	// Overrides are settings given on the command line (key path →
	// value); they win over everything else.
	Overrides map[string]string
	// OverrideFlags name the flag of each override (key path → "--flag"),
	// for Home.Sources; an override without one is "flag".
	OverrideFlags map[string]string
}

// LoadConfig returns the configuration in effect for the home dir and
// where each key came from: defaults < meerkat.toml < MEERKAT_* variables
// < overrides, validated; each problem names where its value came from
// (the file, the variable or the flag). It does not check the home's
// files (see [CheckHome]) nor need an identity. A problem without a
// code of its own is [CodeBadConfig].
func LoadConfig(dir string, o OpenOptions) (config.Config, config.Sources, error) {
	cfg, src, err := loadConfig(dir, o)
	if err != nil {
		return config.Config{}, nil, badConfig(err)
	}
	return cfg, src, nil
}

// badConfig codes err, a problem with the home's configuration or
// files, [CodeBadConfig] unless it has a code already (nil stays nil).
func badConfig(err error) error {
	if err != nil && CodeOf(err) == CodeInternal {
		return &Error{Code: CodeBadConfig, Msg: UserText(err), Err: err}
	}
	return err
}

// loadConfig is LoadConfig, except that when MEERKAT_* variables cannot
// be read or the values do not validate it also returns the
// configuration as far as it is known (src not nil): the variables that
// could be read are applied, and the overrides.
func loadConfig(dir string, o OpenOptions) (config.Config, config.Sources, error) {
	cfg, src, err := config.LoadWithSources(filepath.Join(dir, config.FileName))
	if err != nil {
		return config.Config{}, nil, err
	}
	envErr := cfg.ApplyEnvSources(o.LookupEnv, src)
	if envErr != nil {
		// Apply the variables that can be read: ApplyEnv applies none
		// when one is bad.
		bad := map[string]bool{}
		for _, e := range joined(envErr) {
			if ce, ok := e.(*config.Error); ok {
				bad[ce.Source] = true
			}
		}
		_ = cfg.ApplyEnvSources(func(k string) (string, bool) {
			if bad[k] {
				return "", false
			}
			return o.LookupEnv(k)
		}, src)
	}
	for k, v := range o.Overrides {
		if err := cfg.Set(k, v); err != nil {
			return config.Config{}, nil, &Error{Code: CodeBadArgument, Msg: UserText(err)}
		}
		src[k] = "flag"
		if f := o.OverrideFlags[k]; f != "" {
			src[k] = f
		}
	}
	if envErr != nil {
		return cfg, src, envErr
	}
	if err := cfg.ValidateSources(src); err != nil {
		if namesOverride(err, o.Overrides) {
			// A bad flag value is a bad argument (exit 2), not a fault.
			return config.Config{}, nil, &Error{Code: CodeBadArgument, Err: err, Msg: UserText(err)}
		}
		return cfg, src, err
	}
	return cfg, src, nil
}

// joined returns the errors joined in err (errors.Join), or err alone.
func joined(err error) []error {
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		return j.Unwrap()
	}
	return []error{err}
}

// ShowConfig returns every key of the home dir's configuration in effect
// ([LoadConfig]) with its value and where it came from, for meerkatd
// config show. When the home's files or the values are wrong it returns
// the settings as far as they are known with the error, whose problems
// name where each bad value came from: that is when they are needed. It
// returns no settings when the home does not exist, meerkat.toml cannot
// be read, or an override is bad.
func ShowConfig(dir string, o OpenOptions) ([]config.Setting, error) {
	if err := RequireHome(dir); err != nil {
		return nil, err
	}
	homeErr := CheckHome(dir)
	cfg, src, err := loadConfig(dir, o)
	if src == nil {
		return nil, errors.Join(homeErr, err)
	}
	return config.Settings(&cfg, src), badConfig(errors.Join(homeErr, err))
}

// namesOverride reports whether err (joined errors too) holds a
// config.Error about one of the overridden keys.
func namesOverride(err error, overrides map[string]string) bool {
	if len(overrides) == 0 {
		return false
	}
	var ce *config.Error
	if errors.As(err, &ce) {
		if _, ok := overrides[ce.Key]; ok {
			return true
		}
	}
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		for _, e := range j.Unwrap() {
			if namesOverride(e, overrides) {
				return true
			}
		}
	}
	return false
}

// CheckConfig checks everything a node of the home dir would read at
// start: the home's files and modes, whether the home's path leaves room
// for its sockets, meerkat.toml, the MEERKAT_* variables of lookupEnv
// (and, in environ, any that is no setting: a misspelt one; ignore lists
// names read elsewhere), the listeners (and that the UDS socket's
// directory exists), the identity (identity.key, and
// identity.pub matching it), the audit log (when enabled: a regular file
// if present), the trusted peers file, the spaces file, the files [nats]
// names and, in sqlite mode, the database (store.Check: it opens, and,
// with no daemon serving the home, SQLite finds no damage; with one,
// Checked.Note says the database was not read through), each as the
// node reads it.
func CheckConfig(dir string, lookupEnv func(string) (string, bool), environ []string, ignore ...string) (Checked, error) {
	ck := Checked{Config: filepath.Join(dir, config.FileName)}
	if _, err := os.Stat(dir); errors.Is(err, fs.ErrNotExist) {
		// A path too long for the sockets says so first: the init that
		// RequireHome suggests would refuse it too.
		if err := CheckHomePath(dir); err != nil {
			return ck, err
		}
	}
	if err := RequireHome(dir); err != nil {
		return ck, err
	}
	if err := CheckHome(dir); err != nil {
		return ck, badConfig(err) // as run reports it
	}
	err := CheckHomePath(dir)
	var cfg config.Config
	var src config.Sources
	if err == nil {
		cfg, src, err = LoadConfig(dir, OpenOptions{LookupEnv: lookupEnv})
	}
	var l config.Listeners
	if err == nil {
		l, err = cfg.Resolve(dir)
	}
	if err == nil {
		err = src.Attribute(checkSocketDir(l)) // names MEERKAT_COMMS_LISTEN_UDS when the path came from it
	}
	if err == nil {
		_, err = identity.LoadKeypair(dir)
	}
	if _, serr := os.Stat(ck.Config); err == nil && errors.Is(serr, fs.ErrNotExist) {
		// A home with an identity had one: moved or deleted, the node
		// now runs on the defaults, under the default name.
		ck.Note = fmt.Sprintf("%s is absent though the home has an identity: the node runs on the defaults and MEERKAT_* variables, named %q (restore the file if it was moved; meerkatd config show lists the values in effect)", config.FileName, cfg.Name)
	}
	if err == nil && cfg.Audit.Enabled {
		err = audit.Check(filepath.Join(dir, audit.FileName))
	}
	if err == nil {
		var l *trust.List
		if l, err = trust.LoadOrEmpty(filepath.Join(dir, trust.FileName)); err == nil {
			if cfg.Comms.RefusePlaintext() {
				ck.Note = joinNotes(ck.Note, plaintextPeersNote(l))
			}
			if !cfg.NATS.Enabled() {
				ck.Note = joinNotes(ck.Note, natsPeersNote(l))
			}
		}
	}
	if err == nil {
		_, err = space.LoadRoster(filepath.Join(dir, SpacesFileName))
	}
	if err == nil {
		err = checkNATSFiles(cfg.NATS, dir)
	}
	if err == nil && cfg.Store.Mode == config.StoreSQLite {
		// quick_check reads the whole file under one snapshot, which
		// would hold up a running daemon's checkpoints: with a daemon
		// serving the home, the database is only opened.
		unlock, lerr := LockHome(dir)
		if lerr == nil {
			unlock()
		} else if errors.Is(lerr, ErrHomeServed) {
			ck.Note = joinNotes(ck.Note, "a daemon serves this home, so its database was opened but not read through for damage (that would hold up the daemon); stop the daemon for the full check")
		}
		err = store.Check(filepath.Join(dir, DBFileName), lerr == nil)
	}
	if err == nil {
		err = errors.Join(config.UnknownEnv(environ, ignore...)...)
	}
	return ck, badConfig(err)
}

// plaintextPeersNote names the trusted peers at a plaintext tcp://
// address, for a node that refuses plaintext TCP: the daemon runs, and
// every send to them fails. "" if none.
func plaintextPeersNote(l *trust.List) string {
	var names []string
	for _, p := range l.Peers() {
		if p.Addr.Scheme == transport.SchemeTCP {
			names = append(names, p.Name)
		}
	}
	if len(names) == 0 {
		return ""
	}
	return fmt.Sprintf("trusted_peers.json gives %s a plaintext tcp:// address, which this node refuses (comms.tcp_plaintext = \"refuse\"): every send to them fails; give their tls:// addresses", strings.Join(names, ", "))
}

// natsPeersNote names the trusted peers reached through NATS (an address
// nats:, or a fallback to it) when the node has no NATS servers: sends to
// the first fail, the second have no fallback. "" if none.
func natsPeersNote(l *trust.List) string {
	var only, fallback []string
	for _, p := range l.Peers() {
		switch {
		case p.Addr.Scheme == transport.SchemeNATS:
			only = append(only, p.Name)
		case p.NATS:
			fallback = append(fallback, p.Name)
		}
	}
	var notes []string
	if len(only) > 0 {
		notes = append(notes, fmt.Sprintf("trusted_peers.json reaches %s through NATS (nats:), but nats.servers is empty (in this environment): every send to them fails unless the daemon's sets it", strings.Join(only, ", ")))
	}
	if len(fallback) > 0 {
		notes = append(notes, fmt.Sprintf("trusted_peers.json lets %s fall back to NATS, but nats.servers is empty (in this environment): there is no fallback unless the daemon's sets it", strings.Join(fallback, ", ")))
	}
	return joinNotes(notes...)
}

// joinNotes joins the notes that are not "" with "; ".
func joinNotes(notes ...string) string {
	return strings.Join(slices.DeleteFunc(notes, func(n string) bool { return n == "" }), "; ")
}

// Checked is what [CheckConfig] found of a home: the path of its
// meerkat.toml, and a note on what it could not check, or what will not
// work though a daemon would run (a peer it cannot reach): "" if none.
type Checked struct {
	Config string `json:"config"`
	Note   string `json:"note,omitempty"`
}

// checkSocketDir fails when the directory of the UDS listener's socket
// is missing or not a directory: run would fail to bind it.
func checkSocketDir(l config.Listeners) error {
	if l.UDS.Scheme == "" {
		return nil
	}
	d := filepath.Dir(l.UDS.Path)
	switch fi, err := os.Stat(d); {
	case errors.Is(err, fs.ErrNotExist):
		return &config.Error{Key: "comms.listen_uds", Err: fmt.Errorf("the socket's directory %s does not exist (create it, or choose another path)", d)}
	case err != nil:
		return &config.Error{Key: "comms.listen_uds", Err: err}
	case !fi.IsDir():
		return &config.Error{Key: "comms.listen_uds", Err: fmt.Errorf("%s, the socket's directory, is not a directory", d)}
	}
	if err := transport.NotSocket(l.UDS.Path); err != nil {
		return &config.Error{Key: "comms.listen_uds", Err: err} // run would refuse it
	}
	return nil
}

// checkNATSFiles reads the files [nats] names as the connection will: one
// missing or unreadable, a CA file with no PEM certificate, or a client
// certificate that does not go with its key fails config check, rather
// than every connection attempt of a running node (which only logs it).
func checkNATSFiles(n config.NATS, dir string) error {
	if !n.Enabled() {
		return nil
	}
	var errs []error
	read := func(key, p string) []byte {
		if p == "" {
			return nil
		}
		b, err := os.ReadFile(n.Path(dir, p))
		if err != nil {
			errs = append(errs, fmt.Errorf("nats.%s: %w", key, err))
		}
		return b
	}
	if read("creds_file", n.CredsFile) != nil {
		if err := natsrelay.CheckCredsFile(n.Path(dir, n.CredsFile)); err != nil {
			errs = append(errs, fmt.Errorf("nats.creds_file: %w", err))
		}
	}
	if read("nkey_seed_file", n.NKeySeedFile) != nil {
		if err := natsrelay.CheckSeedFile(n.Path(dir, n.NKeySeedFile)); err != nil {
			errs = append(errs, fmt.Errorf("nats.nkey_seed_file: %w", err))
		}
	}
	if err := checkNATSSecrets(n, dir); err != nil {
		errs = append(errs, err)
	}
	if ca := read("tls_ca", n.TLSCA); ca != nil && !x509.NewCertPool().AppendCertsFromPEM(ca) {
		errs = append(errs, fmt.Errorf("nats.tls_ca: %s holds no PEM certificate", n.Path(dir, n.TLSCA)))
	}
	if n.TLSCert != "" && n.TLSKey != "" {
		if _, err := tls.LoadX509KeyPair(n.Path(dir, n.TLSCert), n.Path(dir, n.TLSKey)); err != nil {
			errs = append(errs, fmt.Errorf("nats.tls_cert and nats.tls_key: %w", err))
		}
	}
	return errors.Join(errs...)
}

// checkNATSSecrets checks the secrets a node connecting to NATS needs:
// the password that goes with nats.user (config.NATS.CheckPassword: only
// the connecting node needs it, so a command that reaches the daemon does
// not), and that others may not read a credentials or nkey seed file
// or TLS client key file (nor its group write it): it holds a secret that
// authenticates the node to its NATS deployment. A file that cannot be
// read is left to the caller.
func checkNATSSecrets(n config.NATS, dir string) error {
	if !n.Enabled() {
		return nil
	}
	errs := []error{n.CheckPassword()}
	for _, f := range []struct{ key, path string }{{"creds_file", n.CredsFile}, {"nkey_seed_file", n.NKeySeedFile}, {"tls_key", n.TLSKey}} {
		if f.path == "" {
			continue
		}
		p := n.Path(dir, f.path)
		// Others may not read it, nor the group write it; the group may
		// read it (a service's group given a root-owned file, 0640).
		if fi, err := os.Stat(p); err == nil && fi.Mode().Perm()&0o027 != 0 {
			errs = append(errs, &config.Error{Key: "nats." + f.key, Err: fmt.Errorf("%s holds a secret and others may read it or the group write it (mode %04o): chmod 600 %s (or 640)", p, fi.Mode().Perm(), p)})
		}
	}
	return errors.Join(errs...)
}

// RequireHome returns an error with code no_home (wrapping [ErrNoHome])
// when dir holds no identity: a home that was never created, or a
// mistyped path. Commands other than init, keygen, run and mcp refuse
// such a home rather than report on it. A home whose identity.key went
// missing is no such home: that is a bad_config error (lostKey).
func RequireHome(dir string) error {
	// Lstat: a dangling link in place of the key is a broken home, which
	// loading the key reports, not a missing one.
	if _, err := os.Lstat(filepath.Join(dir, identity.KeyFile)); errors.Is(err, fs.ErrNotExist) {
		if err := lostKey(dir); err != nil {
			return err
		}
		if err := CheckHomePath(dir); err != nil {
			// init would refuse it too: say why, not to run it.
			return &Error{Code: CodeNoHome, Err: ErrNoHome, Msg: fmt.Sprintf("no node home at %s, and none can be made there: %s", dir, UserText(err))}
		}
		return &Error{Code: CodeNoHome, Err: ErrNoHome, Msg: fmt.Sprintf("no node home at %s (create it with: meerkatd init --home %s)", dir, dir)}
	}
	return nil
}

// lostKey returns a bad_config error when dir, whose identity.key is
// missing, had an identity: its identity.pub, its database or its audit
// log (which only a node that ran writes) is there. A
// new key made there would make the node a stranger to every peer that
// trusts it, with the old one's inbox and trust list: init, run and mcp
// refuse, keygen without --force too. (A meerkat.toml or
// trusted_peers.json alone may have been put there before the first
// init: no sign of a lost key.)
func lostKey(dir string) error {
	var found []string
	for _, f := range []string{identity.PubFile, DBFileName, DBFileName + "-wal", audit.FileName, audit.FileName + ".1"} {
		if _, err := os.Lstat(filepath.Join(dir, f)); err == nil {
			found = append(found, f)
		}
	}
	if len(found) == 0 {
		return nil
	}
	verb := map[bool]string{true: "is", false: "are"}[len(found) == 1]
	return &Error{Code: CodeBadConfig, Msg: fmt.Sprintf("%s is missing from %s, a home that has had an identity (%s %s there): restore identity.key from a backup; to give this home a new identity instead (its peers will have to trust the new key), run meerkatd keygen --force --home %s",
		identity.KeyFile, dir, strings.Join(found, ", "), verb, dir)}
}

// OpenHome opens the home dir with the configuration in effect: defaults
// < meerkat.toml < MEERKAT_* variables < overrides. It returns the files
// it created (with o.Create). It refuses a home that [CheckHome] refuses.
func OpenHome(dir string, o OpenOptions) (*Home, []string, error) {
	var created []string
	if o.Create {
		// A node is to run here: its sockets must fit.
		if err := CheckHomePath(dir); err != nil {
			return nil, nil, err
		}
		if _, err := os.Lstat(filepath.Join(dir, identity.KeyFile)); errors.Is(err, fs.ErrNotExist) {
			// A home about to be created: a configuration that would be
			// refused (bad flag values, say) is refused first, so that
			// it leaves nothing behind.
			if _, _, err := LoadConfig(dir, o); err != nil {
				return nil, nil, err
			}
		}
		var err error
		if created, err = InitHome(dir, ""); err != nil {
			return nil, nil, err
		}
	} else if err := RequireHome(dir); err != nil {
		return nil, nil, err
	}
	if err := CheckHome(dir); err != nil {
		return nil, nil, badConfig(err)
	}
	cfg, src, err := LoadConfig(dir, o)
	if err != nil {
		return nil, nil, err
	}
	kp, err := identity.LoadKeypair(dir)
	if err != nil {
		return nil, nil, badConfig(err)
	}
	return &Home{Dir: dir, Config: cfg, Sources: src, Key: kp, load: o}, created, nil
}

// homeFiles are the files of a home that decide whom the node trusts and
// what it holds; [CheckHome] checks those present.
var homeFiles = []string{
	identity.KeyFile, config.FileName, trust.FileName, SpacesFileName, CardFileName,
	DBFileName, DBFileName + "-wal", DBFileName + "-shm",
}

// CheckHome applies the rules of sshd's StrictModes (internal/filemode) to
// the home dir: the directory must be the user's own and not writable by
// group or others, nor may the directories above it let another user
// replace it; identity.key, meerkat.toml, trusted_peers.json, spaces.json
// and meerkat.db (with its -wal and -shm), where present, must be the
// user's own regular files that group and others cannot write. It
// returns every problem found, each naming the file and the fix (chmod 600
// FILE, chmod 700 DIR, …), joined. The loaders check again when they read
// (the trust and spaces watchers on every reload) and the store narrows
// the database files to 0600; CheckHome finds everything at once, for the
// node's start and for meerkatd config check.
func CheckHome(dir string) error {
	if err := filemode.Dir(dir); err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil // nothing to check yet; the caller reports a missing home
		}
		return err
	}
	var errs []error
	for _, name := range homeFiles {
		path := filepath.Join(dir, name)
		err := filemode.File(path)
		if err == nil && name == identity.KeyFile {
			// The seed is a secret: others may not even read it (the key
			// loader's rule, reported here with the other files).
			if fi, serr := os.Lstat(path); serr == nil && fi.Mode().Perm()&0o077 != 0 {
				err = &filemode.Error{Path: path, Reason: fmt.Sprintf("%s is open to other users (mode %#o) and holds the node's secret; fix with: chmod 600 %s", path, fi.Mode().Perm(), path)}
			}
		}
		if err != nil && !errors.Is(err, fs.ErrNotExist) {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}
