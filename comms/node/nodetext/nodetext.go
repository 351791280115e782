// Package nodetext writes the results of the node's API as text for a
// person at a terminal: tables, item listings and the status page that
// meerkatd's commands print without --json.
//
// Text a peer chose (bodies, names, reasons, card fields) is escaped:
// control characters and invalid UTF-8 are shown escaped and continuation
// lines are indented, so a peer cannot draw lines that look like
// meerkatd's own.
package nodetext

import (
	"bytes"
	"cmp"
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"strings"
	"text/tabwriter"
	"time"
	"unicode/utf16"
	"unicode/utf8"

	"github.com/meerkatd/meerkatd/comms/node"
	"github.com/meerkatd/meerkatd/comms/outbox"
	"github.com/meerkatd/meerkatd/internal/termtext"
)

// Escape makes text a peer chose safe to print: control characters
// (escape sequences, carriage returns, …) and invalid UTF-8 are shown
// escaped, and each new line is indented by indent.
func Escape(s, indent string) string { return termtext.Escape(s, indent, true) }

// Line is Escape for a line of meerkatd's own that carries text a peer
// may have chosen (an error message, a last error, a dead letter's
// reason): control characters escaped, continuation lines indented, but
// backslashes left as they are (the rest of the line is meerkatd's).
func Line(s string) string { return termtext.Escape(s, "  ", false) }

// EscapeJSON is Escape for JSON text a peer chose (params, a result, a
// payload): its backslashes are JSON's own escapes and are shown once,
// not doubled; control characters (which JSON holds escaped, except the
// format characters such as bidirectional overrides and invalid UTF-8
// that it may hold raw) are still shown escaped. A backslash written by
// this escaping cannot be mistaken for one in a JSON string, where a
// literal backslash is always doubled.
func EscapeJSON(v any, indent string) string { return termtext.Escape(JSON(v), indent, false) }

// Table writes a table: header (tab-separated column names), then a row
// of cells per item, in aligned columns.
func Table[T any](w io.Writer, header string, items []T, row func(T) []any) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, header)
	for _, it := range items {
		for i, c := range row(it) {
			if i > 0 {
				fmt.Fprint(tw, "\t")
			}
			fmt.Fprint(tw, c)
		}
		fmt.Fprintln(tw)
	}
	return tw.Flush()
}

// Who is a peer's name, or its key when it has none.
func Who(name, key string) string {
	if name != "" {
		return name
	}
	return key
}

// Time is t in local time (RFC 3339), or "-" for none.
func Time(t *time.Time) string {
	if t == nil || t.IsZero() {
		return "-"
	}
	return t.Local().Format(time.RFC3339)
}

// next shows a next attempt whose time has come as "due".
func next(t *time.Time, due bool) string {
	if due {
		return "due"
	}
	return Time(t)
}

