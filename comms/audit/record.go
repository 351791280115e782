package audit

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"time"
	"unicode/utf8"
)

// FileName is the conventional name of the audit log in a node's home.
const FileName = "audit.log"

// Line limits. They are the same for writing and reading, so every line
// the writer produces is one [Read] accepts.
const (
	// MaxLineSize bounds a line, without its newline: room for a body of
	// a full 1 MiB envelope plus every other field at [MaxFieldSize].
	MaxLineSize = 1<<20 + 256<<10
	// MaxFieldSize bounds each string field of a written record (Dir,
	// Event, Peer, Key, Claimed, Kind, ID, CorrID, Reason); longer values
	// are cut at a UTF-8 boundary by the writer. Even fully escaped (6
	// bytes per byte) the nine fields fit in the margin of MaxLineSize.
	MaxFieldSize = 4 << 10
)

// Directions of a record.
const (
	DirIn  = "in"  // the envelope came from the peer
	DirOut = "out" // the envelope went, or was to go, to the peer
)

// Events: what happened to the envelope. Readers must accept events they do
// not know; newer builds may add some.
const (
	EventSent       = "sent"        // out: written to the peer's link
	EventReceived   = "received"    // in: verified and admitted
	EventAcked      = "acked"       // out: the peer acknowledged our envelope
	EventDuplicate  = "duplicate"   // in: a repeat, acknowledged but not delivered again
	EventRefused    = "refused"     // in or out: refused; Reason says why
	EventRetry      = "retry"       // out: a send attempt failed and will be retried; Attempt, Reason
	EventExpired    = "expired"     // in or out: its time to live ran out before delivery
	EventStored     = "stored"      // out: a broker on the way (NATS) stored it; the recipient's ack is awaited
	EventDeadLetter = "dead_letter" // out: given up on after the last retry; Reason
	EventConsumed   = "consumed"    // in: the consumer acknowledged the inbox item
	EventAcks       = "acks"        // in: Count acks arrived from the peer on its own connections since the previous such row
	// EventDroppedDeadLetter (out): a dead letter deleted for good to
	// bound the disk; Reason is "cap: " or "retention: " and its reason.
	EventDroppedDeadLetter = "dropped_dead_letter"
	// EventDropped is written by the Log itself, not by callers: Reason
	// holds the decimal number of records lost (queue full or a write
	// error) since the previous dropped row. Its other fields are empty.
	EventDropped = "dropped"
)

// Events are the events this build writes, in the order of a send's
// life: what a filter on the event may name.
var Events = []string{EventReceived, EventDuplicate, EventRefused, EventAcks, EventSent, EventAcked,
	EventRetry, EventStored, EventExpired, EventDeadLetter, EventDroppedDeadLetter, EventDropped}

// Record is one row of the log. Only Time and Event are required; the
// writer fills Time when it is zero. A Record is a plain value: the Log
// copies what it keeps (including Body), so the caller may reuse its
// buffers after [Log.Record] returns.
type Record struct {
	Time    time.Time       `json:"time"`              // written in UTC, RFC 3339 with nanoseconds
	Dir     string          `json:"dir"`               // DirIn or DirOut; empty only for EventDropped
	Event   string          `json:"event"`             // one of the Event constants
	Peer    string          `json:"peer,omitempty"`    // the peer's trust-list name, if known
	Key     string          `json:"key,omitempty"`     // the peer's key text, "ed25519:<base64>"
	Claimed string          `json:"claimed,omitempty"` // a refused envelope's unverified sender key, or "*" for many; never in Key
	Kind    string          `json:"kind,omitempty"`    // message, request, response, ack, ...
	ID      string          `json:"id,omitempty"`      // envelope id (UUID text); for acked, our envelope's id
	CorrID  string          `json:"corr_id,omitempty"` // in_reply_to of a response or ack
	Size    int             `json:"size,omitempty"`    // bytes on the wire
	Reason  string          `json:"reason,omitempty"`  // why refused, retried, expired or dead-lettered
	Attempt int             `json:"attempt,omitempty"` // send attempt number, from 1
	Count   int             `json:"count,omitempty"`   // a summary row: how many events it stands for (0: one)
	Sealed  bool            `json:"sealed,omitempty"`  // the envelope travelled sealed to its recipient (through NATS)
	Body    json.RawMessage `json:"body,omitempty"`    // only with Options.Bodies; see appendRecord
}

