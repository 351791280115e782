package node

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/meerkatd/meerkatd/comms/wire"
	"github.com/meerkatd/meerkatd/config"
	"github.com/meerkatd/meerkatd/identity"
	"github.com/meerkatd/meerkatd/inbox/store"
	"github.com/meerkatd/meerkatd/trust"
)

func TestCheckTaskID(t *testing.T) {
	for _, tc := range []struct {
		id string
		ok bool
	}{
		{"t-1", true},
		{"build 42 / step:3", true},
		{"résumé-タスク", true},
		{strings.Repeat("a", MaxTaskIDLen), true},
		{strings.Repeat("a", MaxTaskIDLen+1), false},
		{strings.Repeat("é", MaxTaskIDLen/2+1), false}, // 130 bytes, 65 characters
		{"", false},
		{"a\nb", false},
		{"tab\there", false},
		{"nul\x00", false},
		{"bad\xffutf8", false},
		{"zero\u200bwidth", false}, // a format character is not printable
		{"line\u2028sep", false},
	} {
		err := CheckTaskID(tc.id)
		if (err == nil) != tc.ok {
			t.Errorf("CheckTaskID(%q) = %v, want ok %v", tc.id, err, tc.ok)
		}
		if nerr := checkNewTaskID(tc.id); (nerr == nil) != tc.ok {
			t.Errorf("checkNewTaskID(%q) = %v, want ok %v", tc.id, nerr, tc.ok)
		}
	}
	// A task id sent from here does not start or end with a space; one a
	// peer sent is taken as it came.
	for _, id := range []string{" spaced ", " lead", "trail ", "in side"} {
		want := strings.TrimSpace(id) == id
		if err := checkNewTaskID(id); (err == nil) != want || CheckTaskID(id) != nil {
			t.Errorf("checkNewTaskID(%q) = %v, want ok %v (CheckTaskID %v)", id, err, want, CheckTaskID(id))
		}
	}
}

// A task id the check accepts is short printable UTF-8, and a kind
// carrying it gives it back; one it refuses is never read from a kind.
func FuzzCheckTaskID(f *testing.F) {
	for _, s := range []string{"t-1", "", "a\nb", "\xff", strings.Repeat("x", 129), "タスク"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, id string) {
		err := CheckTaskID(id)
		if utf8.ValidString(id) {
			k, kerr := wire.Message("b").With(FieldObjectiveID, wire.Text(id))
			if kerr != nil {
				t.Fatal(kerr)
			}
			got, ok := taskIDOf(k)
			if ok != (err == nil) || ok && got != id {
				t.Fatalf("taskIDOf(%q) = %q, %v; CheckTaskID: %v", id, got, ok, err)
			}
		}
		if err != nil {
			return
		}
		if id == "" || len(id) > MaxTaskIDLen || !utf8.ValidString(id) {
			t.Fatalf("accepted %q", id)
		}
		for _, r := range id {
			if !unicode.IsPrint(r) {
				t.Fatalf("accepted %q with %U", id, r)
			}
		}
	})
}

