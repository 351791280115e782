// Package config reads a node's settings: the TOML file <home>/meerkat.toml,
// then MEERKAT_* environment variables, on top of built-in defaults.
//
// # Precedence
//
// Defaults < file < environment < flags. The caller composes the layers:
//
//	cfg, err := config.LoadOrDefault(filepath.Join(home, config.FileName))
//	err = cfg.ApplyEnv(os.LookupEnv)
//	// apply command-line flags: assign fields, or cfg.Set("comms.listen_tcp", v)
//	err = cfg.Validate()
//	listen, err := cfg.Resolve(home)
//
// [Keys] lists every key with its environment variable, default and
// meaning; the environment layer, [Config.Set], [Marshal] and
// docs/config.md are all driven by that one table.
//
// # Strictness
//
// Unknown keys (including keys that differ from a known one only in case)
// are errors naming the key path, with a suggestion for near misses. TOML
// syntax and type errors keep the line number the TOML decoder reports.
// [Config.Validate] reports every problem at once, each as an [*Error]
// naming its key.
//
// # What it is not
//
// The package never reads the environment, flags or the home directory by
// itself: [Config.ApplyEnv] takes a lookup function (os.LookupEnv in
// cmd/meerkatd) and [Config.Resolve] takes the home directory. It does not
// write files either: [Marshal] returns bytes, and cmd/meerkatd writes them.
//
// # Concurrency
//
// A [Config] is a plain value: copy it freely; do not mutate one from
// several goroutines. Copies share the nats.servers list: replace it
// rather than change its items in place. Compare Configs with
// [Config.Equal] (the list makes == unusable). The package's functions are safe for concurrent use
// and the package holds no mutable state.
package config
