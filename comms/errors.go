package comms

import (
	"errors"
	"fmt"
)

// Errors returned by the Router.
var (
	// ErrUnknownPeer means no trusted peer has the given name or key.
	ErrUnknownPeer = errors.New("comms: unknown peer")
	// ErrBadPeerKey means a peer reference written as a key
	// ("ed25519:…") is not one: a mistake in the reference, not a peer
	// this node does not know.
	ErrBadPeerKey = errors.New("comms: not a valid key")
	// ErrPlaintextRefused means the peer's address is tcp:// and
	// Options.RefusePlaintext is set: nothing is sent to it.
	ErrPlaintextRefused = errors.New("comms: plaintext TCP is refused on this node")
	// ErrPeerOffline matches every [*PeerOfflineError].
	ErrPeerOffline = errors.New("comms: peer offline")
	// ErrClosed means the Router was closed.
	ErrClosed = errors.New("comms: closed")
	// ErrUnknownRequest means no request with that id is awaiting a
	// response (never sent here, already answered, or forgotten).
	ErrUnknownRequest = errors.New("comms: unknown request id")
	// ErrDuplicate may be returned by an [Admitter] (or an
	// [AsyncAdmitter]'s wait) for an envelope it stored before: the
	// Router acks it again without counting it as new.
	ErrDuplicate = errors.New("comms: already admitted")
	// ErrNotServing may be returned by an [Admitter] that takes only
	// some envelopes for now (a command waiting for a response or a
	// pairing while no daemon serves the inbox): the Router refuses the
	// envelope as [RejectNotServing], and its sender retries later.
	ErrNotServing = errors.New("comms: this node does not serve its inbox now")
)

// Reasons a send fails with [*PeerOfflineError].
const (
	OfflineTimeout = "no ack within the ack timeout"
	OfflineRefused = "connection refused or failed"
	OfflineBadAck  = "invalid ack"
	OfflineClosed  = "connection closed before the ack"
	// OfflinePlaintext: the peer's address is tcp:// and
	// Options.RefusePlaintext is set.
	OfflinePlaintext = "plaintext TCP is refused on this node (comms.tcp_plaintext = \"refuse\"): give the peer a tls:// address"
	// OfflineTLS: the TLS handshake failed (the peer presented another
	// key than its trust entry's, did not trust ours, or does not speak
	// TLS).
	OfflineTLS = "TLS handshake failed"
	// OfflineConnectTimeout: the peer's address accepted no connection
	// before the send's time ran out (the error names the address).
	OfflineConnectTimeout = "connection timed out"
	// OfflineTLSTimeout: the peer's address accepted the connection but
	// the TLS handshake did not complete within comms.frame_timeout_secs
	// (the error names the address).
	OfflineTLSTimeout = "TLS handshake timed out"
)

// PeerOfflineError reports that a peer did not acknowledge an envelope.
type PeerOfflineError struct {
	Peer   string // the peer's trust-list name
	Reason string // one of the Offline… constants
	Err    error  // the underlying error, if any
	// Plaintext: the peer was dialled at a plaintext tcp:// address,
	// which it may refuse (its comms.tcp_plaintext = "refuse").
	Plaintext bool
}

func (e *PeerOfflineError) Error() string {
	if e.Err != nil {
		return fmt.Sprintf("comms: peer %s offline: %s: %v", e.Peer, e.Reason, e.Err)
	}
	if e.Reason == OfflineClosed {
		// A peer closes the connection without an ack when it refuses an
		// envelope; by far the most common reason is that it does not
		// trust the sender's key, the next that its inbox is full, or
		// the envelope is larger than it takes.
		// The peer answered: not "offline", though the code says so.
		if e.Plaintext {
			return fmt.Sprintf("comms: peer %s did not take the envelope: %s: %s; or it refuses plaintext TCP (its comms.tcp_plaintext = \"refuse\"): give it a tls:// address", e.Peer, e.Reason, untrustedHint)
		}
		return fmt.Sprintf("comms: peer %s did not take the envelope: %s: %s", e.Peer, e.Reason, untrustedHint)
	}
	return fmt.Sprintf("comms: peer %s offline: %s", e.Peer, e.Reason)
}

// untrustedHint explains the likely cause of a connection closed before
// the ack.
const untrustedHint = "it may not trust this node's key (meerkatd id shows the key; the peer adds it with meerkatd peers add, or pair with meerkatd pair), had no room for the envelope (a full inbox, which its log says), takes no envelope that large (its comms.max_message_bytes), or runs no daemon (a command of it listens for responses only)"

// Unwrap returns the underlying error.
func (e *PeerOfflineError) Unwrap() error { return e.Err }

// Is makes every PeerOfflineError match [ErrPeerOffline].
func (e *PeerOfflineError) Is(target error) bool { return target == ErrPeerOffline }
