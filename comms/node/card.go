package node

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/meerkatd/meerkatd/comms"
	"github.com/meerkatd/meerkatd/comms/audit"
	"github.com/meerkatd/meerkatd/comms/card"
	"github.com/meerkatd/meerkatd/comms/wire"
	"github.com/meerkatd/meerkatd/identity"
	"github.com/meerkatd/meerkatd/internal/atomicfile"
	"github.com/meerkatd/meerkatd/internal/filemode"
)

// CardAPI is the part of [API] about agent cards: what this node says
// about itself (the home's card.json, signed with the node key when
// handed out) and the verified cards of its peers.
type CardAPI interface {
	// Card returns this node's card, signed: card.json, or the default
	// card (the node's name, no intents) when there is none.
	Card(ctx context.Context) (OwnCard, error)
	// CardEdit changes card.json (creating it from the default card). It
	// works with or without a running node; a running node hands out the
	// new card from the next request on.
	CardEdit(ctx context.Context, e CardEdit) (OwnCard, error)
	// FetchCard asks peer (name, key or peer UUID) for its card with a
	// request of intent meerkat.card, verifies it (signed by the key this
	// node trusts for peer) and keeps it. A card that does not verify is
	// refused with CodeBadCard and nothing is kept. It needs a node that
	// listens (the daemon, or a command's node in ModeReplies).
	FetchCard(ctx context.Context, peer string) (PeerCard, error)
	// DescribePeer returns what this node knows of peer with its verified
	// card: the one kept, or fetched now if none is kept or refresh is
	// set.
	DescribePeer(ctx context.Context, peer string, refresh bool) (PeerDescription, error)
}

// CodeBadCard: a peer's card is malformed, its signature does not verify,
// another key signed it, or the peer declined to give it.
const CodeBadCard = "bad_card"

// CardIntent is the reserved request intent a meerkatd node answers
// itself with its signed card (docs/protocol.md, "Agent cards").
const CardIntent = "meerkat.card"

// CardFileName is the home's card file; CardsDirName the directory of the
// verified peer cards this node keeps (one <peer-uuid>.json each).
const (
	CardFileName = "card.json"
	CardsDirName = "cards"
)

// Tunables of the card exchange.
const (
	// cardRate and cardBurst bound how often one peer gets an answer to
	// meerkat.card: cardBurst at once, then one per cardRate. Requests
	// beyond are acknowledged and not answered, so a peer cannot make
	// this node send more than it asks for.
	cardRate  = time.Second
	cardBurst = 4
	// cardQueue bounds the requests waiting for an answer, all peers
	// together; beyond, requests are acknowledged and not answered.
	cardQueue = 64
	// cardWait is how long FetchCard waits for the answer by default.
	cardWait = 15 * time.Second
	// cardAsked bounds the fetches whose answers this node still
	// expects (their responses are consumed, not stored in the inbox),
	// and cardAskedFor how long one stays expected.
	cardAsked    = 1024
	cardAskedFor = 10 * time.Minute
	// cardLimiters bounds the peers whose rate is tracked; past it the
	// tracking starts over.
	cardLimiters = 4096
)

// CardPath is the home's card.json.
func (h *Home) CardPath() string { return filepath.Join(h.Dir, CardFileName) }

// CardsDir is the home's directory of verified peer cards.
func (h *Home) CardsDir() string { return filepath.Join(h.Dir, CardsDirName) }

// CardIntentInfo is one intent of a card. Its text and schema are the
// card author's.
type CardIntentInfo struct {
	Name        string `json:"name"`
	Description string `json:"description,omitempty"`
	// ParamsSchema is the JSON Schema of the intent's params (a JSON
	// object, as a json.RawMessage; absent: none given).
	ParamsSchema any `json:"params_schema,omitempty"`
}

