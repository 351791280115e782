package node

import (
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/meerkatd/meerkatd/comms"
	"github.com/meerkatd/meerkatd/comms/audit"
	"github.com/meerkatd/meerkatd/comms/meup"
	"github.com/meerkatd/meerkatd/comms/outbox"
	"github.com/meerkatd/meerkatd/comms/space"
	"github.com/meerkatd/meerkatd/comms/wire"
	"github.com/meerkatd/meerkatd/config"
	"github.com/meerkatd/meerkatd/identity"
	"github.com/meerkatd/meerkatd/internal/filelock"
)

// SpacesFileName is the rosters file in a home.
const SpacesFileName = "spaces.json"

// SpacesPath is the home's rosters file.
func (h *Home) SpacesPath() string { return filepath.Join(h.Dir, SpacesFileName) }

// noMEUPAfter is how many MEUP attempts in a row a peer may close the
// connection on (without an ack) before the node takes it for a peer
// that does not speak MEUP (the Rust reference closes on unknown kinds).
// One close can be a stale connection; three in a row, over the
// outbox's backoff, are the peer refusing the kind.
const noMEUPAfter = 3

// maxTrackedMEUPRequests bounds the mcp/requests remembered so that
// space_respond can address the requester.
const maxTrackedMEUPRequests = 4096

// spaces is the node's part in MEUP spaces: the engine, the rosters file
// and what the engine cannot know (peers closing on MEUP frames, the
// requests received for space_respond).
type spaces struct {
	n   *Node
	eng *space.Engine
	st  space.Store // the engine's store

	// file identifies what spaces.json held when the engine's rosters
	// were last read from it or written to it (saveRoster, reload):
	// a file that differs has been edited by hand since, and is not
	// written over. Taken inside the engine's lock, never around a call
	// of the engine.
	fileMu sync.Mutex
	file   rosterStamp

	mu       sync.Mutex
	problem  string                  // why spaces.json was not taken in at the last reload; "" when it was
	closes   map[identity.PeerID]int // MEUP attempts in a row the peer closed on
	requests map[string]meupRequest  // space + "\x00" + MEUP id of mcp/requests received
	reqOrder []string
}

type meupRequest struct {
	from string   // the requester's participant id
	to   []string // who it addressed
}

// rosterStamp identifies the content of spaces.json.
type rosterStamp struct {
	exists bool
	sum    [sha256.Size]byte
}

// stampOf is the stamp of a rosters file's content (nil: no file).
func stampOf(data []byte) rosterStamp {
	if data == nil {
		return rosterStamp{}
	}
	return rosterStamp{exists: true, sum: sha256.Sum256(data)}
}

// readRosters reads the home's rosters file and its stamp.
func (s *spaces) readRosters() (*space.Roster, rosterStamp, error) {
	path := s.n.h.SpacesPath()
	data, err := space.ReadRosterFile(path)
	if err != nil {
		return nil, rosterStamp{}, err
	}
	r := &space.Roster{}
	if data != nil {
		if r, err = space.ParseRosterFile(path, data); err != nil {
			return nil, rosterStamp{}, err
		}
	}
	return r, stampOf(data), nil
}

// startSpaces builds the space engine of a serving node.
func startSpaces(n *Node) (*spaces, error) {
	var st space.Store = space.NewMemStore()
	if d, ok := n.mail.(*durableMail); ok {
		st = d.st.Spaces()
	}
	s := &spaces{n: n, st: st, closes: map[identity.PeerID]int{}, requests: map[string]meupRequest{}}
	roster, stamp, err := s.readRosters()
	if err != nil {
		return nil, err
	}
	s.file = stamp
	s.eng, err = space.New(st, s, roster, space.Options{
		Self:        n.h.Key.ID(),
		Protocol:    n.h.Config.MEUP.Protocol,
		ProposalTTL: n.h.Config.MEUP.ProposalTTL(),
		Trusted: func(k identity.PeerID) bool {
			_, ok := n.r.Trust().Lookup(k)
			return ok
		},
		Logger:     n.log,
		SaveRoster: s.saveRoster,
	})
	if err != nil {
		return nil, err
	}
	return s, nil
}

// saveRoster writes the engine's rosters to spaces.json (the engine's
// Options.SaveRoster: it runs with the engine's lock held), unless the
// file changed since the engine's rosters were read from it or written
// to it: then it was edited by hand and not reloaded yet, and writing
// over it would lose that edit. It answers with the rosters of the file
// instead (*space.StaleRosterError), and the engine makes its change on
// them. A changed file that does not validate is left as it is, and the
// change is not saved.
func (s *spaces) saveRoster(r *space.Roster) error {
	path := s.n.h.SpacesPath()
	s.fileMu.Lock()
	defer s.fileMu.Unlock()
	data, err := space.ReadRosterFile(path)
	if err != nil {
		return err
	}
	// A file that is gone is written again with the engine's rosters
	// (see reload): it is no edit to keep.
	if stamp := stampOf(data); stamp != s.file && data != nil {
		cur, err := space.ParseRosterFile(path, data)
		if err != nil {
			return fmt.Errorf("%s was changed and does not validate, so it is not written over (fix it; the node reloads it): %w", SpacesFileName, err)
		}
		s.file = stamp // the engine puts these rosters in force
		return &space.StaleRosterError{Current: cur}
	}
	data, err = r.SaveData(path)
	if err != nil {
		return err
	}
	s.file = stampOf(data)
	return nil
}

