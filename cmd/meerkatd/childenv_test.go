package main

import "github.com/meerkatd/meerkatd/bench"

// childEnv is the environment for a meerkatd child process of the tests:
// the one the bench gives its children (no MEERKAT_* settings from this
// process, no exit delay in race-built children).
func childEnv() []string { return bench.ChildEnv() }
