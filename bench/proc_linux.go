package bench

import "syscall"

// sysProcAttr makes a bench child die with the bench process.
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
