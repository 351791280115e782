package node

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/meerkatd/meerkatd/comms/natsrelay"
)

// NATSStatus is the node's NATS connection as status shows it.
type NATSStatus struct {
	natsrelay.Status
	// Servers are the configured server URLs.
	Servers []string `json:"servers"`
}

// natsLink is the node's NATS relay: connected in the background, retried
// until it is up; nats.go reconnects it from then on.
type natsLink struct {
	mu      sync.Mutex
	relay   *natsrelay.Relay // nil until connected
	lastErr string           // why the last attempt to connect failed
	servers []string
}

// natsRetryMax bounds the wait between attempts to make the first
// connection.
const natsRetryMax = 30 * time.Second

// startNATS connects to the [nats] servers in the background, so a node
// whose NATS deployment is down still serves its direct links; sends to
// nats: peers fail as offline until the connection is up.
func (n *Node) startNATS(ctx context.Context) {
	c := n.h.Config.NATS
	if !c.Enabled() {
		return
	}
	urls, _ := c.ServerURLs() // validated with the configuration
	n.nats = &natsLink{servers: urls}
	opts := natsrelay.Options{
		Servers:        urls,
		CredsFile:      c.Path(n.h.Dir, c.CredsFile),
		NKeySeedFile:   c.Path(n.h.Dir, c.NKeySeedFile),
		User:           c.User,
		Password:       c.Password,
		TLSCA:          c.Path(n.h.Dir, c.TLSCA),
		TLSCert:        c.Path(n.h.Dir, c.TLSCert),
		TLSKey:         c.Path(n.h.Dir, c.TLSKey),
		SubjectPrefix:  c.SubjectPrefix,
		JetStream:      c.JetStream,
		Stream:         c.Stream,
		StreamMaxAge:   c.StreamMaxAge(),
		StreamMaxBytes: int64(c.StreamMaxBytes),
		StreamMaxMsgs:  int64(c.StreamMaxMsgs),
		StreamReplicas: c.StreamReplicas,
		DedupWindow:    c.DedupWindow(),
		ReconnectWait:  c.ReconnectWait(),
		ConnectTimeout: c.ConnectTimeout(),
		Name:           "meerkatd " + n.h.Config.Name,
		Logger:         n.log,
	}
	n.wg.Add(1)
	go func() {
		defer n.wg.Done()
		wait := c.ReconnectWait()
		for {
			cctx, cancel := context.WithTimeout(ctx, c.ConnectTimeout()+10*time.Second)
			rl, err := natsrelay.Start(cctx, n.r, opts)
			cancel()
			if err == nil {
				n.nats.mu.Lock()
				n.nats.relay, n.nats.lastErr = rl, ""
				n.nats.mu.Unlock()
				if n.ob != nil {
					n.ob.Retry() // what waited for the connection goes now
				}
				return
			}
			n.nats.mu.Lock()
			n.nats.lastErr = err.Error()
			n.nats.mu.Unlock()
			n.log.Warn("cannot connect to NATS; retrying", "servers", urls, "retry_in", wait.String(), "err", err)
			select {
			case <-ctx.Done():
				return
			case <-time.After(wait):
			}
			wait = min(2*wait, natsRetryMax)
		}
	}()
}

// closeNATS closes the relay, if it connected.
func (n *Node) closeNATS() {
	if n.nats == nil {
		return
	}
	n.nats.mu.Lock()
	rl := n.nats.relay
	n.nats.mu.Unlock()
	if rl != nil {
		rl.Close()
	}
}

// natsStatus reports the NATS connection, nil if [nats] is off.
func (n *Node) natsStatus() *NATSStatus {
	if n.nats == nil {
		return nil
	}
	n.nats.mu.Lock()
	rl, lastErr := n.nats.relay, n.nats.lastErr
	n.nats.mu.Unlock()
	st := &NATSStatus{Servers: n.nats.servers}
	if rl == nil {
		c := n.h.Config.NATS
		st.State, st.JetStream, st.LastError = "connecting", c.JetStream, lastErr
		st.Subject = natsrelay.Subject(c.SubjectPrefix, n.r.ID())
		return st
	}
	st.Status = rl.Status()
	return st
}

// Summary is the status in one line, for people: the state, the server,
// the subject, and the counters that are not zero.
func (s NATSStatus) Summary() string {
	var b strings.Builder
	b.WriteString(s.State)
	if s.Server != "" {
		b.WriteString(" to " + s.Server)
	} else if len(s.Servers) > 0 {
		b.WriteString(" (servers " + strings.Join(s.Servers, ", ") + ")")
	}
	b.WriteString(" as " + s.Subject)
	if s.JetStream {
		b.WriteString(", jetstream")
	}
	fmt.Fprintf(&b, ", %d received, %d refused", s.Received, s.Refused)
	if s.JetStream {
		fmt.Fprintf(&b, ", %d stored in broker", s.Stored)
	}
	if s.Reconnects > 0 {
		fmt.Fprintf(&b, ", %d reconnects", s.Reconnects)
	}
	if s.Dropped > 0 {
		fmt.Fprintf(&b, ", %d dropped (slow consumer)", s.Dropped)
	}
	if s.LastError != "" {
		b.WriteString("; last error: " + s.LastError)
	}
	return b.String()
}

// natsRelay returns the connected relay, or an error saying why there is
// none.
func (n *Node) natsRelay() (*natsrelay.Relay, error) {
	if n.nats == nil && n.h.Config.NATS.Enabled() {
		return nil, errorf(CodeNoDaemon, "the NATS connection is the daemon's: start it (meerkatd run --home %s) and try again", n.h.Dir)
	}
	if n.nats == nil {
		return nil, errorf(CodeBadArgument, "this node has no NATS connection: set [nats] servers in meerkat.toml (docs/nats.md)")
	}
	n.nats.mu.Lock()
	defer n.nats.mu.Unlock()
	if n.nats.relay == nil {
		return nil, errorf(CodePeerOffline, "this node is not connected to NATS yet (meerkatd status shows why)")
	}
	return n.nats.relay, nil
}
