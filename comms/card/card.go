package card

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/meerkatd/meerkatd/identity"
)

// Limits of a card (docs/protocol.md, "Agent cards").
const (
	// MaxSize bounds a card, signed or not (64 KiB): the length of its
	// canonical form (see the package doc; a signed card's with its
	// pubkey and signature), which Sign measures and the signature
	// covers. It is the same whatever text carried the card, so a card
	// Sign accepts is within the limit for every peer.
	MaxSize = 64 << 10
	// MaxText bounds the JSON text Parse and ParseSigned read (512 KiB).
	// Other writers spell a card differently: \u0008 for \b (the wire's
	// JSON), \u003c for < (Go's encoding/json), 1e-07 for 1e-7,
	// whitespace. Written compactly, any escaping takes at most six bytes
	// for one byte of canonical text, so the text of a card within
	// MaxSize is within MaxText however it was escaped.
	MaxText = 8 * MaxSize
	// MaxDepth bounds the nesting of a card's JSON (the card object is
	// level 1, so a params schema may nest 28 levels).
	MaxDepth = 32
	// MaxIntents bounds the intents a card lists.
	MaxIntents = 64
	// MaxNameLen bounds a card's name, in bytes.
	MaxNameLen = 128
	// MaxDescriptionLen bounds a card's description, in bytes.
	MaxDescriptionLen = 4096
	// MaxContactLen bounds a card's contact text, in bytes.
	MaxContactLen = 512
	// MaxIntentNameLen bounds an intent's name, in bytes.
	MaxIntentNameLen = 128
	// MaxIntentDescriptionLen bounds an intent's description, in bytes.
	MaxIntentDescriptionLen = 1024
)

// Domain starts the bytes a card's signature covers; it keeps a card
// signature from being taken for any other signature of the node's key.
const Domain = "meerkat-card-v1\x00"

// ReservedPrefix starts the intents a meerkatd node answers itself
// (meerkat.card, …): a card does not list them.
const ReservedPrefix = "meerkat."

// Errors. Every failure of Parse and ParseSigned matches one of them
// (errors.Is); none quotes the card's text.
var (
	ErrMalformed    = errors.New("card: malformed card")
	ErrBadSignature = errors.New("card: the signature does not verify")
	ErrWrongKey     = errors.New("card: signed by another key than the peer's")
)

