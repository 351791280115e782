package mcpserver

import (
	"cmp"
	"context"
	"encoding/json"
	"maps"
	"slices"
	"sync"

	"github.com/mark3labs/mcp-go/mcp"
	"github.com/mark3labs/mcp-go/server"

	"github.com/meerkatd/meerkatd/comms/node"
)

// One server speaks both protocol eras (docs/mcp.md, "Protocol
// revisions"); the era is a property of each request, which mcp-go
// classifies by its _meta:
//
//   - 2025-11-25 and earlier ("legacy"): the client opens with initialize.
//     It subscribes to meerkat://inbox with resources/subscribe and is then
//     sent notifications/resources/updated until it unsubscribes, and a
//     notifications/message log event per arrival.
//   - 2026-07-28 ("modern"): no handshake; server/discover describes the
//     server, and every request carries its version in _meta. The server
//     sends nothing unsolicited: notifications/resources/updated for
//     meerkat://inbox go only to an open subscriptions/listen stream that
//     asked for it, tagged with the stream's id (_meta
//     io.modelcontextprotocol/subscriptionId). Logging is deprecated: no
//     log events, and server/discover does not offer the capability.
//
// A session that completed initialize is a legacy one; the others get only
// what they listen for. mcp-go serves both vocabularies; who is sent which
// notification is left to the application, and watchers records it from
// mcp-go's hooks.

// watchers records which client sessions are told about arrivals. It is
// safe for concurrent use; the zero value is not (use newWatchers).
type watchers struct {
	mu  sync.Mutex
	seq uint64 // listen streams opened so far
	// legacy holds the sessions that completed initialize, which get
	// arrival log events (at level info), with the level each asked for
	// with logging/setLevel ("" until it asks: info is sent).
	legacy map[string]mcp.LoggingLevel
	inbox  map[string]bool // legacy sessions subscribed to meerkat://inbox
	listen map[listenKey]listener
}

// listenKey names an open subscriptions/listen stream: its session and its
// request id in canonical form (idKey).
type listenKey struct{ session, id string }

// listener is an open subscriptions/listen stream that includes
// meerkat://inbox.
type listener struct {
	seq     uint64 // opening order: streams are notified oldest first
	session server.ClientSession
	id      any // the listen request's id, as mcp-go decoded it
}

func newWatchers() *watchers {
	return &watchers{legacy: map[string]mcp.LoggingLevel{}, inbox: map[string]bool{}, listen: map[listenKey]listener{}}
}

func (w *watchers) setLegacy(session string) {
	w.mu.Lock()
	if _, ok := w.legacy[session]; !ok {
		w.legacy[session] = ""
	}
	w.mu.Unlock()
}

// setLevel records the least level of log events session asked for.
func (w *watchers) setLevel(session string, level mcp.LoggingLevel) {
	w.mu.Lock()
	if _, ok := w.legacy[session]; ok {
		w.legacy[session] = level
	}
	w.mu.Unlock()
}

func (w *watchers) subscribe(session string, on bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if on {
		w.inbox[session] = true
	} else {
		delete(w.inbox, session)
	}
}

func (w *watchers) openListen(session server.ClientSession, id any) {
	k, ok := listenKeyOf(session, id)
	if !ok {
		return
	}
	w.mu.Lock()
	w.seq++
	w.listen[k] = listener{seq: w.seq, session: session, id: id}
	w.mu.Unlock()
}

func (w *watchers) closeListen(session server.ClientSession, id any) {
	if k, ok := listenKeyOf(session, id); ok {
		w.mu.Lock()
		delete(w.listen, k)
		w.mu.Unlock()
	}
}

// forget drops everything recorded for a session that ended.
func (w *watchers) forget(session string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	delete(w.legacy, session)
	delete(w.inbox, session)
	for k := range w.listen {
		if k.session == session {
			delete(w.listen, k)
		}
	}
}