// Both task tables (SQLite and memory) keep the same rules.
func TestTaskStores(t *testing.T) {
	sqlite := func(t *testing.T) taskStore {
		st, err := store.Open(filepath.Join(t.TempDir(), "t.db"), store.Options{})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { st.Close() })
		return st.Tasks()
	}
	mem := func(*testing.T) taskStore { return newMemTasks() }
	for name, open := range map[string]func(*testing.T) taskStore{"sqlite": sqlite, "memory": mem} {
		t.Run(name, func(t *testing.T) {
			st := open(t)
			a, b := peerN(1), peerN(2)
			t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
			step := func(what string, created bool, err error, wantCreated bool) {
				t.Helper()
				if err != nil || created != wantCreated {
					t.Fatalf("%s: %v, %v; want %v", what, created, err, wantCreated)
				}
			}
			c, err := st.Touch("t1", a, false, t0)
			step("new task", c, err, true)
			c, err = st.Touch("t1", a, true, t0.Add(time.Second))
			step("same participant", c, err, false)
			c, err = st.Touch("t1", b, false, t0.Add(2*time.Second))
			step("second participant", c, err, false)
			c, err = st.Touch("t2", identity.PeerID{}, false, t0.Add(3*time.Second))
			step("task without participant", c, err, true)
			if t1, _, _ := st.Get("t1"); !t1.Local {
				t.Fatal("t1 is not local after this node sent under it")
			}
			if t2, _, _ := st.Get("t2"); t2.Local {
				t.Fatal("t2 is local: only peers brought it")
			}

			got, ok, err := st.Get("t1")
			if err != nil || !ok || got.State != store.TaskOpen || len(got.Participants) != 2 || got.Participants[0] != a || got.Participants[1] != b {
				t.Fatalf("t1 = %+v, %v, %v: want open with a then b", got, ok, err)
			}
			if _, ok, err := st.Get("nope"); ok || err != nil {
				t.Fatalf("unknown task: %v, %v", ok, err)
			}
			if _, err := st.Complete("nope", a, nil, t0); !errors.Is(err, store.ErrUnknownTask) {
				t.Fatalf("completing an unknown task: %v", err)
			}
			changed, err := st.Complete("t1", b, []byte(`{"n":1}`), t0.Add(4*time.Second))
			if err != nil || !changed {
				t.Fatalf("complete: %v, %v", changed, err)
			}
			changed, err = st.Complete("t1", a, []byte(`2`), t0.Add(5*time.Second))
			if err != nil || changed {
				t.Fatalf("second completion: %v, %v; want no change", changed, err)
			}
			got, _, _ = st.Get("t1")
			if got.State != store.TaskCompleted || got.CompletedBy != b || string(got.Result) != `{"n":1}` || !got.CompletedAt.Equal(t0.Add(4*time.Second)) {
				t.Fatalf("completed t1 = %+v", got)
			}
			all, err := st.List("", 10)
			if err != nil || len(all) != 2 || all[0].ID != "t1" || all[1].ID != "t2" {
				t.Fatalf("list = %+v, %v: want t1 (updated last) then t2", all, err)
			}
			open, err := st.List(store.TaskOpen, 10)
			if err != nil || len(open) != 1 || open[0].ID != "t2" {
				t.Fatalf("open tasks = %+v, %v", open, err)
			}
			for i := range store.MaxTaskParticipants {
				if _, err := st.Touch("crowd", keyN(i), false, t0); err != nil {
					t.Fatalf("participant %d: %v", i, err)
				}
			}
			if _, err := st.Touch("crowd", keyN(store.MaxTaskParticipants), false, t0); !errors.Is(err, store.ErrTasksFull) {
				t.Fatalf("participant past the limit: %v, want ErrTasksFull", err)
			}
		})
	}
}

