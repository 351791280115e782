package node

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/meerkatd/meerkatd/identity"
	"github.com/meerkatd/meerkatd/inbox/store"
)

// CodeIdempotencyConflict: an idempotency key was used again with another
// operation or other arguments, or its first call has not finished (it
// runs now, or it was interrupted and its outcome is unknown).
const CodeIdempotencyConflict = "idempotency_conflict"

// MaxIdempotencyKey bounds an idempotency key, in bytes.
const MaxIdempotencyKey = 128

// idempotencyWindow is how long a key's first result is replayed
// (agent.idempotency_window_secs).
func (n *Node) idempotencyWindow() time.Duration { return n.h.Config.Agent.IdempotencyWindow() }

// sentHistory is how long send records are kept (agent.sent_history_hours).
func (n *Node) sentHistory() time.Duration { return n.h.Config.Agent.SentHistory() }

// CheckIdempotencyKey reports whether key can be an idempotency key: 1 to
// MaxIdempotencyKey bytes of printable UTF-8 (spaces allowed, no control
// characters).
func CheckIdempotencyKey(key string) error {
	switch {
	case key == "":
		return errorf(CodeBadArgument, "an idempotency key must not be empty")
	case len(key) > MaxIdempotencyKey:
		return errorf(CodeBadArgument, "an idempotency key is at most %d bytes, got %d", MaxIdempotencyKey, len(key))
	case !utf8.ValidString(key):
		return errorf(CodeBadArgument, "an idempotency key must be valid UTF-8")
	}
	for _, r := range key {
		if !unicode.IsPrint(r) {
			return errorf(CodeBadArgument, "an idempotency key must be printable text (found %U)", r)
		}
	}
	return nil
}

// argsHash is the hash of an operation's arguments a key is bound to.
func argsHash(op string, args any) ([]byte, error) {
	b, err := json.Marshal(args)
	if err != nil {
		return nil, fmt.Errorf("bug: idempotency: arguments of %s: %w", op, err)
	}
	h := sha256.New()
	h.Write([]byte(op))
	h.Write([]byte{0})
	h.Write(b)
	return h.Sum(nil), nil
}

// lockKey makes the calls of one key in this process run one at a time:
// it returns once no other call holds key, and the function that lets the
// next one in.
func (n *Node) lockKey(ctx context.Context, key string) (func(), error) {
	for {
		n.sent.mu.Lock()
		if n.sent.busy == nil {
			n.sent.busy = map[string]chan struct{}{}
			n.sent.owner = identity.NewUUID().String()
		}
		ch, held := n.sent.busy[key]
		if !held {
			ch = make(chan struct{})
			n.sent.busy[key] = ch
			n.sent.mu.Unlock()
			return func() {
				n.sent.mu.Lock()
				delete(n.sent.busy, key)
				n.sent.mu.Unlock()
				close(ch)
			}, nil
		}
		n.sent.mu.Unlock()
		select {
		case <-ch:
		case <-ctx.Done():
			return nil, errorf(CodeIdempotencyConflict, "a call with this idempotency key is still running")
		case <-n.stopped:
			return nil, Coded(ErrClosed)
		}
	}
}

