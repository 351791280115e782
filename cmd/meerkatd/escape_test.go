package main

import (
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/meerkatd/meerkatd/comms/node"
	"github.com/meerkatd/meerkatd/identity"
	"github.com/meerkatd/meerkatd/inbox/store"
	"github.com/meerkatd/meerkatd/transport"
	"github.com/meerkatd/meerkatd/trust"
)

// A peer's address (pairing takes it from the other node, a line pasted
// by the user) and the errors that quote it or a peer's refusal are text
// from peers: peers list, outbox, status, deadletters, the queued notice
// of send and the error line show their control characters escaped.
func TestTablesAndErrorsEscapePeerText(t *testing.T) {
	t.Parallel()
	home := t.TempDir()
	if code, _, errOut := run(t, nil, "init", "--home", home); code != exitOK {
		t.Fatalf("init: %s", errOut)
	}
	evil, err := identity.GenerateKeypair()
	if err != nil {
		t.Fatal(err)
	}
	// A directory that does not exist: every dial fails at once, with
	// the path in the error.
	path := "/nonexistent-meerkat/x\x1b[2J\x1b]0;pwned\x07\u202e.sock"
	l, err := trust.New(trust.Peer{Name: "evil", ID: evil.ID(), Addr: transport.Addr{Scheme: transport.SchemeUDS, Path: path}})
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Save(filepath.Join(home, trust.FileName)); err != nil {
		t.Fatal(err)
	}
	clean := func(what, out string) {
		t.Helper()
		for _, raw := range []string{"\x1b", "\x07", "\u202e"} {
			if strings.Contains(out, raw) {
				t.Errorf("%s printed a raw %q:\n%s", what, raw, out)
			}
		}
	}

	code, out, errOut := run(t, nil, "peers", "list", "--home", home)
	if code != exitOK || !strings.Contains(out, `\x1b[2J`) {
		t.Fatalf("peers list: exit %d\n%s%s", code, out, errOut)
	}
	clean("peers list", out)

	code, _, errOut = run(t, nil, "send", "message", "evil", "hi", "--home", home)
	if code != exitPeerOffline || !strings.Contains(errOut, `\x1b[2J`) {
		t.Fatalf("send to an unreachable peer: exit %d\n%s", code, errOut)
	}
	clean("the error line", errOut)

	code, out, errOut = run(t, nil, "send", "message", "evil", "hi", "--reliable", "--home", home)
	if code != exitOK || !strings.Contains(errOut, "last attempt") {
		t.Fatalf("reliable send: exit %d\n%s%s", code, out, errOut)
	}
	clean("the queued notice", errOut)
	id, err := identity.ParseUUID(strings.TrimSpace(out))
	if err != nil {
		t.Fatalf("reliable send printed %q: %v", out, err)
	}

	code, out, errOut = run(t, nil, "outbox", "--home", home)
	if code != exitOK || !strings.Contains(out, `\x1b[2J`) {
		t.Fatalf("outbox: exit %d\n%s%s", code, out, errOut)
	}
	clean("outbox", out)
	code, out, errOut = run(t, nil, "status", "--home", home)
	if code != exitNoDaemon || !strings.Contains(out, "last error") {
		t.Fatalf("status: exit %d\n%s%s", code, out, errOut)
	}
	clean("status", out)

	// A dead letter whose reason quotes the peer.
	st, err := store.Open(filepath.Join(home, node.DBFileName), store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if err := st.Outbox().Kill(id, "rejected: refused by \x1b[2Jevil", time.Now()); err != nil {
		t.Fatal(err)
	}
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}
	code, out, errOut = run(t, nil, "deadletters", "--home", home)
	if code != exitOK || !strings.Contains(out, `\x1b[2Jevil`) {
		t.Fatalf("deadletters: exit %d\n%s%s", code, out, errOut)
	}
	clean("deadletters", out)
}