// CardInfo is a signed card.
type CardInfo struct {
	Name        string           `json:"name"`
	Description string           `json:"description,omitempty"`
	Contact     string           `json:"contact,omitempty"`
	Intents     []CardIntentInfo `json:"intents"`
	PubKey      string           `json:"pubkey"`    // the signer's key
	Signature   string           `json:"signature"` // base64 Ed25519 signature (docs/protocol.md)
}

// OwnCard is this node's card.
type OwnCard struct {
	CardInfo
	// Default is true when the home has no card.json: the card is the
	// node's name and no intents.
	Default bool   `json:"default"`
	Path    string `json:"path"` // the home's card.json
}

// PeerCard is a peer's verified card. Its text (name, description,
// contact, intents and schemas) is the peer's: data to read, never
// instructions; the signature proves only that the peer's key signed it.
type PeerCard struct {
	CardInfo
	Peer      string    `json:"peer"` // the peer's trust-list name
	FetchedAt time.Time `json:"fetched_at"`
	Untrusted bool      `json:"untrusted"` // always true: the content is the peer's
}

// CardSummary is what [Peer] shows of a peer's verified card.
type CardSummary struct {
	Name        string    `json:"name"`
	Description string    `json:"description,omitempty"`
	Intents     []string  `json:"intents"`
	FetchedAt   time.Time `json:"fetched_at"`
}

// PeerDescription is what DescribePeer returns.
type PeerDescription struct {
	Peer Peer     `json:"peer"`
	Card PeerCard `json:"card"`
}

// CardEdit changes the home's card: each field set is applied, in the
// order name, description, contact, remove_intent, add_intent.
type CardEdit struct {
	Name         *string `json:"name,omitempty"`
	Description  *string `json:"description,omitempty"`
	Contact      *string `json:"contact,omitempty"`
	RemoveIntent string  `json:"remove_intent,omitempty"`
	// AddIntent adds an intent, or replaces the one of the same name.
	AddIntent *CardIntentEdit `json:"add_intent,omitempty"`
}

// CardIntentEdit is an intent to add to the card.
type CardIntentEdit struct {
	Name         string          `json:"name"`
	Description  string          `json:"description,omitempty"`
	ParamsSchema json.RawMessage `json:"params_schema,omitempty"` // a JSON object
}

// cards is a node's card state: the verified peer cards kept, the
// fetches it waits for, and the answering of meerkat.card requests.
type cards struct {
	editMu   sync.Mutex // serializes CardEdit
	mu       sync.Mutex
	kept     map[identity.PeerID]keptCard     // cards kept in the home, as last read
	asked    map[identity.UUID]time.Time      // fetch request id → when asked
	limiters map[identity.PeerID]*cardLimiter // answering rate per peer
	fetches  map[identity.PeerID]*cardLimiter // this node's fetches per peer, paced to its answering rate

	queue chan comms.Item // requests to answer (serving nodes); nil: none answered
}

// keptCard is a peer card kept in the home, as last read.
type keptCard struct {
	s         card.Signed
	fetchedAt time.Time
	valid     bool      // the file verified
	mtime     time.Time // the file's, when read
	size      int64
}

// cardLimiter is a token bucket: cardBurst tokens, one more per cardRate.
type cardLimiter struct {
	tokens float64
	last   time.Time
}

func (l *cardLimiter) allow(now time.Time) bool {
	l.tokens = min(cardBurst, l.tokens+now.Sub(l.last).Seconds()/cardRate.Seconds())
	l.last = now
	if l.tokens < 1 {
		return false
	}
	l.tokens--
	return true
}

// Pacing this node's fetches of one peer's card: a bucket one token
// smaller than the peer's, filling a little slower. The peer counts from
// when requests arrive, and the first (which dials) takes longer on the
// way than the next: the spare token and the slower fill absorb that,
// up to about a second, so every fetch paced here finds a token there.
const (
	cardPaceBurst = cardBurst - 1
	cardPaceRate  = cardRate + cardRate/10
)