// idempotentKeep runs fn at most once for key within
// agent.idempotency_window_secs, also across restarts (the key is kept in
// the home's database; in memory mode in the running node): a later call
// with the same key, op and args returns the first call's result, as
// JSON, with replayed true, without running fn. The same key with
// another op or other args fails with CodeIdempotencyConflict. Calls with
// one key run one at a time. fn says whether its result is kept for
// replay (keep) apart from its error: a send that went out but whose wait
// for an answer failed is kept, with the error returned only to the first
// call; if nothing is kept, the key is released and a retry runs fn
// again. fn gets the call's name (callOf), the same at every run for the
// same key, op and args within the key's window: sends sealed under it
// (sendSpec.call) carry the same envelope ids at every run, so a retry
// after an attempt whose outcome was unknown (its ack lost) is dropped by
// a peer that got the first. args are the operation's arguments without the key (they are
// hashed, as JSON). The features' sends use it through idempotentResult
// or idempotentCall, each with its own op name.
func (n *Node) idempotentKeep(ctx context.Context, key, op string, args any, fn func(call []byte) (v any, keep bool, err error)) (json.RawMessage, bool, error) {
	if err := CheckIdempotencyKey(key); err != nil {
		return nil, false, err
	}
	hash, err := argsHash(op, args)
	if err != nil {
		return nil, false, err
	}
	unlock, err := n.lockKey(ctx, key)
	if err != nil {
		return nil, false, err
	}
	defer unlock()
	st, err := n.sentStore()
	if err != nil {
		return nil, false, Coded(err)
	}
	now := time.Now()
	got, claimed, err := st.ClaimKey(store.Idem{Key: key, Op: op, ArgsHash: hash, Owner: n.sent.owner, Created: now},
		now.Add(-n.idempotencyWindow()))
	if err != nil {
		return nil, false, Coded(err)
	}
	if !claimed {
		switch {
		case got.Op != op || !bytes.Equal(got.ArgsHash, hash):
			return nil, false, errorf(CodeIdempotencyConflict, "idempotency key %q was used at %s for another call (%s with other arguments): use a new key for a new call",
				key, got.Created.UTC().Format(time.RFC3339), got.Op)
		case got.Result == nil:
			return nil, false, errorf(CodeIdempotencyConflict, "the first call with idempotency key %q (at %s) has not finished: it runs elsewhere, or it was interrupted and may have sent; check message_status or meerkatd sent before using a new key",
				key, got.Created.UTC().Format(time.RFC3339))
		}
		return got.Result, true, nil
	}
	k := got
	v, keep, ferr := fn(callOf(key, hash, k.CallAt))
	var out json.RawMessage
	if keep {
		if out, err = json.Marshal(v); err != nil {
			keep = false
		}
	}
	if keep {
		k.Result = out
		if err := st.FinishKey(k); err != nil {
			n.log.Warn("idempotency key: result not stored", "err", err)
		}
	} else if err := st.ReleaseKey(k); err != nil {
		n.log.Warn("idempotency key: not released", "err", err)
	}
	return out, false, ferr
}

// callOf names the call made with idempotency key and the hash of its op
// and arguments, first claimed at first, for comms.Router.SealCall and
// CallID: the key, a zero byte (a key holds none: it is printable), the
// hash and first in Unix nanoseconds (8 bytes, big-endian). A retry of a
// failed call within the key's window is claimed under the first claim's
// time, so it is the same call and its envelopes carry the same ids; the
// same key and arguments used again after the window are a new call, with
// new ids, which a peer that still remembers the old ones delivers.
func callOf(key string, hash []byte, first time.Time) []byte {
	call := make([]byte, 0, len(key)+1+len(hash)+8)
	call = append(call, key...)
	call = append(call, 0)
	call = append(call, hash...)
	return binary.BigEndian.AppendUint64(call, uint64(first.UnixNano()))
}

// sendArgs are the arguments a send's idempotency key is bound to: what
// is sent and how (not how long the caller waits). Peer is the peer's
// key once resolved, so "bob" and bob's key or UUID are the same call.
// A request's deadline is left out on purpose: given as a duration
// ("5m") it is another time at each retry.
type sendArgs struct {
	Peer      string          `json:"peer"`
	Body      string          `json:"body,omitempty"`
	Intent    string          `json:"intent,omitempty"`
	Params    json.RawMessage `json:"params,omitempty"`
	Request   string          `json:"request_id,omitempty"`
	Status    string          `json:"status,omitempty"`
	Reliable  bool            `json:"reliable"`
	TTL       time.Duration   `json:"ttl"`
	TaskID    string          `json:"task_id,omitempty"`
	Interrupt bool            `json:"interrupt,omitempty"`
}

