package nodetext

import (
	"bytes"
	"encoding/json"
	"reflect"
	"strings"
	"testing"
	"time"
	"unicode"

	"github.com/meerkatd/meerkatd/comms/node"
)

// TestPeerTextEscaped: text a peer chose cannot put an escape sequence
// or a line of its own on the terminal.
func TestPeerTextEscaped(t *testing.T) {
	var b bytes.Buffer
	Message(&b, node.Message{Seq: 7, Kind: "message", From: "ed25519:k", Peer: "bob\x1b[2J", ID: "id1", Class: node.ClassNormal,
		Body: "hi\n#8 fake line\r", TaskID: "t\x07", BroadcastID: "b1", Received: time.Unix(0, 0)})
	Peers(&b, []node.Peer{{Name: "carol", PubKey: "ed25519:c", Addr: "uds:///x\x1b]0;pwned\x07"}})
	out := b.String()
	if strings.ContainsAny(out, "\x1b\x07\r") {
		t.Fatalf("control characters reached the output:\n%q", out)
	}
	for _, want := range []string{"bob\\x1b[2J (ed25519:k)", "  hi\n  #8 fake line\\x0d", "  task t\\x07 broadcast b1\n", "[normal]"} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		if strings.HasPrefix(line, "#") && !strings.HasPrefix(line, "#7 ") {
			t.Errorf("a peer's text made a line of its own: %q", line)
		}
	}
}

func TestStatusPendingByClass(t *testing.T) {
	var b bytes.Buffer
	Status(&b, node.Status{Running: false, Pending: 3, Inbox: 5, PendingByClass: map[string]int{node.ClassSystem: 1, node.ClassNormal: 2, node.ClassUser: 0}})
	if want := "inbox      5 (3 pending: 1 system, 2 normal)\n"; !strings.Contains(b.String(), want) {
		t.Fatalf("status lacks %q:\n%s", want, b.String())
	}
	b.Reset()
	Status(&b, node.Status{})
	if want := "inbox      0 (0 pending)\n"; !strings.Contains(b.String(), want) {
		t.Fatalf("empty status lacks %q:\n%s", want, b.String())
	}
}

func TestTableAligns(t *testing.T) {
	var b bytes.Buffer
	err := Table(&b, "A\tBB", []int{1, 22}, func(i int) []any { return []any{i, "x"} })
	if err != nil || b.String() != "A   BB\n1   x\n22  x\n" {
		t.Fatalf("%v %q", err, b.String())
	}
}

// WithError adds an "error" member to a result that is a JSON object,
// keeping its fields; anything else is not one.
func TestWithError(t *testing.T) {
	e := map[string]string{"code": "peer_offline", "message": "no ack"}
	out, ok := WithError(struct {
		ID string `json:"id"`
	}{"m-1"}, e)
	if got := JSON(out); !ok || got != `{"error":{"code":"peer_offline","message":"no ack"},"id":"m-1"}` {
		t.Fatalf("WithError(object) = %s, %v", got, ok)
	}
	for _, v := range []any{[]int{1}, "text", nil, 3} {
		if _, ok := WithError(v, e); ok {
			t.Errorf("WithError(%#v): ok for what is not an object", v)
		}
	}
}

// A reliable send left in the outbox says who sends it on: the node
// serving the home retries it, and without one it waits for the daemon to
// start (nothing retries it meanwhile).
func TestSendQueued(t *testing.T) {
	held := time.Date(2026, 11, 30, 11, 31, 17, 0, time.UTC)
	for _, tc := range []struct {
		daemon    bool
		lastError string
		behind    int
		want      string
	}{
		{true, "", 0, "queued in the outbox; retrying until acked: see meerkatd outbox\n"},
		{true, "peer offline", 2, "queued in the outbox; retrying until acked (not attempted yet, behind 2 earlier sends to bob; the peer's last attempt: peer offline): see meerkatd outbox\n"},
		{true, "", 1, "queued in the outbox; retrying until acked (not attempted yet, behind 1 earlier send to bob): see meerkatd outbox\n"},
		{true, "peer offline", -1, "queued in the outbox; retrying until acked (not attempted yet: the peer's circuit breaker is open until " + held.Local().Format(time.TimeOnly) + " (sooner if it shows it is back); the peer's last attempt: peer offline): see meerkatd outbox\n"},
		{true, "peer offline", -3, "queued in the outbox; retrying until acked (not attempted yet, behind 2 earlier sends to bob; its circuit breaker open until " + held.Local().Format(time.TimeOnly) + " (sooner if it shows it is back); the peer's last attempt: peer offline): see meerkatd outbox\n"},
		{true, "peer offline\x1b[2J", 0, "queued in the outbox; retrying until acked (last attempt: peer offline\\x1b[2J): see meerkatd outbox\n"},
		{false, "", 0, "queued in the outbox; kept for the daemon to send when it starts (no daemon runs: meerkatd run): see meerkatd outbox\n"},
		{false, "peer offline", 0, "queued in the outbox; kept for the daemon to send when it starts (no daemon runs: meerkatd run; last attempt: peer offline): see meerkatd outbox\n"},
	} {
		var b bytes.Buffer
		sent := node.Sent{Peer: "bob", LastError: tc.lastError, Behind: tc.behind}
		if tc.behind < 0 { // held by the breaker, behind -1-behind others
			sent.Behind, sent.BreakerOpenUntil = -1-tc.behind, &held
		}
		SendQueued(&b, sent, tc.daemon)
		if b.String() != tc.want {
			t.Errorf("daemon %v, last error %q:\n got %q\nwant %q", tc.daemon, tc.lastError, b.String(), tc.want)
		}
		if !tc.daemon && strings.Contains(b.String(), "retrying") {
			t.Errorf("without a daemon the note claims a retry: %q", b.String())
		}
	}
}

