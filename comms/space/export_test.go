package space

// TrackedBytes is the payload bytes of the proposals the engine holds in
// memory for space (for tests of its bounds).
func (e *Engine) TrackedBytes(space string) int {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.proposalsLocked(space).bytes
}
