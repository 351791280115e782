// Package trust holds the list of trusted peers: who may send to this node,
// under which name, and where to reach them. It loads, validates, saves and
// watches trusted_peers.json.
//
// # File format
//
// The trust file is a JSON object with one array:
//
//	{
//	  "peers": [
//	    {"name": "bob", "pubkey": "ed25519:…", "addr": "uds:///tmp/bob.sock"},
//	    {"name": "db-01", "pubkey": "ed25519:…", "addr": "tcp://10.0.0.7:4200", "meta": {"team": "ops"}},
//	    {"name": "edge-7", "pubkey": "ed25519:…", "addr": "nats:"},
//	    {"name": "web-2", "pubkey": "ed25519:…", "addr": "tls://10.0.0.9:4200", "nats": true}
//	  ]
//	}
//
// Each row has a name, a pubkey in the canonical form of identity.ParsePeerID
// ("ed25519:" + 44 characters of padded base64, nothing else), an addr that
// transport.ParseAddr accepts (uds:// with an absolute path,
// tcp://host[:port], tls://host[:port], or nats: for a peer reached through
// the node's NATS connection), optionally "nats": true for a peer with a
// direct address that is also reachable through NATS, and optionally
// meta, a JSON object meerkatd keeps but does not interpret. Anything else is an error: unknown or repeated
// fields, fields of the wrong JSON type, unknown top-level fields, trailing
// data, invalid UTF-8, files over [MaxFileSize].
//
// # Names
//
// A name is 1 to 64 ASCII letters, digits, '.', '_' or '-', starting with a
// letter or digit: [A-Za-z0-9][A-Za-z0-9._-]{0,63}. So names need no
// quoting on a command line or in a log line, cannot look like a flag, and
// cannot hide control characters or trailing spaces. Names are unique
// ignoring case, so "Bob" and "bob" cannot both be listed, but they match
// exactly: [List.ByName]("BOB") does not find "Bob". Keys are unique too.
//
// # Errors
//
// [Parse] and [Load] report every bad row at once (up to 20, then a count),
// joined with errors.Join. Each is a [*RowError] naming the file, the row's
// index and name, and the field:
//
//	trust: trusted_peers.json: peers[2] ("bob"): pubkey: identity: key string must start with "ed25519:"
//
// and wrapping a sentinel of this package ([ErrBadName], [ErrDuplicateKey],
// …) or of identity or transport. Errors quote names and addresses but
// never hold more key material than public keys.
//
// # Snapshots and files
//
// A [List] is immutable: [List.With] and [List.Without] return new lists,
// and Lookup, ByName and Peers return copies. A nil *List is a valid empty
// list. [List.Save] writes atomically with mode 0600; [Load] refuses files
// that group or others can write. [LoadOrEmpty] treats a missing file as
// an empty list.
//
// A [Watcher] polls the file and hands each new valid list (or the error
// that keeps the old one in force) to a callback; [Watcher.Reload] forces
// a read, for SIGHUP.
//
// # What it is not
//
// trust does not authenticate anyone: it answers "is this key listed, and
// as whom", and comms does the signature checks. It knows nothing about
// connections or envelopes, and it never reads the environment or flags.
//
// # Concurrency
//
// A *List is safe for concurrent use; swap snapshots with an
// atomic.Pointer. A Watcher's Reload is safe for concurrent use and its Run
// owns all its state; Run starts no goroutines of its own.
package trust
