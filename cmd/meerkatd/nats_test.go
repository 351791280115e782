package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/meerkatd/meerkatd/comms/node"
	"github.com/meerkatd/meerkatd/comms/wire"
	"github.com/meerkatd/meerkatd/internal/natstest"
)

// Fleets over NATS (docs/nats.md) with real daemons and real nats-server
// instances run in this test process on 127.0.0.1: never a mock. The
// servers run the least-privilege user block of docs/nats.md, one user per
// node, and the daemons connect with those users.

// natsEnv is the environment of the NATS nodes: reliable sends retried
// quickly, and a quick reconnect after a server goes away.
var natsEnv = []string{
	"MEERKAT_OUTBOX_BACKOFF=0s,200ms",
	"MEERKAT_OUTBOX_BREAKER_OPEN_SECS=1",
	"MEERKAT_NATS_RECONNECT_WAIT_MS=100",
	"MEERKAT_NATS_CONNECT_TIMEOUT_MS=2000",
}

// natsPassword is the NATS password of node n's user (named as the node).
func natsPassword(n *testNode) string { return "pw-" + n.name }

// natsConf is a server configuration with one user per node as
// docs/nats.md gives it and an administrative user, in a JetStream
// account.
func natsConf(t *testing.T, nodes ...*testNode) string {
	t.Helper()
	var users []natstest.User
	for _, n := range nodes {
		var id struct {
			PeerUUID string `json:"peer_uuid"`
		}
		n.okJSON(&id, "id", "--json")
		if id.PeerUUID == "" {
			t.Fatalf("id --json of %s has no peer_uuid", n.name)
		}
		users = append(users, natstest.User{Name: n.name, Password: natsPassword(n), PeerUUID: id.PeerUUID})
	}
	return natstest.LeastPrivilege(t, "../../docs/nats.md", users...)
}

// newNATSNode creates a node whose peers will reach it at nats:.
func newNATSNode(t *testing.T, name string) *testNode {
	t.Helper()
	n := newNode(t, name)
	n.addr = "nats:"
	n.env = append(n.env, natsEnv...)
	return n
}

// useNATS writes servers and the node's user into the [nats] table of its
// meerkat.toml; the password comes from the environment, as docs/nats.md
// advises.
func (n *testNode) useNATS(servers []string, jetStream bool) {
	n.t.Helper()
	path := filepath.Join(n.home, "meerkat.toml")
	b, err := os.ReadFile(path)
	if err != nil {
		n.t.Fatal(err)
	}
	quoted := make([]string, len(servers))
	for i, s := range servers {
		quoted[i] = fmt.Sprintf("%q", s)
	}
	conf := string(b)
	for old, repl := range map[string]string{
		"\nservers = []\n":    "\nservers = [" + strings.Join(quoted, ", ") + "]\n",
		"\nuser = \"\"\n":     fmt.Sprintf("\nuser = %q\n", n.name),
		"\njetstream = false": fmt.Sprintf("\njetstream = %v", jetStream),
	} {
		if strings.Count(conf, old) != 1 {
			n.t.Fatalf("%s's meerkat.toml does not have %q once", n.name, old)
		}
		conf = strings.Replace(conf, old, repl, 1)
	}
	if err := os.WriteFile(path, []byte(conf), 0o600); err != nil {
		n.t.Fatal(err)
	}
	n.env = append(n.env, "MEERKAT_NATS_PASSWORD="+natsPassword(n))
}

// natsState is the `nats` object of `status --json`, decoded with this
// file's own field names.
type natsState struct {
	State      string   `json:"state"`
	Server     string   `json:"server"`
	Subject    string   `json:"subject"`
	JetStream  bool     `json:"jetstream"`
	Reconnects uint64   `json:"reconnects"`
	Received   uint64   `json:"received"`
	Refused    uint64   `json:"refused"`
	Stored     uint64   `json:"stored_in_broker"`
	Servers    []string `json:"servers"`
	LastError  string   `json:"last_error"`
}

// natsStatus is what the NATS tests read of `status --json`.
type natsStatus struct {
	NATS   *natsState `json:"nats"`
	Outbox int        `json:"outbox"`
	Inbox  int        `json:"inbox"`
}

func (n *testNode) natsStatus() natsStatus {
	n.t.Helper()
	var s natsStatus
	n.okJSON(&s, "status", "--json")
	if s.NATS == nil {
		n.t.Fatalf("%s's status --json has no nats object", n.name)
	}
	return s
}