// ParseLine parses one line of the log (with or without its newline). It
// accepts what the writer produces and any other JSON object with those
// fields — unknown fields are ignored and unknown events kept, for newer
// builds — provided every known field has the right JSON type and time is
// a valid RFC 3339 time (as encoding/json parses it) whose UTC year is
// 0–9999. Time is returned in UTC; Body is returned
// compacted, and a null body as nil. Errors match [ErrMalformed].
//
// A record ParseLine returns encodes to a line that parses to the same
// record (FuzzParseLine checks this).
func ParseLine(line []byte) (Record, error) {
	if len(line) > MaxLineSize+2 { // +2: "\r\n"
		return Record{}, fmt.Errorf("%w: longer than %d bytes", ErrMalformed, MaxLineSize)
	}
	var r Record
	if err := json.Unmarshal(line, &r); err != nil {
		return Record{}, jsonError(err)
	}
	if r.Time.IsZero() {
		return Record{}, fmt.Errorf("%w: no time", ErrMalformed)
	}
	// An offset can move a time at the edge of years 0–9999 out of them;
	// it could not be written back in UTC.
	r.Time = r.Time.UTC()
	if y := r.Time.Year(); y < 0 || y > 9999 {
		return Record{}, fmt.Errorf("%w: time out of range", ErrMalformed)
	}
	if r.Body != nil {
		// The writer stores a body that is not valid UTF-8 JSON as a
		// string, so a raw body with invalid UTF-8 was not written by it.
		if !utf8.Valid(r.Body) {
			return Record{}, fmt.Errorf("%w: body is not UTF-8", ErrMalformed)
		}
		var buf bytes.Buffer
		if err := json.Compact(&buf, r.Body); err != nil {
			return Record{}, fmt.Errorf("%w: bad body", ErrMalformed) // unreachable: Unmarshal validated it
		}
		r.Body = buf.Bytes()
		if string(r.Body) == "null" {
			r.Body = nil
		}
	}
	return r, nil
}

// jsonError turns an encoding/json error into an ErrMalformed without
// echoing input (time.ParseError, for one, quotes the text).
func jsonError(err error) error {
	var syn *json.SyntaxError
	var typ *json.UnmarshalTypeError
	switch {
	case errors.As(err, &syn):
		return fmt.Errorf("%w: invalid JSON at offset %d", ErrMalformed, syn.Offset)
	case errors.As(err, &typ) && typ.Field != "":
		return fmt.Errorf("%w: field %s has the wrong type", ErrMalformed, typ.Field)
	case errors.As(err, &typ):
		return fmt.Errorf("%w: not a JSON object", ErrMalformed)
	default:
		return fmt.Errorf("%w: invalid field value", ErrMalformed)
	}
}

// appendRecord appends r as one JSON line (with its newline) to b. The
// output is byte for byte what a json.Encoder with SetEscapeHTML(false)
// writes for r with Time in UTC (TestAppendRecordMatchesJSON), at a fraction
// of the cost (BenchmarkEncode) — except for a Body that is not valid UTF-8
// JSON, which encoding/json refuses and appendRecord writes as a JSON string
// of its bytes. A valid body is compacted, so the line has no newline in it.
//
// A Time outside years 0–9999 cannot be written as RFC 3339; the writer
// replaces it (see [Log.Record]) before calling appendRecord.
func appendRecord(b []byte, r *Record) []byte {
	b = append(b, `{"time":"`...)
	b = r.Time.UTC().AppendFormat(b, time.RFC3339Nano)
	b = append(b, `","dir":`...)
	b = appendString(b, r.Dir)
	b = append(b, `,"event":`...)
	b = appendString(b, r.Event)
	b = appendField(b, `,"peer":`, r.Peer)
	b = appendField(b, `,"key":`, r.Key)
	b = appendField(b, `,"claimed":`, r.Claimed)
	b = appendField(b, `,"kind":`, r.Kind)
	b = appendField(b, `,"id":`, r.ID)
	b = appendField(b, `,"corr_id":`, r.CorrID)
	if r.Size != 0 {
		b = append(b, `,"size":`...)
		b = strconv.AppendInt(b, int64(r.Size), 10)
	}
	b = appendField(b, `,"reason":`, r.Reason)
	if r.Attempt != 0 {
		b = append(b, `,"attempt":`...)
		b = strconv.AppendInt(b, int64(r.Attempt), 10)
	}
	if r.Count != 0 {
		b = append(b, `,"count":`...)
		b = strconv.AppendInt(b, int64(r.Count), 10)
	}
	if r.Sealed {
		b = append(b, `,"sealed":true`...)
	}
	if len(r.Body) > 0 {
		b = append(b, `,"body":`...)
		b = appendBody(b, r.Body)
	}
	return append(b, '}', '\n')
}

