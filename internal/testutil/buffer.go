package testutil

import (
	"bytes"
	"sync"
)

// SyncBuffer is a bytes.Buffer that a writer (a logger, a child process's
// stderr) and readers in other goroutines may use at once. Its zero value
// is an empty buffer.
type SyncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

// Write appends p.
func (s *SyncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

// String returns what was written so far.
func (s *SyncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}
