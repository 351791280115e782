package node

import (
	"strings"
	"testing"
)

// A file that opens but cannot be read is a bad argument too, naming it.
func TestReadInputReadError(t *testing.T) {
	_, err := ReadInput(strings.NewReader(""), "the body", "@/proc/self/mem")
	if CodeOf(err) != CodeBadArgument || !strings.Contains(err.Error(), "/proc/self/mem cannot be read") {
		t.Fatalf("reading /proc/self/mem: %v (%s)", err, CodeOf(err))
	}
}
