package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/meerkatd/meerkatd/comms/wire"
	"github.com/meerkatd/meerkatd/identity"
	"github.com/meerkatd/meerkatd/transport"
)

// MEUP spaces across real daemons: three nodes (orchestrator, worker,
// proposer) that trust each other and hold the same roster of space
// "build", driven through `meerkatd space … --json` and `meerkatd inbox
// --json` over Unix sockets. Every receiving node enforces the sender's
// capabilities itself; these tests check that each of them does.

const spaceName = "build"

// The CLI's JSON output for spaces, decoded with this file's own field
// names so that a renamed key fails the tests.
type (
	meupEnvelope struct {
		Protocol      string          `json:"protocol"`
		ID            string          `json:"id"`
		From          string          `json:"from"`
		To            []string        `json:"to"`
		Kind          string          `json:"kind"`
		CorrelationID []string        `json:"correlation_id"`
		Payload       json.RawMessage `json:"payload"`
	}
	meupPart struct {
		Space       string          `json:"space"`
		ID          string          `json:"id"`
		Kind        string          `json:"kind"`
		Participant string          `json:"participant"`
		To          []string        `json:"to"`
		Envelope    json.RawMessage `json:"envelope"`
	}
	// spaceItem is an inbox item of kind "meup", with its envelope
	// decoded.
	spaceItem struct {
		Seq  uint64    `json:"seq"`
		ID   string    `json:"id"` // the Meerkat envelope id
		Kind string    `json:"kind"`
		Peer string    `json:"peer"`
		MEUP *meupPart `json:"meup"`
		env  meupEnvelope
	}
	spaceCopy struct {
		Participant string `json:"participant"`
		Key         string `json:"key"`
		ID          string `json:"id"`
		Delivery    string `json:"delivery"`
		LastError   string `json:"last_error"`
		Skipped     string `json:"skipped"`
	}
	spaceSent struct {
		Space    string          `json:"space"`
		ID       string          `json:"id"`
		Kind     string          `json:"kind"`
		Envelope json.RawMessage `json:"envelope"`
		Copies   []spaceCopy     `json:"copies"`
	}
	spaceMember struct {
		ID       string            `json:"id"`
		Key      string            `json:"key"`
		Self     bool              `json:"self"`
		Status   string            `json:"status"`
		Granted  []json.RawMessage `json:"granted"`
		Note     string            `json:"note"`
		Presence string            `json:"presence"`
	}
	spaceInfo struct {
		Name    string        `json:"name"`
		Self    string        `json:"self"`
		Members []spaceMember `json:"members"`
		Pending int           `json:"pending_proposals"`
	}
	spaceProposal struct {
		Space      string          `json:"space"`
		ID         string          `json:"id"`
		Proposer   string          `json:"proposer"`
		To         []string        `json:"to"`
		Payload    json.RawMessage `json:"payload"`
		State      string          `json:"state"`
		By         string          `json:"by"`
		RequestID  string          `json:"request_id"`
		ResponseID string          `json:"response_id"`
	}
	auditRow struct {
		Dir    string `json:"dir"`
		Event  string `json:"event"`
		Peer   string `json:"peer"`
		Key    string `json:"key"`
		Kind   string `json:"kind"`
		ID     string `json:"id"`
		Reason string `json:"reason"`
	}
)

// spaceEnv is the environment of the nodes of these tests: reliable
// sends retried quickly (a presence join queued for a node not started
// yet must not hold the sends behind it for long).
var spaceEnv = []string{"MEERKAT_OUTBOX_BACKOFF=0s,200ms", "MEERKAT_OUTBOX_BREAKER_OPEN_SECS=1"}

// spaceNodes are the three members of space "build".
type spaceNodes struct {
	orch, worker, prop *testNode
}

func (s spaceNodes) all() []*testNode { return []*testNode{s.orch, s.worker, s.prop} }

// Capabilities of the roster, as --cap flags.
var (
	orchCaps   = []string{"--cap", "*"}
	workerCaps = []string{"--cap", "chat", "--cap", "mcp/response", "--cap", "mcp/proposal"}
	propCaps   = []string{"--cap", "mcp/proposal", "--cap", "chat"}
)

// threeSpaceNodes creates orchestrator, worker and proposer, trusting each
// other, each with the same roster of space "build" (each creates it as
// itself and adds the other two), and starts their daemons.
func threeSpaceNodes(t *testing.T) spaceNodes {
	t.Helper()
	s := spaceNodes{newNode(t, "orchestrator"), newNode(t, "worker"), newNode(t, "proposer")}
	caps := map[*testNode][]string{s.orch: orchCaps, s.worker: workerCaps, s.prop: propCaps}
	for _, n := range s.all() {
		n.env = append(n.env, spaceEnv...)
		for _, o := range s.all() {
			if o != n {
				n.trusts(o)
			}
		}
		n.ok(append([]string{"space", "create", spaceName, "--as", n.name}, caps[n]...)...)
		for _, o := range s.all() {
			if o != n {
				n.ok(append([]string{"space", "add", spaceName, o.name, o.name}, caps[o]...)...)
			}
		}
	}
	for _, n := range s.all() {
		n.start()
	}
	for _, n := range s.all() {
		// The presence joins sent before the others started are through:
		// no send waits behind them.
		waitOutboxEmpty(t, n, pollTimeout)
		sp := spaceShow(n)
		if sp.Self != n.name || len(sp.Members) != 3 {
			t.Fatalf("%s's space: %s", n.name, jsonText(sp))
		}
		for _, m := range sp.Members {
			if m.Status != "active" {
				t.Fatalf("%s's space: member %s is %s", n.name, m.ID, m.Status)
			}
		}
	}
	return s
}