// reserve takes a token for a request made at now from a bucket of burst
// tokens filling one per rate, or the next one to come when none is left:
// it returns how long to wait before making the request (0: at once).
func (l *cardLimiter) reserve(now time.Time, burst float64, rate time.Duration) time.Duration {
	l.tokens = min(burst, l.tokens+now.Sub(l.last).Seconds()/rate.Seconds())
	l.last = now
	l.tokens--
	if l.tokens >= 0 {
		return 0
	}
	return time.Duration(-l.tokens * float64(rate))
}

// pace waits, before a fetch of peer's card, until the peer's limiter
// (cardBurst in a row, then one per cardRate: the same bucket, counted
// here) would answer it: a fetch past the burst is made later rather
// than left unanswered. It fails when the wait would be longer than a
// fetch waits for its answer (many fetches of one peer at once), or
// when ctx ends first.
func (c *cards) pace(ctx context.Context, peer identity.PeerID, name string) error {
	c.mu.Lock()
	if len(c.fetches) >= cardLimiters {
		c.fetches = map[identity.PeerID]*cardLimiter{}
	}
	l := c.fetches[peer]
	now := time.Now()
	if l == nil {
		l = &cardLimiter{tokens: cardPaceBurst, last: now}
		c.fetches[peer] = l
	}
	wait := l.reserve(now, cardPaceBurst, cardPaceRate)
	if wait > cardWait {
		l.tokens++ // not made: give the token back
		c.mu.Unlock()
		return errorf(CodeUnavailable, "too many card fetches of %s at once: a node answers one peer's card requests %d times in a row, then once every %s; try again later", name, cardBurst, cardRate)
	}
	c.mu.Unlock()
	if wait == 0 {
		return nil
	}
	t := time.NewTimer(wait)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		c.unpace(peer) // not made
		return ctx.Err()
	}
}

// unpace gives back the token pace took for a fetch of peer's card that
// did not reach it (given up while waiting, or not delivered), so that
// later fetches do not wait for turns nobody used.
func (c *cards) unpace(peer identity.PeerID) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if l := c.fetches[peer]; l != nil {
		l.tokens = min(cardPaceBurst, l.tokens+1)
	}
}

func newCards(serve bool) *cards {
	c := &cards{kept: map[identity.PeerID]keptCard{}, asked: map[identity.UUID]time.Time{}, limiters: map[identity.PeerID]*cardLimiter{},
		fetches: map[identity.PeerID]*cardLimiter{}}
	if serve {
		c.queue = make(chan comms.Item, cardQueue)
	}
	return c
}

// cardFile is a kept peer card as stored in the home.
type cardFile struct {
	FetchedAt time.Time       `json:"fetched_at"`
	Card      json.RawMessage `json:"card"` // the signed card, canonical
}

// interceptCard handles, before the inbox, what belongs to the card
// exchange: a meerkat.card request (answered by the node on a serving
// node, queued for cardLoop) and the response to a fetch this node made
// (handed to the fetch through the Router's request table). Both are
// acknowledged as admitted and never stored. It reports whether it took
// the item.
func (n *Node) interceptCard(it comms.Item) bool {
	if it.Type != comms.ItemExternal {
		return false
	}
	e := it.Envelope
	c := n.cards
	switch e.Kind.Type() {
	case wire.TypeRequest:
		if e.Kind.Intent() != CardIntent || c.queue == nil {
			return false
		}
		c.mu.Lock()
		if len(c.limiters) >= cardLimiters {
			c.limiters = map[identity.PeerID]*cardLimiter{}
		}
		l := c.limiters[e.From]
		now := time.Now()
		if l == nil {
			l = &cardLimiter{tokens: cardBurst, last: now}
			c.limiters[e.From] = l
		}
		ok := l.allow(now)
		c.mu.Unlock()
		if !ok {
			n.log.Debug("card request not answered: the peer asks too often", "peer", e.From)
			return true
		}
		select {
		case c.queue <- it:
		default:
			n.log.Debug("card request not answered: too many waiting", "peer", e.From)
		}
		return true
	case wire.TypeResponse:
		id, ok := e.Kind.InReplyTo()
		if !ok {
			return false
		}
		c.mu.Lock()
		_, asked := c.asked[id]
		c.mu.Unlock()
		return asked
	}
	return false
}

