// Package mcpserver exposes a meerkatd node to LLM clients as an MCP server
// over stdio: tools to show the node's status, send messages, requests
// and responses (reliably by default: stored in the node's outbox and
// retried), list peers, receive and acknowledge mail, list the outbox and
// dead letters and retry them;
// resources meerkat://inbox (subscribable) and meerkat://peers; and
// notifications of arrivals.
//
// # Protocol revisions
//
// A Server speaks MCP 2025-11-25 (and earlier: the initialize handshake,
// resources/subscribe, a log event per arrival) and 2026-07-28 (stateless:
// server/discover, updates only on a subscriptions/listen stream, no log
// events) to whichever client connects; era.go says who is told what.
//
// # What it is not
//
// mcpserver holds no node state: it is an adapter over node.API, the one
// API of a node (comms/node), which is a node in the same process or a
// running daemon reached through its control socket (comms/control). Every
// check of an operation happens in the node; the tools only parse
// arguments and format results: a tool's result holds the API result's
// fields as they are (what `meerkatd … --json` prints), plus pending, and
// its error codes are the API's. It is the only package that imports
// mcp-go.
//
// # Errors
//
// Failures a model can act on (unknown peer, peer offline, unknown or
// already answered request, body too large, bad status, outbox full) are
// tool results with isError set and a stable code first ("unknown_peer:
// …"). A reliable send whose first attempt fails is not an error: its
// result says delivery "queued". Calls whose arguments the tool refuses
// (missing, of the wrong type, out of range, unknown) are tool errors
// too, bad_argument; only a request whose arguments are not an object
// gets the protocol's invalid-params error.
//
// # Concurrency
//
// A Server is safe for concurrent use; a long receive_messages wait does
// not block other tools.
package mcpserver