// spaceShow returns `space show build --json`.
func spaceShow(n *testNode) spaceInfo {
	n.t.Helper()
	var sp spaceInfo
	n.okJSON(&sp, "space", "show", spaceName, "--json")
	return sp
}

// spaceSend runs `space ARGS… --json` and returns what it sent.
func (n *testNode) spaceSend(args ...string) spaceSent {
	n.t.Helper()
	var s spaceSent
	n.okJSON(&s, append(append([]string{"space"}, args...), "--json")...)
	if s.ID == "" || s.Space != spaceName {
		n.t.Fatalf("space %s: %s", strings.Join(args, " "), jsonText(s))
	}
	return s
}

// copyTo returns the copy of s that went to participant id.
func (s spaceSent) copyTo(t *testing.T, id string) spaceCopy {
	t.Helper()
	for _, c := range s.Copies {
		if c.Participant == id {
			return c
		}
	}
	t.Fatalf("%s %s has no copy for %s: %s", s.Kind, s.ID, id, jsonText(s.Copies))
	return spaceCopy{}
}

// wantAcked requires every copy of s to have been acknowledged.
func (s spaceSent) wantAcked(t *testing.T, ids ...string) {
	t.Helper()
	for _, id := range ids {
		if c := s.copyTo(t, id); c.Delivery != "acked" || c.Skipped != "" || c.ID == "" {
			t.Fatalf("%s %s: copy for %s not acked: %s", s.Kind, s.ID, id, jsonText(c))
		}
	}
}

// meupItems returns n's inbox items of kind meup in space build, each
// with its envelope decoded.
func meupItems(n *testNode) []spaceItem {
	n.t.Helper()
	var b struct {
		Messages []spaceItem `json:"messages"`
	}
	n.okJSON(&b, "inbox", "--json")
	var out []spaceItem
	for _, it := range b.Messages {
		if it.Kind != "meup" {
			continue
		}
		if it.MEUP == nil || it.MEUP.Space != spaceName {
			n.t.Fatalf("%s's inbox: meup item without its space: %s", n.name, jsonText(it))
		}
		if err := json.Unmarshal(it.MEUP.Envelope, &it.env); err != nil {
			n.t.Fatalf("%s's inbox: envelope of %s: %v", n.name, it.ID, err)
		}
		if it.env.ID != it.MEUP.ID || it.env.Kind != it.MEUP.Kind || it.env.From != it.MEUP.Participant {
			n.t.Fatalf("%s's inbox: item fields disagree with its envelope: %s", n.name, jsonText(it.MEUP))
		}
		out = append(out, it)
	}
	return out
}

// itemsOf returns the items of kind whose predicate holds.
func itemsOf(items []spaceItem, kind string, match func(spaceItem) bool) []spaceItem {
	var out []spaceItem
	for _, it := range items {
		if it.MEUP.Kind == kind && (match == nil || match(it)) {
			out = append(out, it)
		}
	}
	return out
}

// withID matches items whose MEUP id is id.
func withID(id string) func(spaceItem) bool {
	return func(it spaceItem) bool { return it.MEUP.ID == id }
}

// correlatedTo matches items whose correlation ids name id.
func correlatedTo(id string) func(spaceItem) bool {
	return func(it spaceItem) bool { return slices.Contains(it.env.CorrelationID, id) }
}

// waitItems waits until n's inbox holds exactly want items of kind that
// match, and returns them. (More than want fails at once.)
func waitItems(t *testing.T, n *testNode, want int, kind string, match func(spaceItem) bool) []spaceItem {
	t.Helper()
	var got []spaceItem
	waitUntil(t, fmt.Sprintf("%d %s item(s) in %s's inbox", want, kind, n.name), func() bool {
		got = itemsOf(meupItems(n), kind, match)
		if len(got) > want {
			t.Fatalf("%s's inbox holds %d %s items, want %d: %s", n.name, len(got), kind, want, jsonText(got))
		}
		return len(got) == want
	})
	return got
}

// barrier sends a chat from `from` and waits until each of to holds it:
// what from's outbox held for them before has been delivered (a reliable
// send waits behind what the outbox holds for that peer).
func barrier(t *testing.T, from *testNode, to ...*testNode) {
	t.Helper()
	s := from.spaceSend("chat", spaceName, "barrier")
	for _, n := range to {
		waitItems(t, n, 1, "chat", withID(s.ID))
	}
}

// systemError is a system/error payload.
type systemError struct {
	Error            string            `json:"error"`
	Message          string            `json:"message"`
	AttemptedKind    string            `json:"attempted_kind"`
	YourCapabilities []json.RawMessage `json:"your_capabilities"`
}