// cardLoop answers the queued meerkat.card requests until ctx ends.
func (n *Node) cardLoop(ctx context.Context) {
	for {
		select {
		case it := <-n.cards.queue:
			n.answerCard(ctx, it)
		case <-ctx.Done():
			return
		}
	}
}

// cardAnswer is the completed response to card request id: this node's
// signed card.
func (n *Node) cardAnswer(id identity.UUID) (wire.Kind, error) {
	own, err := n.signedCard()
	if err != nil {
		return wire.Kind{}, err
	}
	b, err := own.MarshalJSON()
	if err != nil {
		return wire.Kind{}, err
	}
	v, err := wire.ParseJSON(b)
	if err != nil {
		return wire.Kind{}, err
	}
	return wire.Response(id, wire.StatusCompleted, v), nil
}

// answerCard sends the signed card as a completed response to request
// it (one attempt: the requester asks again if it is lost).
func (n *Node) answerCard(ctx context.Context, it comms.Item) {
	e := it.Envelope
	kind, err := n.cardAnswer(e.ID)
	if err != nil {
		// The asker is told at once (a failed response: "declined"),
		// not left to wait for a card that will not come.
		n.log.Warn("card request declined: this node's card cannot be given", "err", err)
		kind = wire.Response(e.ID, wire.StatusFailed, wire.Text("no card to give"))
	}
	sctx, cancel := context.WithTimeout(ctx, n.SendTimeout())
	defer cancel()
	if _, err := n.send(sctx, sendSpec{peer: e.From.String(), kind: kind}); err != nil {
		n.log.Debug("card response not delivered", "peer", e.From, "err", err)
	}
}

// loadCard reads the home's card.json (the default card if there is
// none). It refuses a file that is not the user's own regular file or
// that group or others may write: the card is signed with the node key.
// A file it refuses is the file's fault, not the command's (internal,
// exit 1): cardFileError says so.
func (n *Node) loadCard() (card.Card, bool, error) {
	path := n.h.CardPath()
	err := filemode.File(path)
	if errors.Is(err, fs.ErrNotExist) {
		return card.Card{Name: n.h.Config.Name, Intents: []card.Intent{}}, true, nil
	}
	if err != nil {
		return card.Card{}, false, cardFileError(path, err)
	}
	f, err := os.Open(path)
	if err != nil {
		return card.Card{}, false, err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return card.Card{}, false, err
	}
	if err := filemode.Current().FileInfo(path, st); err != nil { // swapped since the check
		return card.Card{}, false, cardFileError(path, err)
	}
	data, err := io.ReadAll(io.LimitReader(f, card.MaxText+1))
	if err != nil {
		return card.Card{}, false, err
	}
	c, err := card.Parse(data)
	if err != nil {
		return card.Card{}, false, cardFileError(path, err)
	}
	return c, false, nil
}

// cardFileError is the error of a card.json that cannot be used.
func cardFileError(path string, err error) error {
	text := UserText(err)
	if !strings.Contains(text, path) {
		text = path + ": " + text
	}
	return fmt.Errorf("%s (fix the file, or remove it to give the default card)", text)
}

// signedCard is the home's card signed with the node key.
func (n *Node) signedCard() (card.Signed, error) {
	c, _, err := n.loadCard()
	if err != nil {
		return card.Signed{}, err
	}
	s, err := card.Sign(n.h.Key, c)
	if err != nil {
		return card.Signed{}, cardFileError(n.h.CardPath(), err)
	}
	return s, nil
}

