//go:build !linux

package main

import "syscall"

// benchSysProcAttr: only Linux can tie a child's life to its parent's;
// elsewhere the bench kills its children on every exit path it controls.
func benchSysProcAttr() *syscall.SysProcAttr { return nil }