// checkSystemErrors checks that prop holds exactly one system/error
// correlated to id from each of the participants froms, with reason
// reason about kind attempted, and none from anyone else.
func checkSystemErrors(t *testing.T, prop *testNode, id, reason, attempted string, froms ...string) {
	t.Helper()
	errs := waitItems(t, prop, len(froms), "system/error", correlatedTo(id))
	var who []string
	for _, it := range errs {
		who = append(who, it.MEUP.Participant)
		var p systemError
		if err := json.Unmarshal(it.env.Payload, &p); err != nil {
			t.Fatalf("system/error payload: %v: %s", err, it.env.Payload)
		}
		if p.Error != reason || p.AttemptedKind != attempted || p.YourCapabilities == nil || p.Message == "" {
			t.Fatalf("system/error from %s: %s", it.MEUP.Participant, it.env.Payload)
		}
		if !slices.Equal(it.env.To, []string{prop.name}) || it.env.From != it.MEUP.Participant {
			t.Fatalf("system/error from %s: to %v from %q", it.MEUP.Participant, it.env.To, it.env.From)
		}
	}
	slices.Sort(who)
	froms = slices.Sorted(slices.Values(froms))
	if !slices.Equal(who, froms) {
		t.Fatalf("system/errors correlated to %s came from %v, want %v", id, who, froms)
	}
}

// capKinds returns the kinds of a capability list (each kind a string).
func capKinds(t *testing.T, caps []json.RawMessage) []string {
	t.Helper()
	var kinds []string
	for _, c := range caps {
		var v struct {
			Kind string `json:"kind"`
		}
		if err := json.Unmarshal(c, &v); err != nil {
			t.Fatalf("capability %s: %v", c, err)
		}
		kinds = append(kinds, v.Kind)
	}
	slices.Sort(kinds)
	return kinds
}

// auditRefused returns n's audit rows of refused envelopes.
func auditRefused(t *testing.T, n *testNode) []auditRow {
	t.Helper()
	out := n.ok("audit", "--json", "--event", "refused")
	var rows []auditRow
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		if line == "" {
			continue
		}
		var r auditRow
		if err := json.Unmarshal([]byte(line), &r); err != nil {
			t.Fatalf("%s's audit line %q: %v", n.name, line, err)
		}
		rows = append(rows, r)
	}
	return rows
}

// wantRefusedRow requires n's audit log to hold a refused row for the
// Meerkat envelope id from peer, its reason naming reason.
func wantRefusedRow(t *testing.T, n *testNode, id, peer, reason string) {
	t.Helper()
	// The audit log is written in the background: wait for the row.
	var rows []auditRow
	var found *auditRow
	waitUntil(t, n.name+"'s refused row for "+id, func() bool {
		rows = auditRefused(t, n)
		for i := range rows {
			if rows[i].ID == id {
				found = &rows[i]
				return true
			}
		}
		return false
	})
	if r := found; r.Dir != "in" || r.Kind != "meup" || r.Peer != peer || !strings.Contains(r.Reason, reason) {
		t.Fatalf("%s's refused row for %s: %s", n.name, id, jsonText(r))
	}
}

// noItem requires that n's inbox holds no meup item with MEUP id id.
func noItem(t *testing.T, n *testNode, id string) {
	t.Helper()
	for _, it := range meupItems(n) {
		if it.MEUP.ID == id {
			t.Fatalf("%s's inbox holds %s %s, which it should have refused", n.name, it.MEUP.Kind, id)
		}
	}
}

const toolCall = `{"method":"tools/call","params":{"name":"deploy","arguments":{"env":"prod"}}}`

// 1. An mcp/request from a member without that capability is refused by
// every receiver: each answers a correlated system/error, none delivers.
func TestSpaceCapabilityRefusedByEveryReceiver(t *testing.T) {
	t.Parallel()
	s := threeSpaceNodes(t)
	sent := s.prop.spaceSend("send", spaceName, "mcp/request", toolCall)
	if sent.Kind != "mcp/request" || len(sent.Copies) != 2 {
		t.Fatalf("send: %s", jsonText(sent))
	}
	// A refused envelope is acknowledged all the same (no retries).
	sent.wantAcked(t, "orchestrator", "worker")

	checkSystemErrors(t, s.prop, sent.ID, "capability_violation", "mcp/request", "orchestrator", "worker")
	for _, it := range itemsOf(meupItems(s.prop), "system/error", correlatedTo(sent.ID)) {
		var p systemError
		json.Unmarshal(it.env.Payload, &p)
		if got := capKinds(t, p.YourCapabilities); !slices.Equal(got, []string{"chat", "mcp/proposal"}) {
			t.Fatalf("system/error from %s: your_capabilities %s", it.MEUP.Participant, jsonText(p.YourCapabilities))
		}
	}
	for _, n := range []*testNode{s.orch, s.worker} {
		if reqs := itemsOf(meupItems(n), "mcp/request", nil); len(reqs) != 0 {
			t.Fatalf("%s's inbox holds mcp/requests: %s", n.name, jsonText(reqs))
		}
		wantRefusedRow(t, n, sent.copyTo(t, n.name).ID, "proposer", "capability_violation")
	}
	// The proposer's refused envelope counts against it on each
	// receiver; what it may send still goes through.
	ok := s.prop.spaceSend("chat", spaceName, "still allowed")
	ok.wantAcked(t, "orchestrator", "worker")
	for _, n := range []*testNode{s.orch, s.worker} {
		waitItems(t, n, 1, "chat", withID(ok.ID))
	}
}