// cardInfo is s as the API shows it.
func cardInfo(s card.Signed) CardInfo {
	ci := CardInfo{Name: s.Name, Description: s.Description, Contact: s.Contact, Intents: []CardIntentInfo{},
		PubKey: s.PubKey.String(), Signature: base64.StdEncoding.EncodeToString(s.Signature)}
	for _, in := range s.Intents {
		ii := CardIntentInfo{Name: in.Name, Description: in.Description}
		if in.ParamsSchema != nil {
			ii.ParamsSchema = in.ParamsSchema
		}
		ci.Intents = append(ci.Intents, ii)
	}
	return ci
}

// Card implements [API].
func (n *Node) Card(context.Context) (OwnCard, error) {
	if n.closing() {
		return OwnCard{}, Coded(ErrClosed)
	}
	_, def, err := n.loadCard()
	if err != nil {
		return OwnCard{}, err
	}
	s, err := n.signedCard()
	if err != nil {
		return OwnCard{}, err
	}
	return OwnCard{CardInfo: cardInfo(s), Default: def, Path: n.h.CardPath()}, nil
}

// CardEdit implements [API].
func (n *Node) CardEdit(ctx context.Context, e CardEdit) (OwnCard, error) {
	if n.closing() {
		return OwnCard{}, Coded(ErrClosed)
	}
	n.cards.editMu.Lock()
	defer n.cards.editMu.Unlock()
	c, _, err := n.loadCard()
	if err != nil {
		return OwnCard{}, err
	}
	if e.Name != nil {
		c.Name = *e.Name
	}
	if e.Description != nil {
		c.Description = *e.Description
	}
	if e.Contact != nil {
		c.Contact = *e.Contact
	}
	if e.RemoveIntent != "" {
		i := intentIndex(c.Intents, e.RemoveIntent)
		if i < 0 {
			return OwnCard{}, errorf(CodeBadArgument, "the card has no intent %q", e.RemoveIntent)
		}
		c.Intents = append(c.Intents[:i], c.Intents[i+1:]...)
	}
	if a := e.AddIntent; a != nil {
		if err := card.CheckIntentName(a.Name); err != nil {
			return OwnCard{}, errorf(CodeBadArgument, "%s", UserText(err))
		}
		in := card.Intent{Name: a.Name, Description: a.Description}
		if len(a.ParamsSchema) > 0 && string(a.ParamsSchema) != "null" {
			in.ParamsSchema = a.ParamsSchema
		}
		if i := intentIndex(c.Intents, a.Name); i >= 0 {
			c.Intents[i] = in
		} else {
			c.Intents = append(c.Intents, in)
		}
	}
	if err := c.Validate(); err != nil {
		return OwnCard{}, errorf(CodeBadArgument, "%s", UserText(err))
	}
	data, err := c.MarshalIndent()
	if err != nil {
		return OwnCard{}, Coded(err)
	}
	// What is saved must load: card.Parse reads it back the same way.
	if _, err := card.Parse(data); err != nil {
		return OwnCard{}, errorf(CodeBadArgument, "%s", UserText(err))
	}
	if _, err := card.Sign(n.h.Key, c); err != nil {
		return OwnCard{}, errorf(CodeBadArgument, "%s", UserText(err))
	}
	if err := atomicfile.WriteFile(n.h.CardPath(), data, 0o600); err != nil {
		return OwnCard{}, err
	}
	return n.Card(ctx)
}

func intentIndex(list []card.Intent, name string) int {
	for i, in := range list {
		if in.Name == name {
			return i
		}
	}
	return -1
}

// keptCardPath is where the card kept for peer id lives in the home.
func (n *Node) keptCardPath(id identity.PeerID) string {
	return filepath.Join(n.h.CardsDir(), id.UUID().String()+".json")
}

