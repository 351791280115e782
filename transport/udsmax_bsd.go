//go:build darwin || dragonfly || freebsd || netbsd || openbsd

package transport

// MaxUDSPath is the longest Unix socket path the kernel accepts (sun_path
// is 104 bytes on macOS and the BSDs, including the terminating NUL).
const MaxUDSPath = 103