// 2 and 6. A proposal is seen by the orchestrator, survives its restart,
// is fulfilled with an mcp/request to the worker, and the worker's
// response reaches the proposer and the orchestrator; the orchestrator's
// record of it (fulfilled, with request and response ids) survives a
// restart too.
func TestSpaceProposalFlow(t *testing.T) {
	t.Parallel()
	s := threeSpaceNodes(t)
	params := `{"name":"deploy","arguments":{"env":"staging"}}`
	prop := s.prop.spaceSend("propose", spaceName, "tools/call", params, "--to", "worker")
	prop.wantAcked(t, "orchestrator", "worker")
	seen := waitItems(t, s.orch, 1, "mcp/proposal", withID(prop.ID))[0]
	if seen.MEUP.Participant != "proposer" || !slices.Equal(seen.env.To, []string{"worker"}) {
		t.Fatalf("the proposal in the orchestrator's inbox: %s", jsonText(seen.MEUP))
	}
	var call struct {
		Method string          `json:"method"`
		Params json.RawMessage `json:"params"`
	}
	if err := json.Unmarshal(seen.env.Payload, &call); err != nil || call.Method != "tools/call" || !jsonEqual(call.Params, params) {
		t.Fatalf("proposal payload %s (%v)", seen.env.Payload, err)
	}

	proposals := func(n *testNode) []spaceProposal {
		t.Helper()
		var ps []spaceProposal
		n.okJSON(&ps, "space", "proposals", spaceName, "--json")
		return ps
	}
	only := func(n *testNode, state string) spaceProposal {
		t.Helper()
		ps := proposals(n)
		if len(ps) != 1 || ps[0].ID != prop.ID || ps[0].State != state || ps[0].Proposer != "proposer" || ps[0].Space != spaceName {
			t.Fatalf("%s's proposals, want %s in state %s: %s", n.name, prop.ID, state, jsonText(ps))
		}
		return ps[0]
	}
	p := only(s.orch, "pending")
	if sp := spaceShow(s.orch); sp.Pending != 1 {
		t.Fatalf("the orchestrator's space shows %d pending proposals, want 1", sp.Pending)
	}
	s.orch.stop() // without its daemon, space show reads its store
	if sp := spaceShow(s.orch); sp.Pending != 1 {
		t.Fatalf("the orchestrator's space without its daemon shows %d pending proposals, want 1", sp.Pending)
	}
	s.orch.start()
	if !jsonEqual(p.Payload, `{"method":"tools/call","params":`+params+`}`) {
		t.Fatalf("the orchestrator's proposal: %s", jsonText(p))
	}
	if !slices.Equal(p.To, []string{"worker"}) {
		// Not fatal: the rest of the flow goes on without it.
		t.Errorf("the orchestrator's proposal addresses %q, want [worker]: %s", p.To, jsonText(p))
	}

	// 6: the proposal survives the orchestrator's restart.
	s.orch.stop()
	s.orch.start()
	if p := only(s.orch, "pending"); !slices.Equal(p.To, []string{"worker"}) {
		// Not fatal: the rest of the flow goes on without it.
		t.Errorf("after the orchestrator's restart its proposal addresses %q, want [worker]: the store lost the proposal's to: %s", p.To, jsonText(p))
	}
	var pend []spaceProposal
	s.orch.okJSON(&pend, "space", "proposals", spaceName, "--state", "pending", "--json")
	if len(pend) != 1 || pend[0].ID != prop.ID {
		t.Fatalf("pending proposals after the restart: %s", jsonText(pend))
	}

	req := s.orch.spaceSend("fulfill", spaceName, prop.ID)
	req.wantAcked(t, "worker", "proposer")
	if req.Kind != "mcp/request" {
		t.Fatalf("fulfill sent %s", jsonText(req))
	}
	got := waitItems(t, s.worker, 1, "mcp/request", withID(req.ID))[0]
	if got.MEUP.Participant != "orchestrator" || !slices.Equal(got.env.CorrelationID, []string{prop.ID}) {
		t.Fatalf("the worker's mcp/request: %s", jsonText(got.MEUP))
	}
	if !slices.Equal(got.env.To, []string{"worker"}) {
		// Not fatal: the rest of the flow does not depend on it.
		t.Errorf("the fulfilment of a proposal addressed to the worker addresses %q, want [worker]", got.env.To)
	}
	if err := json.Unmarshal(got.env.Payload, &call); err != nil || call.Method != "tools/call" || !jsonEqual(call.Params, params) {
		t.Fatalf("the worker's mcp/request payload %s (%v)", got.env.Payload, err)
	}

	resp := s.worker.spaceSend("respond", spaceName, req.ID, `{"content":[{"type":"text","text":"deployed"}]}`)
	resp.wantAcked(t, "orchestrator", "proposer")
	for _, n := range []*testNode{s.orch, s.prop} {
		it := waitItems(t, n, 1, "mcp/response", withID(resp.ID))[0]
		var r struct {
			Result json.RawMessage `json:"result"`
		}
		if it.MEUP.Participant != "worker" || !slices.Equal(it.env.CorrelationID, []string{req.ID}) ||
			json.Unmarshal(it.env.Payload, &r) != nil || !jsonEqual(r.Result, `{"content":[{"type":"text","text":"deployed"}]}`) {
			t.Fatalf("the response in %s's inbox: %s", n.name, jsonText(it.MEUP))
		}
	}
	// No node refused anything on the way.
	for _, n := range s.all() {
		if its := itemsOf(meupItems(n), "system/error", nil); len(its) != 0 {
			t.Fatalf("%s received system/errors: %s", n.name, jsonText(its))
		}
	}

	fulfilled := func() {
		t.Helper()
		p := only(s.orch, "fulfilled")
		if p.RequestID != req.ID || p.ResponseID != resp.ID || p.By != "orchestrator" {
			t.Fatalf("the orchestrator's fulfilled proposal: %s (request %s, response %s)", jsonText(p), req.ID, resp.ID)
		}
	}
	waitUntil(t, "the proposal to show its response", func() bool {
		ps := proposals(s.orch)
		return len(ps) == 1 && ps[0].ResponseID != ""
	})
	fulfilled()
	// 6: and so it stays across a restart.
	s.orch.stop()
	s.orch.start()
	fulfilled()
}