// SendMEUP implements space.Sender: one MEUP envelope to one member, in a
// signed Meerkat envelope of type meup, sealed under o.Call if it is set
// (sendSpec.call: the copy's envelope id is derived from the call and
// the member).
func (s *spaces) SendMEUP(ctx context.Context, to identity.PeerID, name string, envelope []byte, o space.SendOptions) (space.Delivery, error) {
	env, err := wire.ParseJSON(envelope)
	if err != nil {
		return space.Delivery{}, err
	}
	m, err := wire.Map(wire.Member{Key: "type", Value: wire.Text(wire.TypeMEUP)}, wire.Member{Key: "space", Value: wire.Text(name)}, wire.Member{Key: "envelope", Value: env})
	if err != nil {
		return space.Delivery{}, err
	}
	kind, err := wire.NewKind(m)
	if err != nil {
		return space.Delivery{}, err
	}
	out, err := s.n.send(ctx, sendSpec{peer: to.String(), kind: kind, reliable: o.Reliable, ttl: o.TTL, noWait: o.NoWait, call: callBytes(o.Call)})
	d := space.Delivery{Delivery: out.delivery, LastError: userText(out.lastError)}
	if !out.id.IsZero() {
		d.ID = out.id.String()
	}
	if err != nil {
		return d, Coded(err)
	}
	return d, nil
}

// callBytes is space.SendOptions.Call as sendSpec.call (nil for none).
func callBytes(call string) []byte {
	if call == "" {
		return nil
	}
	return []byte(call)
}

// attempted learns from the outcome of a reliable MEUP attempt to peer:
// a peer that closes the connection on MEUP frames, again and again,
// does not speak MEUP. Its MEUP envelopes then die at once (instead of
// being retried for hours) and the engine stops sending it any.
func (s *spaces) attempted(peer identity.PeerID, err error) error {
	s.mu.Lock()
	if err == nil {
		delete(s.closes, peer)
		s.mu.Unlock()
		return nil
	}
	var off *comms.PeerOfflineError
	if !errors.As(err, &off) || off.Reason != comms.OfflineClosed {
		s.mu.Unlock()
		return err
	}
	s.closes[peer]++
	n := s.closes[peer]
	s.mu.Unlock()
	if n < noMEUPAfter {
		return err
	}
	const why = "it closed the connection on MEUP envelopes: it does not speak MEUP (or does not trust this node)"
	s.eng.NoMEUP(peer, why)
	if n == noMEUPAfter && s.n.ob != nil {
		// The rest of its MEUP envelopes would fail the same way, one
		// backoff round at a time: they become dead letters now.
		s.n.ob.Abandon(peer, wire.TypeMEUP, outbox.ReasonRejected+": "+why)
	}
	return outbox.Permanent(outbox.ReasonRejected, fmt.Errorf("%s: %w", why, err))
}

// admit runs a received meup item through the engine. It reports
// whether the item goes to the inbox, and how to take back the engine's
// record of it if the inbox then fails to store it.
func (s *spaces) admit(it comms.Item) (deliver bool, undo func(), err error) {
	e := it.Envelope
	name, _, raw, _ := parseMEUPRaw(e.Kind)
	s.mu.Lock()
	delete(s.closes, e.From) // it speaks MEUP
	s.mu.Unlock()
	v := s.eng.Receive(e.From, e.ID.String(), name, raw)
	switch {
	case v.Err != nil:
		return false, nil, v.Err // not acknowledged: the sender tries again
	case v.Refused != nil:
		s.n.auditRefusedMEUP(it, v.Refused)
		return false, nil, nil
	case !v.Deliver:
		return false, nil, nil
	}
	if v.Envelope.Kind == meup.KindMCPRequest {
		s.track(name, v.Envelope)
	}
	from, id := e.From, v.Envelope.ID
	return true, func() { s.eng.Undo(name, from, id, raw) }, nil
}

// track remembers an mcp/request for space_respond.
func (s *spaces) track(name string, env meup.Envelope) {
	key := name + "\x00" + env.ID
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.requests[key]; !ok {
		s.reqOrder = append(s.reqOrder, key)
	}
	s.requests[key] = meupRequest{from: env.From, to: env.To}
	for len(s.reqOrder) > maxTrackedMEUPRequests {
		delete(s.requests, s.reqOrder[0])
		s.reqOrder = s.reqOrder[1:]
	}
}

// request finds the mcp/request id received in space name: remembered
// since this node started, or still in the inbox (from before a
// restart).
func (s *spaces) request(name, id string) (meupRequest, bool) {
	s.mu.Lock()
	r, ok := s.requests[name+"\x00"+id]
	s.mu.Unlock()
	if ok {
		return r, true
	}
	for after := uint64(0); ; {
		page := s.n.mail.List(after, listPage)
		for _, en := range page.items {
			sp, env, _, ok := parseMEUP(en.Item.Envelope.Kind)
			if ok && sp == name && env.ID == id && env.Kind == meup.KindMCPRequest {
				s.track(name, env)
				return meupRequest{from: env.From, to: env.To}, true
			}
		}
		if after = page.next; !page.more {
			return meupRequest{}, false
		}
	}
}

// self is this node's participant id in space name ("" if none).
func (s *spaces) self(name string) string {
	for _, in := range s.eng.Spaces() {
		if strings.EqualFold(in.Name, name) {
			return in.Self
		}
	}
	return ""
}

// auditRefusedMEUP records a refused MEUP envelope: the Meerkat envelope
// was acknowledged (so its sender does not retry it) and stored nowhere.
func (n *Node) auditRefusedMEUP(it comms.Item, r *space.Refusal) {
	if n.audit == nil {
		return
	}
	e := it.Envelope
	reason := "meup " + r.Reason
	if r.Kind != "" {
		reason += " (" + r.Kind + ")"
	}
	n.audit.Record(audit.Record{Dir: audit.DirIn, Event: audit.EventRefused, Peer: it.PeerName, Key: e.From.String(),
		Kind: wire.TypeMEUP, ID: e.ID.String(), Size: it.Size, Reason: reason})
}

// parseMEUPRaw returns a meup kind's space and envelope JSON text.
func parseMEUPRaw(k wire.Kind) (name string, env wire.Value, raw []byte, ok bool) {
	sv, _ := k.Field("space")
	name, _ = sv.Text()
	env, ok = k.Field("envelope")
	if !ok {
		return name, env, nil, false
	}
	raw, err := env.MarshalJSON()
	return name, env, raw, err == nil
}

