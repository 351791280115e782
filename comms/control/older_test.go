package control

import (
	"bufio"
	"context"
	"net"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/meerkatd/meerkatd/comms/node"
	"github.com/meerkatd/meerkatd/internal/testutil"
)

// olderDaemon answers every request on a control socket as a node of an
// earlier version answers an operation it does not have, or with reply
// if given; it returns the socket's path.
func olderDaemon(t *testing.T, reply string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "c.sock")
	ln, err := net.Listen("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			br := bufio.NewReader(c)
			if line, err := br.ReadString('\n'); err == nil {
				r := reply
				if r == "" {
					op := strings.SplitN(strings.SplitN(line, `"op":"`, 2)[1], `"`, 2)[0]
					r = `{"ok":false,"code":"bad_argument","error":"unknown control operation \"` + op + `\""}`
				}
				c.Write([]byte(r + "\n"))
			}
			c.Close()
		}
	}()
	t.Cleanup(func() { ln.Close(); <-done })
	return path
}

// Through a node of an earlier version, the calls it lacks fail as
// unavailable, saying so, not as a usage error a script might answer by
// sending again: AwaitResponses (the request went out already), and
// PairCancel (which such a node answers with true).
func TestOlderDaemon(t *testing.T) {
	testutil.CheckGoroutines(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c := NewClient(olderDaemon(t, ""))
	_, err := c.AwaitResponses(ctx, "9bc35376-3f0e-4c4a-9f3c-2e0d7d1b3b11", time.Second, time.Time{})
	if node.CodeOf(err) != node.CodeUnavailable || !strings.Contains(err.Error(), "which was sent") {
		t.Fatalf("AwaitResponses through an older node: %v (code %s)", err, node.CodeOf(err))
	}
	c = NewClient(olderDaemon(t, `{"ok":true,"result":true}`))
	if n, err := c.PairCancel(ctx, ""); node.CodeOf(err) != node.CodeUnavailable || !strings.Contains(err.Error(), "older") {
		t.Fatalf("PairCancel through an older node: %d, %v", n, err)
	}
}
