package node

import (
	"context"
	"errors"
	"io/fs"
	"sync"
	"sync/atomic"

	"github.com/meerkatd/meerkatd/identity"
	"github.com/meerkatd/meerkatd/trust"
)

// trustState is the trusted peers list a node uses, taken from the trust
// file by the watcher, by SIGHUP, by a pairing and by [Node.ApplyTrust].
//
// Each of them re-reads the file under mu rather than apply a list read
// earlier: whichever applies last applies what the file held then, so a
// watcher's read from before an edit cannot undo the edit once
// ApplyTrust has returned.
type trustState struct {
	mu   sync.Mutex
	list *trust.List // the list the Router uses
	err  string      // the last trust file error logged; "" after a good read
	// forced is set by ReloadTrust (SIGHUP): the next outcome is logged
	// even if nothing changed, so a reload always gets an answer.
	forced atomic.Bool
}

// ApplyTrust re-reads the trust file and returns once the node uses what
// it holds: a peer another process just added to the file (meerkatd
// peers add) can be sent to, and one removed is refused, as soon as
// ApplyTrust returns, without waiting for the watcher to notice the edit.
// A file the node cannot use is refused with an [*Error]
// (CodeUnavailable) saying why; the node keeps the peers it had.
func (n *Node) ApplyTrust(ctx context.Context) error {
	if n.closing() {
		return Coded(ErrClosed)
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	if err := n.applyTrust(false); err != nil {
		return &Error{Code: CodeUnavailable, Msg: "the node cannot use " + trust.FileName + " and keeps the trusted peers it had: " + UserText(err), Err: err}
	}
	return nil
}

// trustChanged is the trust watcher's callback: the file changed, or
// could not be used, or a SIGHUP asked.
func (n *Node) trustChanged(_ *trust.List, err error) {
	forced := n.trusted.forced.Swap(false)
	if err != nil {
		n.trusted.mu.Lock()
		n.trustFailedLocked(err, forced)
		n.trusted.mu.Unlock()
		return
	}
	n.applyTrust(forced) // a failure is logged
}

// applyTrust reads the trust file and, if it changed since the node last
// took it in (or the last read failed, or announce is set), makes the
// Router use it and logs the reload. A file that cannot be used is
// logged (once for one error, unless announce) and returned; the node
// keeps its list.
func (n *Node) applyTrust(announce bool) error {
	t := &n.trusted
	t.mu.Lock()
	l, err := trust.Load(n.h.TrustPath())
	if errors.Is(err, fs.ErrNotExist) {
		if t.list != nil && len(t.list.Peers()) > 0 {
			// Gone while the node ran (moved away, an editor's
			// rename): no reason to drop every peer at once.
			err = errTrustFileGone
		} else {
			l, err = trust.New() // none yet, and none now
		}
	}
	if err != nil {
		n.trustFailedLocked(err, announce)
		t.mu.Unlock()
		return err
	}
	apply := announce || t.err != "" || !l.Equal(t.list)
	var moved []identity.PeerID
	if apply {
		moved = movedPeers(t.list, l)
		n.r.SetTrust(l)
		logTrustReload(n.log, t.list, l)
		t.list, t.err = l, ""
	}
	t.mu.Unlock()
	if n.ob != nil {
		// What waits for a peer that moved (its backoff, an open
		// breaker: failures at the old address) is tried at the new one.
		for _, id := range moved {
			n.ob.Kick(id)
		}
	}
	if apply && n.spaces != nil {
		n.spaces.joined() // members whose key is trusted now hear of this node
	}
	return nil
}

// errTrustFileGone is the trust file's problem when it went away while the
// node trusted peers from it.
var errTrustFileGone = errors.New(trust.FileName + ` is gone (write {"peers": []} there to trust nobody)`)

// movedPeers returns the peers of next that were in prev reached another
// way (another address, NATS tried or not).
func movedPeers(prev, next *trust.List) []identity.PeerID {
	var moved []identity.PeerID
	for _, p := range next.Peers() {
		if old, ok := prev.Lookup(p.ID); ok && (old.Addr != p.Addr || old.NATS != p.NATS) {
			moved = append(moved, p.ID)
		}
	}
	return moved
}

// trustFailedLocked logs that the trust file could not be used, unless
// the same error was logged last and announce is not set. It needs
// n.trusted.mu held.
func (n *Node) trustFailedLocked(err error, announce bool) {
	if msg := err.Error(); announce || msg != n.trusted.err {
		n.trusted.err = msg
		n.log.Error("trusted peers file not reloaded; keeping the previous list", "err", err)
	}
}
