package nodetext

import (
	"encoding/json"
	"fmt"
	"io"
	"maps"

	"github.com/meerkatd/meerkatd/comms/node"
)

// BatchJSON writes the pages of an inbox listing, as they come, as one
// JSON batch: the messages of every page, then the last page's cursor
// and counts. It writes a message at a time, so neither side holds a
// large inbox whole.
type BatchJSON struct {
	w       io.Writer
	started bool
	n       int
	last    node.Batch
}

// NewBatchJSON returns a BatchJSON writing to w.
func NewBatchJSON(w io.Writer) *BatchJSON { return &BatchJSON{w: w} }

// Started reports whether the document was begun.
func (b *BatchJSON) Started() bool { return b.started }

// Page writes the messages of page.
func (b *BatchJSON) Page(page node.Batch) error {
	b.last = page
	if err := b.start(); err != nil {
		return err
	}
	for _, m := range page.Messages {
		sep := ","
		if b.n == 0 {
			sep = ""
		}
		j, err := json.MarshalIndent(m, "    ", "  ")
		if err != nil {
			return err
		}
		if _, err := fmt.Fprintf(b.w, "%s\n    %s", sep, escapeFormat(j)); err != nil {
			return err
		}
		b.n++
	}
	return nil
}

func (b *BatchJSON) start() error {
	if b.started {
		return nil
	}
	b.started = true
	_, err := io.WriteString(b.w, "{\n  \"messages\": [")
	return err
}

// Acked counts msgs, of the last page, as acknowledged since it was read,
// with pending items left: the counts the document ends with are then
// those after the acknowledgement.
func (b *BatchJSON) Acked(msgs []node.Message, pending int) {
	b.last.Pending = pending
	byClass := maps.Clone(b.last.PendingByClass)
	for _, m := range msgs {
		if byClass[m.Class] > 0 {
			byClass[m.Class]--
		}
	}
	b.last.PendingByClass = byClass
}

// Abort closes a document that was begun, after a failure: the messages
// written, and no cursor.
func (b *BatchJSON) Abort() {
	if b.started {
		fmt.Fprintln(b.w, "\n  ]\n}")
	}
}

// End closes the document with the last page's cursor and counts.
func (b *BatchJSON) End() error {
	if err := b.start(); err != nil {
		return err
	}
	if b.n > 0 {
		io.WriteString(b.w, "\n  ")
	}
	epoch, err := json.Marshal(b.last.Epoch)
	if err != nil {
		return err
	}
	byClass, err := json.Marshal(b.last.PendingByClass)
	if err != nil {
		return err
	}
	_, err = fmt.Fprintf(b.w, "],\n  \"cursor\": %d,\n  \"more\": %t,\n  \"timed_out\": %t,\n  \"pending\": %d,\n  \"epoch\": %s,\n  \"pending_by_class\": %s\n}\n",
		b.last.Cursor, b.last.More, b.last.TimedOut, b.last.Pending, epoch, byClass)
	return err
}