// parseMEUP returns a meup kind's space and normalised envelope.
func parseMEUP(k wire.Kind) (name string, env meup.Envelope, raw []byte, ok bool) {
	if k.Type() != wire.TypeMEUP {
		return "", env, nil, false
	}
	name, _, raw, ok = parseMEUPRaw(k)
	if !ok {
		return name, env, raw, false
	}
	env, err := meup.Parse(raw)
	return name, env, raw, err == nil
}

// meupItem is a stored meup kind as Receive shows it.
func meupItem(k wire.Kind) *MEUPItem {
	name, env, raw, ok := parseMEUP(k)
	if raw == nil {
		return &MEUPItem{Space: name}
	}
	it := &MEUPItem{Space: name, Envelope: json.RawMessage(raw)}
	if ok {
		it.ID, it.Kind, it.Participant, it.To, it.Context = env.ID, env.Kind, env.From, env.To, env.Context
	}
	return it
}

// ---- API ----

// needSpaces returns the engine, or the error for a node without one.
func (n *Node) needSpaces() (*spaces, error) {
	if n.closing() {
		return nil, Coded(ErrClosed)
	}
	if n.spaces == nil {
		return nil, errorf(CodeNoDaemon, "no daemon is running for %s: spaces need it (start it with meerkatd run --home %s)", n.h.Dir, n.h.Dir)
	}
	return n.spaces, nil
}

// Spaces implements [API]. Without a running node it shows the rosters
// file (presence and grants unknown).
func (n *Node) Spaces(context.Context) ([]SpaceInfo, error) {
	if n.closing() {
		return nil, Coded(ErrClosed)
	}
	if n.spaces != nil {
		return n.spaces.eng.Spaces(), nil
	}
	roster, err := n.currentRoster()
	if err != nil {
		return nil, err
	}
	// The grants and proposals the daemon stored, read only; none for a
	// memory home or one without a database yet.
	var st space.Store = space.NewMemStore()
	switch db, err := n.readDB(); {
	case err == nil:
		st = db.Spaces()
	case !errors.Is(err, fs.ErrNotExist) && !errors.Is(err, errMemoryHome):
		return nil, Coded(err)
	}
	eng, err := space.New(st, noSender{}, roster, space.Options{Self: n.h.Key.ID(), Trusted: func(k identity.PeerID) bool {
		_, ok := n.r.Trust().Lookup(k)
		return ok
	}})
	if err != nil {
		return nil, Coded(err)
	}
	infos := eng.Spaces()
	for _, in := range infos {
		for i := range in.Members {
			if in.Members[i].Self {
				in.Members[i].Presence = space.PresenceOffline // no node of this home runs
			}
		}
	}
	return infos, nil
}

// noSender is the sender of the engine a node without spaces builds to
// show the rosters file: that engine only lists, it never sends.
type noSender struct{}

func (noSender) SendMEUP(context.Context, identity.PeerID, string, []byte, space.SendOptions) (space.Delivery, error) {
	return space.Delivery{}, errorf(CodeNoDaemon, "no daemon is running: spaces need it to send")
}

// Pages of proposals (Proposals, list_proposals). Peers choose what
// proposals hold: up to MaxProposalBytes of pending payloads per space,
// and closed ones stay for [store] history_hours. A page is bounded so
// that a model is not handed megabytes and a reply fits the control
// socket.
const (
	// DefaultProposalLimit is list_proposals' page size without a limit.
	DefaultProposalLimit = 100
	// MaxProposalLimit is the largest page; a ProposalQuery without a
	// limit gets it.
	MaxProposalLimit = 1000
	// MaxProposalBatchBytes bounds a page by the size of its proposals'
	// JSON (payloads included, as encoding/json writes them); a page
	// always holds at least one proposal (a single larger one comes
	// alone).
	MaxProposalBatchBytes = 1 << 20
)

// Proposals implements [API]: one page of q and whether proposals follow
// it, from one listing of the engine.
func (n *Node) Proposals(_ context.Context, q ProposalQuery) (ProposalsPage, error) {
	s, err := n.needSpaces()
	if err != nil {
		return ProposalsPage{}, err
	}
	switch q.State {
	case "", space.ProposalPending, space.ProposalFulfilled, space.ProposalRejected, space.ProposalWithdrawn, space.ProposalExpired:
	default:
		return ProposalsPage{}, errorf(CodeBadArgument, "state %q: want pending, fulfilled, rejected, withdrawn or expired", q.State)
	}
	limit := q.Limit
	switch {
	case limit < 0 || limit > MaxProposalLimit:
		return ProposalsPage{}, errorf(CodeBadArgument, "limit: %d is not from 1 to %d", q.Limit, MaxProposalLimit)
	case limit == 0:
		limit = MaxProposalLimit
	}
	var after proposalKey
	if q.After != "" {
		if after, err = parseProposalCursor(q.After); err != nil {
			return ProposalsPage{}, err
		}
	}
	ps, err := s.eng.Proposals(q.Space, q.State)
	if err != nil {
		return ProposalsPage{}, spaceErr(err)
	}
	if len(ps) == 0 && q.Space != "" && !s.eng.Known(q.Space) {
		// The proposals of a space left or deleted here stay listed
		// (until they expire); a name with none, in any state, and no
		// space is a typo.
		if all, err := s.eng.Proposals(q.Space, ""); err == nil && len(all) == 0 {
			return ProposalsPage{}, errorf(CodeUnknownSpace, "no space %q here (list_spaces or meerkatd space list shows them)", q.Space)
		}
	}
	// The cursor orders by creation, space and id: the stores' order,
	// made exact here (it compares the times the cursor holds).
	ps = slices.DeleteFunc(ps, func(p space.Proposal) bool { return q.After != "" && keyOf(p).compare(after) <= 0 })
	slices.SortStableFunc(ps, func(a, b space.Proposal) int { return keyOf(a).compare(keyOf(b)) })
	page := ProposalsPage{Proposals: []Proposal{}}
	size := 0
	for _, p := range ps {
		if len(page.Proposals) == limit {
			break
		}
		v := proposalView(p)
		b, err := json.Marshal(v)
		if err != nil {
			return ProposalsPage{}, Coded(err)
		}
		if len(page.Proposals) > 0 && size+len(b) > MaxProposalBatchBytes {
			break
		}
		size += len(b)
		page.Proposals = append(page.Proposals, v)
	}
	if n := len(page.Proposals); n < len(ps) {
		page.More, page.Cursor = true, ProposalCursor(page.Proposals[n-1])
	}
	return page, nil
}