// loadKeptLocked returns the card kept in the home for peer id, read
// again only when its file changed (another process, a command run
// without the daemon, may have fetched it). Each file read is verified
// again against id: a file that does not verify is ignored. n.cards.mu
// is held.
func (n *Node) loadKeptLocked(id identity.PeerID) (keptCard, bool) {
	c := n.cards
	path := n.keptCardPath(id)
	st, err := os.Stat(path)
	if err != nil {
		delete(c.kept, id)
		return keptCard{}, false
	}
	if k, ok := c.kept[id]; ok && k.mtime.Equal(st.ModTime()) && k.size == st.Size() {
		return k, k.valid
	}
	k := keptCard{mtime: st.ModTime(), size: st.Size()}
	c.kept[id] = k // a file that does not verify is not read again until it changes
	data, err := readSmall(path, card.MaxText+4096)
	if err != nil {
		n.log.Warn("kept card ignored", "path", path, "err", err)
		return keptCard{}, false
	}
	var cf cardFile
	if err := json.Unmarshal(data, &cf); err != nil {
		n.log.Warn("kept card ignored: not a card file", "path", path)
		return keptCard{}, false
	}
	s, err := card.ParseSigned(cf.Card)
	if err == nil {
		err = s.Check(id)
	}
	if err != nil {
		n.log.Warn("kept card ignored: it does not verify for the peer's key", "path", path, "err", err)
		return keptCard{}, false
	}
	k.s, k.fetchedAt, k.valid = s, cf.FetchedAt, true
	c.kept[id] = k
	return k, true
}

// keptCard returns the verified card kept for peer id, if any: only one
// signed by the key the trust list has for it now.
func (n *Node) keptCard(id identity.PeerID) (keptCard, bool) {
	n.cards.mu.Lock()
	defer n.cards.mu.Unlock()
	return n.loadKeptLocked(id)
}

// hasVerifiedCard reports whether this node holds a verified card from
// peer id (then the peer runs meerkatd: only meerkatd answers
// meerkat.card).
func (n *Node) hasVerifiedCard(id identity.PeerID) bool {
	_, ok := n.keptCard(id)
	return ok
}

// cardSummary is the summary of peer id's kept card, nil if none.
func (n *Node) cardSummary(id identity.PeerID) *CardSummary {
	k, ok := n.keptCard(id)
	if !ok {
		return nil
	}
	s := &CardSummary{Name: k.s.Name, Description: k.s.Description, Intents: []string{}, FetchedAt: k.fetchedAt.UTC()}
	for _, in := range k.s.Intents {
		s.Intents = append(s.Intents, in.Name)
	}
	return s
}

// keep stores a verified card for peer id, in memory and in the home.
// The file holds the card's canonical bytes as they are: neither
// indented nor with < > & escaped, which could take a card within
// card.MaxSize past what is read back.
func (n *Node) keep(id identity.PeerID, s card.Signed, at time.Time) error {
	b, err := s.MarshalJSON()
	if err != nil {
		return err
	}
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(cardFile{FetchedAt: at.UTC(), Card: b}); err != nil {
		return err
	}
	data := buf.Bytes()
	n.cards.mu.Lock()
	defer n.cards.mu.Unlock()
	if err := os.MkdirAll(n.h.CardsDir(), 0o700); err != nil {
		return err
	}
	if err := atomicfile.WriteFile(n.keptCardPath(id), data, 0o600); err != nil {
		return err
	}
	delete(n.cards.kept, id) // read back (and verified) on next use
	return nil
}

// ask records that a response to request id is a card fetch's: it is
// consumed, not stored.
func (c *cards) ask(id identity.UUID, now time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.asked) >= cardAsked {
		for k, t := range c.asked {
			if now.Sub(t) > cardAskedFor || len(c.asked) >= cardAsked {
				delete(c.asked, k)
			}
		}
	}
	c.asked[id] = now
}

func badCard(format string, args ...any) *Error { return errorf(CodeBadCard, format, args...) }

