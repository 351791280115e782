package node

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/meerkatd/meerkatd/comms/outbox"
	"github.com/meerkatd/meerkatd/config"
	"github.com/meerkatd/meerkatd/inbox/store"
	"github.com/meerkatd/meerkatd/transport"
	"github.com/meerkatd/meerkatd/trust"
)

// Self implements [API].
func (n *Node) Self(context.Context) (Self, error) {
	h := n.h
	s := Self{Name: h.Config.Name, PubKey: h.Key.ID().String(), PeerUUID: h.Key.ID().UUID().String(), Home: h.Dir, Listen: []string{}, Embedded: n.embedded}
	for _, a := range n.addrs {
		s.Listen = append(s.Listen, a.String())
	}
	if n.mode == ModeSend {
		// Not listening: where the home's node listens when it runs.
		if ls, err := h.Config.Resolve(h.Dir); err == nil {
			for _, a := range ls.All() {
				s.Listen = append(s.Listen, a.String())
			}
		}
	}
	return s, nil
}

// Status implements [API]. For a node that does not serve its home (a
// command run without a daemon) it shows what is on disk: the stored
// inbox and outbox.
func (n *Node) Status(ctx context.Context) (Status, error) {
	if n.closing() {
		return Status{}, Coded(ErrClosed)
	}
	self, _ := n.Self(ctx)
	st := n.r.Stats()
	s := Status{
		Self:        self,
		Running:     n.mode == ModeServe,
		Peers:       n.r.Trust().Len(),
		Accepted:    st.Accepted,
		AcksSent:    st.AcksSent,
		Connections: st.Connections,
		Rejected:    st.Rejected,
		SendPeers:   []PeerSendState{},
		LoopGuards:  n.heldGuards(),
		NATS:        n.natsStatus(),
	}
	if s.Rejected == nil {
		s.Rejected = map[string]uint64{}
	}
	if s.Running {
		s.Problems = n.problems()
		s.Warnings = n.warnings()
		s.StartedAt = timeOrNil(n.started)
		s.Inbox, s.Pending = n.mail.Len(), n.mail.Pending()
		s.PendingByClass = n.mail.PendingByClass()
	} else if d, err := n.diskMail(); err == nil {
		s.Inbox, s.Pending = d.Len(), d.Pending()
		s.PendingByClass = d.PendingByClass()
	}
	if s.PendingByClass == nil {
		s.PendingByClass = pendingByClass(nil)
	}
	s.DBBytes = n.dbBytes()
	if n.ob == nil && n.h.Config.Store.Mode == config.StoreMemory {
		return s, nil // no daemon and nothing on disk: no outbox
	}
	ob, err := n.Outbox(ctx)
	if err != nil {
		return s, err
	}
	dl, err := n.DeadLetters(ctx)
	if err != nil {
		return s, err
	}
	s.Outbox, s.DeadLetters, s.SendPeers = len(ob.Entries), len(dl), ob.Peers
	return s, nil
}

// warnings says what a serving node runs despite (Status.Warnings): a
// meerkat.toml changed since it started, or one that does not load, and
// a trust or spaces file it could not take in.
func (n *Node) warnings() []string {
	var out []string
	if keys, err := n.h.ConfigChanges(); err != nil {
		out = append(out, fmt.Sprintf("%s does not load now (%s): the node runs on what it read when it started", config.FileName, UserText(err)))
	} else if len(keys) > 0 {
		out = append(out, fmt.Sprintf("%s changed since the node started: restart it to apply %s", config.FileName, strings.Join(keys, ", ")))
	}
	n.trusted.mu.Lock()
	if e := n.trusted.err; e != "" {
		out = append(out, trust.FileName+" was not taken in ("+e+"): the node keeps the peers it had")
	}
	n.trusted.mu.Unlock()
	if n.spaces != nil {
		n.spaces.mu.Lock()
		if p := n.spaces.problem; p != "" {
			out = append(out, p)
		}
		n.spaces.mu.Unlock()
	}
	return out
}

// socketFile is a Unix socket a node listens on: its path, and the file
// the listener created there.
type socketFile struct {
	path string
	info fs.FileInfo
}

// WatchSocket adds the Unix socket file at path, as it is now, to those
// whose removal or replacement Status (problems) and /readyz report: the
// node adds its own listeners', a host its control socket's (again, when
// it made the socket anew: the file at path is then the one watched).
func (n *Node) WatchSocket(path string) {
	fi, err := os.Lstat(path)
	if err != nil {
		return
	}
	n.sockMu.Lock()
	defer n.sockMu.Unlock()
	for i := range n.sockets {
		if n.sockets[i].path == path {
			n.sockets[i].info = fi
			return
		}
	}
	n.sockets = append(n.sockets, socketFile{path, fi})
}