// jsonEqual reports whether raw and want are the same JSON value.
func jsonEqual(raw json.RawMessage, want string) bool {
	var a, b any
	if json.Unmarshal(raw, &a) != nil || json.Unmarshal([]byte(want), &b) != nil {
		return false
	}
	x, _ := json.Marshal(a)
	y, _ := json.Marshal(b)
	return string(x) == string(y)
}

// 3 and 6. A grant lets the proposer call, across restarts of the
// receivers; a revoke takes it back.
func TestSpaceGrantThenRevoke(t *testing.T) {
	t.Parallel()
	s := threeSpaceNodes(t)
	call := func() spaceSent {
		t.Helper()
		c := s.prop.spaceSend("send", spaceName, "mcp/request", toolCall, "--to", "worker")
		c.wantAcked(t, "orchestrator", "worker")
		return c
	}
	// Without a grant: refused at the worker.
	before := call()
	checkSystemErrors(t, s.prop, before.ID, "capability_violation", "mcp/request", "orchestrator", "worker")
	noItem(t, s.worker, before.ID)

	grant := s.orch.spaceSend("grant", spaceName, "proposer", `{"kind":"mcp/request","payload":{"method":"tools/call"}}`)
	grant.wantAcked(t, "worker", "proposer")
	if grant.Kind != "capability/grant" {
		t.Fatalf("grant sent %s", jsonText(grant))
	}
	for _, n := range s.all() {
		if g := granted(t, n, "proposer"); len(g) != 1 {
			t.Fatalf("%s's grants to the proposer after the grant: %s", n.name, jsonText(g))
		}
	}

	granted1 := call()
	waitItems(t, s.worker, 1, "mcp/request", withID(granted1.ID))
	waitItems(t, s.orch, 1, "mcp/request", withID(granted1.ID))

	// 6: the grant survives the receivers' restarts; while they are
	// stopped, space show reads it from their stores.
	s.worker.stop()
	s.orch.stop()
	for _, n := range []*testNode{s.worker, s.orch} {
		if g := granted(t, n, "proposer"); len(g) != 1 {
			t.Fatalf("%s's grants to the proposer without its daemon: %s", n.name, jsonText(g))
		}
	}
	s.worker.start()
	s.orch.start()
	granted2 := call()
	waitItems(t, s.worker, 1, "mcp/request", withID(granted2.ID))
	waitItems(t, s.orch, 1, "mcp/request", withID(granted2.ID))
	// Neither granted call was answered with an error: the barriers
	// deliver whatever the receivers queued for the proposer before.
	barrier(t, s.worker, s.prop)
	barrier(t, s.orch, s.prop)
	for _, id := range []string{granted1.ID, granted2.ID} {
		if errs := itemsOf(meupItems(s.prop), "system/error", correlatedTo(id)); len(errs) != 0 {
			t.Fatalf("granted call %s was refused: %s", id, jsonText(errs))
		}
	}

	rev := s.orch.spaceSend("revoke", spaceName, "proposer", "--grant-id", grant.ID)
	rev.wantAcked(t, "worker", "proposer")
	if rev.Kind != "capability/revoke" {
		t.Fatalf("revoke sent %s", jsonText(rev))
	}
	for _, n := range s.all() {
		if g := granted(t, n, "proposer"); len(g) != 0 {
			t.Fatalf("%s's grants to the proposer after the revoke: %s", n.name, jsonText(g))
		}
	}
	after := call()
	checkSystemErrors(t, s.prop, after.ID, "capability_violation", "mcp/request", "orchestrator", "worker")
	noItem(t, s.worker, after.ID)
	wantRefusedRow(t, s.worker, after.copyTo(t, "worker").ID, "proposer", "capability_violation")

	// The revocation survives a restart of the worker too.
	s.worker.stop()
	s.worker.start()
	again := call()
	checkSystemErrors(t, s.prop, again.ID, "capability_violation", "mcp/request", "orchestrator", "worker")
	noItem(t, s.worker, again.ID)
}

// granted returns the live grants n holds for member id.
func granted(t *testing.T, n *testNode, id string) []json.RawMessage {
	t.Helper()
	for _, m := range spaceShow(n).Members {
		if m.ID == id {
			return m.Granted
		}
	}
	t.Fatalf("%s's space has no member %s", n.name, id)
	return nil
}

// sealMEUP signs, with kp, a meup kind carrying envelope (JSON text) in
// space, addressed to the node with key to.
func sealMEUP(t *testing.T, kp *identity.Keypair, to identity.PeerID, space, envelope string) wire.Envelope {
	t.Helper()
	env, err := wire.ParseJSON([]byte(envelope))
	if err != nil {
		t.Fatal(err)
	}
	m, err := wire.Map(wire.Member{Key: "type", Value: wire.Text(wire.TypeMEUP)}, wire.Member{Key: "space", Value: wire.Text(space)}, wire.Member{Key: "envelope", Value: env})
	if err != nil {
		t.Fatal(err)
	}
	kind, err := wire.NewKind(m)
	if err != nil {
		t.Fatal(err)
	}
	e, err := wire.Seal(kp, identity.NewUUID(), to, kind)
	if err != nil {
		t.Fatal(err)
	}
	return e
}

