// Package filemode refuses the files and directories a node must not
// trust, in the manner of sshd's StrictModes: whoever can write a node's
// trust file, key, configuration, rosters or database decides whom the
// node trusts and what it holds, so each of them must belong to the user
// running the node and be writable by nobody else.
//
// # Rules
//
// A file passes [Checker.File] if it is a regular file (not a symbolic
// link, FIFO, device or directory), is owned by [Checker.UID], and group
// and others may not write it (mode & 0o022 == 0). Reading by others is
// the caller's business: a seed file has its own stricter rule, and a
// database the node opens is narrowed to 0600 with [Tighten].
//
// A directory passes [Checker.Dir] if it is owned by Checker.UID and group
// and others may not write it, and if every directory above it (after
// resolving symbolic links) is owned by Checker.UID or root and is
// writable by group or others only with the sticky bit set (as /tmp is):
// otherwise another user could rename the home away and put their own in
// its place.
//
// Errors are [*Error]s matching [ErrUnsafe]; they name the path and end
// with the command that fixes the problem ("fix with: chmod 600 PATH").
//
// # What it is not
//
// It does not read files or hold them open: a check and the open that
// follows are two steps, so callers that open a file check the opened
// file again with [Checker.FileInfo]. On systems without Unix ownership
// and permission bits (Windows) every check passes.
//
// # Concurrency
//
// A Checker is a plain value; its methods are safe for concurrent use.
package filemode
