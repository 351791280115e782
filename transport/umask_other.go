//go:build !unix

package transport

// withPrivateUmask runs f: this system has no umask (its Unix sockets
// take the directory's access control).
func withPrivateUmask(f func() error) error { return f() }