// rawEnvelope seals kind from node from (its identity key) to node to.
func rawEnvelope(t *testing.T, from, to *testNode, kind wire.Kind) wire.Envelope {
	t.Helper()
	kp, err := identity.LoadKeypair(from.home)
	if err != nil {
		t.Fatal(err)
	}
	toID, err := identity.ParsePeerID(to.key)
	if err != nil {
		t.Fatal(err)
	}
	e, err := wire.Seal(kp, identity.NewUUID(), toID, kind)
	if err != nil {
		t.Fatal(err)
	}
	return e
}

// sendRaw dials n's address as a raw peer (plaintext frames) and writes
// e's frame; the connection is n's to close or answer, within pollTimeout.
// The write may fail when n closed the connection at once.
func sendRaw(t *testing.T, n *testNode, e wire.Envelope) (net.Conn, error) {
	t.Helper()
	addr, err := transport.ParseAddr(n.addr)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), pollTimeout)
	defer cancel()
	c, err := transport.Dial(ctx, addr)
	if err != nil {
		t.Fatalf("dial %s: %v", n.name, err)
	}
	t.Cleanup(func() { c.Close() })
	c.SetDeadline(time.Now().Add(pollTimeout))
	payload, err := e.MarshalBinary()
	if err != nil {
		t.Fatal(err)
	}
	return c, transport.WriteFrame(c, payload)
}

// deliverRaw sends e to n's socket as a raw peer and requires n's ack.
func deliverRaw(t *testing.T, n *testNode, e wire.Envelope) {
	t.Helper()
	c, err := sendRaw(t, n, e)
	if err != nil {
		t.Fatalf("write to %s: %v", n.name, err)
	}
	defer c.Close()
	frame, err := transport.ReadFrame(c, 0)
	if err != nil {
		t.Fatalf("%s did not ack %s: %v", n.name, e.ID, err)
	}
	ack, err := wire.Open(frame)
	if err != nil {
		t.Fatalf("%s's ack does not open: %v", n.name, err)
	}
	if id, ok := ack.Kind.InReplyTo(); ack.Kind.Type() != wire.TypeAck || !ok || id != e.ID || ack.To != e.From {
		t.Fatalf("%s answered %q (in reply to %s, ok %v) to %s", n.name, ack.Kind.Type(), id, ok, e.ID)
	}
}

// rawMEUPEnvelope is a MEUP envelope's JSON text.
func rawMEUPEnvelope(id, from, kind, payload string) string {
	return fmt.Sprintf(`{"protocol":"meup/v0.1","id":%q,"ts":%q,"from":%q,"kind":%q,"payload":%s}`,
		id, time.Now().UTC().Format("2006-01-02T15:04:05.000Z07:00"), from, kind, payload)
}

// 4. An envelope signed by the proposer's key whose from names the
// orchestrator is refused with from_mismatch: audited, delivered nowhere,
// answered to the proposer.
func TestSpaceForgedFrom(t *testing.T) {
	t.Parallel()
	s := threeSpaceNodes(t)
	kp, err := identity.LoadKeypair(s.prop.home)
	if err != nil {
		t.Fatal(err)
	}
	if kp.ID().String() != s.prop.key {
		t.Fatalf("the proposer's key file holds %s, its id says %s", kp.ID(), s.prop.key)
	}
	workerKey, err := identity.ParsePeerID(s.worker.key)
	if err != nil {
		t.Fatal(err)
	}

	// The raw path works: the same key, from its own participant id, is
	// delivered.
	genuineID := identity.NewUUID().String()
	deliverRaw(t, s.worker, sealMEUP(t, kp, workerKey, spaceName, rawMEUPEnvelope(genuineID, "proposer", "chat", `{"text":"genuine"}`)))
	it := waitItems(t, s.worker, 1, "chat", withID(genuineID))[0]
	if it.MEUP.Participant != "proposer" {
		t.Fatalf("genuine chat: %s", jsonText(it.MEUP))
	}

	forgedID := identity.NewUUID().String()
	forged := sealMEUP(t, kp, workerKey, spaceName, rawMEUPEnvelope(forgedID, "orchestrator", "chat", `{"text":"orders from the orchestrator"}`))
	deliverRaw(t, s.worker, forged)
	wantRefusedRow(t, s.worker, forged.ID.String(), "proposer", "from_mismatch")
	checkSystemErrors(t, s.prop, forgedID, "from_mismatch", "chat", "worker")
	noItem(t, s.worker, forgedID)
	for _, it := range meupItems(s.worker) {
		if it.ID == forged.ID.String() {
			t.Fatalf("the forged envelope is in the worker's inbox: %s", jsonText(it))
		}
	}
}