// AllProposals reads every proposal q selects through api, page by page
// (the command line lists them all; a tool gets pages).
func AllProposals(ctx context.Context, api SpacesAPI, q ProposalQuery) ([]Proposal, error) {
	out := []Proposal{}
	for {
		page, err := api.Proposals(ctx, q)
		if err != nil {
			return nil, err
		}
		out = append(out, page.Proposals...)
		if !page.More {
			return out, nil
		}
		if page.Cursor == "" || page.Cursor == q.After {
			return nil, errorf(CodeInternal, "proposals: a page with more to follow did not move the cursor (%q)", q.After)
		}
		q.After = page.Cursor
	}
}

// ProposalsPage is one page of proposals: More is true when proposals
// follow it; pass Cursor as ProposalQuery.After for the next page.
type ProposalsPage struct {
	Proposals []Proposal `json:"proposals"`
	More      bool       `json:"more"`
	Cursor    string     `json:"cursor,omitempty"`
}

// proposalKey orders proposals as pages list them: by creation time,
// then space, then id.
type proposalKey struct {
	created   int64 // Unix nanoseconds
	space, id string
}

func keyOf(p space.Proposal) proposalKey {
	return proposalKey{created: p.Created.UnixNano(), space: p.Space, id: p.ID}
}

func (k proposalKey) compare(o proposalKey) int {
	return cmp.Or(cmp.Compare(k.created, o.created), cmp.Compare(k.space, o.space), cmp.Compare(k.id, o.id))
}

// ProposalCursor is the cursor of a page ending with p: the next page
// starts after it (ProposalQuery.After).
func ProposalCursor(p Proposal) string {
	k := proposalKey{created: p.Created.UnixNano(), space: p.Space, id: p.ID}
	return base64.RawURLEncoding.EncodeToString([]byte(strconv.FormatInt(k.created, 10) + "\x00" + k.space + "\x00" + k.id))
}

// parseProposalCursor reads a ProposalCursor.
func parseProposalCursor(c string) (proposalKey, error) {
	bad := errorf(CodeBadArgument, "cursor: %q is not a cursor a proposals page returned", c)
	raw, err := base64.RawURLEncoding.DecodeString(c)
	if err != nil {
		return proposalKey{}, bad
	}
	parts := strings.SplitN(string(raw), "\x00", 3) // a space name holds no NUL; an id may
	if len(parts) != 3 {
		return proposalKey{}, bad
	}
	created, err := strconv.ParseInt(parts[0], 10, 64)
	if err != nil {
		return proposalKey{}, bad
	}
	return proposalKey{created: created, space: parts[1], id: parts[2]}, nil
}

func proposalView(p space.Proposal) Proposal {
	return Proposal{Space: p.Space, ID: p.ID, Proposer: p.Proposer, Key: p.Key.String(), To: p.To, Payload: p.Payload,
		State: p.State, Created: p.Created.UTC(), Expires: p.Expires.UTC(), Updated: p.Updated.UTC(), By: p.By, Reason: p.Reason,
		RequestID: p.RequestID, ResponseID: p.ResponseID}
}

// SpaceEdit implements [API].
func (n *Node) SpaceEdit(_ context.Context, e SpaceEdit) (SpaceInfo, error) {
	if n.closing() {
		return SpaceInfo{}, Coded(ErrClosed)
	}
	// edit changes a copy of the rosters and checks the result as the
	// file's reader will.
	edit := func(roster *space.Roster) error {
		if err := n.applyEdit(roster, e); err != nil {
			return err
		}
		data, err := json.Marshal(roster)
		if err != nil {
			return Coded(err)
		}
		if _, err := space.ParseRoster(data); err != nil {
			return errorf(CodeBadArgument, "%v", err)
		}
		return nil
	}
	if n.spaces != nil {
		// The engine edits the rosters in force, saves and applies them
		// under its lock: a kick or invite received meanwhile is not
		// lost, and a hand edit of the file not reloaded yet is edited
		// rather than written over.
		if err := n.spaces.eng.UpdateRoster(edit); err != nil {
			return SpaceInfo{}, Coded(err)
		}
		n.spaces.joined()
	} else {
		// Under the file's lock: two edits without a daemon (two
		// `meerkatd space add` at once) each read, edit and save the
		// whole file, and one would write over the other's.
		unlock, err := filelock.Lock(n.h.SpacesPath())
		if err != nil {
			return SpaceInfo{}, fmt.Errorf("lock %s: %w", SpacesFileName, err)
		}
		defer unlock()
		before, err := n.currentRoster()
		if err != nil {
			return SpaceInfo{}, err
		}
		roster, err := n.currentRoster()
		if err != nil {
			return SpaceInfo{}, err
		}
		if err := edit(roster); err != nil {
			return SpaceInfo{}, err
		}
		// The database first: if it fails, the file is not changed and
		// the edit can be made again; a file saved with the grants
		// left in the database could not (the member is gone from it).
		if err := n.dropLeftState(before, roster); err != nil {
			return SpaceInfo{}, fmt.Errorf("spaces.json is not changed: the grants and proposals of who leaves could not be dropped from the database (make the edit again once it can be written): %w", Coded(err))
		}
		if err := roster.Save(n.h.SpacesPath()); err != nil {
			return SpaceInfo{}, Coded(err)
		}
	}
	infos, err := n.Spaces(context.Background())
	if err != nil {
		return SpaceInfo{}, err
	}
	for _, in := range infos {
		if strings.EqualFold(in.Name, e.Space) {
			return in, nil
		}
	}
	// Deleted, or this node is no member: the same shape, empty.
	return SpaceInfo{Name: e.Space, Members: []SpaceMember{}}, nil
}

