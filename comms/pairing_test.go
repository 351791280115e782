package comms

import (
	"bufio"
	"io"
	"net"
	"testing"
	"time"

	"github.com/meerkatd/meerkatd/internal/testutil"
)

// A connection that starts with PairingByte goes to Options.Pairing with
// nothing lost; envelope frames on other connections are unaffected.
func TestPairingConnectionsAreHandedOver(t *testing.T) {
	testutil.CheckGoroutines(t)
	got := make(chan string, 1)
	a, b := pair(t, "uds", Options{Pairing: func(c net.Conn, r io.Reader) {
		line, _ := bufio.NewReader(r).ReadString('\n')
		c.Write([]byte("hello pairing\n"))
		got <- line
	}})
	c, err := net.Dial("unix", b.addr.Path)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := c.Write([]byte("MKPAIR/1\n")); err != nil {
		t.Fatal(err)
	}
	reply, err := bufio.NewReader(c).ReadString('\n')
	if err != nil || reply != "hello pairing\n" {
		t.Fatalf("reply %q, %v", reply, err)
	}
	if line := <-got; line != "MKPAIR/1\n" {
		t.Fatalf("handler read %q", line)
	}
	if _, err := a.r.SendMessage(ctxT(t), "bob", "still an envelope"); err != nil {
		t.Fatal(err)
	}
	if st := b.r.Stats(); st.Accepted != 1 || len(st.Rejected) != 0 {
		t.Fatalf("stats %+v", st)
	}
}

// Close ends a pairing exchange that set its own, longer deadline.
func TestCloseEndsPairingExchange(t *testing.T) {
	testutil.CheckGoroutines(t)
	started := make(chan struct{})
	ended := make(chan error, 1)
	_, b := pair(t, "uds", Options{Pairing: func(c net.Conn, r io.Reader) {
		c.SetDeadline(time.Now().Add(time.Hour))
		close(started)
		_, err := io.ReadAll(r) // blocks until the deadline or the peer closes
		ended <- err
	}})
	c, err := net.Dial("unix", b.addr.Path)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.Write([]byte("MKPAIR/1\n"))
	<-started
	go b.r.Close() // it waits for the exchange: the select below detects a hang
	select {
	case err := <-ended:
		if err == nil {
			t.Fatal("the exchange ended without an error")
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Close did not end the pairing exchange")
	}
}
