package main

import (
	"os"
	"strings"
)

// childEnv is the environment for a meerkatd child process of the tests:
// this process's, without MEERKAT_* settings that would change its
// configuration, and with GORACE atexit_sleep_ms=0 (a race-built child
// would otherwise sleep a second at every exit). Package bench has its own
// for the processes of a bench run.
func childEnv() []string {
	var env []string
	gorace := "atexit_sleep_ms=0"
	for _, kv := range os.Environ() {
		switch {
		case strings.HasPrefix(kv, "MEERKAT_"):
		case strings.HasPrefix(kv, "GORACE="):
			gorace = strings.TrimPrefix(kv, "GORACE=") + " " + gorace
		default:
			env = append(env, kv)
		}
	}
	return append(env, "GORACE="+gorace)
}
