// Package control is the control socket of a meerkatd node: the protocol
// the CLI and an attached meerkatd mcp use to reach the node a daemon runs.
//
// [Serve] answers requests on a listener with a [node.API] (the daemon's
// node); [Client] implements node.API by sending each call over the
// socket, so a face written against node.API works the same in the
// daemon's process and outside it.
//
// # Protocol
//
// One JSON [Request] per line ({"op": …, "args": {…}}), answered by one
// JSON [Response] per line ({"ok": …, "code": …, "error": …, "result":
// …}). Each API method is one op with one argument shape (the *Args types)
// and returns the method's result type; errors carry the node.Code…
// values. A connection carries one request at a time; a client that
// closes the connection (or its write side) before the reply cancels the
// call.
//
// # Security
//
// Only the node's own user may use the socket. The socket file is created
// mode 0600 (transport.Listen); the server also checks each connecting
// process's user id with the kernel (SO_PEERCRED, LOCAL_PEERCRED) and
// refuses others; the client checks that the socket file belongs to its
// own user before it sends anything. Requests are bounded ([MaxRequest]),
// as are concurrent connections ([Options].MaxConns) and replies
// ([MaxReply]); listings are paged by the API itself.
//
// # Serving a home
//
// [ServeHome] runs a home's node with its control socket in this process
// (the daemon, or meerkatd mcp with no daemon). Exactly one process serves
// a home: the one holding the lock on the home directory (flock(2)), which
// it takes before it touches the sockets and lets go only once its node
// has stopped. A [Session] attaches to whoever serves the home or serves
// it itself, and takes over when that process goes away.
//
// # Concurrency
//
// Serve handles connections concurrently and returns once they have all
// ended. A Client is safe for concurrent use: each call uses its own
// connection, so a long wait does not hold up other calls, and a call
// made after the daemon restarted simply reaches the new one.
package control
