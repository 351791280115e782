package testutil

import (
	"net"
	"sync"
)

// WriteHolder is a connection whose writes can be held and then sent in
// one write, so that what a TLS connection writes as several records
// arrives together.
type WriteHolder struct {
	net.Conn
	mu   sync.Mutex
	hold bool
	held []byte
}

// Hold makes later writes wait, in order, for Release.
func (w *WriteHolder) Hold() {
	w.mu.Lock()
	w.hold = true
	w.mu.Unlock()
}

// Release writes what was held in one write; later writes go straight
// through.
func (w *WriteHolder) Release() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.hold = false
	if len(w.held) == 0 {
		return nil
	}
	_, err := w.Conn.Write(w.held)
	w.held = nil
	return err
}

func (w *WriteHolder) Write(b []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.hold {
		w.held = append(w.held, b...)
		return len(b), nil
	}
	return w.Conn.Write(b)
}