// dropLeftState drops from the home's database, for an edit made without
// a daemon, what the engine drops when a member leaves a space or a space
// is deleted: the grants the member made or received (every grant of a
// deleted space), and its pending proposals expire. Without it they
// would come back at the next start if the member (or the space) were
// added again meanwhile, and pass the engine's checks against the new
// roster. A home without a database, or keeping none, has nothing to
// drop. The grants that stood on the dropped ones go at the next start,
// as the engine checks every grant against the rosters then.
func (n *Node) dropLeftState(before, after *space.Roster) error {
	type left struct {
		space string
		all   bool                     // the space is gone
		keys  map[identity.PeerID]bool // members gone
	}
	var gone []left
	for _, b := range before.Spaces {
		i := slices.IndexFunc(after.Spaces, func(c space.Config) bool { return strings.EqualFold(c.Name, b.Name) })
		if i < 0 {
			gone = append(gone, left{space: b.Name, all: true})
			continue
		}
		l := left{space: b.Name, keys: map[identity.PeerID]bool{}}
		for _, m := range b.Members {
			if !slices.ContainsFunc(after.Spaces[i].Members, func(o space.Member) bool { return o.Key == m.Key }) {
				l.keys[m.Key] = true
			}
		}
		if len(l.keys) > 0 {
			gone = append(gone, l)
		}
	}
	if len(gone) == 0 || n.h.Config.Store.Mode == config.StoreMemory {
		return nil
	}
	if _, err := os.Stat(filepath.Join(n.h.Dir, DBFileName)); errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	n.obMu.Lock()
	db, err := n.homeDBLocked()
	n.obMu.Unlock()
	if err != nil {
		return err
	}
	st := db.Spaces()
	now := time.Now()
	for _, l := range gone {
		grants, err := st.Grants(l.space)
		if err != nil {
			return err
		}
		var ids []string
		for _, g := range grants {
			if l.all || l.keys[g.Granter] || l.keys[g.Grantee] {
				ids = append(ids, g.ID)
			}
		}
		if len(ids) > 0 {
			if _, err := st.DeleteGrants(l.space, ids...); err != nil {
				return err
			}
		}
		props, err := st.Proposals(l.space)
		if err != nil {
			return err
		}
		for _, p := range props {
			if p.State == space.ProposalPending && (l.all || l.keys[p.Key]) {
				p.State, p.Updated = space.ProposalExpired, now
				if err := st.PutProposal(p); err != nil {
					return err
				}
			}
		}
	}
	return nil
}

// currentRoster is the rosters of the home's file, for a node that runs
// no engine. A file that cannot be read or does not validate fails as it
// fails `meerkatd run` and `config check` (no code, exit 1): it is no bad
// argument of the call.
func (n *Node) currentRoster() (*space.Roster, error) {
	return space.LoadRoster(n.h.SpacesPath())
}

// defaultMemberCaps are a new member's capabilities when none are given:
// chat and proposals, nothing that acts.
var defaultMemberCaps = []meup.Capability{
	{Kind: json.RawMessage(`"chat"`)},
	{Kind: json.RawMessage(`["mcp/proposal","mcp/withdraw"]`)},
}

// applyEdit changes r as e says.
func (n *Node) applyEdit(r *space.Roster, e SpaceEdit) error {
	idx := slices.IndexFunc(r.Spaces, func(c space.Config) bool { return strings.EqualFold(c.Name, e.Space) })
	if e.Space == "" {
		return errorf(CodeBadArgument, "space: a space name is needed")
	}
	caps := func(def []meup.Capability) ([]meup.Capability, error) {
		if len(e.Capabilities) == 0 {
			return def, nil
		}
		c, err := meup.ParseCapabilities(e.Capabilities)
		if err != nil {
			return nil, errorf(CodeBadArgument, "capabilities: %v", err)
		}
		return c, nil
	}
	switch e.Op {
	case SpaceCreate:
		if idx >= 0 {
			return errorf(CodeBadArgument, "space %q exists already", r.Spaces[idx].Name)
		}
		if err := space.CheckName(e.Space); err != nil {
			return errorf(CodeBadArgument, "space name: %v", err)
		}
		if e.As == "" {
			return errorf(CodeBadArgument, "create: your participant id in the space is needed (meerkatd space create --as ID, or edit_space's as)")
		}
		if err := space.CheckParticipantID(e.As); err != nil {
			return errorf(CodeBadArgument, "your participant id (as): %v", err)
		}
		c, err := caps([]meup.Capability{{Kind: json.RawMessage(`"*"`)}})
		if err != nil {
			return err
		}
		r.Spaces = append(r.Spaces, space.Config{Name: e.Space, Delivery: e.Delivery,
			Members: []space.Member{{Key: n.h.Key.ID(), ID: e.As, Capabilities: c}}})
		return nil
	case SpaceDelete, SpaceAdd, SpaceRemove:
		if idx < 0 {
			return errorf(CodeUnknownSpace, "no space %q here (list_spaces or meerkatd space list shows them)", e.Space)
		}
	default:
		return errorf(CodeBadArgument, "op %q: want create, delete, add or remove", e.Op)
	}
	sp := &r.Spaces[idx]
	switch e.Op {
	case SpaceDelete:
		r.Spaces = slices.Delete(r.Spaces, idx, idx+1)
	case SpaceAdd:
		if e.Peer == "" || e.ID == "" {
			return errorf(CodeBadArgument, "add: the member's key (or trusted peer) and participant id are needed")
		}
		if err := space.CheckParticipantID(e.ID); err != nil {
			return errorf(CodeBadArgument, "the member's participant id: %v", err)
		}
		key, err := n.memberKey(e.Peer)
		if err != nil {
			return err
		}
		c, err := caps(defaultMemberCaps)
		if err != nil {
			return err
		}
		if i := slices.IndexFunc(sp.Members, func(m space.Member) bool { return m.Key == key }); i >= 0 {
			// Added again: its capabilities are replaced. Its id stays:
			// the other members know it by that id.
			if sp.Members[i].ID != e.ID {
				return errorf(CodeBadArgument, "%s is member %q of space %q already: add it again as %q to change its capabilities, or remove it first to give it another id",
					key, sp.Members[i].ID, sp.Name, sp.Members[i].ID)
			}
			sp.Members[i].Capabilities = c
			return nil
		}
		sp.Members = append(sp.Members, space.Member{Key: key, ID: e.ID, Capabilities: c})
	case SpaceRemove:
		ref := e.ID
		if ref == "" {
			ref = e.Peer
		}
		before := len(sp.Members)
		sp.Members = slices.DeleteFunc(sp.Members, func(m space.Member) bool { return m.ID == ref || m.Key.String() == ref })
		if len(sp.Members) == before {
			// Not a participant id: the key of a trusted peer's name or
			// peer UUID, as add takes it.
			if key, err := n.memberKey(ref); err == nil {
				sp.Members = slices.DeleteFunc(sp.Members, func(m space.Member) bool { return m.Key == key })
			}
		}
		if len(sp.Members) == before {
			return errorf(CodeBadArgument, "space %q has no member %q (remove takes a participant id, a key, or a trusted peer's name or peer UUID)", sp.Name, ref)
		}
	}
	return nil
}

