// Package atomicfile replaces files so that a reader, or a machine that
// crashes, sees either the old content or the new content, never a mix and
// never an empty or truncated file. It is the one writer of the project's
// private files: identity keys, the trust list, the runtime announcements.
//
// # Contract
//
// [WriteFile] writes data to a new temporary file in the directory of path,
// syncs it, renames it over path and syncs the directory:
//
//   - The temporary file is created with O_EXCL, under a random name
//     beginning "." + the base name of path + ".tmp", and with mode perm from
//     the start. A file written with 0600 is never readable by anyone else,
//     not even for a moment. The umask can only narrow the mode at creation;
//     WriteFile then widens it back to exactly perm while the file is still
//     empty, so the result always has mode perm, whatever the umask.
//   - path is replaced by rename, never written in place: a reader that
//     opened the old file keeps reading the old content.
//   - If WriteFile fails before the rename, path is untouched and the
//     temporary file is removed.
//   - Only the directory sync comes after the rename. If it fails, path
//     already holds data but the replacement may not survive a crash, and
//     WriteFile reports the error. Filesystems that cannot sync a directory
//     at all (EINVAL, ENOTSUP) are not an error.
//
// The directory must exist; WriteFile does not create it. Symbolic links at
// path are replaced, not followed.
//
// # What it is not
//
// WriteFile is not a lock: when several writers replace the same path at
// once, each rename is atomic and the last one wins, but a read-modify-write
// cycle needs its own lock (as trust.Update takes). It does not append, and
// it keeps no backup of the old content.
//
// # Concurrency
//
// WriteFile is safe for concurrent use, on the same path or on different
// paths.
package atomicfile
