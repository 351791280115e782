//go:build !linux

package store

import "os"

// syncData is os.File.Sync (on macOS, F_FULLFSYNC).
func syncData(f *os.File) error { return f.Sync() }
