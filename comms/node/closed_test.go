package node

import (
	"context"
	"testing"
)

// After Close every operation fails with CodeUnavailable (the package
// doc's promise) instead of touching the closed outbox, store or
// pairing responder; none panics.
func TestCallsAfterClose(t *testing.T) {
	h, _ := testHome(t, "alice", nil) // the SQLite inbox and outbox
	n, err := Start(h, Options{Mode: ModeServe})
	if err != nil {
		t.Fatal(err)
	}
	n.Close()
	ctx := context.Background()
	calls := map[string]func() error{
		"Status":      func() error { _, err := n.Status(ctx); return err },
		"Peers":       func() error { _, err := n.Peers(ctx); return err },
		"SendMessage": func() error { _, err := n.SendMessage(ctx, "bob", "x", SendOptions{}); return err },
		"SendRequest": func() error { _, err := n.SendRequest(ctx, "bob", "x", nil, SendOptions{}); return err },
		"SendResponse": func() error {
			_, err := n.SendResponse(ctx, "bob", "00000000-0000-0000-0000-000000000001", "completed", nil, SendOptions{})
			return err
		},
		"Receive":          func() error { _, err := n.Receive(ctx, Query{}); return err },
		"Ack":              func() error { _, err := n.Ack(ctx, AckRequest{UpTo: 5}); return err },
		"Outbox":           func() error { _, err := n.Outbox(ctx); return err },
		"DeadLetters":      func() error { _, err := n.DeadLetters(ctx); return err },
		"RetryDeadLetters": func() error { _, err := n.RetryDeadLetters(ctx, nil, true); return err },
		"DropDeadLetters":  func() error { _, err := n.DropDeadLetters(ctx, nil, true); return err },
		"PairOffer":        func() error { _, err := n.PairOffer(ctx, PairOptions{}); return err },
		"PairWait":         func() error { _, err := n.PairWait(ctx, "x"); return err },
		"PairAccept":       func() error { _, err := n.PairAccept(ctx, "meerkat-pair/1 x y", ""); return err },
		"CancelRequest": func() error {
			_, err := n.CancelRequest(ctx, "00000000-0000-0000-0000-000000000001", "", SendOptions{})
			return err
		},
		"Requests": func() error { _, err := n.Requests(ctx, RequestQuery{}); return err },
	}
	for name, f := range calls {
		if err := f(); CodeOf(err) != CodeUnavailable {
			t.Errorf("%s after Close: %v (code %s), want %s", name, err, CodeOf(err), CodeUnavailable)
		}
	}
	n.PairCancel(ctx, "x")
	if _, err := n.Self(ctx); err != nil {
		t.Errorf("Self after Close: %v", err)
	}
}
