package nodetext

import (
	"bytes"
	"encoding/json"
	"errors"
	"testing"

	"github.com/meerkatd/meerkatd/comms/node"
)

// failWriter fails every write after the first n bytes.
type failWriter struct{ n int }

func (w *failWriter) Write(p []byte) (int, error) {
	if len(p) > w.n {
		n := w.n
		w.n = 0
		return n, errors.New("disk full")
	}
	w.n -= len(p)
	return len(p), nil
}

// The pages written make one JSON document: every page's messages, then
// the last page's cursor and counts (after an Acked, those left).
func TestBatchJSON(t *testing.T) {
	msg := func(seq uint64, class string) node.Message { return node.Message{Seq: seq, Class: class} }
	type doc struct {
		Messages       []node.Message `json:"messages"`
		Cursor         uint64         `json:"cursor"`
		More           bool           `json:"more"`
		Pending        int            `json:"pending"`
		PendingByClass map[string]int `json:"pending_by_class"`
	}
	for _, tc := range []struct {
		name    string
		pages   []node.Batch
		ack     bool
		want    doc
		wantLen int
	}{
		{name: "no page", want: doc{}},
		{name: "an empty page", pages: []node.Batch{{Cursor: 7, Pending: 0, PendingByClass: map[string]int{}}},
			want: doc{Cursor: 7, PendingByClass: map[string]int{}}},
		{name: "two pages", pages: []node.Batch{
			{Messages: []node.Message{msg(1, "message"), msg(2, "request")}, Cursor: 2, More: true, Pending: 3, PendingByClass: map[string]int{"message": 2, "request": 1}},
			{Messages: []node.Message{msg(3, "message")}, Cursor: 3, Pending: 3, PendingByClass: map[string]int{"message": 2, "request": 1}},
		}, want: doc{Cursor: 3, Pending: 3, PendingByClass: map[string]int{"message": 2, "request": 1}}, wantLen: 3},
		{name: "acknowledged", ack: true, pages: []node.Batch{
			{Messages: []node.Message{msg(1, "message"), msg(2, "request")}, Cursor: 2, Pending: 2, PendingByClass: map[string]int{"message": 1, "request": 1}},
		}, want: doc{Cursor: 2, Pending: 0, PendingByClass: map[string]int{"message": 0, "request": 0}}, wantLen: 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var out bytes.Buffer
			b := NewBatchJSON(&out)
			for _, p := range tc.pages {
				if err := b.Page(p); err != nil {
					t.Fatal(err)
				}
				if tc.ack {
					b.Acked(p.Messages, 0)
				}
			}
			if err := b.End(); err != nil {
				t.Fatal(err)
			}
			var got doc
			if err := json.Unmarshal(out.Bytes(), &got); err != nil {
				t.Fatalf("not one JSON document: %v\n%s", err, out.String())
			}
			if len(got.Messages) != tc.wantLen || got.Cursor != tc.want.Cursor || got.More != tc.want.More || got.Pending != tc.want.Pending {
				t.Fatalf("got %+v, want %+v with %d messages", got, tc.want, tc.wantLen)
			}
			for k, v := range tc.want.PendingByClass {
				if got.PendingByClass[k] != v {
					t.Fatalf("pending_by_class %v, want %v", got.PendingByClass, tc.want.PendingByClass)
				}
			}
			for i, m := range got.Messages {
				if m.Seq != uint64(i+1) {
					t.Fatalf("message %d has seq %d", i, m.Seq)
				}
			}
		})
	}
}

// A listing that breaks off after a page is closed as a document holding
// what was written; a failing writer's error is returned.
func TestBatchJSONAbortAndWriteError(t *testing.T) {
	var out bytes.Buffer
	b := NewBatchJSON(&out)
	if b.Started() {
		t.Fatal("started before any page")
	}
	if err := b.Page(node.Batch{Messages: []node.Message{{Seq: 1}}}); err != nil {
		t.Fatal(err)
	}
	b.Abort()
	var got struct {
		Messages []node.Message `json:"messages"`
	}
	if err := json.Unmarshal(out.Bytes(), &got); err != nil || len(got.Messages) != 1 {
		t.Fatalf("aborted document: %v, %+v\n%s", err, got, out.String())
	}
	if err := NewBatchJSON(&failWriter{n: 5}).Page(node.Batch{Messages: []node.Message{{Seq: 1}}}); err == nil {
		t.Fatal("a write error was not returned")
	}
}
