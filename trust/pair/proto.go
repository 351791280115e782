package pair

import (
	"bufio"
	"crypto/hkdf"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"

	"github.com/meerkatd/meerkatd/identity"
)

// Magic opens a pairing exchange on a node's listener. An envelope frame
// starts with the high byte of its length, which is 0 (frames are at most
// 1 MiB), so the first byte tells the two apart.
const Magic = "MKPAIR/1\n"

// MagicByte is Magic's first byte.
const MagicByte = 'M'

// Protocol limits.
const (
	maxMsg    = 4 << 10 // one message line
	nonceSize = 32
)

// msg is every message of the exchange, one JSON object per line; each
// step uses some of the fields.
type msg struct {
	Offer string `json:"offer,omitempty"` // hello: hex of the offer id
	Key   string `json:"key,omitempty"`   // hello, challenge: sender's key
	Name  string `json:"name,omitempty"`  // hello, challenge: sender's node name
	Addr  string `json:"addr,omitempty"`  // hello: where the initiator listens
	Nonce []byte `json:"nonce,omitempty"` // hello, challenge
	MAC   []byte `json:"mac,omitempty"`   // challenge, proof
	Sig   []byte `json:"sig,omitempty"`   // challenge, proof
	OK    bool   `json:"ok,omitempty"`    // done
	Error string `json:"error,omitempty"` // challenge or done: why it failed
}

// Errors of an exchange, on either side.
var (
	ErrNoOffer = errors.New("pair: no such offer (wrong code, or it was used or cancelled)")
	// ErrWithdrawn: what [Offer.Wait] returns for an offer closed
	// ([Responder.Close]) before anyone used it.
	ErrWithdrawn = errors.New("pair: the offer was withdrawn before anyone used it")
	ErrExpired   = errors.New("pair: the offer has expired")
	// ErrTooManyOffers: as many offers as may be are open already.
	ErrTooManyOffers = errors.New("pair: too many open offers")
	ErrBadProof      = errors.New("pair: the other side does not know the code or does not hold its key")
	ErrRateLimited   = errors.New("pair: too many pairing attempts from here (five at once, then one every 12 seconds); wait a minute")
	ErrRefused       = errors.New("pair: the other side refused")
	ErrProtocol      = errors.New("pair: protocol error")
	// ErrUnanswered: the responder trusted the initiator, but could not
	// tell it so.
	ErrUnanswered = errors.New("pair: the answer did not reach the other node, which may not trust this one (pair again with a new code to complete it)")
	// ErrUnreachable: the line's address could not be connected to.
	ErrUnreachable = errors.New("pair: cannot reach the offer's address")
)

// conn reads and writes messages.
type conn struct {
	r *bufio.Reader
	w io.Writer
}

func (c *conn) send(m msg) error {
	b, err := json.Marshal(m)
	if err != nil {
		return err
	}
	_, err = c.w.Write(append(b, '\n'))
	return err
}

func (c *conn) recv() (msg, error) {
	var m msg
	line, err := c.r.ReadSlice('\n')
	if errors.Is(err, bufio.ErrBufferFull) {
		return m, fmt.Errorf("%w: message longer than %d bytes", ErrProtocol, maxMsg)
	}
	if err != nil {
		return m, err
	}
	if err := json.Unmarshal(line, &m); err != nil {
		return m, fmt.Errorf("%w: %v", ErrProtocol, err)
	}
	return m, nil
}

// transcript binds everything both sides said: the offer, both keys, the
// initiator's name and address, the responder's name and both nonces. A
// relay that changes any of it changes the transcript, and it cannot
// recompute the MACs without the code.
type transcript struct {
	offer                [16]byte
	initKey, respKey     identity.PeerID
	initName, initAddr   string
	respName             string
	initNonce, respNonce []byte
}

func (t *transcript) sum() []byte {
	h := sha256.New()
	field := func(b []byte) {
		var n [binary.MaxVarintLen64]byte
		h.Write(n[:binary.PutUvarint(n[:], uint64(len(b)))])
		h.Write(b)
	}
	field([]byte("meerkat pair transcript v1"))
	field(t.offer[:])
	field(t.initKey[:])
	field(t.respKey[:])
	field([]byte(t.initName))
	field([]byte(t.initAddr))
	field([]byte(t.respName))
	field(t.initNonce)
	field(t.respNonce)
	return h.Sum(nil)
}

// Roles, mixed into MACs and signatures so neither side's proof can be
// reflected back as the other's.
const (
	roleResponder = "meerkat pair responder v1"
	roleInitiator = "meerkat pair initiator v1"
)

// macKey derives the MAC key from the code.
func macKey(c Code) ([]byte, error) {
	return hkdf.Key(sha256.New, c[:], []byte("meerkat pair v1"), "mac key", 32)
}

func proofMAC(key []byte, role string, sum []byte) []byte {
	m := hmac.New(sha256.New, key)
	m.Write([]byte(role))
	m.Write(sum)
	return m.Sum(nil)
}

func signed(role string, sum []byte) []byte { return append([]byte(role), sum...) }

func newNonce() ([]byte, error) {
	n := make([]byte, nonceSize)
	_, err := rand.Read(n)
	return n, err
}
