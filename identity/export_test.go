package identity

// CachedKeys is how many expanded keys v holds.
func CachedKeys(v *Verifier) int {
	v.mu.RLock()
	defer v.mu.RUnlock()
	return len(v.keys)
}
