package nodetext

import (
	"encoding/json"
	"fmt"
	"io"
	"slices"

	"github.com/meerkatd/meerkatd/comms/node"
)

// Space writes a space and its members. A space whose roster does not
// hold this node's key says so: this node neither sends nor receives in
// it.
func Space(w io.Writer, s node.SpaceInfo) error {
	you := "you are " + Escape(s.Self, "")
	if s.Self == "" {
		you = "you are not a member"
	}
	if s.Delivery != "" {
		you += ", delivery " + Escape(s.Delivery, "")
	}
	fmt.Fprintf(w, "space %s (%s, %d pending proposals)\n", Escape(s.Name, ""), you, s.Pending)
	return Table(w, "  ID\tSTATUS\tPRESENCE\tCAPABILITIES\tKEY", s.Members, func(m node.SpaceMember) []any {
		caps, _ := json.Marshal(m.Capabilities)
		if len(m.Granted) > 0 {
			g, _ := json.Marshal(m.Granted)
			caps = append(caps, []byte(" + granted "+string(g))...)
		}
		id := m.ID
		if m.Self {
			id += " (you)"
		}
		status := m.Status
		if m.Note != "" {
			status += ": " + m.Note
		}
		return []any{"  " + Escape(id, ""), Line(status), m.Presence, Line(string(caps)), m.Key}
	})
}

// Proposals writes proposals of spaces and their states.
func Proposals(w io.Writer, ps []node.Proposal) error {
	return Table(w, "SPACE\tID\tPROPOSER\tSTATE\tBY\tCALL", ps, func(p node.Proposal) []any {
		state := p.State
		if p.Reason != "" {
			state += " (" + p.Reason + ")"
		}
		return []any{Escape(p.Space, ""), Escape(p.ID, ""), Escape(p.Proposer, ""), Line(state), Escape(p.By, ""), Line(string(p.Payload))}
	})
}

// SpaceSent writes where each copy of an envelope of a space went.
//
// To errw it writes what the copies do not show: that nothing was sent
// (no other active member, or every member skipped), or that the send
// breaks a rule of the space here.
func SpaceSent(w, errw io.Writer, sent node.SpaceSent) {
	defer func() {
		if len(sent.Copies) == 0 {
			fmt.Fprintln(errw, "no other active member in the space: nothing was sent")
		} else if !slices.ContainsFunc(sent.Copies, func(c node.SpaceCopy) bool { return c.Skipped == "" }) {
			fmt.Fprintln(errw, "warning: every member was skipped (see each copy above): nothing was sent")
		}
		if sent.NotApplied != "" {
			fmt.Fprintf(errw, "warning: it breaks a rule of the space here (%s): it changed nothing here, and %s\n", Line(sent.NotApplied), sent.NotAppliedEffect())
		}
	}()
	fmt.Fprintf(w, "sent %s %s to space %s\n", Escape(sent.Kind, ""), Escape(sent.ID, ""), Escape(sent.Space, ""))
	for _, c := range sent.Copies {
		how := c.Delivery
		switch {
		case c.Skipped != "":
			how = "skipped: " + c.Skipped
		case how == "" && c.LastError != "":
			how = "not delivered (" + c.LastError + ")" // a direct copy that failed
		case c.LastError != "":
			how += " (" + c.LastError + ")"
		}
		fmt.Fprintf(w, "  %s: %s\n", Escape(c.Participant, ""), Line(how))
	}
}