// JSON a peer chose (a MEUP payload, request params, a response result)
// is shown as JSON, its escapes once (not \\"proposer\\"), with control
// and format characters it holds raw still escaped.
func TestJSONEscapedOnce(t *testing.T) {
	var b bytes.Buffer
	env := json.RawMessage("{\"kind\":\"system/error\",\"payload\":{\"error\":\"not the \\\"proposer\\\"\",\"seq\":\"\\u001b[2J\",\"raw\":\"a\u202eb\"}}")
	Message(&b, node.Message{Seq: 1, Kind: "meup", From: "ed25519:k", ID: "id1", Class: node.ClassNormal, Received: time.Unix(0, 0),
		MEUP: &node.MEUPItem{Space: "build", ID: "m1", Kind: "system/error", Participant: "orch", Envelope: env}})
	Message(&b, node.Message{Seq: 2, Kind: "request", From: "ed25519:k", ID: "id2", Class: node.ClassNormal, Received: time.Unix(0, 0),
		Intent: "read", Params: json.RawMessage(`{"path":"C:\\dir"}`)})
	Message(&b, node.Message{Seq: 3, Kind: "response", From: "ed25519:k", ID: "id3", Class: node.ClassNormal, Received: time.Unix(0, 0),
		Status: "failed", RequestID: "r1", Result: json.RawMessage(`{"why":"\"quoted\"\n"}`)})
	out := b.String()
	if strings.ContainsAny(out, "\x1b\u202e") {
		t.Fatalf("control characters reached the output:\n%q", out)
	}
	for _, want := range []string{
		`"error":"not the \"proposer\""`, `"seq":"\u001b[2J"`, `"raw":"a\u202eb"`,
		`read {"path":"C:\\dir"}`, `failed to r1: {"why":"\"quoted\"\n"}`,
	} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %s:\n%s", want, out)
		}
	}
	if strings.Contains(out, `\\"`) {
		t.Errorf("escaped twice:\n%s", out)
	}
}

// A send's detail joins what there is to say with "; ", never leaving a
// separator with nothing after it.
func TestSentDetail(t *testing.T) {
	at := time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)
	for _, c := range []struct {
		s    node.SendStatus
		want string
	}{
		{node.SendStatus{State: node.StateQueued, Intent: "rel"}, "intent rel"},
		{node.SendStatus{State: node.StateQueued}, ""},
		{node.SendStatus{State: node.StateQueued, Attempts: 2, LastError: "refused"}, "2 failed attempt(s); last: refused"},
		{node.SendStatus{State: node.StateAcked, Intent: "build", AckedAt: &at, Progress: &node.SendProgress{Accepted: 1, ResponseID: "r1"}},
			"intent build; at " + Time(&at) + "; 1 accepted response(s), last r1"},
		{node.SendStatus{State: node.StateDead, Reason: "expired"}, "expired"},
		{node.SendStatus{State: node.StateAcked, Intent: "build", AckedAt: &at, RequestState: node.RequestCancelled, RequestNote: "not needed"},
			"intent build; at " + Time(&at) + "; cancelled: not needed"},
		{node.SendStatus{State: node.StateAcked, AckedAt: &at, RequestState: node.RequestCancelled}, "at " + Time(&at) + "; cancelled"},
		{node.SendStatus{State: node.StateAcked, AckedAt: &at, RequestState: node.RequestTimedOut}, "at " + Time(&at) + "; timed out (its deadline passed unanswered)"},
		{node.SendStatus{State: node.StateAcked, AckedAt: &at, RequestState: node.RequestOpen}, "at " + Time(&at)},
	} {
		if got := sentDetail(c.s); got != c.want {
			t.Errorf("%+v: %q, want %q", c.s, got, c.want)
		}
	}
}

// TestCancelled: a cancel that told the peer names the cancel envelope; a
// withdrawn request says the peer never got it.
func TestCancelled(t *testing.T) {
	req := node.SentRequest{ID: "r-1", Peer: "bob", PubKey: "ed25519:k"}
	for _, tc := range []struct {
		c    node.Cancelled
		want string
	}{
		{node.Cancelled{Request: req, Cancel: &node.Sent{ID: "c-1", Delivery: "acked"}}, "r-1 cancelled; bob told (cancel c-1, acked)\n"},
		{node.Cancelled{Request: req, Withdrawn: true}, "r-1 cancelled before it was delivered: a dead letter now; bob never got it, so nothing was sent\n"},
	} {
		var b strings.Builder
		Cancelled(&b, tc.c)
		if b.String() != tc.want {
			t.Errorf("Cancelled(%+v) = %q, want %q", tc.c, b.String(), tc.want)
		}
	}
}

