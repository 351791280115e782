package node

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/meerkatd/meerkatd/identity"
	"github.com/meerkatd/meerkatd/internal/atomicfile"
	"github.com/meerkatd/meerkatd/transport"
	"github.com/meerkatd/meerkatd/trust/pair"
)

// Local discovery: a running daemon announces itself in a per-user
// runtime directory ($XDG_RUNTIME_DIR/meerkat, else <tmp>/meerkat-<uid>),
// mode 0700 and owned by the user. Only the user's own processes can read
// or write there, which is what makes `pair offer --local` safe: its code
// is left in the directory for the user's other node to pick up.

// Announcement is a running node's entry, <peer-uuid>.json.
type Announcement struct {
	Name string `json:"name"`
	Key  string `json:"key"`
	Addr string `json:"addr"` // its Unix socket (or TCP address if it has no socket)
	PID  int    `json:"pid"`
	Home string `json:"home"`
}

// maxAnnouncement bounds an entry file.
const maxAnnouncement = 16 << 10

// RuntimeDir returns the discovery directory under base (the user's
// $XDG_RUNTIME_DIR; "" or a relative path: <tmp>/meerkat-<uid>), creating
// it (not base, which must exist), and refuses one that other users
// could read or write.
func RuntimeDir(base string) (string, error) {
	dir := filepath.Join(os.TempDir(), "meerkat-"+strconv.Itoa(os.Getuid()))
	if base != "" && filepath.IsAbs(base) {
		dir = filepath.Join(base, "meerkat")
	}
	if err := os.Mkdir(dir, 0o700); err != nil && !errors.Is(err, fs.ErrExist) {
		return "", fmt.Errorf("the discovery directory: %w (is $XDG_RUNTIME_DIR there?)", err)
	}
	fi, err := os.Lstat(dir)
	if err != nil {
		return "", err
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	switch {
	case !fi.IsDir():
		return "", fmt.Errorf("%s is not a directory", dir)
	case fi.Mode().Perm()&0o077 != 0:
		return "", fmt.Errorf("%s is open to other users (mode %v): refusing to use it for discovery", dir, fi.Mode().Perm())
	case ok && int(st.Uid) != os.Getuid():
		return "", fmt.Errorf("%s belongs to another user: refusing to use it for discovery", dir)
	}
	return dir, nil
}

func announcePath(dir string, h *Home) string {
	return filepath.Join(dir, h.Key.ID().UUID().String()+".json")
}

// OfferPath is where a local offer of the node of h waits for its user's
// other nodes (pair offer --local) in the discovery directory dir.
func OfferPath(dir string, h *Home) string {
	return filepath.Join(dir, h.Key.ID().UUID().String()+".offer")
}

// Announce writes n's entry in the discovery directory dir; the returned
// function removes it.
func (n *Node) Announce(dir string) (func(), error) {
	addr, err := n.localAddr()
	if err != nil {
		return func() {}, err
	}
	b, _ := json.Marshal(Announcement{Name: n.h.Config.Name, Key: n.h.Key.ID().String(), Addr: addr.String(), PID: os.Getpid(), Home: n.h.Dir})
	path := announcePath(dir, n.h)
	if err := atomicfile.WriteFile(path, b, 0o600); err != nil {
		return func() {}, err
	}
	if n.ob != nil && !n.closing() {
		n.watchOnce.Do(func() {
			n.wg.Add(1)
			go func() {
				defer n.wg.Done()
				n.watchAnnouncements(n.ctx, dir, announceWatchInterval)
			}()
		})
	}
	return func() { os.Remove(path) }, nil
}

// announceWatchInterval is how often a daemon looks for its peers'
// announcements in the discovery directory.
const announceWatchInterval = time.Second

// watchAnnouncements looks in the discovery directory dir every interval
// until ctx ends: a trusted peer whose entry appears or is written again
// (its node started) is up, so the outbox tries its queue at once.
func (n *Node) watchAnnouncements(ctx context.Context, dir string, interval time.Duration) {
	seen := map[string]time.Time{} // entry file: its modification time
	self := announcePath(dir, n.h)
	t := time.NewTicker(interval)
	defer t.Stop()
	for first := true; ; first = false {
		ents, _ := os.ReadDir(dir)
		now := map[string]time.Time{}
		for _, de := range ents {
			path := filepath.Join(dir, de.Name())
			if !strings.HasSuffix(de.Name(), ".json") || !de.Type().IsRegular() || path == self {
				continue
			}
			fi, err := de.Info()
			if err != nil {
				continue
			}
			now[path] = fi.ModTime()
			if old, ok := seen[path]; !first && ok && old.Equal(fi.ModTime()) {
				continue
			}
			// New, written again, or there when this node started: a
			// queue behind a breaker this node's last run left open is
			// tried now too (the peer may have come back meanwhile).
			a, err := readAnnouncement(path)
			if err != nil {
				continue
			}
			if id, err := identity.ParsePeerID(a.Key); err == nil {
				if p, ok := n.r.Trust().Lookup(id); ok {
					n.log.Debug("outbox: peer announced itself; trying its queue", "peer", p.Name)
					n.ob.Kick(id)
				}
			}
		}
		seen = now
		select {
		case <-t.C:
		case <-ctx.Done():
			return
		}
	}
}

// localAddr is the address a node on this host uses: the Unix socket if
// there is one.
func (n *Node) localAddr() (transport.Addr, error) {
	for _, a := range n.addrs {
		if a.Scheme == transport.SchemeUDS {
			return a, nil
		}
	}
	return n.offerAddr()
}

// Discover lists the running nodes announced in the discovery directory
// dir, except self, by name.
func Discover(dir string, self *Home) ([]Announcement, error) {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	var out []Announcement
	for _, de := range ents {
		if !strings.HasSuffix(de.Name(), ".json") || !de.Type().IsRegular() {
			continue
		}
		a, err := readAnnouncement(filepath.Join(dir, de.Name()))
		if err != nil || a.Key == self.Key.ID().String() || !alive(a.PID) {
			continue // unreadable, ours, or left by a node that died
		}
		out = append(out, a)
	}
	slices.SortFunc(out, func(a, b Announcement) int { return strings.Compare(a.Name+a.Key, b.Name+b.Key) })
	return out, nil
}

func readAnnouncement(path string) (Announcement, error) {
	var a Announcement
	b, err := readSmall(path, maxAnnouncement)
	if err != nil {
		return a, err
	}
	if err := json.Unmarshal(b, &a); err != nil {
		return a, err
	}
	if a.Name == "" || a.Key == "" || a.PID <= 0 {
		return a, errors.New("incomplete entry")
	}
	return a, nil
}

// readSmall reads a regular file of at most limit bytes (not a symlink).
func readSmall(path string, limit int64) ([]byte, error) {
	fi, err := os.Lstat(path)
	if err != nil {
		return nil, err
	}
	if !fi.Mode().IsRegular() || fi.Size() > limit {
		return nil, fmt.Errorf("%s: not a small regular file", path)
	}
	return os.ReadFile(path)
}

// alive reports whether process pid exists and is ours (EPERM: the pid
// was reused by another user's process, so the entry is stale).
func alive(pid int) bool {
	return syscall.Kill(pid, 0) == nil
}

// FindLocal finds the running nodes ref names in the discovery directory
// dir: one for a key or peer UUID, possibly several for a name (every
// home made without a name is "meerkat").
func FindLocal(dir string, self *Home, ref string) ([]Announcement, error) {
	if ref == "" {
		return nil, errorf(CodeBadArgument, "the other node's name, key or peer UUID is needed (meerkatd peers discover lists them)")
	}
	as, err := Discover(dir, self)
	if err != nil {
		return nil, err
	}
	if m := matchLocal(as, ref); len(m) > 0 {
		return m, nil
	}
	if ref == self.Config.Name || ref == self.Key.ID().String() || ref == self.Key.ID().UUID().String() {
		// Discover leaves this node out: it is no other node to pair with.
		return nil, errorf(CodeBadArgument, "a node cannot pair with itself: %q is this node", ref)
	}
	return nil, errorf(CodeUnknownPeer, "no running node named %q on this host (meerkatd peers discover lists them)", ref)
}

// matchLocal returns the announcements whose name, key or peer UUID is
// ref.
func matchLocal(as []Announcement, ref string) []Announcement {
	u, uerr := identity.ParseUUID(ref)
	var out []Announcement
	for _, a := range as {
		id, err := identity.ParsePeerID(a.Key)
		if a.Name == ref || a.Key == ref || uerr == nil && err == nil && id.UUID() == u {
			out = append(out, a)
		}
	}
	return out
}

// localOffer is the file pair offer --local leaves in the discovery
// directory: the pairing line, the process that waits on the offer, and
// when the offer ends. The process and the end tell a live offer from
// one left by a process that was killed.
type localOffer struct {
	Line    string    `json:"line"`
	PID     int       `json:"pid"`
	Expires time.Time `json:"expires"`
}

// maxLocalOffer bounds the offer file read.
const maxLocalOffer = 4096

// ShareOfferLocally leaves info, an offer of the node of h made through
// api that this process waits on, for its user's other nodes in the
// discovery directory ($XDG_RUNTIME_DIR/meerkat, from runtimeEnv; see
// OfferPath). An api that announces a node started in this process
// (control.Backend without a daemon) announces it there too: it is the
// node the other one looks for. The returned function removes both. When
// it cannot leave them, it withdraws the offer (nobody could use it) and
// returns why.
func ShareOfferLocally(ctx context.Context, runtimeEnv string, h *Home, api API, info PairOffer) (func(), error) {
	dir, err := RuntimeDir(runtimeEnv)
	var b []byte
	if err == nil {
		b, err = json.Marshal(localOffer{Line: info.Line, PID: os.Getpid(), Expires: info.Expires.UTC()})
	}
	path := OfferPath(dir, h)
	if err == nil {
		err = atomicfile.WriteFile(path, append(b, '\n'), 0o600)
	}
	unannounce := func() {}
	if a, ok := api.(interface{ Announce(string) (func(), error) }); ok && err == nil {
		if unannounce, err = a.Announce(dir); err != nil {
			os.Remove(path)
		}
	}
	if err != nil {
		cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		api.PairCancel(cctx, info.ID)
		cancel()
		return nil, err
	}
	return func() { unannounce(); os.Remove(path) }, nil
}

// parseLocalOffer reads an offer file: a localOffer whose line is a
// pairing line, with a process and an end.
func parseLocalOffer(b []byte) (localOffer, error) {
	var o localOffer
	if len(b) > maxLocalOffer {
		return o, fmt.Errorf("over %d bytes", maxLocalOffer)
	}
	if err := json.Unmarshal(b, &o); err != nil {
		return o, fmt.Errorf("not an offer: %v", err)
	}
	if _, err := pair.ParseLine(o.Line); err != nil {
		return o, err
	}
	if o.PID <= 0 || o.Expires.IsZero() {
		return o, errors.New("incomplete offer: no process or no end")
	}
	return o, nil
}

// LocalOffer reads the offer line the local node a left for its user in
// the discovery directory dir. An offer whose process is gone (killed
// before it could remove it) or whose time is up counts as none.
func LocalOffer(dir string, a Announcement) (string, error) {
	key, err := identity.ParsePeerID(a.Key)
	if err != nil {
		return "", err
	}
	path := filepath.Join(dir, key.UUID().String()+".offer")
	b, err := readSmall(path, maxLocalOffer)
	if errors.Is(err, fs.ErrNotExist) {
		return "", errorf(CodePairFailed, "%s has no local offer open: run meerkatd pair offer --local on it first", a.Name)
	}
	if err != nil {
		return "", err
	}
	o, err := parseLocalOffer(b)
	if err != nil {
		// Left by another version, or cut short: no offer anyone
		// waits on. Keep looking (the offer may come, another node of
		// the name may have one).
		return "", errorf(CodePairFailed, "%s has no local offer open (%s is not one: %v): run meerkatd pair offer --local on it first", a.Name, path, err)
	}
	if !time.Now().Before(o.Expires) || !alive(o.PID) {
		return "", errorf(CodePairFailed, "%s has no local offer open (its last one has ended): run meerkatd pair offer --local on it first", a.Name)
	}
	return strings.TrimSpace(o.Line), nil
}

// LocalOfferWait is how long "pair accept --local" waits for the offer.
const LocalOfferWait = 5 * time.Second

// WaitLocalOffer is LocalOffer, waiting up to bound for the offer to
// appear: the other node's "pair offer --local" may be a moment behind
// the command that takes it, both started from one script.
func WaitLocalOffer(dir string, a Announcement, bound time.Duration) (string, error) {
	_, line, err := waitLocalOffers(dir, a.Name, []Announcement{a}, bound)
	return line, err
}

// AcceptLocalLine is the pairing line the local node ref (a name, key or
// UUID among the nodes announced in dir) left for h, waited for up to
// LocalOfferWait. When several nodes are named ref, it is the offer of
// the one among them that has an offer open; none or several is an error
// that lists them, to pick one by key. The peer's name comes from the
// exchange, as for any line.
//
// A node not running yet (its pair offer --local, without a daemon,
// announces it as it makes the offer) is waited for within the same
// bound; so is another node of this node's own name.
func AcceptLocalLine(dir string, h *Home, ref string) (string, error) {
	const poll = 100 * time.Millisecond
	deadline := time.Now().Add(LocalOfferWait)
	for {
		as, err := FindLocal(dir, h, ref)
		if err == nil {
			_, line, err := waitLocalOffers(dir, ref, as, time.Until(deadline))
			return line, err
		}
		missing := CodeOf(err) == CodeUnknownPeer || strings.Contains(err.Error(), "cannot pair with itself")
		if ref == "" || !missing || time.Until(deadline) < poll {
			return "", err
		}
		time.Sleep(poll)
	}
}

// waitLocalOffers is WaitLocalOffer over the nodes as, all named ref:
// the node that has an offer open, and its line.
func waitLocalOffers(dir, ref string, as []Announcement, bound time.Duration) (Announcement, string, error) {
	const poll = 100 * time.Millisecond
	for deadline := time.Now().Add(bound); ; time.Sleep(poll) {
		var open []Announcement
		var lines []string
		var none error // "no local offer open", for a single node
		for _, a := range as {
			line, err := LocalOffer(dir, a)
			switch {
			case err == nil:
				open, lines = append(open, a), append(lines, line)
			case CodeOf(err) != CodePairFailed:
				return a, "", err // unreadable, or not a pairing line
			default:
				none = err
			}
		}
		switch {
		case len(open) == 1:
			return open[0], lines[0], nil
		case len(open) > 1:
			return Announcement{}, "", errorf(CodeBadArgument, "%d running nodes named %q have a local offer open: %s; pass the key of the one to pair with: meerkatd pair accept --local KEY", len(open), ref, listLocal(open))
		case time.Until(deadline) >= poll:
		case len(as) == 1:
			return as[0], "", none
		default:
			return Announcement{}, "", errorf(CodePairFailed, "none of the %d running nodes named %q has a local offer open: %s; run meerkatd pair offer --local on the one to pair with, and pass its key: meerkatd pair accept --local KEY", len(as), ref, listLocal(as))
		}
	}
}

// listLocal names the nodes as for a person choosing one: key and home
// (or address).
func listLocal(as []Announcement) string {
	s := make([]string, len(as))
	for i, a := range as {
		if a.Home != "" {
			s[i] = fmt.Sprintf("%s (home %s)", a.Key, a.Home)
		} else {
			s[i] = fmt.Sprintf("%s (at %s)", a.Key, a.Addr)
		}
	}
	return strings.Join(s, ", ")
}

// LocalOfferTTL bounds a local offer: the other node picks it up at once.
const LocalOfferTTL = time.Minute