func breaker(p node.PeerSendState) string {
	if p.Breaker == outbox.BreakerOpen && p.OpenUntil != nil {
		return "open until " + p.OpenUntil.Local().Format(time.TimeOnly)
	}
	return p.Breaker
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// JSON is a JSON value of a result (params, a result, fields) as text.
func JSON(v any) string {
	switch v := v.(type) {
	case nil:
		return "null"
	case json.RawMessage:
		return string(v)
	}
	b, _ := json.Marshal(v)
	return string(b)
}

// Self writes a node's identity and listen addresses.
func Self(w io.Writer, s node.Self) {
	fmt.Fprintf(w, "name       %s\npubkey     %s\npeer_uuid  %s\nhome       %s\n", s.Name, s.PubKey, s.PeerUUID, s.Home)
	for _, l := range s.Listen {
		fmt.Fprintf(w, "listen     %s\n", l)
	}
}

// Status writes the status page.
func Status(w io.Writer, s node.Status) {
	state := "not running: showing what is stored on disk"
	if s.Running {
		state = "running since " + s.StartedAt.Local().Format(time.RFC3339)
	}
	fmt.Fprintf(w, "node       %s\nname       %s\npubkey     %s\nhome       %s\n", state, s.Name, s.PubKey, s.Home)
	for _, l := range s.Listen {
		fmt.Fprintf(w, "listen     %s\n", l)
	}
	for _, p := range s.Problems {
		fmt.Fprintf(w, "problem    %s\n", Line(p))
	}
	for _, p := range s.Warnings {
		fmt.Fprintf(w, "warning    %s\n", Line(p))
	}
	fmt.Fprintf(w, "peers      %d\ninbox      %d (%d pending%s)\n", s.Peers, s.Inbox, s.Pending, byClass(s.PendingByClass))
	if s.Running {
		fmt.Fprintf(w, "accepted   %d\nacks sent  %d\nconns      %d\n", s.Accepted, s.AcksSent, s.Connections)
		for reason, k := range s.Rejected {
			fmt.Fprintf(w, "rejected   %s %d\n", reason, k)
		}
	}
	fmt.Fprintf(w, "outbox     %d\ndead       %d\n", s.Outbox, s.DeadLetters)
	if s.DBBytes > 0 {
		fmt.Fprintf(w, "database   %d bytes\n", s.DBBytes)
	}
	if s.NATS != nil {
		fmt.Fprintf(w, "nats       %s\n", Line(s.NATS.Summary()))
	}
	for _, p := range s.SendPeers {
		fmt.Fprintf(w, "peer       %s: %d queued, breaker %s", Who(p.Peer, p.PubKey), p.Queued, breaker(p))
		if p.LastError != "" {
			fmt.Fprintf(w, ", last error: %s", Line(p.LastError))
		}
		fmt.Fprintln(w)
	}
	for _, g := range s.LoopGuards {
		fmt.Fprintf(w, "held       %s: loop guard, %d fast replies in a row, until %s (meerkatd release)\n", Who(g.Peer, g.PubKey), g.Exchanges, Time(g.HeldUntil))
	}
}

// byClass is ": 1 system, 2 normal" for the classes with pending items.
func byClass(pending map[string]int) string {
	var parts []string
	for _, c := range node.Classes {
		if pending[c] > 0 {
			parts = append(parts, fmt.Sprintf("%d %s", pending[c], c))
		}
	}
	if len(parts) == 0 {
		return ""
	}
	return ": " + strings.Join(parts, ", ")
}

// Peers writes the trusted peers.
func Peers(w io.Writer, peers []node.Peer) error {
	return Table(w, "NAME\tPUBKEY\tADDR\tLAST SEEN\tCARD", peers, func(p node.Peer) []any {
		addr := Escape(p.Addr, "")
		if p.NATS {
			addr += " or nats:"
		}
		return []any{p.Name, p.PubKey, addr, Time(p.LastSeen), cardColumn(p.Card)}
	})
}

// Announcements writes the nodes running on this host.
func Announcements(w io.Writer, as []node.Announcement) error {
	return Table(w, "NAME\tKEY\tADDRESS\tPID", as, func(a node.Announcement) []any {
		return []any{Escape(a.Name, ""), a.Key, Escape(a.Addr, ""), a.PID}
	})
}

// OutboxPeers writes the peers with sends queued or a breaker not closed.
func OutboxPeers(w io.Writer, peers []node.PeerSendState) error {
	return Table(w, "PEER\tQUEUED\tBREAKER\tFAILURES\tNEXT ATTEMPT\tLAST ERROR", peers, func(p node.PeerSendState) []any {
		return []any{Who(p.Peer, p.PubKey), p.Queued, breaker(p), p.Failures, next(p.NextAttempt, p.Due), Line(p.LastError)}
	})
}

// Queued writes the reliable sends waiting in the outbox.
func Queued(w io.Writer, qs []node.QueuedSend) error {
	return Table(w, "SEQ\tID\tPEER\tKIND\tATTEMPTS\tNEXT ATTEMPT\tEXPIRES\tLAST ERROR", qs, func(q node.QueuedSend) []any {
		expires := Time(q.Expires)
		if q.Expired {
			expires = "expired (a dead letter once the daemon looks)"
		}
		return []any{q.Seq, q.ID, Who(q.Peer, q.PubKey), q.Kind, q.Attempts, next(q.NextAttempt, q.Due), expires, Line(q.LastError)}
	})
}

// DeadLetters writes the dead letters.
func DeadLetters(w io.Writer, dl []node.DeadLetter) error {
	return Table(w, "DIED\tID\tPEER\tKIND\tATTEMPTS\tREASON", dl, func(d node.DeadLetter) []any {
		return []any{Time(&d.DiedAt), d.ID, Who(d.Peer, d.PubKey), d.Kind, d.Attempts, Line(d.Reason)}
	})
}

// Requests writes the requests this node sent and their states.
func Requests(w io.Writer, rs []node.SentRequest) error {
	return Table(w, "ID\tPEER\tINTENT\tSENT\tDEADLINE\tSTATE\tRESPONSE", rs, func(r node.SentRequest) []any {
		resp := "-"
		if r.ResponseID != "" {
			resp = r.FinalStatus + " " + r.ResponseID
		}
		return []any{r.ID, Who(r.Peer, r.PubKey), Line(r.Intent), Time(&r.Sent), Time(r.Deadline), r.State, resp}
	})
}

// LoopGuards writes the peers the loop guard counts or holds.
func LoopGuards(w io.Writer, gs []node.LoopGuardState) error {
	return Table(w, "PEER\tFAST REPLIES\tSINCE\tHELD UNTIL", gs, func(g node.LoopGuardState) []any {
		return []any{Who(g.Peer, g.PubKey), g.Exchanges, Time(g.Since), Time(g.HeldUntil)}
	})
}

// Sent writes what became of envelopes this node sent.
func Sent(w io.Writer, st []node.SendStatus) error {
	return Table(w, "ID\tPEER\tKIND\tSTATE\tSENT\tDETAIL", st, func(s node.SendStatus) []any {
		return []any{s.ID, orDash(Who(s.Peer, s.PubKey)), orDash(s.Kind), s.State, Time(s.Created), Line(sentDetail(s))}
	})
}

// sentDetail says what a person wants to know next about a send.
func sentDetail(s node.SendStatus) string {
	var parts []string
	if s.Intent != "" {
		parts = append(parts, "intent "+s.Intent)
	}
	switch s.State {
	case node.StateAnswered:
		parts = append(parts, s.Answer.Status+" by response "+s.Answer.ResponseID)
	case node.StateAcked, node.StateWritten:
		parts = append(parts, "at "+Time(s.AckedAt))
	case node.StateDead, node.StateFailed:
		if s.Reason != "" {
			parts = append(parts, s.Reason)
		}
	case node.StateQueued:
		if s.Attempts > 0 {
			parts = append(parts, fmt.Sprintf("%d failed attempt(s); last: %s", s.Attempts, s.LastError))
		}
	}
	switch s.RequestState {
	case node.RequestTimedOut:
		parts = append(parts, "timed out (its deadline passed unanswered)")
	case node.RequestCancelled:
		parts = append(parts, strings.TrimSuffix("cancelled: "+s.RequestNote, ": "))
	}
	if s.Progress != nil && s.State != node.StateAnswered {
		parts = append(parts, fmt.Sprintf("%d accepted response(s), last %s", s.Progress.Accepted, s.Progress.ResponseID))
	}
	return strings.Join(parts, "; ")
}

// Tasks writes the tasks and their states.
func Tasks(w io.Writer, tl node.TaskList) error {
	return Table(w, "ID\tSTATE\tPARTICIPANTS\tUPDATED\tCOMPLETED BY", tl.Tasks, func(t node.Task) []any {
		names := make([]string, 0, len(t.Participants))
		for _, p := range t.Participants {
			names = append(names, Who(p.Peer, p.PubKey))
		}
		return []any{Line(t.ID), t.State, orDash(strings.Join(names, ",")), t.Updated.Local().Format(time.RFC3339), Line(t.CompletedBy)}
	})
}

// Task writes a task's line: its state and, once completed, by whom and
// its result.
func Task(w io.Writer, t node.Task) {
	line := t.ID + " " + t.State
	if t.State == node.TaskStateCompleted {
		line += " by " + t.CompletedBy + ": " + JSON(t.Result)
	}
	fmt.Fprintln(w, Line(line))
}

// SendQueued writes the note of a send left in the outbox (Delivery
// "queued"): with a node serving the home (daemon), that node retries it;
// without one, it waits for the daemon to start. res.LastError is why the
// last attempt failed, or why the send waits ("": none); res.Behind how
// many of the peer's sends wait ahead of it.
func SendQueued(w io.Writer, res node.Sent, daemon bool) {
	what, notes := "retrying until acked", []string{}
	if !daemon {
		what, notes = "kept for the daemon to send when it starts", []string{"no daemon runs: meerkatd run"}
	}
	last := "last attempt: "
	if res.Behind > 0 {
		notes = append(notes, fmt.Sprintf("not attempted yet, behind %d earlier %s to %s", res.Behind, map[bool]string{true: "send", false: "sends"}[res.Behind == 1], Line(res.Peer)))
		last = "the peer's last attempt: "
	}
	if res.BreakerOpenUntil != nil {
		what := "not attempted yet: the peer's circuit breaker is open until "
		if res.Behind > 0 {
			what = "its circuit breaker open until "
		}
		notes = append(notes, what+res.BreakerOpenUntil.Local().Format(time.TimeOnly)+" (sooner if it shows it is back)")
		last = "the peer's last attempt: "
	}
	if res.LastError != "" {
		notes = append(notes, last+Line(res.LastError))
	}
	if len(notes) > 0 {
		what += " (" + strings.Join(notes, "; ") + ")"
	}
	fmt.Fprintf(w, "queued in the outbox; %s: see meerkatd outbox\n", what)
}

// Dropped writes what outbox drop did: how many it dropped (to w, unless
// it dropped none and failed), and each send it left and why (to errw).
// It returns d.Err().
func Dropped(w, errw io.Writer, d node.Dropped) error {
	if len(d.Dropped) > 0 || d.Err() == nil {
		fmt.Fprintf(w, "dropped %d queued send(s) into the dead letters (meerkatd deadletters retry ID queues one again)\n", len(d.Dropped))
	}
	for _, id := range d.InFlight {
		fmt.Fprintf(errw, "%s: being attempted right now (it may be delivered); not dropped\n", Line(id))
	}
	for _, id := range d.Stored {
		fmt.Fprintf(errw, "%s: held by the NATS stream, which delivers it; not dropped\n", Line(id))
	}
	for _, id := range d.NotQueued {
		fmt.Fprintf(errw, "%s: not in the outbox\n", Line(id))
	}
	return d.Err()
}

// Broadcast writes where each copy of a broadcast went.
func Broadcast(w io.Writer, res node.Broadcasted) error {
	return Table(w, "PEER\tDELIVERY\tMARKED\tID\tNOTE", res.Copies, func(c node.BroadcastCopy) []any {
		note := c.LastError
		if c.Error != "" {
			note = c.Code + ": " + c.Error
		}
		return []any{c.Peer, c.Delivery, c.Marked, c.ID, Line(note)}
	})
}

// Message writes an inbox item: a header line ending with its class, then
// its content, indented.
func Message(w io.Writer, m node.Message) {
	who := m.From
	if m.Peer != "" {
		who = Escape(m.Peer, "") + " (" + m.From + ")"
	}
	fmt.Fprintf(w, "#%d %s %s from %s id %s [%s]\n", m.Seq, m.Received.Local().Format(time.RFC3339), Escape(m.Kind, ""), who, m.ID, m.Class)
	var ids []string
	if m.TaskID != "" {
		ids = append(ids, "task "+Escape(m.TaskID, ""))
	}
	if m.BroadcastID != "" {
		ids = append(ids, "broadcast "+m.BroadcastID)
	}
	if len(ids) > 0 {
		fmt.Fprintf(w, "  %s\n", strings.Join(ids, " "))
	}
	switch m.Kind {
	case "message":
		fmt.Fprintf(w, "  %s\n", Escape(m.Body, "  "))
	case "request":
		fmt.Fprintf(w, "  %s %s\n", Escape(m.Intent, "  "), EscapeJSON(m.Params, "  "))
		if m.Deadline != nil {
			fmt.Fprintf(w, "  deadline %s\n", Time(m.Deadline))
		}
		if c := m.Cancelled; c != nil {
			note := ""
			if c.Note != "" {
				note = ": " + Escape(c.Note, "  ")
			}
			fmt.Fprintf(w, "  cancelled by the sender (%s) at %s%s\n", Escape(c.Reason, ""), Time(&c.At), note)
		}
	case "response":
		fmt.Fprintf(w, "  %s to %s: %s\n", Escape(m.Status, ""), m.RequestID, EscapeJSON(m.Result, "  "))
	case "meup":
		meupItem(w, m.MEUP)
	default:
		fmt.Fprintf(w, "  %s\n", EscapeJSON(m.Fields, "  "))
	}
}

// meupItem writes an envelope of a space in an inbox listing.
func meupItem(w io.Writer, it *node.MEUPItem) {
	if it == nil {
		return
	}
	fmt.Fprintf(w, "  space %s: %s from %s (meup id %s)", Escape(it.Space, ""), Escape(it.Kind, ""), Escape(it.Participant, ""), Escape(it.ID, ""))
	if len(it.To) > 0 {
		fmt.Fprintf(w, " to %s", Escape(strings.Join(it.To, ", "), ""))
	}
	if it.Context != "" {
		fmt.Fprintf(w, " context %s", Escape(it.Context, ""))
	}
	fmt.Fprintln(w)
	if raw, ok := it.Envelope.(json.RawMessage); ok {
		var env struct {
			Payload json.RawMessage `json:"payload"`
		}
		if json.Unmarshal(raw, &env) == nil && len(env.Payload) > 0 {
			fmt.Fprintf(w, "  %s\n", EscapeJSON(env.Payload, "  "))
		}
	}
}

// SearchHits writes search hits, newest first, each with its snippet.
func SearchHits(w io.Writer, hits []node.SearchHit) {
	for _, h := range hits {
		m := h.Message
		state := ""
		if h.Acked {
			state = " (acknowledged)"
		}
		fmt.Fprintf(w, "#%d %s %s from %s id %s%s\n  %s\n", m.Seq, m.Received.Local().Format(time.RFC3339),
			Escape(m.Kind, ""), Escape(m.Peer, ""), m.ID, state, Escape(h.Snippet, "  "))
	}
}

// Released writes what releasing peer (as given: a name, key or UUID)
// from the loop guard did, from the guard's states before and after: the
// peer released is the one whose state was dropped.
func Released(w io.Writer, asJSON bool, peer string, before, after []node.LoopGuardState) error {
	var was *node.LoopGuardState
	for i, g := range before {
		if !slices.ContainsFunc(after, func(a node.LoopGuardState) bool { return a.PubKey == g.PubKey }) {
			was = &before[i]
		}
	}
	if asJSON {
		return PrintJSON(w, map[string]any{"peer": peer, "released": was != nil && was.Held})
	}
	if was != nil {
		peer = cmp.Or(was.Peer, peer) // the trusted name, not the reference as typed
	}
	if was != nil && was.Held {
		_, err := fmt.Fprintf(w, "released %s: sends to it go again (it was held until %s); its count starts again\n", Line(peer), Time(was.HeldUntil))
		return err
	}
	_, err := fmt.Fprintf(w, "%s was not held; its count starts again\n", Line(peer))
	return err
}

// Cancelled writes what cancelling a request did.
func Cancelled(w io.Writer, c node.Cancelled) {
	who := Who(c.Request.Peer, c.Request.PubKey)
	if c.Withdrawn || c.Cancel == nil {
		fmt.Fprintf(w, "%s cancelled before it was delivered: a dead letter now; %s never got it, so nothing was sent\n", c.Request.ID, who)
		return
	}
	fmt.Fprintf(w, "%s cancelled; %s told (cancel %s, %s)\n", c.Request.ID, who, c.Cancel.ID, c.Cancel.Delivery)
}

// OwnCard writes this node's card, saying so when it is the default one
// (no card file yet).
func OwnCard(w io.Writer, o node.OwnCard) {
	Card(w, o.CardInfo)
	if o.Default {
		fmt.Fprintf(w, "(the default card: %s does not exist; meerkatd card edit creates it)\n", o.Path)
	}
}

// PeerCard writes a peer's verified card and whose it is.
func PeerCard(w io.Writer, pc node.PeerCard) {
	Card(w, pc.CardInfo)
	fmt.Fprintf(w, "peer:         %s\nverified:     signed by the peer's key, fetched %s\n", pc.Peer, Time(&pc.FetchedAt))
}

// Card writes an agent card.
func Card(w io.Writer, c node.CardInfo) {
	fmt.Fprintf(w, "name:         %s\n", Escape(c.Name, ""))
	if c.Description != "" {
		fmt.Fprintf(w, "description:  %s\n", Escape(c.Description, "              "))
	}
	if c.Contact != "" {
		fmt.Fprintf(w, "contact:      %s\n", Escape(c.Contact, ""))
	}
	fmt.Fprintf(w, "pubkey:       %s\n", c.PubKey)
	if len(c.Intents) == 0 {
		fmt.Fprintln(w, "intents:      (none)")
	} else {
		fmt.Fprintln(w, "intents:")
	}
	for _, in := range c.Intents {
		line := "  " + Escape(in.Name, "")
		if in.Description != "" {
			line += "  " + Escape(in.Description, "    ")
		}
		fmt.Fprintln(w, line)
		if in.ParamsSchema != nil {
			fmt.Fprintf(w, "    params: %s\n", EscapeJSON(in.ParamsSchema, "    "))
		}
	}
}

// cardColumn is what the peers table shows of a peer's card.
func cardColumn(c *node.CardSummary) string {
	if c == nil {
		return "-"
	}
	s := Escape(c.Name, "")
	if len(c.Intents) > 0 {
		s += " (" + Escape(strings.Join(c.Intents, ","), "") + ")"
	}
	return s
}

// PrintJSON writes v to w as indented JSON, HTML characters unescaped:
// what a command prints with --json.
func PrintJSON(w io.Writer, v any) error {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetIndent("", "  ")
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return err
	}
	_, err := w.Write(escapeFormat(b.Bytes()))
	return err
}

