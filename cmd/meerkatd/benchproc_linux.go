package main

import "syscall"

// benchSysProcAttr makes a bench child die with the bench process.
func benchSysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
