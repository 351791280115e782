package inbox

import "testing"

// Last is the newest sequence number handed out, acknowledged or not.
func TestMailboxLast(t *testing.T) {
	m := NewMailbox[string](2)
	if got := m.Last(); got != 0 {
		t.Fatalf("empty: Last = %d", got)
	}
	for _, s := range []string{"a", "b"} {
		if err := m.Push(s); err != nil {
			t.Fatal(err)
		}
	}
	if err := m.Push("c"); err == nil {
		t.Fatal("a push into a full mailbox was stored")
	}
	if got := m.Last(); got != 2 {
		t.Fatalf("after two pushes and a refused one: Last = %d", got)
	}
	m.Ack(2)
	if got := m.Last(); got != 2 {
		t.Fatalf("after acking the newest: Last = %d", got)
	}
}
