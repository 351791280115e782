// Package node is the assembled meerkatd node and its one API.
//
// A [Node] puts together what a running node needs: the comms Router, the
// inbox it admits into (memory or the home's SQLite store), the record of
// requests received (so a response must answer one), the send policy
// (direct, or reliable through the outbox), the audit log, the trust-file
// watcher, pairing and local discovery. [Start] builds one from an opened
// [Home]; [Node.Close] stops it.
//
// [API] is the one interface every face of the node speaks: the CLI (on a
// node in its own process, or through the control socket), the control
// socket's server and client, and the MCP tools. It has one set of result
// types and one error type, [*Error], whose codes are stable strings.
// Every check of an operation happens here, once.
//
// This package is not the wire protocol (package comms and comms/wire),
// not the control socket (comms/control) and not MCP (mcpserver); it does
// not read flags or the environment: the caller hands it the values.
//
// # Concurrency
//
// A Node's methods are safe for concurrent use. Sends may run in
// parallel; Receive may wait (up to [MaxWait]) while other calls proceed;
// Close may be called at any time, more than once: it stops the outbox,
// the Router and the listeners and waits for the node's goroutines, and
// calls made after it return an error with CodeUnavailable instead of
// touching closed resources. A Home is immutable once opened.
package node