// memberKey resolves a member reference: a key (trusted or not), or the
// name or peer UUID of a trusted peer.
func (n *Node) memberKey(ref string) (identity.PeerID, error) {
	if k, err := identity.ParsePeerID(ref); err == nil {
		return k, nil
	}
	p, err := n.r.ResolvePeer(ref)
	switch {
	case errors.Is(err, comms.ErrBadPeerKey): // written as a key, but not one
		return identity.PeerID{}, Coded(err)
	case err != nil:
		return identity.PeerID{}, errorf(CodeUnknownPeer, "%q is neither a key (ed25519:…) nor a trusted peer's name or UUID", ref)
	}
	return p.ID, nil
}

// SpaceSend implements [API].
func (n *Node) SpaceSend(ctx context.Context, m SpaceMessage) (SpaceSent, error) {
	if m.IdempotencyKey != "" { // slice B
		return n.idempotentSpaceSend(ctx, m)
	}
	return n.spaceSend(ctx, m, nil)
}

// spaceSend is SpaceSend without a key, made as call (nil for none: a
// send under an idempotency key, callOf). Under a call, the MEUP id is
// derived from it (meupCallID) and each copy's envelope id from it and
// the member (sendSpec.call): every retry of the call sends the same
// envelope under the same ids, so a member that got an earlier attempt
// (its ack lost) drops the repeat, at the Meerkat level by its envelope
// id and in the space by its MEUP id, and acknowledges it.
func (n *Node) spaceSend(ctx context.Context, m SpaceMessage, call []byte) (SpaceSent, error) {
	s, err := n.needSpaces()
	if err != nil {
		return SpaceSent{}, err
	}
	if m.TTL < 0 || m.TTL > MaxTTL {
		return SpaceSent{}, errorf(CodeBadArgument, "ttl %s: want 0 to %s", m.TTL, MaxTTL)
	}
	var id string
	if call != nil {
		id = n.meupCallID(call)
	}
	d, err := s.draft(m, id)
	if err != nil {
		return SpaceSent{}, err
	}
	if len(d.Payload) > 0 {
		// What the wire cannot carry (a number beyond 64-bit floats,
		// nesting past its depth) is refused before anything is applied
		// or sent.
		if _, err := wire.ParseJSON(d.Payload); err != nil {
			return SpaceSent{}, errorf(CodeBadArgument, "payload: %s", UserText(err))
		}
	}
	sent, err := s.eng.Send(ctx, m.Space, d, space.SendOptions{Reliable: m.Reliable, TTL: m.TTL, NoWait: m.NoWait, Call: string(call)})
	if err != nil {
		err = spaceErr(err)
		var e *Error
		if m.Action == ActRevoke && errors.As(err, &e) && errors.As(err, new(*space.RuleError)) {
			e.Msg += "; list_spaces or meerkatd space show lists each member's live grants with their ids" +
				" (if this node revoked it already and that revoke did not reach every member, send the revoke again as a plain envelope:" +
				" space_send or meerkatd space send with kind capability/revoke, which is not checked here)"
		}
		return SpaceSent{}, err
	}
	env, err := sent.Envelope.Encode(n.h.Config.MEUP.Protocol)
	if err != nil {
		return SpaceSent{}, Coded(err)
	}
	copies := sent.Copies
	if copies == nil {
		copies = []SpaceCopy{}
	}
	return SpaceSent{Space: m.Space, ID: sent.Envelope.ID, Kind: sent.Envelope.Kind, Envelope: env, Copies: copies, NotApplied: sent.NotApplied}, nil
}

// meupCallID is the MEUP id of the space send made as call: the call's
// own id (comms.Router.CallID with no peer), in the text form of a UUID
// as the engine's random MEUP ids. It differs from every copy's envelope
// id (those are the call's id for each member).
func (n *Node) meupCallID(call []byte) string {
	return n.r.CallID(call, identity.PeerID{}).String()
}

// spaceErr gives engine errors their API codes.
func spaceErr(err error) error {
	var rule *space.RuleError
	if errors.As(err, &rule) {
		code := CodeBadArgument
		if rule.Reason == meup.ReasonUnknownProposal {
			code = CodeUnknownProposal
		}
		return &Error{Code: code, Err: err, Msg: fmt.Sprintf("not sent: %s (%s: the members' nodes would refuse it)", rule.Detail, rule.Reason)}
	}
	switch {
	case errors.Is(err, space.ErrUnknownSpace):
		return &Error{Code: CodeUnknownSpace, Msg: UserText(err), Err: err}
	case errors.Is(err, meup.ErrTooLarge):
		return &Error{Code: CodeBodyTooLarge, Msg: UserText(err), Err: err}
	case errors.Is(err, space.ErrInvalid):
		// "not sent: payload: not a JSON object", not the layers'
		// "space: invalid envelope: meup: invalid_envelope: payload: …".
		msg := strings.TrimPrefix(err.Error(), space.ErrInvalid.Error()+": ")
		if me := (*meup.Error)(nil); errors.As(err, &me) {
			msg = me.Msg
			if me.Field != "" {
				msg = me.Field + ": " + msg
			}
		}
		return &Error{Code: CodeBadArgument, Msg: "not sent: " + userText(msg), Err: err}
	}
	var me *meup.Error
	if errors.As(err, &me) {
		switch me.Reason {
		case meup.ReasonUnknownSpace, meup.ReasonNotAMember:
			return &Error{Code: CodeUnknownSpace, Msg: UserText(err), Err: err}
		case meup.ReasonUnknownProposal:
			return &Error{Code: CodeUnknownProposal, Msg: UserText(err), Err: err}
		}
		return &Error{Code: CodeBadArgument, Msg: UserText(err), Err: err}
	}
	return Coded(err)
}