// appendBody appends body compacted if it is valid UTF-8 JSON, else as a
// JSON string.
func appendBody(b []byte, body []byte) []byte {
	if utf8.Valid(body) {
		buf := bytes.NewBuffer(b)
		if json.Compact(buf, body) == nil { // on error buf is unchanged
			return buf.Bytes()
		}
	}
	return appendString(b, string(body))
}

func appendField(b []byte, key, v string) []byte {
	if v == "" {
		return b
	}
	return appendString(append(b, key...), v)
}

const hexDigits = "0123456789abcdef"

// appendString appends s as a JSON string the way encoding/json does
// without HTML escaping: short escapes for \" \\ \b \f \n \r \t, \u00XX for
// other control characters, \ufffd for each invalid UTF-8 byte, and
// \u2028, \u2029 escaped for JavaScript.
func appendString(b []byte, s string) []byte {
	b = append(b, '"')
	start := 0
	for i := 0; i < len(s); {
		c := s[i]
		if c < utf8.RuneSelf {
			if c >= 0x20 && c != '"' && c != '\\' {
				i++
				continue
			}
			b = append(b, s[start:i]...)
			switch c {
			case '"', '\\':
				b = append(b, '\\', c)
			case '\b':
				b = append(b, '\\', 'b')
			case '\f':
				b = append(b, '\\', 'f')
			case '\n':
				b = append(b, '\\', 'n')
			case '\r':
				b = append(b, '\\', 'r')
			case '\t':
				b = append(b, '\\', 't')
			default:
				b = append(b, '\\', 'u', '0', '0', hexDigits[c>>4], hexDigits[c&0xf])
			}
			i++
			start = i
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && size == 1:
			b = append(b, s[start:i]...)
			b = append(b, `\ufffd`...)
		case r == '\u2028' || r == '\u2029':
			b = append(b, s[start:i]...)
			b = append(b, '\\', 'u', '2', '0', '2', hexDigits[r&0xf])
		default:
			i += size
			continue
		}
		i += size
		start = i
	}
	b = append(b, s[start:]...)
	return append(b, '"')
}

// truncate cuts s to at most n bytes at a UTF-8 boundary.
func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n]
}

// clamp applies the writer's limits to r: Time in range, string fields at
// most MaxFieldSize.
func (r *Record) clamp(now func() time.Time) {
	if y := r.Time.UTC().Year(); y < 0 || y > 9999 {
		r.Time = now()
	}
	r.Dir = truncate(r.Dir, MaxFieldSize)
	r.Event = truncate(r.Event, MaxFieldSize)
	r.Peer = truncate(r.Peer, MaxFieldSize)
	r.Key = truncate(r.Key, MaxFieldSize)
	r.Claimed = truncate(r.Claimed, MaxFieldSize)
	r.Kind = truncate(r.Kind, MaxFieldSize)
	r.ID = truncate(r.ID, MaxFieldSize)
	r.CorrID = truncate(r.CorrID, MaxFieldSize)
	r.Reason = truncate(r.Reason, MaxFieldSize)
}