// idempotentSend runs a send under opts.IdempotencyKey: once sent (acked,
// written or queued), a retry with the key returns the first Sent with
// Replayed set, whether or not the first call then failed waiting. The
// replayed Sent has no Responses (a request's responses are in the
// inbox). A send that failed (its ack did not come, say) releases the
// key, but send seals under call (sendSpec.call): the retry carries the
// first attempt's envelope id, and a peer that got that attempt drops the
// repeat and acknowledges it, so the peer gets the envelope once.
func (n *Node) idempotentSend(ctx context.Context, op string, a sendArgs, opts SendOptions, send func(o SendOptions, call []byte) (Sent, error)) (Sent, error) {
	key := opts.IdempotencyKey
	opts.IdempotencyKey = ""
	a.Reliable, a.TTL, a.TaskID, a.Interrupt = opts.Reliable, opts.TTL, opts.TaskID, opts.Interrupt
	a.Params = compactJSON(a.Params)
	if p, err := n.r.ResolvePeer(a.Peer); err == nil {
		a.Peer = p.ID.String() // an unknown peer stays as given: the send fails, and nothing is kept
	}
	var first Sent
	s, replayed, err := idempotentCall(n, ctx, key, op, a, func(call []byte) (Sent, bool, error) {
		s, err := send(opts, call)
		first = s
		kept := s
		kept.Responses = nil // bounded: the responses are in the inbox
		return kept, s.Delivery != "" && s.Delivery != DeliveryFailed, err
	})
	if !replayed {
		return first, err
	}
	s.Replayed = true
	return s, nil
}

// compactJSON is v without insignificant space, so that the same JSON
// however it is spaced binds a key to the same arguments; v as it is if
// it does not parse.
func compactJSON(v json.RawMessage) json.RawMessage {
	var buf bytes.Buffer
	if len(v) == 0 || json.Compact(&buf, v) != nil {
		return v
	}
	return buf.Bytes()
}

// idempotentResult is idempotentKeep for an operation with a result of
// type T: the first call returns fn's own result and error, a replay the
// result kept, decoded.
func idempotentResult[T any](n *Node, ctx context.Context, key, op string, args any, fn func() (T, bool, error)) (v T, replayed bool, err error) {
	return idempotentCall(n, ctx, key, op, args, func([]byte) (T, bool, error) { return fn() })
}

// idempotentCall is idempotentResult whose fn gets the call's name, to
// seal its sends under (sendSpec.call).
func idempotentCall[T any](n *Node, ctx context.Context, key, op string, args any, fn func(call []byte) (T, bool, error)) (v T, replayed bool, err error) {
	var first T
	raw, replayed, err := n.idempotentKeep(ctx, key, op, args, func(call []byte) (any, bool, error) {
		v, keep, err := fn(call)
		first = v
		return v, keep, err
	})
	if !replayed {
		return first, false, err
	}
	if uerr := json.Unmarshal(raw, &v); uerr != nil {
		return v, false, errorf(CodeInternal, "the stored result of idempotency key %q does not decode: %v", key, uerr)
	}
	return v, true, nil
}

// idempotentSpaceSend runs SpaceSend under m.IdempotencyKey: once any
// copy was sent, a retry with the key returns the first SpaceSent
// (nothing is sent again). If no copy was sent (every one failed: an ack
// lost, say), the key is released, but the send is made as the key's
// call (spaceSend): the retry sends the same MEUP id under the same
// envelope ids, so a member that got a copy of the failed attempt drops
// the repeat and acknowledges it, and this node does not apply the
// envelope a second time (space.Engine.Send).
func (n *Node) idempotentSpaceSend(ctx context.Context, m SpaceMessage) (SpaceSent, error) {
	key := m.IdempotencyKey
	m.IdempotencyKey = ""
	args := m
	args.NoWait, args.Wait = false, 0
	op := "space_send"
	if m.Action != "" && m.Action != ActSend {
		op = "space_" + m.Action // as the tool is named: space_chat, space_grant, …
	}
	s, replayed, err := idempotentCall(n, ctx, key, op, args, func(call []byte) (SpaceSent, bool, error) {
		s, err := n.spaceSend(ctx, m, call)
		sent := false
		for _, c := range s.Copies {
			sent = sent || c.Delivery != ""
		}
		return s, sent, err
	})
	s.Replayed = replayed
	return s, err
}