// 5. A chat from the orchestrator reaches every member exactly once, a
// member that was stopped when it was sent included, whatever the
// restarts after.
func TestSpaceBroadcastOnce(t *testing.T) {
	t.Parallel()
	s := threeSpaceNodes(t)
	first := s.orch.spaceSend("chat", spaceName, "everyone, once")
	first.wantAcked(t, "worker", "proposer")
	for _, n := range []*testNode{s.worker, s.prop} {
		waitItems(t, n, 1, "chat", withID(first.ID))
	}

	s.worker.stop()
	second := s.orch.spaceSend("chat", spaceName, "while the worker is away")
	second.wantAcked(t, "proposer")
	if c := second.copyTo(t, "worker"); c.Skipped != "" || c.ID == "" || c.Delivery == "acked" {
		t.Fatalf("copy for the stopped worker: %s", jsonText(c))
	}
	waitItems(t, s.prop, 1, "chat", withID(second.ID))
	// A --direct send whose copy to the stopped worker fails says so:
	// exit 1, and with --json the result with an error member.
	s.orch.wantCode(exitError, []string{"1 of 2 copies failed"}, "space", "chat", spaceName, "direct, while the worker is away", "--direct")
	r := s.orch.wantCode(exitError, nil, "space", "chat", spaceName, "direct again", "--direct", "--json")
	var direct struct {
		spaceSent
		Error struct{ Code, Message string } `json:"error"`
	}
	if err := json.Unmarshal([]byte(r.stdout), &direct); err != nil || direct.ID == "" || direct.Error.Message != "1 of 2 copies failed (see their notes)" || direct.Error.Code != "copies_failed" ||
		direct.copyTo(t, "worker").Delivery != "" || direct.copyTo(t, "worker").LastError == "" {
		t.Fatalf("--direct --json with a failed copy: %v\n%s", err, r.stdout)
	}
	s.worker.start()
	waitItems(t, s.worker, 1, "chat", withID(second.ID))
	waitOutboxEmpty(t, s.orch, pollTimeout)

	// Further restarts of the receiver and of the sender deliver nothing
	// again.
	s.worker.stop()
	s.orch.stop()
	s.orch.start()
	s.worker.start()
	barrier(t, s.orch, s.worker, s.prop)
	for _, n := range []*testNode{s.worker, s.prop} {
		for _, c := range []spaceSent{first, second} {
			if got := itemsOf(meupItems(n), "chat", withID(c.ID)); len(got) != 1 {
				t.Fatalf("%s holds %d copies of chat %s: %s", n.name, len(got), c.ID, jsonText(got))
			}
		}
		for _, it := range itemsOf(meupItems(n), "chat", nil) {
			if it.MEUP.Participant != "orchestrator" {
				t.Fatalf("%s holds a chat from %s", n.name, it.MEUP.Participant)
			}
		}
	}
}

// rawPeer is a trusted peer that behaves like the Rust reference on MEUP
// frames: it accepts a connection, reads one frame and closes without an
// ack.
type rawPeer struct {
	kp     *identity.Keypair
	addr   string
	ln     net.Listener
	wg     sync.WaitGroup
	mu     sync.Mutex
	frames int
}

func startRawPeer(t *testing.T) *rawPeer {
	t.Helper()
	kp, err := identity.GenerateKeypair()
	if err != nil {
		t.Fatal(err)
	}
	dir, err := os.MkdirTemp("", "mkraw")
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "rust.sock")
	ln, err := net.Listen("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	p := &rawPeer{kp: kp, addr: "uds://" + path, ln: ln}
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			c.SetDeadline(time.Now().Add(pollTimeout))
			if _, err := transport.ReadFrame(c, 0); err == nil {
				p.mu.Lock()
				p.frames++
				p.mu.Unlock()
			}
			c.Close()
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		p.wg.Wait()
		os.RemoveAll(dir)
	})
	return p
}

func (p *rawPeer) count() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.frames
}

// 7. A member whose node closes on MEUP frames is marked after a few
// attempts: its copies become dead letters, nothing stays queued for it,
// and later sends skip it.
func TestSpaceNoMEUPMember(t *testing.T) {
	t.Parallel()
	s := threeSpaceNodes(t)
	rust := startRawPeer(t)
	s.orch.ok("peers", "add", "rust", rust.kp.ID().String(), rust.addr)
	// By key: the running daemon takes in the trust file when it notices
	// the change; the member is pending until then.
	s.orch.ok("space", "add", spaceName, rust.kp.ID().String(), "rust", "--cap", "chat")
	waitUntil(t, "rust to be trusted (active, or already marked by the node's join)", func() bool {
		m := member(t, s.orch, "rust")
		return m.Status == "active" || m.Status == "no_meup"
	})

	// The first MEUP rust gets is the node's own presence join, announced
	// when its roster and trust list changed; a chat may follow while the
	// node is still learning. Either way, a few closed connections later
	// rust is marked and nothing is queued for it.
	first := s.orch.spaceSend("chat", spaceName, "hello rust")
	first.wantAcked(t, "worker", "proposer")
	if c := first.copyTo(t, "rust"); c.Delivery == "acked" {
		t.Fatalf("first copy for rust acked: %s", jsonText(c))
	}
	waitUntil(t, "rust to be marked as not speaking MEUP", func() bool {
		return member(t, s.orch, "rust").Status == "no_meup"
	})
	if m := member(t, s.orch, "rust"); !strings.Contains(m.Note, "MEUP") {
		t.Fatalf("rust's member entry: %s", jsonText(m))
	}
	waitUntil(t, "rust's MEUP envelopes to become dead letters and leave the outbox", func() bool {
		for _, e := range outboxOf(t, s.orch).Entries {
			if e.Peer == "rust" {
				return false
			}
		}
		return len(deadOf(t, s.orch)) > 0
	})
	for _, d := range deadOf(t, s.orch) {
		if d.Peer != "rust" || d.Kind != "meup" || !strings.HasPrefix(d.Reason, "rejected") {
			t.Fatalf("dead letter: %s", jsonText(d))
		}
	}
	if id := first.copyTo(t, "rust").ID; id != "" {
		found := false
		for _, d := range deadOf(t, s.orch) {
			found = found || d.ID == id
		}
		if !found {
			t.Fatalf("the chat's copy for rust %s is neither delivered, queued nor a dead letter", id)
		}
	}
	tried := rust.count()
	if tried < 1 || tried > 6 {
		t.Fatalf("rust was sent %d MEUP frames before it was marked; want a few (1 to 6)", tried)
	}

	// Later sends skip it; the others still get theirs.
	later := s.orch.spaceSend("chat", spaceName, "rust is skipped")
	later.wantAcked(t, "worker", "proposer")
	if c := later.copyTo(t, "rust"); !strings.HasPrefix(c.Skipped, "does not speak MEUP") || c.ID != "" {
		t.Fatalf("later copy for rust: %s", jsonText(c))
	}
	waitItems(t, s.worker, 1, "chat", withID(later.ID))
	for _, e := range outboxOf(t, s.orch).Entries {
		if e.Peer == "rust" {
			t.Fatalf("the outbox holds an envelope for rust after a skipped send: %s", jsonText(e))
		}
	}
	if n := rust.count(); n != tried {
		t.Fatalf("rust was sent %d more frames after it was marked", n-tried)
	}
}