// fastStatus reads the daemon's status over its control socket (cheaper
// than a process, for tight polling).
func (n *testNode) fastStatus() node.Status {
	n.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), cmdTimeout)
	defer cancel()
	s, err := n.control().Status(ctx)
	if err != nil {
		n.t.Fatalf("%s's status: %v", n.name, err)
	}
	if s.NATS == nil {
		n.t.Fatalf("%s's status has no NATS connection", n.name)
	}
	return s
}

// waitNATSConnected waits until n's daemon is connected to a server and
// returns its status.
func (n *testNode) waitNATSConnected(t *testing.T) natsState {
	t.Helper()
	var s natsStatus
	waitUntil(t, n.name+" to connect to NATS", func() bool {
		s = n.natsStatus()
		return s.NATS.State == "connected" && s.NATS.Server != ""
	})
	return *s.NATS
}

// waitInboxLen waits up to bound until n's inbox holds want items (more
// fails at once).
func waitInboxLen(t *testing.T, n *testNode, want int, bound time.Duration) {
	t.Helper()
	deadline := time.Now().Add(bound)
	for {
		got := n.fastStatus().Inbox
		if got > want {
			t.Fatalf("%s's inbox holds %d items, want %d", n.name, got, want)
		}
		if got == want {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s's inbox holds %d items after %v, want %d", n.name, got, bound, want)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// A fleet of three daemons on a three-server cluster, each user with the
// least privilege of docs/nats.md: messages between every pair, a request
// and its response, a space broadcast; then a server goes away while 100
// reliable messages stream to a daemon connected to it, which reconnects
// to another server and receives each of them exactly once.
func TestNATSFleet(t *testing.T) {
	t.Parallel()
	alice, bob, carol := newNATSNode(t, "alice"), newNATSNode(t, "bob"), newNATSNode(t, "carol")
	nodes := []*testNode{alice, bob, carol}
	servers := natstest.Cluster(t, 3, natsConf(t, nodes...), false)
	urls := make([]string, len(servers))
	byURL := map[string]*server.Server{}
	for i, s := range servers {
		urls[i] = s.ClientURL()
		byURL[urls[i]] = s
	}
	for i, n := range nodes {
		// Each daemon is given its own server only: it connects there,
		// and learns the cluster's other servers from it to reconnect to.
		n.useNATS([]string{urls[i]}, false)
		for _, o := range nodes {
			if o != n {
				n.trusts(o)
			}
		}
		// Space "build": each holds the roster with itself and the
		// other two.
		n.ok("space", "create", spaceName, "--as", n.name, "--cap", "*")
		for _, o := range nodes {
			if o != n {
				n.ok("space", "add", spaceName, o.name, o.name, "--cap", "chat")
			}
		}
	}
	for _, n := range nodes {
		n.start()
	}
	connected := map[*testNode]string{}
	for i, n := range nodes {
		st := n.waitNATSConnected(t)
		if st.Server != urls[i] || len(st.Servers) != 1 || st.JetStream || st.Refused != 0 ||
			!strings.HasPrefix(st.Subject, "meerkat.node.") {
			t.Fatalf("%s's nats status: %s (servers %v)", n.name, jsonText(st), urls)
		}
		connected[n] = st.Server
		out := n.ok("status")
		line := ""
		for _, l := range strings.Split(out, "\n") {
			if strings.HasPrefix(l, "nats ") {
				line = l
			}
		}
		if !strings.Contains(line, "connected to "+st.Server) || !strings.Contains(line, " as "+st.Subject) {
			t.Fatalf("%s's status has no nats line saying it is connected:\n%s", n.name, out)
		}
	}
	// The presence joins the daemons sent before the others were up are
	// through.
	for _, n := range nodes {
		waitOutboxEmpty(t, n, pollTimeout)
	}

	// Every daemon to every other.
	for _, from := range nodes {
		for _, to := range nodes {
			if from == to {
				continue
			}
			body := fmt.Sprintf("from %s to %s over NATS", from.name, to.name)
			var sent cliSend
			from.okJSON(&sent, "send", "message", to.name, body, "--json")
			if sent.ID == "" || sent.Peer != to.name || sent.Delivery != "acked" {
				t.Fatalf("%s to %s: %s", from.name, to.name, jsonText(sent))
			}
			if _, ok := findItem(to.inbox(), "message", func(it cliItem) bool {
				return it.ID == sent.ID && it.Body == body && it.Peer == from.name && it.From == from.key
			}); !ok {
				t.Fatalf("%s's message %s is not in %s's inbox", from.name, sent.ID, to.name)
			}
		}
	}
	// A request and its response (send request --wait, send response).
	exchange(t, alice, bob)

	// A space broadcast reaches the other two.
	chat := alice.spaceSend("chat", spaceName, "everyone, over NATS")
	chat.wantAcked(t, "bob", "carol")
	for _, n := range []*testNode{bob, carol} {
		got := waitItems(t, n, 1, "chat", withID(chat.ID))
		if got[0].MEUP.Participant != "alice" || !strings.Contains(string(got[0].env.Payload), "everyone, over NATS") {
			t.Fatalf("%s's chat: %s", n.name, jsonText(got[0]))
		}
	}

	// The receiver's server goes away in the middle of a stream of
	// reliable messages from a sender connected to another server.
	recv, send := bob, alice
	const total = 100
	before := recv.fastStatus().Inbox
	start := time.Now()
	confirmed := queueMessages(t, send, recv.name, "s", total/2, 1)
	waitUntil(t, recv.name+" to receive part of the stream", func() bool { return recv.fastStatus().Inbox >= before+10 })
	gone := byURL[connected[recv]]
	gone.Shutdown()
	gone.WaitForShutdown()
	// The second half is sent while the receiver is cut off or just
	// reconnected.
	rest := queueMessages(t, send, recv.name, "t", total/2, 1)
	if len(confirmed) != total/2 || len(rest) != total/2 {
		t.Fatalf("the sender confirmed %d and %d sends, want %d each", len(confirmed), len(rest), total/2)
	}
	for body, id := range rest {
		confirmed[body] = id
	}
	var rst natsState
	waitUntil(t, recv.name+" to reconnect to another server", func() bool {
		rst = *recv.natsStatus().NATS
		return rst.State == "connected" && rst.Reconnects >= 1 && rst.Server != connected[recv]
	})
	if byURL[rst.Server] == nil {
		t.Fatalf("%s reconnected to %s, not one of %v", recv.name, rst.Server, urls)
	}
	if out := recv.ok("status"); !strings.Contains(out, "connected to "+rst.Server) || !strings.Contains(out, fmt.Sprintf(", %d reconnects", rst.Reconnects)) {
		t.Fatalf("%s's status after the reconnect:\n%s", recv.name, out)
	}
	waitInboxLen(t, recv, before+total, 2*time.Minute)
	waitOutboxEmpty(t, send, 2*time.Minute)
	t.Logf("%d reliable messages across the loss of %s's server in %v", total, recv.name, time.Since(start).Round(time.Millisecond))
	// Each streamed body, under the id the sender confirmed, exactly once.
	bodies, byID := inboxBodies(t, recv)
	seen := map[string]int{}
	for _, b := range bodies {
		seen[b]++
	}
	for body, id := range confirmed {
		if seen[body] != 1 || byID[id] != 1 {
			t.Errorf("%s (%s) is in %s's inbox %d times (by id %d), want exactly once", body, id, recv.name, seen[body], byID[id])
		}
	}
	if s := send.natsStatus(); s.Outbox != 0 {
		t.Fatalf("%s's status shows outbox %d after every ack", send.name, s.Outbox)
	}
	if d := deadOf(t, send); len(d) != 0 {
		t.Fatalf("dead letters: %s", jsonText(d))
	}
}

// With JetStream, a recipient that is down while 1,000 reliable messages
// are sent to it receives each exactly once and in order when it comes
// back; the stream holds them sealed; and the sender's outbox empties
// only once the recipient has acknowledged them.
//
// Not parallel: it streams 1,000 sealed messages through one nats-server
// and checks their order. (It once failed now and then: bob's JetStream
// consumer delivered the stored messages before the node could open
// sealed envelopes, the first few were refused and dropped by the broker,
// and their resends were taken for duplicates for the stream's two-minute
// window. TestSealedBeforeSetRelay covers that.)
func TestNATSJetStreamOfflineRecipient(t *testing.T) {
	alice, bob := newNATSNode(t, "alice"), newNATSNode(t, "bob")
	s := natstest.Server(t, "s1", natsConf(t, alice, bob), nil, "", true)
	// The operator creates the stream: the nodes' users may not.
	admin, err := nats.Connect(s.ClientURL(), nats.UserInfo(natstest.Admin, natstest.Admin))
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close()
	js, err := jetstream.New(admin)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	stream, err := js.CreateStream(ctx, jetstream.StreamConfig{
		Name: "MEERKAT", Subjects: []string{"meerkat.node.>"}, Retention: jetstream.WorkQueuePolicy,
		Duplicates: 2 * time.Minute, Storage: jetstream.FileStorage,
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range []*testNode{alice, bob} {
		n.useNATS([]string{s.ClientURL()}, true)
	}
	alice.trusts(bob)
	bob.trusts(alice)

	// bob runs once, so his durable consumer exists, then goes away.
	bob.start()
	bst := bob.waitNATSConnected(t)
	if !bst.JetStream {
		t.Fatalf("bob's nats status: %s", jsonText(bst))
	}
	bob.stop()
	alice.start()
	alice.waitNATSConnected(t)

	const total = 1000
	start := time.Now()
	ids := make([]string, total)
	cc := alice.control()
	// The first send waits for its first attempt, which ends with the
	// envelope stored in the stream: it returns queued, saying so (not
	// after its whole time ran out, with nothing to say).
	first, err := cc.SendMessage(ctx, "bob", "secret-0000", node.SendOptions{Reliable: true})
	if err != nil || first.Delivery != node.DeliveryQueued || !strings.Contains(first.LastError, "stored_in_broker") {
		t.Fatalf("a reliable send to bob while he is away: %+v, %v", first, err)
	}
	ids[0] = first.ID
	for i := 1; i < total; i++ {
		sctx, cancel := context.WithTimeout(ctx, cmdTimeout)
		r, err := cc.SendMessage(sctx, "bob", fmt.Sprintf("secret-%04d", i), node.SendOptions{Reliable: true, NoWait: true})
		cancel()
		if err != nil {
			t.Fatalf("send %d: %v", i, err)
		}
		ids[i] = r.ID
	}
	queued := time.Since(start)
	t.Logf("1,000 reliable sends queued through alice's control socket in %v", queued.Round(time.Millisecond))
	// Every one goes into the stream while bob is away, in order: one the
	// broker stored holds nothing back in alice's outbox.
	waitUntilWithin(t, 3*time.Minute, "all 1,000 envelopes to be in the stream", func() bool {
		info, err := stream.Info(ctx)
		return err == nil && info.State.Msgs == total
	})
	ast := alice.natsStatus()
	if ast.Outbox != total || ast.NATS.Stored != total || !ast.NATS.JetStream {
		t.Fatalf("while bob is away alice's status shows outbox %d, nats %s", ast.Outbox, jsonText(ast.NATS))
	}
	// Stored is not delivered: the send record says so.
	waitUntil(t, "alice's record to show the sends stored in the broker", func() bool {
		st, err := cc.MessageStatus(ctx, []string{ids[0], ids[total-1]})
		return err == nil && len(st) == 2 && st[0].State == node.StateStored && st[1].State == node.StateStored
	})

	// Scan every stored message: sealed envelopes to bob, in order, no
	// body in the clear.
	info, err := stream.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if info.State.Msgs != total {
		t.Fatalf("the stream holds %d messages, want %d", info.State.Msgs, total)
	}
	for seq := info.State.FirstSeq; seq <= info.State.LastSeq; seq++ {
		m, err := stream.GetMsg(ctx, seq)
		if err != nil {
			t.Fatalf("stream message %d: %v", seq, err)
		}
		if bytes.Contains(m.Data, []byte("secret-")) {
			t.Fatalf("stream message %d holds a body in the clear", seq)
		}
		e, err := wire.Decode(m.Data)
		if err != nil || e.Kind.Type() != wire.TypeSealed {
			t.Fatalf("stream message %d is not a sealed envelope (%v)", seq, err)
		}
		if want := ids[seq-info.State.FirstSeq]; e.ID.String() != want {
			t.Fatalf("stream message %d is envelope %s, want %s: not in the order sent", seq, e.ID, want)
		}
		if m.Subject != bst.Subject {
			t.Fatalf("stream message %d is on %s, not bob's subject %s", seq, m.Subject, bst.Subject)
		}
	}

	// Right before bob comes back alice still holds every send.
	if o := outboxOf(t, alice); len(o.Entries) != total {
		t.Fatalf("alice's outbox holds %d before bob's return, want %d", len(o.Entries), total)
	}
	back := time.Now()
	bob.start()
	// Alice's outbox empties only once bob holds all of them: whenever it
	// is seen empty, bob's inbox (read after) is complete.
	deadline := time.Now().Add(3 * time.Minute)
	for {
		o := alice.fastStatus().Outbox
		got := bob.fastStatus().Inbox
		if got > total {
			t.Fatalf("bob's inbox holds %d items, want %d", got, total)
		}
		if o == 0 {
			if got != total {
				t.Fatalf("alice's outbox is empty while bob holds %d of %d", got, total)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("after 3 minutes alice's outbox holds %d, bob's inbox %d", o, got)
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Logf("bob received the 1,000 and alice's outbox emptied %v after bob's restart", time.Since(back).Round(time.Millisecond))
	items := bob.inbox()
	if len(items) != total {
		t.Fatalf("bob's inbox lists %d items, want %d", len(items), total)
	}
	for i, it := range items {
		if want := fmt.Sprintf("secret-%04d", i); it.Kind != "message" || it.Body != want || it.ID != ids[i] || it.Peer != "alice" {
			t.Fatalf("bob's item %d is %s, want %q (%s) from alice", i, jsonText(it), want, ids[i])
		}
	}
	if st := alice.natsStatus(); st.Outbox != 0 {
		t.Fatalf("alice's status shows outbox %d", st.Outbox)
	}
	if d := deadOf(t, alice); len(d) != 0 {
		t.Fatalf("dead letters: %d", len(d))
	}

	// A direct send while bob is away is stored in the stream: not a
	// failure (bob gets it when he is back), and its record turns acked
	// when his ack comes.
	bob.stop()
	var direct struct {
		ID, Delivery string
	}
	alice.okJSON(&direct, "send", "message", "bob", "direct while away", "--json")
	if direct.Delivery != node.DeliveryStored {
		t.Fatalf("a direct send while bob is away: %+v, want delivery %s", direct, node.DeliveryStored)
	}
	if st := alice.sentStatus(direct.ID); st.State != node.StateStored {
		t.Fatalf("its record: %+v, want %s", st, node.StateStored)
	}
	bob.start()
	waitUntil(t, "bob to get the direct send", func() bool {
		for _, it := range bob.inbox() {
			if it.ID == direct.ID {
				return true
			}
		}
		return false
	})
	// Bob's acknowledgement comes back by way of the broker: on a loaded
	// machine that took longer than the usual wait once.
	waitUntilWithin(t, 2*time.Minute, "alice's record of it to turn acked", func() bool { return alice.sentStatus(direct.ID).State == node.StateAcked })
}

// auditSealedRow is a row of `audit --json`, with the field under test.
type auditSealedRow struct {
	Dir    string `json:"dir"`
	Event  string `json:"event"`
	Peer   string `json:"peer"`
	Kind   string `json:"kind"`
	ID     string `json:"id"`
	Sealed bool   `json:"sealed"`
}

// auditRows returns n's audit rows of envelope id.
func auditRows(t *testing.T, n *testNode, id string) []auditSealedRow {
	t.Helper()
	var rows []auditSealedRow
	for _, line := range strings.Split(strings.TrimSpace(n.ok("audit", "--json")), "\n") {
		if line == "" {
			continue
		}
		var r auditSealedRow
		if err := json.Unmarshal([]byte(line), &r); err != nil {
			t.Fatalf("%s's audit line %q: %v", n.name, line, err)
		}
		if r.ID == id {
			rows = append(rows, r)
		}
	}
	return rows
}

// The audit log of a daemon marks the envelopes that reached it through
// NATS "sealed": true (and the sender's rows too), and not those that came
// over a direct link.
func TestNATSAuditSealed(t *testing.T) {
	t.Parallel()
	alice, bob := newNATSNode(t, "alice"), newNATSNode(t, "bob")
	carol := newNode(t, "carol") // a direct (Unix socket) peer of bob's
	s := natstest.Server(t, "s1", natsConf(t, alice, bob), nil, "", false)
	for _, n := range []*testNode{alice, bob} {
		n.env = append(n.env, "MEERKAT_AUDIT_ENABLED=true")
		n.useNATS([]string{s.ClientURL()}, false)
	}
	alice.trusts(bob)
	bob.trusts(alice)
	bob.trusts(carol)
	carol.ok("peers", "add", "bob", bob.key, "uds://"+filepath.Join(bob.home, "meerkat.sock"))
	bob.start()
	alice.start()
	carol.start()
	bob.waitNATSConnected(t)
	alice.waitNATSConnected(t)

	var viaNATS, direct cliSend
	alice.okJSON(&viaNATS, "send", "message", "bob", "through NATS", "--json")
	carol.okJSON(&direct, "send", "message", "bob", "over the socket", "--json")
	if viaNATS.Delivery != "acked" || direct.Delivery != "acked" {
		t.Fatalf("sends: %s, %s", jsonText(viaNATS), jsonText(direct))
	}
	// The audit log is written in the background: wait for the rows.
	var in, out, plain []auditSealedRow
	waitUntil(t, "the audit rows of both messages", func() bool {
		in, plain, out = auditRows(t, bob, viaNATS.ID), auditRows(t, bob, direct.ID), auditRows(t, alice, viaNATS.ID)
		return len(in) > 0 && len(plain) > 0 && len(out) > 0
	})
	received := func(rows []auditSealedRow) *auditSealedRow {
		for i, r := range rows {
			if r.Dir == "in" && r.Event == "received" {
				return &rows[i]
			}
		}
		return nil
	}
	if r := received(in); r == nil || !r.Sealed || r.Peer != "alice" || r.Kind != "message" {
		t.Fatalf("bob's audit rows of the message through NATS: %s", jsonText(in))
	}
	if r := received(plain); r == nil || r.Sealed || r.Peer != "carol" {
		t.Fatalf("bob's audit rows of the message over the socket: %s", jsonText(plain))
	}
	for _, r := range out {
		if r.Dir != "out" || !r.Sealed {
			t.Fatalf("alice's audit rows of her message through NATS: %s", jsonText(out))
		}
	}

	// A peer with a direct address that cannot be connected to is
	// reached through NATS (--nats): the rows of that attempt's outcome
	// are marked too, direct and reliable alike.
	alice.ok("peers", "remove", "bob")
	alice.ok("peers", "add", "bob", bob.key, "uds://"+filepath.Join(t.TempDir(), "gone.sock"), "--nats")
	for _, args := range [][]string{{"fell back"}, {"fell back, reliable", "--reliable"}} {
		var fb cliSend
		alice.okJSON(&fb, append([]string{"send", "message", "bob"}, append(args, "--json")...)...)
		if fb.Delivery != "acked" {
			t.Fatalf("send %q: %s", args[0], jsonText(fb))
		}
		waitUntil(t, "the acked row of "+args[0], func() bool {
			for _, r := range auditRows(t, alice, fb.ID) {
				if r.Event == "acked" {
					return r.Sealed
				}
			}
			return false
		})
	}
}

// The password of nats.user is often given to the daemon alone (in its
// environment, as docs/operations.md sets the service up): the other
// commands reach the daemon without it, and run and config check still
// ask for it in an environment without it. No NATS server is needed: the
// daemon keeps trying to connect in the background.
func TestNATSPasswordInTheDaemonsEnvironmentOnly(t *testing.T) {
	n := newNode(t, "pwonly")
	n.useNATS([]string{"nats://127.0.0.1:" + strconv.Itoa(freeTCPPort(t))}, false)
	n.start()
	defer n.stop()
	without := slices.DeleteFunc(slices.Clone(n.env), func(v string) bool { return strings.HasPrefix(v, "MEERKAT_NATS_PASSWORD=") })
	in := func(args ...string) result { return runIn(without, "", nil, append(args, "--home", n.home)...) }
	for _, args := range [][]string{{"status"}, {"peers", "list"}, {"id"}, {"inbox"}, {"outbox"}} {
		if r := in(args...); r.code != 0 {
			t.Errorf("without the password: %v", r)
		}
	}
	if r := in("config", "check"); r.code != exitError || !strings.Contains(r.stderr, "nats.password: must be set with nats.user") {
		t.Errorf("config check without the password: %v, want exit %d naming nats.password", r, exitError)
	}
	n.stop()
	if r := in("run"); r.code != exitError || !strings.Contains(r.stderr, "nats.password") {
		t.Errorf("run without the password: %v, want exit %d naming nats.password", r, exitError)
	}
	n.start() // for the deferred stop
}