// FetchCard implements [API].
func (n *Node) FetchCard(ctx context.Context, peer string) (PeerCard, error) {
	if n.closing() {
		return PeerCard{}, Coded(ErrClosed)
	}
	if n.mode == ModeSend {
		return PeerCard{}, errorf(CodeNoDaemon, "fetching a card needs a node that listens for the answer (the daemon, or meerkatd card fetch)")
	}
	p, err := n.r.ResolvePeer(peer)
	if err != nil {
		return PeerCard{}, Coded(err)
	}
	if err := n.cards.pace(ctx, p.ID, p.Name); err != nil {
		return PeerCard{}, Coded(err)
	}
	sealed, err := n.r.Seal(p.ID.String(), wire.Request(CardIntent, wire.Null()))
	if err != nil {
		n.cards.unpace(p.ID)
		return PeerCard{}, Coded(err)
	}
	n.cards.ask(sealed.ID, time.Now())
	n.auditSealed(sealed, audit.EventSent, 1, "")
	if err := n.r.Deliver(ctx, comms.Delivery{To: p.ID, ID: sealed.ID, Payload: sealed.Payload, WantAck: true, SecondTry: true}); err != nil {
		n.cards.unpace(p.ID) // not acknowledged: the peer has not counted it
		n.auditSealed(sealed, audit.EventRefused, 1, err.Error())
		return PeerCard{}, Coded(err)
	}
	n.auditSealed(sealed, audit.EventAcked, 1, "")
	wctx, cancel := context.WithTimeout(ctx, cardWait)
	defer cancel()
	for {
		resp, err := n.r.AwaitResponse(wctx, sealed.ID)
		if err != nil {
			if errors.Is(err, context.DeadlineExceeded) {
				return PeerCard{}, errorf(CodePeerOffline, "%s acknowledged the card request but sent no card within %s: it may not run meerkatd, or it had more card requests from this key than it answers (%d in a row, then one every %s)", p.Name, cardWait, cardBurst, cardRate)
			}
			return PeerCard{}, Coded(err)
		}
		switch resp.Kind.Status() {
		case wire.StatusAccepted:
			continue
		case wire.StatusFailed:
			return PeerCard{}, badCard("%s declined to give its card", p.Name)
		}
		// b is this node's JSON for the CBOR value the peer sent, not the
		// text the peer signed: its escapes and numbers may take more
		// bytes (\u0008 for \b, 1e-07 for 1e-7). ParseSigned measures the
		// card's canonical form, as Sign did on the peer.
		b, err := resp.Kind.Result().MarshalJSON()
		if err != nil {
			return PeerCard{}, badCard("the card %s sent is not JSON", p.Name)
		}
		s, err := card.ParseSigned(b)
		if err == nil {
			err = s.Check(p.ID)
		}
		if err != nil {
			n.log.Warn("refused a peer's card", "peer", p.Name, "err", err)
			return PeerCard{}, badCard("the card %s sent is refused: %s", p.Name, UserText(err))
		}
		now := time.Now()
		if err := n.keep(p.ID, s, now); err != nil {
			return PeerCard{}, err
		}
		return PeerCard{CardInfo: cardInfo(s), Peer: p.Name, FetchedAt: now.UTC(), Untrusted: true}, nil
	}
}

// DescribePeer implements [API].
func (n *Node) DescribePeer(ctx context.Context, peer string, refresh bool) (PeerDescription, error) {
	if n.closing() {
		return PeerDescription{}, Coded(ErrClosed)
	}
	p, err := n.r.ResolvePeer(peer)
	if err != nil {
		return PeerDescription{}, Coded(err)
	}
	var pc PeerCard
	if k, ok := n.keptCard(p.ID); ok && !refresh {
		pc = PeerCard{CardInfo: cardInfo(k.s), Peer: p.Name, FetchedAt: k.fetchedAt.UTC(), Untrusted: true}
	} else if pc, err = n.FetchCard(ctx, p.ID.String()); err != nil {
		return PeerDescription{}, err
	}
	peers, err := n.Peers(ctx)
	if err != nil {
		return PeerDescription{}, err
	}
	for _, mp := range peers {
		if mp.PubKey == p.ID.String() {
			return PeerDescription{Peer: mp, Card: pc}, nil
		}
	}
	return PeerDescription{}, errorf(CodeUnknownPeer, "%s is no longer trusted", p.Name)
}
