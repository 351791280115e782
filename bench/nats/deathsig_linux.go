package main

import (
	"os/exec"
	"syscall"
)

// setDeathSignal has the kernel kill the responder if the requester dies
// without stopping it. The responder also exits when its stdin closes.
func setDeathSignal(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