// escapeFormat escapes, as \uXXXX, the invisible formatting characters
// (Unicode's Cf: bidirectional overrides, zero-width marks; ZWJ, which
// joins emoji, is left) in JSON text js, which the JSON encoder leaves
// raw, so that a peer's text cannot reorder what a terminal shows. They
// can only stand inside strings, where the escape means the same text.
func escapeFormat(js []byte) []byte {
	if !hasFormat(js) {
		return js
	}
	out := make([]byte, 0, len(js)+32)
	for i := 0; i < len(js); {
		r, size := utf8.DecodeRune(js[i:])
		if termtext.Invisible(r) {
			for _, u := range utf16.Encode([]rune{r}) {
				out = fmt.Appendf(out, `\u%04x`, u)
			}
		} else {
			out = append(out, js[i:i+size]...)
		}
		i += size
	}
	return out
}

func hasFormat(js []byte) bool {
	for _, r := range string(js) {
		if r >= 0x80 && termtext.Invisible(r) {
			return true
		}
	}
	return false
}

// List prints items to out: as JSON (none as []) with asJSON, else as
// text, or with none on errOut when there are no items.
func List[T any](out, errOut io.Writer, asJSON bool, items []T, none string, text func(io.Writer, []T) error) error {
	if asJSON {
		if items == nil {
			items = []T{}
		}
		return PrintJSON(out, items)
	}
	if len(items) == 0 {
		fmt.Fprintln(errOut, none)
		return nil
	}
	return text(out, items)
}

// WithError returns result v (which must marshal to a JSON object) with
// an "error" member, e: the outcome of a call that failed after it had a
// result. ok is false when v is not an object.
func WithError(v any, e map[string]string) (out any, ok bool) {
	var fields map[string]json.RawMessage
	if b, err := json.Marshal(v); err != nil || json.Unmarshal(b, &fields) != nil || fields == nil {
		return nil, false
	}
	fields["error"], _ = json.Marshal(e) // strings only: cannot fail
	return fields, true
}

// UnknownSubcommand is the message for sub, which is not one of subs, the
// subcommands of the command cmd: `unknown peers subcommand "x" (want
// list, add, remove or discover)`, or, when cmd has none, that it has
// none.
func UnknownSubcommand(cmd, sub string, subs []string) string {
	if len(subs) == 0 {
		return fmt.Sprintf("%s has no subcommands, got %q", cmd, sub)
	}
	want := subs[len(subs)-1]
	if len(subs) > 1 {
		want = strings.Join(subs[:len(subs)-1], ", ") + " or " + want
	}
	return fmt.Sprintf("unknown %s subcommand %q (want %s)", cmd, sub, want)
}
