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
package space
