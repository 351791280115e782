package control

import (
	"context"
	"encoding/json"
	"log/slog"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/meerkatd/meerkatd/comms/node"
)

// records is a slog.Handler keeping every record.
type records struct {
	mu   sync.Mutex
	recs []slog.Record
}

func (r *records) Enabled(context.Context, slog.Level) bool { return true }
func (r *records) WithAttrs([]slog.Attr) slog.Handler       { return r }
func (r *records) WithGroup(string) slog.Handler            { return r }

func (r *records) Handle(_ context.Context, rec slog.Record) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.recs = append(r.recs, rec)
	return nil
}

// A client that goes away during a waiting call (an MCP client that
// stopped, an interrupted inbox --wait) is no failure of the node: the
// server logs it at debug, not as an error.
func TestServerHangUpIsNoError(t *testing.T) {
	path := tempSocket(t)
	logs := &records{}
	api := newWaitingAPI()
	serveAt(t, path, api, Options{Logger: slog.New(logs), MaxConns: 1})
	hangUpMidCall(t, path, api)
	// The only connection slot is free again once the server is done
	// with the call, logging included.
	waitFor(t, 10*time.Second, "a free slot", func() bool {
		return rawCall(t, path, []byte(`{"op":"frobnicate"}`+"\n")).Code == node.CodeBadArgument
	})
	logs.mu.Lock()
	defer logs.mu.Unlock()
	debug := false
	for _, r := range logs.recs {
		if r.Level >= slog.LevelError {
			t.Errorf("logged at %s: %s", r.Level, r.Message)
		}
		debug = debug || r.Level == slog.LevelDebug && strings.Contains(r.Message, "hung up")
	}
	if !debug {
		t.Error("the hang-up is not logged at debug")
	}
}

// pagingAPI answers Proposals with a page that has more to follow.
type pagingAPI struct {
	node.API
	page node.ProposalsPage
}

func (p pagingAPI) Proposals(_ context.Context, q node.ProposalQuery) (node.ProposalsPage, error) {
	if q.Limit != 2 || q.After != "c0" || q.Space != "build" {
		return node.ProposalsPage{}, &node.Error{Code: node.CodeBadArgument, Msg: "unexpected query"}
	}
	return p.page, nil
}

// A page of proposals crosses the control socket whole: whether more
// follow and where the next page starts come with it, in one call.
func TestClientProposalsPage(t *testing.T) {
	path := tempSocket(t)
	want := node.ProposalsPage{Proposals: []node.Proposal{{Space: "build", ID: "p1", Proposer: "carol", State: "pending", Payload: json.RawMessage(`{"a":1}`)},
		{Space: "build", ID: "p2", Proposer: "carol", State: "pending", Payload: json.RawMessage(`{"a":2}`)}}, More: true, Cursor: "c2"}
	serveAt(t, path, pagingAPI{page: want}, Options{})
	got, err := NewClient(path).Proposals(context.Background(), node.ProposalQuery{Space: "build", Limit: 2, After: "c0"})
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("Proposals = %+v, want %+v", got, want)
	}
}