// legacySessions returns the sessions that get arrival log events: those
// that completed initialize and did not ask for a level above info.
func (w *watchers) legacySessions() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	var out []string
	for session, level := range w.legacy {
		if level == "" || mcp.LoggingLevelInfo.ShouldSendTo(level) {
			out = append(out, session)
		}
	}
	slices.Sort(out)
	return out
}

// inboxWatchers returns the legacy sessions subscribed to meerkat://inbox
// and the listen streams that include it, oldest first.
func (w *watchers) inboxWatchers() (subscribed []string, listens []listener) {
	w.mu.Lock()
	defer w.mu.Unlock()
	subscribed = slices.Sorted(maps.Keys(w.inbox))
	for _, l := range w.listen {
		listens = append(listens, l)
	}
	slices.SortFunc(listens, func(a, b listener) int { return cmp.Compare(a.seq, b.seq) })
	return subscribed, listens
}

func listenKeyOf(session server.ClientSession, id any) (listenKey, bool) {
	if session == nil {
		return listenKey{}, false
	}
	b, err := json.Marshal(id)
	if err != nil {
		return listenKey{}, false
	}
	k, ok := idKey(b)
	return listenKey{session: session.SessionID(), id: k}, ok
}

// hooks connects the watchers to mcp-go's request handling.
func (s *Server) hooks() *server.Hooks {
	h := &server.Hooks{}
	sessionOf := server.ClientSessionFromContext
	h.AddAfterInitialize(func(ctx context.Context, _ any, _ *mcp.InitializeRequest, _ *mcp.InitializeResult) {
		if ss := sessionOf(ctx); ss != nil {
			s.watch.setLegacy(ss.SessionID())
		}
	})
	h.AddAfterSetLevel(func(ctx context.Context, _ any, req *mcp.SetLevelRequest, _ *mcp.EmptyResult) {
		if ss := sessionOf(ctx); ss != nil {
			s.watch.setLevel(ss.SessionID(), req.Params.Level)
		}
	})
	h.AddAfterSubscribe(func(ctx context.Context, _ any, req *mcp.SubscribeRequest, _ *mcp.EmptyResult) {
		if ss := sessionOf(ctx); ss != nil && req.Params.URI == InboxURI {
			s.watch.subscribe(ss.SessionID(), true)
		}
	})
	h.AddAfterUnsubscribe(func(ctx context.Context, _ any, req *mcp.UnsubscribeRequest, _ *mcp.EmptyResult) {
		if ss := sessionOf(ctx); ss != nil && req.Params.URI == InboxURI {
			s.watch.subscribe(ss.SessionID(), false)
		}
	})
	h.AddOnUnregisterSession(func(_ context.Context, ss server.ClientSession) {
		s.watch.forget(ss.SessionID())
	})
	// The server sends no log events to 2026-07-28 clients (logging is
	// deprecated there, and they could ask for events only per request),
	// so discover does not offer logging; initialize still does.
	h.AddAfterDiscover(func(_ context.Context, _ any, _ *mcp.DiscoverRequest, res *mcp.DiscoverResult) {
		res.Capabilities.Logging = nil
	})
	// mcp-go acknowledges every resource URI a listen asks for; meerkat://inbox
	// is the only one this server ever reports changes of, so the request
	// is narrowed to it before mcp-go handles (and acknowledges) it: the
	// acknowledgement then says what the client will really be told about.
	// The stream is recorded here rather than after the acknowledgement
	// (there is no hook in between), so an arrival racing the
	// acknowledgement may be announced just before it: announced early
	// rather than lost.
	h.AddBeforeSubscriptionsListen(func(ctx context.Context, id any, req *mcp.SubscriptionsListenRequest) {
		f := &req.Params.Notifications
		inbox := slices.Contains(f.ResourceSubscriptions, InboxURI)
		f.ResourceSubscriptions = nil
		if inbox {
			f.ResourceSubscriptions = []string{InboxURI}
			s.watch.openListen(sessionOf(ctx), id)
		}
	})
	h.AddAfterSubscriptionsListen(func(ctx context.Context, id any, _ *mcp.SubscriptionsListenRequest, _ *mcp.SubscriptionsListenResult) {
		s.watch.closeListen(sessionOf(ctx), id)
	})
	h.AddOnError(func(ctx context.Context, id any, method mcp.MCPMethod, _ any, _ error) {
		if method == mcp.MethodSubscriptionsListen {
			s.watch.closeListen(sessionOf(ctx), id)
		}
	})
	return h
}

