//go:build !(darwin || dragonfly || freebsd || netbsd || openbsd)

package transport

// MaxUDSPath is the longest Unix socket path the kernel accepts (sun_path
// is 108 bytes on Linux, including the terminating NUL).
const MaxUDSPath = 107
