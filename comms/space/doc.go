// Package space is the MEUP space engine: the rosters of the spaces this
// node takes part in, the enforcement every received MEUP envelope passes
// (membership, the sender's participant id bound to its key, reserved
// system kinds, capabilities as this node holds them, proposal and grant
// rules, dedup), grants and revokes, proposals and their states, presence,
// and the system/error answers to refused envelopes.
//
// It declares what it needs from the node as interfaces: a [Store] for
// grants, proposals and seen ids ([MemStore] here, the SQLite store in the
// daemon) and a [Sender] that delivers one MEUP envelope to one member
// over a signed link. It does not seal, dial or store inbox items itself.
//
// # Members
//
// A roster ([Roster], spaces.json) binds each member's key to a
// participant id and the capabilities this node enforces for it. The
// member whose key is [Options.Self] is this node; a space without it is
// not active here. A member is active while its key is trusted
// ([Options.Trusted]); until then it is pending: it gets no copies and
// its envelopes are refused. Invites add pending members; nothing in a
// space makes a key trusted.
//
// # Own envelopes
//
// [Engine.Send] checks what it sends as a receiver would (this node's own
// capabilities included) and applies it to its own state by the same
// rules: a grant it sends is enforced here too, a proposal it
// sends is tracked, a kick or invite changes its roster. What breaks a
// rule here is sent anyway ([Sent].NotApplied says which), unless the
// draft is strict ([Draft].Strict) and every member's node would refuse
// it too: then nothing is sent ([RuleError]).
//
// # Concurrency
//
// An [Engine] is safe for concurrent use. One mutex guards its state; it
// is never held while the [Sender] or [Options.Observe] is called, so
// both may call the engine. [Options.SaveRoster], the [Store] and the
// functions given to [Engine.UpdateRoster] and [Engine.ReloadRoster] are
// called with it held and must not call the engine. The engine starts no
// goroutine that outlives a call: [Engine.Send] and [Engine.Announce]
// wait for the copies they send.
package space