// TestEscapeFormat: JSON output carries a peer's bidirectional overrides
// and other invisible formatting characters escaped, the text unchanged.
func TestEscapeFormat(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{`"plain"`, `"plain"`},
		{"\"bidi \u202eevil\u202c\"", `"bidi \u202eevil\u202c"`},
		{"{\"\u202ekey\": 1}", `{"\u202ekey": 1}`},
		{"\"family \U0001F468\u200d\U0001F469\"", "\"family \U0001F468\u200d\U0001F469\""}, // ZWJ joins emoji: left
		{"\"tag \U000E0041\"", `"tag \udb40\udc41"`},                                       // beyond the BMP: a surrogate pair
		{"\"soft\u00adhyphen\"", `"soft\u00adhyphen"`},
	} {
		got := string(escapeFormat([]byte(tc.in)))
		if got != tc.want {
			t.Errorf("escapeFormat(%q) = %q, want %q", tc.in, got, tc.want)
		}
		var a, b any
		if json.Unmarshal([]byte(tc.in), &a) != nil || json.Unmarshal([]byte(got), &b) != nil || !reflect.DeepEqual(a, b) {
			t.Errorf("escapeFormat(%q): the JSON means something else: %v, %v", tc.in, a, b)
		}
	}
	var buf bytes.Buffer
	if err := PrintJSON(&buf, map[string]string{"body": "x\u202ey"}); err != nil || !strings.Contains(buf.String(), `x\u202ey`) {
		t.Errorf("PrintJSON: %q, %v", buf.String(), err)
	}
}

// FuzzEscapeFormat: the escaped JSON is valid when the input is, means
// the same, and holds no formatting character but ZWJ.
func FuzzEscapeFormat(f *testing.F) {
	f.Add("\"a\u202eb\"")
	f.Add(`{"k": ["\u200f", 1]}`)
	f.Fuzz(func(t *testing.T, s string) {
		var a any
		if json.Unmarshal([]byte(s), &a) != nil {
			return
		}
		out := escapeFormat([]byte(s))
		var b any
		if err := json.Unmarshal(out, &b); err != nil || !reflect.DeepEqual(a, b) {
			t.Fatalf("%q became %q (%v)", s, out, err)
		}
		for _, r := range string(out) {
			if r != '\u200d' && unicode.In(r, unicode.Cf) {
				t.Fatalf("%q left %U in %q", s, r, out)
			}
		}
	})
}

// TestReleased: the peer released is named by its trusted name, whatever
// reference was typed; one not counted is named as typed.
func TestReleased(t *testing.T) {
	until := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	held := node.LoopGuardState{Peer: "bob", PubKey: "ed25519:b", Held: true, HeldUntil: &until}
	var b strings.Builder
	if err := Released(&b, false, "BOB", []node.LoopGuardState{held}, nil); err != nil || !strings.HasPrefix(b.String(), "released bob: ") {
		t.Errorf("released: %q, %v", b.String(), err)
	}
	b.Reset()
	if err := Released(&b, false, "carol", nil, nil); err != nil || b.String() != "carol was not held; its count starts again\n" {
		t.Errorf("not held: %q, %v", b.String(), err)
	}
}

// outbox drop says how many it dropped, names each send it left and why,
// and fails (bad_argument) when it left any.
func TestDropped(t *testing.T) {
	var out, errOut bytes.Buffer
	err := Dropped(&out, &errOut, node.Dropped{Dropped: []string{"a"}, InFlight: []string{"b"}, NotQueued: []string{"c\x1b[2J"}})
	if out.String() != "dropped 1 queued send(s) into the dead letters (meerkatd deadletters retry ID queues one again)\n" ||
		errOut.String() != "b: being attempted right now (it may be delivered); not dropped\nc\\x1b[2J: not in the outbox\n" {
		t.Errorf("stdout %q, stderr %q", out.String(), errOut.String())
	}
	if node.CodeOf(err) != node.CodeBadArgument || !strings.Contains(err.Error(), "2 of the sends given not dropped") {
		t.Errorf("error %v", err)
	}
	out.Reset()
	if err := Dropped(&out, &errOut, node.Dropped{Dropped: []string{"a", "b"}}); err != nil || !strings.HasPrefix(out.String(), "dropped 2 ") {
		t.Errorf("all dropped: %q, %v", out.String(), err)
	}
	// None dropped, and why: no "dropped 0" before the error.
	out.Reset()
	errOut.Reset()
	if err := Dropped(&out, &errOut, node.Dropped{NotQueued: []string{"c"}}); err == nil || out.Len() != 0 || errOut.String() != "c: not in the outbox\n" {
		t.Errorf("none dropped: stdout %q, stderr %q, %v", out.String(), errOut.String(), err)
	}
}