// The memory table, full, replaces the oldest completed task, else the
// oldest open task only peers brought, and refuses a new one when every
// task is open and this node's (as the SQLite table does).
func TestMemTasksLimit(t *testing.T) {
	m := newMemTasks()
	t0 := time.Now()
	if _, err := m.Touch("p0", identity.PeerID{}, false, t0); err != nil {
		t.Fatal(err)
	}
	for i := 1; i < store.MaxTasks; i++ {
		if _, err := m.Touch(fmt.Sprint(i), identity.PeerID{}, true, t0.Add(time.Duration(i))); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := m.Touch("one more", identity.PeerID{}, true, t0); err != nil {
		t.Fatal(err)
	}
	if _, ok, _ := m.Get("p0"); ok {
		t.Fatal("the task only peers brought was kept")
	}
	if _, err := m.Touch("two more", identity.PeerID{}, false, t0); !errors.Is(err, store.ErrTasksFull) {
		t.Fatalf("a task past the limit with every task open and local: %v", err)
	}
	m.Complete("7", identity.PeerID{}, nil, t0)
	m.Complete("3", identity.PeerID{}, nil, t0.Add(time.Hour))
	if _, err := m.Touch("three more", identity.PeerID{}, false, t0); err != nil {
		t.Fatal(err)
	}
	if _, ok, _ := m.Get("7"); ok {
		t.Fatal("the oldest completed task was kept")
	}
	if _, ok, _ := m.Get("3"); !ok {
		t.Fatal("a newer completed task was dropped")
	}
}

// meshHomes makes homes that trust each other over Unix sockets; meta
// gives each home's entry, as the others hold it, its meta.
func meshHomes(t *testing.T, tune func(*config.Config), names []string, meta map[string]string) map[string]*Home {
	t.Helper()
	hs := map[string]*Home{}
	for _, name := range names {
		hs[name], _ = testHome(t, name, tune)
	}
	for _, name := range names {
		var peers []trust.Peer
		for _, other := range names {
			if other == name {
				continue
			}
			ls, err := hs[other].Config.Resolve(hs[other].Dir)
			if err != nil {
				t.Fatal(err)
			}
			p := trust.Peer{Name: other, ID: hs[other].Key.ID(), Addr: ls.UDS}
			if meta[other] != "" {
				p.Meta = json.RawMessage(meta[other])
			}
			peers = append(peers, p)
		}
		saveTrust(t, hs[name].TrustPath(), peers...)
	}
	return hs
}

func memoryStore(c *config.Config) { c.Store.Mode = config.StoreMemory }

// A task resolves only on completion: a wait times out while it is open
// (and can be repeated), a completion from a peer that took no part
// changes nothing, and the participant's task_complete resolves it on
// both sides, with its result, and is passed on to the other
// participants.
func TestTaskLifecycle(t *testing.T) {
	hs := meshHomes(t, memoryStore, []string{"alice", "bob", "carol"}, nil)
	alice, bob, carol := startTest(t, hs["alice"], ModeServe), startTest(t, hs["bob"], ModeServe), startTest(t, hs["carol"], ModeServe)
	ctx := context.Background()

	if _, err := alice.SendRequest(ctx, "bob", "build", json.RawMessage(`{"target":"all"}`), SendOptions{TaskID: "build-7"}); err != nil {
		t.Fatal(err)
	}
	if got := waitPeerItems(t, bob, 1); len(got) != 1 || got[0].TaskID != "build-7" {
		t.Fatalf("bob's inbox: %+v: want the request with task_id build-7", got)
	}
	for _, n := range []*Node{alice, bob} {
		w, err := n.WaitTask(ctx, "build-7", 20*time.Millisecond)
		if err != nil || !w.TimedOut || w.Task.State != TaskStateOpen || len(w.Task.Participants) != 1 {
			t.Fatalf("%s: wait on an open task: %+v, %v", n.h.Config.Name, w, err)
		}
	}
	if _, err := alice.WaitTask(ctx, "unknown", 0); CodeOf(err) != CodeUnknownTask {
		t.Fatalf("wait on an unknown task: %v", err)
	}
	if _, err := alice.TaskComplete(ctx, "unknown", nil, SendOptions{}); CodeOf(err) != CodeUnknownTask {
		t.Fatalf("complete an unknown task: %v", err)
	}

	// carol, who took no part, claims it is done: alice's agent sees the
	// request, the task stays open.
	claim, err := wire.Request(IntentTaskComplete, mustMap(t, wire.Member{Key: "task_id", Value: wire.Text("build-7")})).With(FieldObjectiveID, wire.Text("build-7"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := carol.send(ctx, sendSpec{peer: "alice", kind: claim}); err != nil {
		t.Fatal(err)
	}
	ab, err := alice.Receive(ctx, Query{Wait: 10 * time.Second, From: "carol"})
	if err != nil || len(ab.Messages) != 1 || ab.Messages[0].Intent != IntentTaskComplete {
		t.Fatalf("alice's inbox: %+v, %v", ab.Messages, err)
	}
	if w, _ := alice.WaitTask(ctx, "build-7", 0); w.Task.State != TaskStateOpen || len(w.Task.Participants) != 2 {
		t.Fatalf("after a stranger's completion: %+v: want open, carol now a participant", w.Task)
	}

	// alice brings carol in properly: carol now knows the task too.
	if _, err := alice.SendMessage(ctx, "carol", "you too", SendOptions{TaskID: "build-7"}); err != nil {
		t.Fatal(err)
	}

	done := make(chan TaskWaited, 1)
	go func() {
		w, _ := alice.WaitTask(ctx, "build-7", time.Minute)
		done <- w
	}()
	res, err := bob.TaskComplete(ctx, "build-7", json.RawMessage(`{"artifacts":3}`), SendOptions{})
	if err != nil || res.Already || len(res.Copies) != 1 || res.Copies[0].Peer != "alice" || res.Copies[0].Delivery != DeliveryAcked {
		t.Fatalf("task_complete: %+v, %v", res, err)
	}
	if res.Task.State != TaskStateCompleted || res.Task.CompletedBy != "self" {
		t.Fatalf("bob's task: %+v", res.Task)
	}
	w := <-done
	if w.TimedOut || w.Task.State != TaskStateCompleted || w.Task.CompletedBy != "bob" || string(w.Task.Result.(json.RawMessage)) != `{"artifacts":3}` {
		t.Fatalf("alice's wait: %+v", w)
	}
	// alice passed the completion on to carol, whom bob never dealt with.
	if w, err := carol.WaitTask(ctx, "build-7", time.Minute); err != nil || w.Task.State != TaskStateCompleted || w.Task.CompletedBy != "alice" {
		t.Fatalf("carol's task after the relay: %+v, %v", w, err)
	}
	// Awaited again later: it stays resolved.
	if w, err := alice.WaitTask(ctx, "build-7", time.Minute); err != nil || w.TimedOut || w.Task.State != TaskStateCompleted {
		t.Fatalf("second wait: %+v, %v", w, err)
	}
	again, err := bob.TaskComplete(ctx, "build-7", nil, SendOptions{})
	if err != nil || !again.Already || len(again.Copies) != 0 {
		t.Fatalf("completing twice: %+v, %v: want already, nothing sent", again, err)
	}
	tl, err := alice.Tasks(ctx, TaskQuery{State: TaskStateCompleted})
	if ts := tl.Tasks; err != nil || len(ts) != 1 || ts[0].ID != "build-7" {
		t.Fatalf("alice's completed tasks: %+v, %v", tl, err)
	}
	if _, err := alice.Tasks(ctx, TaskQuery{State: "done"}); CodeOf(err) != CodeBadArgument {
		t.Fatalf("bad state filter: %v", err)
	}
	// A completion retried with its idempotency key replays the first
	// result, where a retry without one says "already".
	keyed, err := bob.TaskComplete(ctx, "build-8", nil, SendOptions{IdempotencyKey: "finish-8"})
	if CodeOf(err) != CodeUnknownTask || keyed.Replayed {
		t.Fatalf("keyed completion of an unknown task: %+v, %v", keyed, err)
	}
	if _, err := alice.SendMessage(ctx, "bob", "next", SendOptions{TaskID: "build-8"}); err != nil {
		t.Fatal(err)
	}
	waitPeerItems(t, bob, 2)
	first, err := bob.TaskComplete(ctx, "build-8", json.RawMessage(`{"ok": true}`), SendOptions{IdempotencyKey: "finish-8"})
	if err != nil || first.Replayed || first.Already || len(first.Copies) != 1 {
		t.Fatalf("keyed completion: %+v, %v", first, err)
	}
	replay, err := bob.TaskComplete(ctx, "build-8", json.RawMessage(`{"ok":true}`), SendOptions{IdempotencyKey: "finish-8"})
	if err != nil || !replay.Replayed || replay.Already || len(replay.Copies) != 1 || replay.Copies[0].ID != first.Copies[0].ID {
		t.Fatalf("retried completion: %+v, %v: want the first result replayed", replay, err)
	}
	if _, err := bob.TaskComplete(ctx, "build-8", json.RawMessage(`{"ok":false}`), SendOptions{IdempotencyKey: "finish-8"}); CodeOf(err) != CodeIdempotencyConflict {
		t.Fatalf("the key with another result: %v", err)
	}
	for _, bad := range []string{"", "a\nb", strings.Repeat("x", 200)} {
		if _, err := alice.SendMessage(ctx, "bob", "hi", SendOptions{TaskID: bad}); bad != "" && CodeOf(err) != CodeBadArgument {
			t.Errorf("task id %q: %v", bad, err)
		}
	}
}

// A task survives a restart with the SQLite store: a wait after it
// times out open, and resolves once the participant completes it.
func TestTaskAfterRestart(t *testing.T) {
	hs := meshHomes(t, nil, []string{"alice", "bob"}, nil)
	ctx := context.Background()
	alice := startTest(t, hs["alice"], ModeServe)
	bob := startTest(t, hs["bob"], ModeServe)
	if _, err := alice.SendMessage(ctx, "bob", "please do it", SendOptions{TaskID: "T-9"}); err != nil {
		t.Fatal(err)
	}
	alice.Close()
	alice = startTest(t, hs["alice"], ModeServe)
	w, err := alice.WaitTask(ctx, "T-9", 10*time.Millisecond)
	if err != nil || !w.TimedOut || w.Task.State != TaskStateOpen || len(w.Task.Participants) != 1 || w.Task.Participants[0].Peer != "bob" {
		t.Fatalf("after restart: %+v, %v", w, err)
	}
	waitFor(t, 10*time.Second, "bob to hold the message", func() bool {
		return len(fromPeers(t, bob)) == 1
	})
	if _, err := bob.TaskComplete(ctx, "T-9", json.RawMessage(`"ok"`), SendOptions{}); err != nil {
		t.Fatal(err)
	}
	w, err = alice.WaitTask(ctx, "T-9", time.Minute)
	if err != nil || w.TimedOut || w.Task.State != TaskStateCompleted {
		t.Fatalf("after completion: %+v, %v", w, err)
	}
	// Without a daemon, the home's table still answers (no waiting).
	alice.Close()
	cmd := startTest(t, hs["alice"], ModeSend)
	w, err = cmd.WaitTask(ctx, "T-9", time.Hour)
	if err != nil || w.Task.State != TaskStateCompleted {
		t.Fatalf("read without a daemon: %+v, %v", w, err)
	}
}

// keyN is a distinct test key for every n.
func keyN(n int) identity.PeerID {
	var raw [32]byte
	raw[0], raw[1], raw[2] = byte(n), byte(n>>8), 0x80
	id, err := identity.PeerIDFromBytes(raw[:])
	if err != nil {
		panic(err)
	}
	return id
}

// The memory task book counts activity under a task as an update, as the
// SQLite table does (store.TestTaskTouchUpdates).
func TestMemTasksTouchUpdates(t *testing.T) {
	m := newMemTasks()
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	bob := identity.PeerID{1}
	for i, id := range []string{"a", "b"} {
		if _, err := m.Touch(id, bob, true, t0.Add(time.Duration(i)*time.Second)); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := m.Touch("a", bob, true, t0.Add(time.Minute)); err != nil {
		t.Fatal(err)
	}
	if _, err := m.Touch("a", bob, false, t0); err != nil { // older: no move back
		t.Fatal(err)
	}
	if got := m.tasks["a"].Updated; !got.Equal(t0.Add(time.Minute)) {
		t.Fatalf("a updated %v, want a minute on", got)
	}
}

// A task this node starts has no space at either end of its id; a task a
// peer started under such an id is taken as it came, and this node may
// send under it and broadcast under it.
func TestPaddedTaskIDs(t *testing.T) {
	hs := meshHomes(t, memoryStore, []string{"alice", "bob"}, nil)
	alice, bob := startTest(t, hs["alice"], ModeServe), startTest(t, hs["bob"], ModeServe)
	ctx := context.Background()
	if _, err := alice.SendMessage(ctx, "bob", "hi", SendOptions{TaskID: " new "}); CodeOf(err) != CodeBadArgument {
		t.Fatalf("a new padded task id: %v, want %s", err, CodeBadArgument)
	}
	if _, err := alice.Broadcast(ctx, BroadcastArgs{Body: "hi", SendOptions: SendOptions{TaskID: "new "}}); CodeOf(err) != CodeBadArgument {
		t.Fatalf("a new padded task id, broadcast: %v, want %s", err, CodeBadArgument)
	}
	// bob's envelope, as a peer that allows it would send it.
	k, err := wire.Message("under bob's task").With(FieldObjectiveID, wire.Text(" bob's "))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := bob.send(ctx, sendSpec{peer: "alice", kind: k}); err != nil {
		t.Fatal(err)
	}
	if got := waitPeerItems(t, alice, 1); len(got) != 1 || got[0].TaskID != " bob's " {
		t.Fatalf("alice's inbox: %+v", got)
	}
	if _, err := alice.SendMessage(ctx, "bob", "answer", SendOptions{TaskID: " bob's "}); err != nil {
		t.Fatalf("sending under a task bob started: %v", err)
	}
	if _, err := alice.Broadcast(ctx, BroadcastArgs{Body: "all", SendOptions: SendOptions{TaskID: " bob's "}}); err != nil {
		t.Fatalf("broadcasting under a task bob started: %v", err)
	}
}