// intentName is what an intent name may be: a letter or digit, then
// letters, digits and . _ : / - (at most MaxIntentNameLen bytes in all).
var intentName = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._:/-]*$`)

// Intent is one request intent a card says its node accepts.
type Intent struct {
	Name        string `json:"name"`
	Description string `json:"description,omitempty"`
	// ParamsSchema is a JSON Schema for the request's params: any JSON
	// object, in canonical form (nil: none given).
	ParamsSchema json.RawMessage `json:"params_schema,omitempty"`
}

// Card is what a node says about itself. The zero value is not valid: a
// card needs a name.
type Card struct {
	Name        string   `json:"name"`
	Description string   `json:"description,omitempty"`
	Contact     string   `json:"contact,omitempty"`
	Intents     []Intent `json:"intents"`
}

// Signed is a card with its signer's key and signature, as [Sign] makes
// it and [ParseSigned] reads it. Its JSON form (MarshalJSON) is the
// canonical signed object, members unknown to this version included.
type Signed struct {
	Card
	PubKey    identity.PeerID
	Signature []byte
	tree      map[string]any // the whole signed object, signature included
}

// Validate checks c against the limits of the package doc.
func (c Card) Validate() error {
	if err := checkText("name", c.Name, MaxNameLen, false); err != nil {
		return err
	}
	if c.Name == "" || strings.TrimSpace(c.Name) == "" {
		return fmt.Errorf("%w: name: empty", ErrMalformed)
	}
	if err := checkText("description", c.Description, MaxDescriptionLen, true); err != nil {
		return err
	}
	if err := checkText("contact", c.Contact, MaxContactLen, false); err != nil {
		return err
	}
	if len(c.Intents) > MaxIntents {
		return fmt.Errorf("%w: %d intents, at most %d", ErrMalformed, len(c.Intents), MaxIntents)
	}
	seen := map[string]bool{}
	for i, in := range c.Intents {
		if err := checkIntentName(in.Name); err != nil {
			return fmt.Errorf("intents[%d]: %w", i, err)
		}
		if seen[in.Name] {
			return fmt.Errorf("%w: intents[%d]: the name repeats an earlier intent's", ErrMalformed, i)
		}
		seen[in.Name] = true
		if err := checkText("description", in.Description, MaxIntentDescriptionLen, true); err != nil {
			return fmt.Errorf("intents[%d]: %w", i, err)
		}
		if in.ParamsSchema != nil {
			v, err := parseTree(in.ParamsSchema)
			if err != nil {
				return fmt.Errorf("intents[%d]: params_schema: %w", i, err)
			}
			if _, ok := v.(map[string]any); !ok {
				return fmt.Errorf("%w: intents[%d]: params_schema is not a JSON object", ErrMalformed, i)
			}
		}
	}
	return nil
}

// CheckIntentName reports whether name may name an intent in a card: 1
// to MaxIntentNameLen bytes, a letter or digit then letters, digits and
// . _ : / -, not starting with ReservedPrefix.
func CheckIntentName(name string) error { return checkIntentName(name) }

func checkIntentName(name string) error {
	switch {
	case name == "":
		return fmt.Errorf("%w: an intent needs a name", ErrMalformed)
	case len(name) > MaxIntentNameLen:
		return fmt.Errorf("%w: an intent name of %d bytes, at most %d", ErrMalformed, len(name), MaxIntentNameLen)
	case !intentName.MatchString(name):
		return fmt.Errorf("%w: an intent name may hold only letters, digits and . _ : / -, and starts with a letter or digit", ErrMalformed)
	case strings.HasPrefix(strings.ToLower(name), ReservedPrefix):
		return fmt.Errorf("%w: intents starting with %q are the node's own, not listed in a card", ErrMalformed, ReservedPrefix)
	}
	return nil
}

// checkText checks a text member: valid UTF-8, at most max bytes, no
// control characters (but newlines and tabs where multiline).
func checkText(what, s string, max int, multiline bool) error {
	if len(s) > max {
		return fmt.Errorf("%w: %s of %d bytes, at most %d", ErrMalformed, what, len(s), max)
	}
	if !utf8.ValidString(s) {
		return fmt.Errorf("%w: %s is not valid UTF-8", ErrMalformed, what)
	}
	for _, r := range s {
		if multiline && (r == '\n' || r == '\t') {
			continue
		}
		if unicode.IsControl(r) {
			return fmt.Errorf("%w: %s holds a control character", ErrMalformed, what)
		}
	}
	return nil
}

// Parse reads an unsigned card (the home's card.json): a JSON object of
// at most MaxText bytes, MaxSize in canonical form, with only the members
// of [Card], which must be valid. Its params schemas come back in
// canonical form.
func Parse(data []byte) (Card, error) {
	m, err := parseObject(data)
	if err != nil {
		return Card{}, err
	}
	return fromTree(m, true)
}

// ParseSigned reads a signed card and checks it: the limits (MaxText
// bytes of text in any spelling, MaxSize in canonical form, as Sign
// measures), the members of [Card] (others are kept, and covered by the
// signature), and the signature against the key in "pubkey". It does not
// say whom that key belongs to: see [Signed.Check].
func ParseSigned(data []byte) (Signed, error) {
	m, err := parseObject(data)
	if err != nil {
		return Signed{}, err
	}
	pk, ok1 := m["pubkey"].(string)
	sig, ok2 := m["signature"].(string)
	if !ok1 || !ok2 {
		return Signed{}, fmt.Errorf("%w: a signed card needs pubkey and signature text", ErrMalformed)
	}
	s := Signed{tree: m}
	if s.PubKey, err = identity.ParsePeerID(pk); err != nil {
		return Signed{}, fmt.Errorf("%w: pubkey: %w", ErrMalformed, err)
	}
	if s.Signature, err = base64.StdEncoding.Strict().DecodeString(sig); err != nil || len(s.Signature) != 64 {
		return Signed{}, fmt.Errorf("%w: signature: want 64 bytes in standard base64", ErrMalformed)
	}
	if s.Card, err = fromTree(m, false); err != nil {
		return Signed{}, err
	}
	msg, err := signingBytes(m)
	if err != nil {
		return Signed{}, err
	}
	if !s.PubKey.Verify(msg, s.Signature) {
		return Signed{}, ErrBadSignature
	}
	return s, nil
}

// Check reports whether s was signed by want, the key the caller trusts
// for the node that handed s over ([ErrWrongKey] if not).
func (s Signed) Check(want identity.PeerID) error {
	if s.PubKey != want {
		return ErrWrongKey
	}
	return nil
}

// Sign validates c and signs it with kp. The signed card's canonical
// form (its MarshalJSON) is at most MaxSize bytes, so that every peer
// can read it, however the card travels.
func Sign(kp *identity.Keypair, c Card) (Signed, error) {
	if err := c.Validate(); err != nil {
		return Signed{}, err
	}
	m, err := toTree(c)
	if err != nil {
		return Signed{}, err
	}
	m["pubkey"] = kp.ID().String()
	msg, err := signingBytes(m)
	if err != nil {
		return Signed{}, err
	}
	sig := kp.Sign(msg)
	m["signature"] = base64.StdEncoding.EncodeToString(sig)
	s := Signed{PubKey: kp.ID(), Signature: sig, tree: m}
	if s.Card, err = fromTree(m, false); err != nil {
		return Signed{}, err
	}
	// The limit ParseSigned applies, on the same canonical bytes: what
	// is signed here is read by every peer, whatever carries it.
	if err := checkSize(m); err != nil {
		return Signed{}, err
	}
	return s, nil
}

// MarshalJSON returns the signed card in canonical form. The zero Signed
// has nothing to write and fails.
func (s Signed) MarshalJSON() ([]byte, error) {
	if s.tree == nil {
		return nil, fmt.Errorf("%w: an empty signed card", ErrMalformed)
	}
	return appendCanonical(nil, s.tree)
}

// SigningBytes returns what the signature of the signed card data
// covers: Domain and the canonical form of its object without
// "signature". It reads data as ParseSigned does but checks nothing
// else, so it serves other implementations' tests.
func SigningBytes(data []byte) ([]byte, error) {
	m, err := parseObject(data)
	if err != nil {
		return nil, err
	}
	return signingBytes(m)
}

func signingBytes(m map[string]any) ([]byte, error) {
	sig, had := m["signature"]
	delete(m, "signature")
	b, err := appendCanonical([]byte(Domain), m)
	if had {
		m["signature"] = sig
	}
	return b, err
}

// parseObject reads a card's JSON object, within the limits: at most
// MaxText bytes of text, at most MaxSize in canonical form.
func parseObject(data []byte) (map[string]any, error) {
	if len(data) > MaxText {
		return nil, fmt.Errorf("%w: %d bytes of JSON text, at most %d", ErrMalformed, len(data), MaxText)
	}
	v, err := parseTree(data)
	if err != nil {
		return nil, err
	}
	m, ok := v.(map[string]any)
	if !ok {
		return nil, fmt.Errorf("%w: a card is a JSON object", ErrMalformed)
	}
	if err := checkSize(m); err != nil {
		return nil, err
	}
	return m, nil
}

// checkSize refuses a card object whose canonical form is over MaxSize.
func checkSize(m map[string]any) error {
	n, err := canonicalSize(m)
	if err != nil {
		return err
	}
	if n > MaxSize {
		return fmt.Errorf("%w: the card takes %d bytes in canonical form, at most %d", ErrMalformed, n, MaxSize)
	}
	return nil
}

// fromTree reads a Card from a parsed object. strict refuses members
// other than Card's (and so pubkey and signature).
func fromTree(m map[string]any, strict bool) (Card, error) {
	var c Card
	known := map[string]bool{"name": true, "description": true, "contact": true, "intents": true}
	if strict {
		for k := range m {
			if !known[k] {
				return Card{}, fmt.Errorf("%w: unknown member %.64q (a card has name, description, contact and intents)", ErrMalformed, k)
			}
		}
	}
	var err error
	if c.Name, err = textMember(m, "name", true); err != nil {
		return Card{}, err
	}
	if c.Description, err = textMember(m, "description", false); err != nil {
		return Card{}, err
	}
	if c.Contact, err = textMember(m, "contact", false); err != nil {
		return Card{}, err
	}
	c.Intents = []Intent{}
	if v, ok := m["intents"]; ok {
		a, ok := v.([]any)
		if !ok {
			return Card{}, fmt.Errorf("%w: intents is not an array", ErrMalformed)
		}
		if len(a) > MaxIntents {
			return Card{}, fmt.Errorf("%w: %d intents, at most %d", ErrMalformed, len(a), MaxIntents)
		}
		for i, item := range a {
			im, ok := item.(map[string]any)
			if !ok {
				return Card{}, fmt.Errorf("%w: intents[%d] is not an object", ErrMalformed, i)
			}
			if strict {
				for k := range im {
					if k != "name" && k != "description" && k != "params_schema" {
						return Card{}, fmt.Errorf("%w: intents[%d]: unknown member %.64q (an intent has name, description and params_schema)", ErrMalformed, i, k)
					}
				}
			}
			var in Intent
			if in.Name, err = textMember(im, "name", true); err != nil {
				return Card{}, fmt.Errorf("intents[%d]: %w", i, err)
			}
			if in.Description, err = textMember(im, "description", false); err != nil {
				return Card{}, fmt.Errorf("intents[%d]: %w", i, err)
			}
			if ps, ok := im["params_schema"]; ok {
				if _, ok := ps.(map[string]any); !ok {
					return Card{}, fmt.Errorf("%w: intents[%d]: params_schema is not a JSON object", ErrMalformed, i)
				}
				if in.ParamsSchema, err = appendCanonical(nil, ps); err != nil {
					return Card{}, err
				}
			}
			c.Intents = append(c.Intents, in)
		}
	}
	if err := c.Validate(); err != nil {
		return Card{}, err
	}
	return c, nil
}

// textMember returns m's member name, which must be text if present.
func textMember(m map[string]any, name string, required bool) (string, error) {
	v, ok := m[name]
	if !ok {
		if required {
			return "", fmt.Errorf("%w: %s missing", ErrMalformed, name)
		}
		return "", nil
	}
	s, ok := v.(string)
	if !ok {
		return "", fmt.Errorf("%w: %s is not text", ErrMalformed, name)
	}
	return s, nil
}

// toTree is c as a JSON tree (c is valid).
func toTree(c Card) (map[string]any, error) {
	m := map[string]any{"name": c.Name}
	if c.Description != "" {
		m["description"] = c.Description
	}
	if c.Contact != "" {
		m["contact"] = c.Contact
	}
	intents := make([]any, 0, len(c.Intents))
	for _, in := range c.Intents {
		im := map[string]any{"name": in.Name}
		if in.Description != "" {
			im["description"] = in.Description
		}
		if in.ParamsSchema != nil {
			v, err := parseTree(in.ParamsSchema)
			if err != nil {
				return nil, err
			}
			im["params_schema"] = v
		}
		intents = append(intents, im)
	}
	m["intents"] = intents
	return m, nil
}

// MarshalIndent returns c as the home's card.json holds it: indented
// JSON, params schemas in canonical form, < > & unescaped. If indenting
// would take it past MaxText (deeply nested schemas), it is on one line
// instead, so that Parse reads back every card within MaxSize.
func (c Card) MarshalIndent() ([]byte, error) {
	if c.Intents == nil {
		c.Intents = []Intent{}
	}
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	enc.SetIndent("", "  ")
	if err := enc.Encode(c); err != nil {
		return nil, err
	}
	if buf.Len() <= MaxText {
		return buf.Bytes(), nil
	}
	buf.Reset()
	enc.SetIndent("", "")
	if err := enc.Encode(c); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}
