package identity

import (
	"crypto"
	"crypto/ed25519"
	"errors"
	"io"
)

// Signer returns kp as a [crypto.Signer], for APIs that take one (a TLS
// certificate's key). It signs pure Ed25519 only (opts.HashFunc() == 0)
// and does not expose the private key: it is not an
// ed25519.PrivateKey.
func (kp *Keypair) Signer() crypto.Signer { return signer{kp} }

type signer struct{ kp *Keypair }

// errPrehash refuses Ed25519ph and any other hashed mode.
var errPrehash = errors.New("identity: only pure Ed25519 signatures are made")

func (s signer) Public() crypto.PublicKey { return ed25519.PublicKey(s.kp.id[:]) }

func (s signer) Sign(_ io.Reader, msg []byte, opts crypto.SignerOpts) ([]byte, error) {
	if opts != nil && opts.HashFunc() != 0 {
		return nil, errPrehash
	}
	if o, ok := opts.(*ed25519.Options); ok && o.Context != "" {
		return nil, errPrehash
	}
	return s.kp.Sign(msg), nil
}