// member returns n's entry for member id of space build, as `space list
// --json` shows it.
func member(t *testing.T, n *testNode, id string) spaceMember {
	t.Helper()
	var list []spaceInfo
	n.okJSON(&list, "space", "list", "--json")
	for _, sp := range list {
		if sp.Name != spaceName {
			continue
		}
		for _, m := range sp.Members {
			if m.ID == id {
				return m
			}
		}
	}
	t.Fatalf("%s's space list has no member %s of %s: %s", n.name, id, spaceName, jsonText(list))
	return spaceMember{}
}

// The rosters are edited with no daemon running: capabilities given as
// kind patterns, objects or arrays; the file is what the next daemon
// runs; show and list read it.
func TestSpaceRosterWithoutDaemon(t *testing.T) {
	t.Parallel()
	alice, bob := twoNodes(t, "uds")
	var info struct {
		Name    string `json:"name"`
		Self    string `json:"self"`
		Members []struct {
			ID           string            `json:"id"`
			Key          string            `json:"key"`
			Status       string            `json:"status"`
			Capabilities []json.RawMessage `json:"capabilities"`
		} `json:"members"`
	}
	compact := func(raw json.RawMessage) string {
		var b bytes.Buffer
		if err := json.Compact(&b, raw); err != nil {
			t.Fatal(err)
		}
		return b.String()
	}
	alice.okJSON(&info, "space", "create", "build", "--as", "orchestrator", "--json")
	if info.Name != "build" || info.Self != "orchestrator" || len(info.Members) != 1 || compact(info.Members[0].Capabilities[0]) != `{"kind":"*"}` {
		t.Fatalf("create: %+v", info)
	}
	alice.okJSON(&info, "space", "add", "build", "bob", "worker", "--cap", "chat", "--cap", `{"kind":"mcp/response"}`, "--cap", `[{"kind":"mcp/proposal"},{"kind":"reasoning/*"}]`, "--json")
	var caps []string
	for _, m := range info.Members {
		if m.ID == "worker" {
			if m.Key != bob.key || m.Status != "active" {
				t.Errorf("worker %+v", m)
			}
			for _, c := range m.Capabilities {
				caps = append(caps, compact(c))
			}
		}
	}
	if want := []string{`{"kind":"chat"}`, `{"kind":"mcp/response"}`, `{"kind":"mcp/proposal"}`, `{"kind":"reasoning/*"}`}; strings.Join(caps, " ") != strings.Join(want, " ") {
		t.Fatalf("worker's capabilities %v, want %v", caps, want)
	}
	data, err := os.ReadFile(filepath.Join(alice.home, "spaces.json"))
	if err != nil || !strings.Contains(string(data), bob.key) {
		t.Fatalf("spaces.json: %v\n%s", err, data)
	}
	if out := alice.ok("space", "show", "build"); !strings.Contains(out, "worker") || !strings.Contains(out, "orchestrator (you)") {
		t.Errorf("show:\n%s", out)
	}
	alice.ok("space", "remove", "build", "worker")
	var list []json.RawMessage
	alice.okJSON(&list, "space", "list", "--json")
	if len(list) != 1 || strings.Contains(string(list[0]), "worker") {
		t.Fatalf("after remove: %s", list)
	}
	alice.ok("space", "delete", "build")
	alice.okJSON(&list, "space", "list", "--json")
	if len(list) != 0 {
		t.Fatalf("after delete: %s", list)
	}
}

// A space send every member was skipped for (none trusted here) sends
// nothing, and says so.
func TestSpaceSendAllSkipped(t *testing.T) {
	t.Parallel()
	alice := newNode(t, "alice")
	kp, err := identity.GenerateKeypair()
	if err != nil {
		t.Fatal(err)
	}
	alice.ok("space", "create", "lab", "--as", "me")
	alice.ok("space", "add", "lab", kp.ID().String(), "dave")
	alice.start()
	r := alice.run("space", "chat", "lab", "anyone?")
	if r.code != exitOK || !strings.Contains(r.stdout, "dave: skipped: not trusted") || !strings.Contains(r.stderr, "every member was skipped") {
		t.Fatalf("chat to a space of untrusted members: %d %q %q", r.code, r.stdout, r.stderr)
	}
}