// inboxChanged tells the clients watching meerkat://inbox that it changed:
// legacy sessions that subscribed to it, and listen streams that asked for
// it (tagged with the stream's id).
func (s *Server) inboxChanged() {
	subscribed, listens := s.watch.inboxWatchers()
	for _, session := range subscribed {
		if err := s.mcp.SendNotificationToSpecificClient(session, mcp.MethodNotificationResourceUpdated, map[string]any{"uri": InboxURI}); err != nil {
			s.log.Warn("could not tell an MCP client its inbox changed", "session", session, "err", err)
		}
	}
	for _, l := range listens {
		n := mcp.JSONRPCNotification{
			JSONRPC: mcp.JSONRPC_VERSION,
			Notification: mcp.Notification{
				Method: mcp.MethodNotificationResourceUpdated,
				Params: mcp.NotificationParams{
					Meta:             map[string]any{mcp.MetaKeySubscriptionID: l.id},
					AdditionalFields: map[string]any{"uri": InboxURI},
				},
			},
		}
		// Non-blocking, like mcp-go's own notification sends: the channel
		// is buffered and a client that does not drain it already has
		// updates waiting.
		select {
		case l.session.NotificationChannel() <- n:
		default:
			s.log.Warn("MCP client is not reading its notifications; an inbox update was dropped", "session", l.session.SessionID())
		}
	}
}

// Arrival kinds, the only values of an arrival event's "kind".
const (
	arrivalMessage  = "message"
	arrivalRequest  = "request"
	arrivalResponse = "response"
	arrivalMEUP     = "meup"
	arrivalOther    = "other" // a kind this node does not know: its name is the peer's text
)

// arrivalKind maps an item's kind onto the fixed set of arrival kinds.
func arrivalKind(kind string) string {
	switch kind {
	case arrivalMessage, arrivalRequest, arrivalResponse, arrivalMEUP:
		return kind
	}
	return arrivalOther
}

// announceArrival sends the log event for an arrival to legacy sessions.
// It carries only what this node vouches for, never a byte a peer chose:
// the kind from a fixed set, the sender's name in this node's trust list
// (its key was verified), the envelope id and seq, the pending count and,
// for an envelope of a space, the space's name (admitted only if this
// node's roster has it). A peer's kind text, MEUP kind, ids, bodies and
// params stay in receive_messages, marked untrusted. A coalesced event
// (arrivals > 0) describes the latest of arrivals items.
func (s *Server) announceArrival(m node.Message, pending, arrivals int) {
	data := map[string]any{"event": "arrival", "kind": arrivalKind(m.Kind), "peer": m.Peer, "id": m.ID, "seq": m.Seq, "pending": pending}
	if arrivals > 0 {
		data["arrivals"] = arrivals
	}
	if m.MEUP != nil && m.Kind == arrivalMEUP {
		data["space"] = m.MEUP.Space
	}
	for _, session := range s.watch.legacySessions() {
		err := s.mcp.SendNotificationToSpecificClient(session, string(mcp.MethodNotificationMessage), map[string]any{
			"level":  "info",
			"logger": "meerkatd",
			"data":   data,
		})
		if err != nil {
			s.log.Warn("could not announce an arrival to an MCP client", "session", session, "err", err)
		}
	}
}
