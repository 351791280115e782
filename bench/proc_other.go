//go:build !linux

package bench

import "syscall"

// sysProcAttr: only Linux can tie a child's life to its parent's;
// elsewhere the bench kills its children on every exit path it controls.
func sysProcAttr() *syscall.SysProcAttr { return nil }
