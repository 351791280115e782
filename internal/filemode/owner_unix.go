//go:build unix

package filemode

import (
	"io/fs"
	"syscall"
)

// hasPermBits: Unix permission bits mean what they say.
const hasPermBits = true

// ownerOf returns the uid that owns fi's file.
func ownerOf(fi fs.FileInfo) (int, bool) {
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return 0, false
	}
	return int(st.Uid), true
}
