package space_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/meerkatd/meerkatd/comms/meup"
	"github.com/meerkatd/meerkatd/comms/space"
	"github.com/meerkatd/meerkatd/identity"
)

// key returns a distinct non-zero test key.
func key(b byte) identity.PeerID {
	k, err := identity.PeerIDFromBytes(bytes.Repeat([]byte{b}, 32))
	if err != nil {
		panic(err)
	}
	return k
}

var (
	kAlice = key(1) // this node
	kBob   = key(2)
	kCarol = key(3)
	kDave  = key(4) // in the roster, not trusted
	kEve   = key(5) // trusted, in no roster
	kErin  = key(6) // the space's admin
	kFrank = key(7) // invited later
)

// The test roster. In "lab", alice (this node) and erin may do
// everything; bob may chat, propose, withdraw, reject, respond and grant
// chat; carol may chat, withdraw and reject; dave may chat but is not
// trusted. In "other" this node is not a member. "desk" delivers to the
// addressed members only.
func testRoster(t testing.TB) *space.Roster {
	t.Helper()
	text := fmt.Sprintf(`{"spaces": [
	  {"name": "lab", "members": [
	    {"key": %q, "id": "alice", "capabilities": [{"kind": "*"}]},
	    {"key": %q, "id": "bob", "capabilities": [{"kind": ["chat", "mcp/proposal", "mcp/withdraw", "mcp/reject", "mcp/response", "capability/grant"]}]},
	    {"key": %q, "id": "carol", "capabilities": [{"kind": ["chat", "mcp/withdraw", "mcp/reject"]}]},
	    {"key": %q, "id": "dave", "capabilities": [{"kind": "chat"}]},
	    {"key": %q, "id": "erin", "capabilities": [{"kind": "*"}]}
	  ]},
	  {"name": "other", "members": [
	    {"key": %q, "id": "bob", "capabilities": [{"kind": "*"}]}
	  ]},
	  {"name": "desk", "delivery": "addressed", "members": [
	    {"key": %q, "id": "alice", "capabilities": [{"kind": "*"}]},
	    {"key": %q, "id": "bob", "capabilities": [{"kind": "chat"}]},
	    {"key": %q, "id": "carol", "capabilities": [{"kind": "chat"}]}
	  ]}
	]}`, kAlice, kBob, kCarol, kDave, kErin, kBob, kAlice, kBob, kCarol)
	r, err := space.ParseRoster([]byte(text))
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// fakeClock is a clock tests move by hand.
type fakeClock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *fakeClock) Add(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

// sentCopy is one SendMEUP call the fake sender saw.
type sentCopy struct {
	To    identity.PeerID
	Space string
	Env   meup.Envelope
	Opts  space.SendOptions
}

// fakeSender records every copy. hook, if set, runs inside SendMEUP.
type fakeSender struct {
	t      testing.TB
	mu     sync.Mutex
	copies []sentCopy
	n      int
	hook   func(to identity.PeerID) error
}

func (s *fakeSender) SendMEUP(ctx context.Context, to identity.PeerID, sp string, data []byte, o space.SendOptions) (space.Delivery, error) {
	env, err := meup.Parse(data)
	if err != nil {
		s.t.Errorf("the engine sent an envelope that does not parse: %v\n%s", err, data)
	}
	if s.hook != nil {
		if err := s.hook(to); err != nil {
			return space.Delivery{}, err
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.n++
	s.copies = append(s.copies, sentCopy{To: to, Space: sp, Env: env, Opts: o})
	return space.Delivery{ID: fmt.Sprintf("mk-%d", s.n), Delivery: "queued"}, nil
}

// take returns the copies sent since the last call.
func (s *fakeSender) take() []sentCopy {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := s.copies
	s.copies = nil
	return out
}

// harness is an engine with fakes around it.
type harness struct {
	t       *testing.T
	e       *space.Engine
	st      *fakeStore
	snd     *fakeSender
	clock   *fakeClock
	mu      sync.Mutex
	trusted map[identity.PeerID]bool
	refused []space.Refusal
	saved   []*space.Roster
	// save, if set, answers SaveRoster (a roster it accepts, with nil,
	// is recorded in saved).
	save func(*space.Roster) error
	seq  int
}

func newHarness(t *testing.T) *harness {
	t.Helper()
	h := &harness{
		t:       t,
		st:      newFakeStore(),
		snd:     &fakeSender{t: t},
		clock:   &fakeClock{t: time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)},
		trusted: map[identity.PeerID]bool{kBob: true, kCarol: true, kEve: true, kErin: true},
	}
	e, err := space.New(h.st, h.snd, testRoster(t), space.Options{
		Self:    kAlice,
		Trusted: h.isTrusted,
		Now:     h.clock.Now,
		Observe: func(r space.Refusal) {
			h.mu.Lock()
			defer h.mu.Unlock()
			h.refused = append(h.refused, r)
		},
		SaveRoster: func(r *space.Roster) error {
			h.mu.Lock()
			defer h.mu.Unlock()
			if h.save != nil {
				if err := h.save(r); err != nil {
					return err
				}
			}
			h.saved = append(h.saved, r)
			return nil
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	h.e = e
	return h
}

func (h *harness) isTrusted(k identity.PeerID) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.trusted[k]
}

func (h *harness) trust(k identity.PeerID) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.trusted[k] = true
}

// takeRefused returns the refusals observed since the last call.
func (h *harness) takeRefused() []space.Refusal {
	h.mu.Lock()
	defer h.mu.Unlock()
	out := h.refused
	h.refused = nil
	return out
}

// env is an envelope a test peer sends.
type env struct {
	ID      string
	From    string
	Kind    string
	To      []string
	Corr    []string
	Payload string // JSON object text; "" for none
}

// raw encodes e as meup/v0.2 JSON, giving it a fresh id if it has none.
func (h *harness) raw(e *env) []byte {
	h.t.Helper()
	if e.ID == "" {
		h.seq++
		e.ID = fmt.Sprintf("env-%d", h.seq)
	}
	m := map[string]any{"protocol": meup.ProtocolMEUP02, "id": e.ID, "from": e.From, "kind": e.Kind}
	if len(e.To) > 0 {
		m["to"] = e.To
	}
	if len(e.Corr) > 0 {
		m["correlation_id"] = e.Corr
	}
	if e.Payload != "" {
		m["payload"] = json.RawMessage(e.Payload)
	}
	b, err := json.Marshal(m)
	if err != nil {
		h.t.Fatal(err)
	}
	return b
}

// recv has key from send e in space sp.
func (h *harness) recv(from identity.PeerID, sp string, e *env) space.Verdict {
	h.t.Helper()
	return h.e.Receive(from, newCopy(), sp, h.raw(e))
}

// mustDeliver receives e and fails unless it is delivered.
func (h *harness) mustDeliver(from identity.PeerID, sp string, e *env) space.Verdict {
	h.t.Helper()
	v := h.recv(from, sp, e)
	if !v.Deliver || v.Refused != nil || v.Err != nil {
		h.t.Fatalf("%s from %s: want delivered, got %+v", e.Kind, e.From, v)
	}
	return v
}

// mustRefuse receives e and fails unless it is refused for reason.
func (h *harness) mustRefuse(from identity.PeerID, sp string, e *env, reason string) space.Verdict {
	h.t.Helper()
	v := h.recv(from, sp, e)
	if v.Refused == nil || v.Refused.Reason != reason || v.Deliver {
		h.t.Fatalf("%s from %s: want refused %s, got %+v", e.Kind, e.From, reason, v)
	}
	return v
}

// send sends d in sp as this node.
func (h *harness) send(sp string, d space.Draft) space.Sent {
	h.t.Helper()
	s, err := h.e.Send(context.Background(), sp, d, space.SendOptions{})
	if err != nil {
		h.t.Fatalf("Send %s: %v", d.Kind, err)
	}
	return s
}

// member returns the MemberInfo of id in space sp.
func (h *harness) member(sp, id string) (space.MemberInfo, bool) {
	for _, in := range h.e.Spaces() {
		if in.Name != sp {
			continue
		}
		for _, m := range in.Members {
			if m.ID == id {
				return m, true
			}
		}
	}
	return space.MemberInfo{}, false
}

// errorPayload is system/error's payload.
type errorPayload struct {
	Error            string            `json:"error"`
	Message          string            `json:"message"`
	AttemptedKind    string            `json:"attempted_kind"`
	YourCapabilities []meup.Capability `json:"your_capabilities"`
}

func decode[T any](t testing.TB, raw json.RawMessage) T {
	t.Helper()
	var v T
	if err := json.Unmarshal(raw, &v); err != nil {
		t.Fatalf("decode %s: %v", raw, err)
	}
	return v
}

// kinds lists the capabilities' kinds as JSON text, for comparisons.
func kinds(caps []meup.Capability) []string {
	var out []string
	for _, c := range caps {
		out = append(out, string(c.Kind))
	}
	slices.Sort(out)
	return out
}

func participants(cs []sentCopy) []identity.PeerID {
	var out []identity.PeerID
	for _, c := range cs {
		out = append(out, c.To)
	}
	return out
}

// newCopy is the id of a new Meerkat copy: every Receive in these tests
// is another envelope on the wire unless a test says otherwise.
func newCopy() string { return identity.NewUUID().String() }
