package node

import (
	"context"
	"errors"
	"fmt"
	"regexp"

	"github.com/meerkatd/meerkatd/comms"
	"github.com/meerkatd/meerkatd/comms/natsrelay"
	"github.com/meerkatd/meerkatd/comms/outbox"
	"github.com/meerkatd/meerkatd/comms/wire"
	"github.com/meerkatd/meerkatd/identity"
	"github.com/meerkatd/meerkatd/trust/pair"
)

// Error codes: stable strings every face reports (the CLI maps them to
// exit statuses, MCP puts them first in a tool error, the control socket
// carries them).
const (
	CodeUnknownPeer     = "unknown_peer"     // no trusted peer by that name, key or UUID
	CodePeerOffline     = "peer_offline"     // the peer did not acknowledge (or a reliable send died at once)
	CodeUnknownRequest  = "unknown_request"  // a response to a request not received from that peer
	CodeAlreadyAnswered = "already_answered" // a second final response to one request
	CodeBodyTooLarge    = "body_too_large"   // the envelope would exceed the frame limit
	CodeBadStatus       = "bad_status"       // a response status other than accepted, completed, failed
	CodeBadArgument     = "bad_argument"     // anything else wrong with the arguments
	CodeOutboxFull      = "outbox_full"      // the outbox is at its configured limit
	CodePairFailed      = "pair_failed"      // wrong, used or expired code, a failed proof, rate limited
	CodePairPending     = "pair_pending"     // PairWait ended before the offer was used
	CodeNoDaemon        = "no_daemon"        // the operation needs a running node
	CodeUnavailable     = "unavailable"      // the node is shutting down or busy, or the control socket broke
	CodeForbidden       = "forbidden"        // the control socket refused a process of another user
	CodeNoHome          = "no_home"          // the home does not exist (and was not to be created)
	CodeUnknownSpace    = "unknown_space"    // no such space here, or this node is not in it
	CodeUnknownProposal = "unknown_proposal" // no such proposal (or mcp/request) in the space
	CodeCopiesFailed    = "copies_failed"    // a broadcast or space send some of whose copies failed (its result says which)
	CodeBadConfig       = "bad_config"       // CheckConfig: the home's configuration or one of its files would stop a daemon
	CodeInterrupted     = "interrupted"      // CLI only: SIGINT or SIGTERM ended a wait (ErrInterrupted)
	CodeInternal        = "internal"         // everything else
)

// Error is a failure with a code. Its message never contains bodies or
// keys' secrets; it is fit to show a user.
type Error struct {
	Code string
	Msg  string
	Err  error // the cause, if a caller may need it (errors.Is); may be nil
}

func (e *Error) Error() string { return e.Msg }

// Unwrap returns the cause.
func (e *Error) Unwrap() error { return e.Err }

// pkgPrefix matches the package names errors carry ("comms: ", "pair: "):
// useful in a log, noise for a person, and they stack.
var pkgPrefix = regexp.MustCompile(`(^|: )(comms|identity|trust|config|transport|pair|store|outbox|audit|wire|node|control|inbox|bench|atomicfile|sdnotify|systemdunit|completion|card|natsrelay): `)

// UserText is err's message for a person: without the package names the
// errors of meerkatd's packages start with.
func UserText(err error) string { return userText(err.Error()) }

// userText is UserText for an error's text kept as a string (an outbox
// entry's or send record's last error).
func userText(s string) string { return pkgPrefix.ReplaceAllString(s, "$1") }

// errorf returns an *Error with code and a formatted message.
func errorf(code, format string, args ...any) *Error {
	return &Error{Code: code, Msg: fmt.Sprintf(format, args...)}
}

// CodeOf returns the code of err: an *Error's own, or the code of the
// package error it wraps, else CodeInternal.
func CodeOf(err error) string {
	var e *Error
	if errors.As(err, &e) {
		return e.Code
	}
	if c := Coded(err); c != err {
		return CodeOf(c)
	}
	return CodeInternal
}

// Coded returns err as an *Error when it is one of the failures the API
// gives a code to (unknown peer, peer offline, bad values, a full
// outbox, failed pairing), and err unchanged otherwise (nil stays nil).
func Coded(err error) error {
	var e *Error
	var dead *outbox.DeadError
	switch {
	case err == nil, errors.As(err, &e):
		return err
	case errors.Is(err, comms.ErrUnknownPeer):
		return &Error{Code: CodeUnknownPeer, Msg: UserText(err)}
	case errors.Is(err, ErrInterrupted):
		return &Error{Code: CodeInterrupted, Msg: UserText(err)}
	case errors.Is(err, comms.ErrPlaintextRefused), errors.Is(err, comms.ErrBadPeerKey):
		return &Error{Code: CodeBadArgument, Msg: UserText(err)}
	case errors.Is(err, comms.ErrPeerOffline):
		return &Error{Code: CodePeerOffline, Msg: UserText(err)}
	case errors.As(err, &dead):
		return errorf(CodePeerOffline, "moved to the dead letters: %s", dead.Reason)
	case errors.Is(err, outbox.ErrFull):
		return &Error{Code: CodeOutboxFull, Msg: UserText(err)}
	case errors.Is(err, wire.ErrTooLarge):
		return &Error{Code: CodeBodyTooLarge, Msg: "the envelope would exceed the 1 MiB frame limit"}
	case errors.Is(err, wire.ErrBadValue):
		return &Error{Code: CodeBadStatus, Msg: UserText(err)}
	case errors.Is(err, wire.ErrMalformed), errors.Is(err, wire.ErrType), errors.Is(err, wire.ErrInvalidUTF8),
		errors.Is(err, wire.ErrTooDeep), errors.Is(err, wire.ErrUnsupported), errors.Is(err, wire.ErrDuplicateKey),
		errors.Is(err, identity.ErrBadUUID):
		return &Error{Code: CodeBadArgument, Msg: UserText(err)}
	case errors.Is(err, pair.ErrNoOffer), errors.Is(err, pair.ErrExpired), errors.Is(err, pair.ErrBadProof),
		errors.Is(err, pair.ErrRateLimited), errors.Is(err, pair.ErrRefused), errors.Is(err, pair.ErrProtocol),
		errors.Is(err, natsrelay.ErrNoPairOffer), errors.Is(err, pair.ErrWithdrawn):
		return &Error{Code: CodePairFailed, Msg: UserText(err)}
	case errors.Is(err, ErrClosed):
		return &Error{Code: CodeUnavailable, Msg: UserText(err), Err: err}
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return err
	}
	return err
}

// ErrClosed is returned by a Node's methods after Close.
var ErrClosed = errors.New("node: closed")

// ErrInterrupted is wrapped by the error of a wait its caller ended
// (SIGINT, SIGTERM: the command line exits 130).
var ErrInterrupted = errors.New("interrupted")
