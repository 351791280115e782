package control

import (
	"context"
	"errors"
	"path/filepath"
	"time"

	"github.com/meerkatd/meerkatd/comms/node"
)

// applyTrustTimeout bounds asking the node that serves a home to take in
// its edited trust file.
const applyTrustTimeout = 10 * time.Second

// trustApplier is what the server needs of its API for OpApplyTrust: a
// node in this process ([node.Node.ApplyTrust]).
type trustApplier interface {
	ApplyTrust(ctx context.Context) error
}

var _ trustApplier = (*node.Node)(nil)

// ApplyTrust asks the node serving the socket to re-read its trust file
// and returns once the node uses it ([node.Node.ApplyTrust]), or with
// why the node refused the file (CodeUnavailable). With no node serving
// the socket it fails with ErrNoDaemon (wrapped).
func (c *Client) ApplyTrust(ctx context.Context) error {
	return c.call(ctx, OpApplyTrust, nil, nil)
}

// AddPeer trusts a peer in h's trusted peers file, as [node.AddPeer]
// does. When a node serves h (a daemon, or meerkatd mcp running the node
// itself), AddPeer returns once that node uses the new file: the peer can
// be sent to at once. If the node refuses the file, the peer is in the
// file but AddPeer fails, saying so.
func AddPeer(h *node.Home, name, key, addr string, alsoNATS bool, meta string) (node.Paired, error) {
	p, err := node.AddPeer(h, name, key, addr, alsoNATS, meta)
	if err != nil {
		return p, err
	}
	return p, applyTrust(h, p.Name+" is added to "+filepath.Base(h.TrustPath()))
}

// ReplacePeer changes how a trusted peer is reached in h's trusted
// peers file, as [node.ReplacePeer] does, and returns once the node
// serving h, if any, uses the new address: sends go there at once.
func ReplacePeer(h *node.Home, name, key, addr string, alsoNATS bool, meta string) (node.Paired, error) {
	p, err := node.ReplacePeer(h, name, key, addr, alsoNATS, meta)
	if err != nil {
		return p, err
	}
	return p, applyTrust(h, p.Name+" is changed in "+filepath.Base(h.TrustPath()))
}

// RemovePeer removes the peer called name from h's trusted peers file,
// as [node.RemovePeer] does. When a node serves h, RemovePeer returns
// once that node no longer trusts the peer; if the node refuses the new
// file, RemovePeer fails, saying so.
func RemovePeer(h *node.Home, name string) (node.Paired, error) {
	p, err := node.RemovePeer(h, name)
	if err != nil {
		return p, err
	}
	return p, applyTrust(h, p.Name+" is removed from "+filepath.Base(h.TrustPath()))
}

// applyTrust has the node serving h, if any, take in h's trust file,
// which was just edited as done says.
func applyTrust(h *node.Home, done string) error {
	ctx, cancel := context.WithTimeout(context.Background(), applyTrustTimeout)
	defer cancel()
	err := NewClient(h.ControlPath()).ApplyTrust(ctx)
	switch {
	case err == nil, errors.Is(err, ErrNoDaemon):
		return nil // no node runs: the next one to start reads the file
	case lacksOp(err):
		return nil // a node of an earlier version, without the operation: its watcher takes the file in within a second or so
	}
	return &node.Error{Code: node.CodeOf(err), Msg: done + ", but the node serving this home did not take it in: " + node.UserText(err), Err: err}
}