// object builds a JSON object from name/value pairs, leaving out nil and
// empty raw values.
func object(pairs ...any) (json.RawMessage, error) {
	m := map[string]any{}
	for i := 0; i+1 < len(pairs); i += 2 {
		v := pairs[i+1]
		switch x := v.(type) {
		case json.RawMessage:
			if len(x) == 0 {
				continue
			}
		case string:
			if x == "" {
				continue
			}
		}
		m[pairs[i].(string)] = v
	}
	b, err := json.Marshal(m)
	if err != nil {
		return nil, errorf(CodeBadArgument, "%v", err)
	}
	return b, nil
}

// draft turns a SpaceMessage into the envelope the engine sends, under
// MEUP id ("" for a random one; a call's id: meupCallID).
func (s *spaces) draft(m SpaceMessage, id string) (space.Draft, error) {
	// The actions refuse what every member's node would refuse (a
	// revoke of no live grant, say: space.Draft.Strict); a plain send
	// goes out as given, and says what rule it breaks here.
	d := space.Draft{ID: id, Kind: m.Kind, To: m.To, CorrelationID: m.CorrelationID, Context: m.Context, Payload: m.Payload,
		Strict: m.Action != "" && m.Action != ActSend}
	if !s.eng.In(m.Space) { // before its proposals and requests are looked for
		return d, errorf(CodeUnknownSpace, "no space %q here, or this node is not a member of it (list_spaces or meerkatd space list shows them)", m.Space)
	}
	var err error
	proposal := func() (space.Proposal, error) {
		if m.Proposal == "" {
			return space.Proposal{}, errorf(CodeBadArgument, "%s: the proposal id is needed", m.Action)
		}
		ps, err := s.eng.Proposals(m.Space, "")
		if err != nil {
			return space.Proposal{}, Coded(err)
		}
		for _, p := range ps {
			if p.ID == m.Proposal {
				return p, nil
			}
		}
		return space.Proposal{}, errorf(CodeUnknownProposal, "space %q has no proposal %q (list_proposals or meerkatd space proposals shows them)", m.Space, m.Proposal)
	}
	switch m.Action {
	case "", ActSend:
		if m.Kind == "" {
			return d, errorf(CodeBadArgument, "send: a MEUP kind is needed")
		}
	case ActChat:
		if m.Text == "" {
			return d, errorf(CodeBadArgument, "chat: the text is empty")
		}
		d.Kind = meup.KindChat
		d.Payload, err = object("text", m.Text)
	case ActPropose:
		if m.Method == "" {
			return d, errorf(CodeBadArgument, "propose: the method (e.g. tools/call) is needed")
		}
		d.Kind = meup.KindMCPProposal
		d.Payload, err = object("method", m.Method, "params", m.Params)
	case ActFulfill:
		p, perr := proposal()
		if perr != nil {
			return d, perr
		}
		// A retry of a call that fulfilled it (its request has the
		// call's id) fulfils it again: the same request, which the
		// members that got it drop.
		if p.State != space.ProposalPending && (id == "" || p.State != space.ProposalFulfilled || p.RequestID != id) {
			return d, errorf(CodeBadArgument, "proposal %q is %s, not pending", p.ID, p.State)
		}
		d.Kind, d.Payload, d.CorrelationID = meup.KindMCPRequest, p.Payload, []string{p.ID}
		if len(d.To) == 0 {
			d.To = p.To
		}
	case ActReject, ActWithdraw:
		p, perr := proposal()
		if perr != nil {
			return d, perr
		}
		d.CorrelationID = []string{p.ID}
		if m.Action == ActReject {
			d.Kind = meup.KindMCPReject
			d.Payload, err = object("reason", m.Reason)
			if len(d.To) == 0 {
				d.To = []string{p.Proposer}
			}
		} else {
			d.Kind, d.Payload = meup.KindMCPWithdraw, json.RawMessage(`{}`)
		}
	case ActRespond:
		if m.Request == "" {
			return d, errorf(CodeBadArgument, "respond: the request id is needed")
		}
		if (len(m.Result) == 0) == (len(m.Error) == 0) {
			return d, errorf(CodeBadArgument, "respond: give a result or an error (one of them)")
		}
		req, ok := s.request(m.Space, m.Request)
		if !ok {
			return d, errorf(CodeUnknownProposal, "no mcp/request %q was received in space %q (or it was acknowledged before this node restarted)", m.Request, m.Space)
		}
		if me := s.self(m.Space); len(req.to) > 0 && !slices.Contains(req.to, me) {
			return d, errorf(CodeBadArgument, "mcp/request %q is addressed to %s, not to you (%s)", m.Request, strings.Join(req.to, ", "), me)
		}
		d.Kind, d.CorrelationID = meup.KindMCPResponse, []string{m.Request}
		d.Payload, err = object("result", m.Result, "error", m.Error)
		if len(d.To) == 0 {
			d.To = []string{req.from}
		}
	case ActGrant, ActRevoke:
		if m.Recipient == "" {
			return d, errorf(CodeBadArgument, "%s: the recipient's participant id is needed", m.Action)
		}
		if len(d.To) == 0 {
			d.To = []string{m.Recipient}
		}
		if m.Action == ActGrant {
			if len(m.Capabilities) == 0 {
				return d, errorf(CodeBadArgument, "grant: the capabilities to grant are needed")
			}
			d.Kind = meup.KindCapabilityGrant
			caps, cerr := capabilityObjects(m.Capabilities)
			if cerr != nil {
				return d, cerr
			}
			d.Payload, err = object("recipient", m.Recipient, "capabilities", caps)
		} else {
			if m.GrantID == "" && len(m.Capabilities) == 0 {
				return d, errorf(CodeBadArgument, "revoke: a grant id or capabilities are needed")
			}
			d.Kind = meup.KindCapabilityRevoke
			caps, cerr := capabilityObjects(m.Capabilities)
			if cerr != nil {
				return d, cerr
			}
			d.Payload, err = object("recipient", m.Recipient, "grant_id", m.GrantID, "capabilities", caps)
		}
	default:
		return d, errorf(CodeBadArgument, "action %q: want send, chat, propose, fulfill, respond, reject, withdraw, grant or revoke", m.Action)
	}
	return d, err
}

