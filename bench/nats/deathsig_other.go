//go:build !linux

package main

import "os/exec"

// setDeathSignal does nothing here: the responder exits when its stdin
// closes, which it does when the requester dies.
func setDeathSignal(*exec.Cmd) {}