// problems says what keeps a serving node from being reached as its
// configuration says: a socket file removed (say by a cleaner of /tmp)
// or replaced leaves the listener serving a file no one can reach.
func (n *Node) problems() []string {
	n.sockMu.Lock()
	sockets := slices.Clone(n.sockets)
	n.sockMu.Unlock()
	var out []string
	for _, s := range sockets {
		if p := s.problem(); p != "" {
			out = append(out, p)
		}
	}
	return out
}

// problem says what keeps connections to the socket from reaching the
// node ("" for nothing).
func (s socketFile) problem() string {
	fi, err := os.Lstat(s.path)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return fmt.Sprintf("the socket file %s was removed: nothing can connect to it until the node restarts", s.path)
	case err != nil:
		return fmt.Sprintf("the socket file %s cannot be checked: %v", s.path, err)
	case !os.SameFile(fi, s.info):
		return fmt.Sprintf("the socket file %s was replaced by another file: connections to it do not reach this node until it restarts", s.path)
	}
	return ""
}

// reachable refuses to hand out a Unix socket address (to a node pairing
// with this one) whose socket file is watched and has a problem: the
// other node would trust an address that does not reach this one.
func (n *Node) reachable(a transport.Addr) error {
	if a.Scheme != transport.SchemeUDS {
		return nil
	}
	n.sockMu.Lock()
	sockets := slices.Clone(n.sockets)
	n.sockMu.Unlock()
	for _, s := range sockets {
		if s.path == a.Path {
			if p := s.problem(); p != "" {
				return errorf(CodeUnavailable, "not paired: the other node would reach this one at %s, but %s (restarting the daemon makes the socket anew)", a, p)
			}
		}
	}
	return nil
}

// dbBytes is the size of the database the node keeps or, for a node that
// does not serve its home, of the home's: 0 for none (memory mode, no
// file yet) or when its size cannot be read.
func (n *Node) dbBytes() int64 {
	var st *store.Store
	if d, ok := n.mail.(*durableMail); ok {
		st = d.st
	} else if n.mode != ModeServe {
		st, _ = n.readDB()
	}
	if st == nil {
		return 0
	}
	size, err := st.DiskSize()
	if err != nil {
		return 0
	}
	return size
}

// Peers implements [API]. Without a running outbox (a command run
// without a daemon) the send states are those of the home's stored
// outbox, as Outbox shows them.
func (n *Node) Peers(ctx context.Context) ([]Peer, error) {
	if n.closing() {
		return nil, Coded(ErrClosed)
	}
	stored := map[string]PeerSendState{}
	if n.ob == nil {
		if o, err := n.Outbox(ctx); err == nil { // none kept (a memory-mode home): every breaker closed
			for _, ps := range o.Peers {
				stored[ps.PubKey] = ps
			}
		}
	}
	out := []Peer{}
	for _, p := range n.r.Trust().Peers() {
		mp := Peer{Name: p.Name, PubKey: p.ID.String(), PeerUUID: p.ID.UUID().String(), Addr: p.Addr.String(), NATS: p.NATS, Meta: p.Meta, Breaker: outbox.BreakerClosed}
		mp.LastSeen = timeOrNil(n.r.LastSeen(p.ID))
		mp.LoopGuard = n.guardState(p.ID)
		if ob := n.ob; ob != nil {
			ps := ob.Peer(p.ID)
			mp.Breaker, mp.Queued, mp.LastError = ps.Breaker, ps.Queued, userText(ps.LastError)
		} else if ps, ok := stored[mp.PubKey]; ok {
			mp.Breaker, mp.Queued, mp.LastError = ps.Breaker, ps.Queued, ps.LastError
		}
		mp.Card = n.cardSummary(p.ID)
		out = append(out, mp)
	}
	return out, nil
}

// LogStart logs msg at info with what an operator wants to know of a node
// that starts: version, name, key, listeners, control socket and store.
func (n *Node) LogStart(log *slog.Logger, msg, version string) {
	h := n.h
	var listen []string
	for _, a := range n.Addrs() {
		listen = append(listen, a.String())
	}
	attrs := []any{"version", version, "name", h.Config.Name, "pubkey", h.Key.ID().String(),
		"listen", strings.Join(listen, " "), "control", h.ControlPath(), "store", h.Config.Store.Mode}
	if h.Config.Store.Mode == config.StoreSQLite {
		attrs = append(attrs, "store_path", filepath.Join(h.Dir, DBFileName))
	}
	log.Info(msg, attrs...)
}