// capabilityObjects returns a grant's or revoke's capabilities as the
// envelope carries them, an array of capability objects: a string in it
// (a kind pattern, or "KIND:METHOD", as rosters and edit_space take them)
// becomes its object; objects are kept as given. Empty stays empty.
func capabilityObjects(raw json.RawMessage) (json.RawMessage, error) {
	if len(raw) == 0 {
		return raw, nil
	}
	var items []json.RawMessage
	if err := json.Unmarshal(raw, &items); err != nil {
		return nil, errorf(CodeBadArgument, "capabilities: not a JSON array: %v", err)
	}
	changed := false
	for i, it := range items {
		var s string
		if json.Unmarshal(it, &s) != nil {
			continue // an object (or what the envelope's checks refuse)
		}
		var err error
		if items[i], err = stringCapability(s); err != nil {
			return nil, errorf(CodeBadArgument, "capabilities: %q: %v", s, err)
		}
		changed = true
	}
	if !changed {
		return raw, nil
	}
	return json.Marshal(items)
}

// reload re-reads the rosters file into the engine (SIGHUP, or the file
// changed). It reads the file under the engine's lock, so no kick or
// invite saved meanwhile is undone by rosters read before it.
func (s *spaces) reload() {
	count := 0
	err := s.eng.ReloadRoster(func() (*space.Roster, error) {
		s.fileMu.Lock()
		defer s.fileMu.Unlock()
		r, stamp, err := s.readRosters()
		if err != nil {
			return nil, err
		}
		if !stamp.exists && !s.file.exists {
			return nil, errSpacesFileNone // there was none, and is none: nothing changed
		}
		if !stamp.exists {
			// Gone, for now (moved away and back, an editor's
			// rename): no reason to leave every space and drop every
			// grant. An empty file leaves them.
			return nil, errSpacesFileGone
		}
		s.file, count = stamp, len(r.Spaces)
		return r, nil
	})
	problem := ""
	switch {
	case errors.Is(err, errSpacesFileGone):
		problem = SpacesFileName + ` is gone: the node keeps the rosters it had (write {"spaces": []} there to leave every space; the next change writes the file again)`
	case err != nil && !errors.Is(err, errSpacesFileNone):
		problem = SpacesFileName + " was not taken in (" + UserText(err) + "): the node keeps the rosters it had"
	}
	s.mu.Lock()
	s.problem = problem
	s.mu.Unlock()
	if errors.Is(err, errSpacesFileNone) {
		return
	}
	if errors.Is(err, errSpacesFileGone) {
		s.n.log.Warn("the spaces file is gone; keeping the rosters in force (write {\"spaces\": []} to leave every space; the next change writes the file again)", "file", SpacesFileName)
		return
	}
	if err != nil {
		s.n.log.Error("spaces file not reloaded; keeping the previous rosters", "err", err)
		return
	}
	s.n.log.Info("spaces reloaded", "spaces", count)
	s.joined()
}

var (
	errSpacesFileGone = errors.New("the spaces file is gone")
	errSpacesFileNone = errors.New("there is no spaces file")
)

// joined announces this node's presence again after the rosters or the
// trust list changed, so members added or trusted since hear of it (and
// answer with their welcome). The joins are queued in the outbox.
func (s *spaces) joined() {
	if s.n.closing() {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), s.n.SendTimeout())
	defer cancel()
	s.eng.Announce(ctx, space.EventJoin)
}

// expire forgets, once an hour, the MEUP ids seen longer ago than the
// dedup window and the proposals closed longer ago than the history
// retention ([store] dedup_window_hours, history_hours), until ctx ends.
func (s *spaces) expire(ctx context.Context) {
	t := time.NewTicker(expireInterval)
	defer t.Stop()
	for {
		now := time.Now()
		cfg := s.n.h.Config.Store
		seen, closed, err := s.st.Expire(now.Add(-time.Duration(cfg.DedupWindowHours)*time.Hour), now.Add(-time.Duration(cfg.HistoryHours)*time.Hour))
		switch {
		case err != nil && ctx.Err() == nil:
			s.n.log.Warn("spaces store: expiry failed", "err", err)
		case seen+closed > 0:
			s.n.log.Debug("spaces store: expired", "seen", seen, "proposals", closed)
		}
		select {
		case <-t.C:
		case <-ctx.Done():
			return
		}
	}
}

// watch reloads the rosters file when it changes, until ctx ends.
func (s *spaces) watch(ctx context.Context, every time.Duration) {
	stamp := func() string {
		fi, err := os.Stat(s.n.h.SpacesPath())
		if err != nil {
			return "absent"
		}
		// The mode too: a chmod that opens the file to others is refused
		// at the next poll, as the trust file's watcher does.
		return fmt.Sprint(fi.ModTime().UnixNano(), fi.Size(), fi.Mode())
	}
	last := stamp()
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if now := stamp(); now != last {
			last = now
			s.reload()
		}
	}
}
