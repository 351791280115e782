// Package mcpserver exposes a meerkatd node to LLM clients as an MCP server
// over stdio: tools to send messages, requests and responses, list peers,
// receive and acknowledge mail; resources meerkat://inbox (subscribable)
// and meerkat://peers; and a log notification on each arrival.
//
// # What it is not
//
// mcpserver holds no node state. It declares the small [Node] interface it
// needs; cmd/meerkatd implements it for a node in the same process and for
// a running daemon reached through its control socket. It is the only
// package that imports mcp-go.
//
// # Errors
//
// Failures a model can act on (unknown peer, peer offline, unknown or
// already answered request, body too large, bad status) are tool results
// with isError set and a stable code first ("unknown_peer: …"). Calls whose
// arguments do not fit the schema get the protocol's invalid-params error.
//
// # Concurrency
//
// A Server is safe for concurrent use; a long receive_messages wait does
// not block other tools.
package mcpserver
