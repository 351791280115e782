package store

import (
	"bytes"
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"math"
	"strconv"
	"time"

	"github.com/meerkatd/meerkatd/comms/meup"
	"github.com/meerkatd/meerkatd/comms/space"
	"github.com/meerkatd/meerkatd/identity"
)

// spaces is the durable [space.Store] of a [Store] (see [Store.Spaces]).
type spaces struct{ s *Store }

var _ space.Store = spaces{}

// Spaces returns the MEUP space engine's store in the same database file
// as the inbox (tables space_seen, space_grants and space_proposals,
// schema version 5). It is cheap; every call returns a view of the same
// tables, safe for concurrent use.
//
// Its writes go through the Store's committer like admissions, so they
// group-commit with them and return once on disk. Its reads run beside
// the committer and see every write that returned before them. After the
// Store is closed every method returns [ErrClosed]; on a store opened
// with Options.ReadOnly the reads work and the writes return
// [ErrReadOnly].
//
// It bounds nothing: the engine bounds how many grants and proposals a
// space holds. Times round-trip at nanosecond precision (Unix
// nanoseconds, read back in the local time zone); the zero time is
// stored as NULL. Times outside the years 1678 to 2262 are refused, also
// as Expire cutoffs. Capabilities are kept as one JSON array per grant
// whose kinds and payloads are the given bytes, verbatim; a kind or
// payload that is not valid JSON is refused, as is a proposal payload.
// A row that does not decode (a file edited by hand) fails the read with
// an error naming its table and row, never a panic.
func (s *Store) Spaces() space.Store { return spaces{s: s} }

// spaceReq carries the arguments of a space op to the committer. Times
// were checked by the caller (checkSpaceTime), so nanos cannot fail there.
type spaceReq struct {
	space  string
	sender identity.PeerID // opSpaceRemember, opSpaceForget
	id     string          // opSpaceRemember, opSpaceForget
	copy   string          // opSpaceRemember
	at     time.Time       // opSpaceRemember
	ids    []string        // opSpaceDeleteGrants
	grant  space.Grant     // opSpacePutGrant
	caps   string          // opSpacePutGrant: grant.Capabilities as JSON
	prop   space.Proposal  // opSpacePutProposal

	seenBefore, closedBefore time.Time // opSpaceExpire
}

// checkSpaceTime refuses a non-zero t that Unix nanoseconds cannot hold.
func checkSpaceTime(op string, t time.Time) error {
	if t.IsZero() {
		return nil
	}
	if t.Before(time.Unix(0, math.MinInt64)) || t.After(time.Unix(0, math.MaxInt64)) {
		return fmt.Errorf("store: space: %s: time %s out of range", op, t.UTC().Format(time.RFC3339))
	}
	return nil
}

// Remember implements [space.Store]: it returns after the commit.
func (sp spaces) Remember(spc string, sender identity.PeerID, id, copy string, at time.Time) (space.Remembered, error) {
	if err := checkSpaceTime("remember", at); err != nil {
		return space.RememberRepeat, err
	}
	res := sp.s.do(context.Background(), &request{op: opSpaceRemember, sp: &spaceReq{space: spc, sender: sender, id: id, copy: copy, at: at}})
	return space.Remembered(res.n), res.err
}

// Forget implements [space.Store]: it returns after the commit.
func (sp spaces) Forget(spc string, sender identity.PeerID, id string) error {
	return sp.s.do(context.Background(), &request{op: opSpaceForget, sp: &spaceReq{space: spc, sender: sender, id: id}}).err
}

// PutGrant implements [space.Store]: it returns after the commit.
func (sp spaces) PutGrant(g space.Grant) error {
	if err := checkSpaceTime("put grant", g.Created); err != nil {
		return err
	}
	caps, err := encodeCapabilities(g.Capabilities)
	if err != nil {
		return fmt.Errorf("store: space: grant %q in %q: %w", g.ID, g.Space, err)
	}
	g.Capabilities = nil // the committer writes caps
	return sp.s.do(context.Background(), &request{op: opSpacePutGrant, sp: &spaceReq{grant: g, caps: caps}}).err
}

// DeleteGrants implements [space.Store]: it returns after the commit.
func (sp spaces) DeleteGrants(spc string, ids ...string) (int, error) {
	if len(ids) == 0 {
		return 0, sp.s.checkOpen()
	}
	res := sp.s.do(context.Background(), &request{op: opSpaceDeleteGrants, sp: &spaceReq{space: spc, ids: append([]string(nil), ids...)}})
	return res.n, res.err
}

// Grants implements [space.Store]. Grants created at the same time are
// ordered by space, then ID.
func (sp spaces) Grants(spc string) ([]space.Grant, error) {
	var out []space.Grant
	err := sp.s.readArgs("store: space: read space_grants", `SELECT space, id, granter, grantee, capabilities, created
		FROM space_grants WHERE ?1 = '' OR space = ?1 ORDER BY created, space, id`, []any{spc}, func(rows *sql.Rows) error {
		var (
			g                space.Grant
			granter, grantee []byte
			caps             string
			created          sql.NullInt64
		)
		if err := rows.Scan(&g.Space, &g.ID, &granter, &grantee, &caps, &created); err != nil {
			return err
		}
		if len(granter) != len(g.Granter) {
			return fmt.Errorf("grant %q in %q has a malformed granter key (%d bytes)", g.ID, g.Space, len(granter))
		}
		if len(grantee) != len(g.Grantee) {
			return fmt.Errorf("grant %q in %q has a malformed grantee key (%d bytes)", g.ID, g.Space, len(grantee))
		}
		cs, err := decodeCapabilities(caps)
		if err != nil {
			return fmt.Errorf("grant %q in %q: %w", g.ID, g.Space, err)
		}
		g.Granter, g.Grantee = identity.PeerID(granter), identity.PeerID(grantee)
		g.Capabilities, g.Created = cs, fromNanos(created)
		out = append(out, g)
		return nil
	})
	return out, err
}

// PutProposal implements [space.Store]: it returns after the commit.
func (sp spaces) PutProposal(p space.Proposal) error {
	for _, t := range []time.Time{p.Created, p.Expires, p.Updated} {
		if err := checkSpaceTime("put proposal", t); err != nil {
			return err
		}
	}
	if len(p.Payload) > 0 && !json.Valid(p.Payload) {
		return fmt.Errorf("store: space: proposal %q in %q: payload is not valid JSON", p.ID, p.Space)
	}
	p.Payload = bytes.Clone(p.Payload) // the caller may change it while the request waits
	return sp.s.do(context.Background(), &request{op: opSpacePutProposal, sp: &spaceReq{prop: p}}).err
}

// HasProposal implements [space.Store].
func (sp spaces) HasProposal(spc, id string) (bool, error) {
	found := false
	err := sp.s.readArgs("store: space: read space_proposals", `SELECT 1 FROM space_proposals WHERE space = ? AND id = ?`,
		[]any{spc, id}, func(*sql.Rows) error {
			found = true
			return nil
		})
	return found, err
}

// Proposals implements [space.Store]. Proposals created at the same time
// are ordered by space, then ID.
func (sp spaces) Proposals(spc string) ([]space.Proposal, error) {
	var out []space.Proposal
	err := sp.s.readArgs("store: space: read space_proposals", `SELECT space, id, proposer, proposer_key, addressed, payload, state,
		created, expires, updated, closed_by, reason, request_id, response_id, request_to
		FROM space_proposals WHERE ?1 = '' OR space = ?1 ORDER BY created, space, id`, []any{spc}, func(rows *sql.Rows) error {
		var (
			p                         space.Proposal
			key                       []byte
			addressed                 string
			payload, requestTo        sql.NullString
			created, expires, updated sql.NullInt64
		)
		if err := rows.Scan(&p.Space, &p.ID, &p.Proposer, &key, &addressed, &payload, &p.State,
			&created, &expires, &updated, &p.By, &p.Reason, &p.RequestID, &p.ResponseID, &requestTo); err != nil {
			return err
		}
		if len(key) != len(p.Key) {
			return fmt.Errorf("proposal %q in %q has a malformed proposer key (%d bytes)", p.ID, p.Space, len(key))
		}
		p.Key = identity.PeerID(key)
		if err := json.Unmarshal([]byte(addressed), &p.To); err != nil {
			return fmt.Errorf("proposal %q in %q: addressed participants are not a JSON list of texts", p.ID, p.Space)
		}
		if requestTo.Valid {
			if err := json.Unmarshal([]byte(requestTo.String), &p.RequestTo); err != nil {
				return fmt.Errorf("proposal %q in %q: the participants its request addressed are not a JSON list of texts", p.ID, p.Space)
			}
		}
		if payload.Valid {
			if !json.Valid([]byte(payload.String)) {
				return fmt.Errorf("proposal %q in %q: payload is not valid JSON", p.ID, p.Space)
			}
			p.Payload = json.RawMessage(payload.String)
		}
		p.Created, p.Expires, p.Updated = fromNanos(created), fromNanos(expires), fromNanos(updated)
		out = append(out, p)
		return nil
	})
	return out, err
}

// Expire implements [space.Store]: it returns after the commit. A zero
// cutoff deletes nothing of its kind; a row whose time is zero (NULL) is
// before every other cutoff.
func (sp spaces) Expire(seenBefore, closedBefore time.Time) (seen, proposals int, err error) {
	if err := checkSpaceTime("expire", seenBefore); err != nil {
		return 0, 0, err
	}
	if err := checkSpaceTime("expire", closedBefore); err != nil {
		return 0, 0, err
	}
	res := sp.s.do(context.Background(), &request{op: opSpaceExpire, sp: &spaceReq{seenBefore: seenBefore, closedBefore: closedBefore}})
	return res.n, res.m, res.err
}

// encodeCapabilities writes caps as a JSON array of objects with the
// fields of meup.Capability, splicing each Kind and Payload in verbatim
// (json.Marshal would compact and re-escape them). Decoding the result
// into []meup.Capability gives back the same bytes, since a RawMessage
// receives a value's text as it is.
func encodeCapabilities(caps []meup.Capability) (string, error) {
	var b bytes.Buffer
	b.WriteByte('[')
	for i, c := range caps {
		if !json.Valid(c.Kind) {
			return "", fmt.Errorf("capability %d: kind is not valid JSON", i)
		}
		if len(c.Payload) > 0 && !json.Valid(c.Payload) {
			return "", fmt.Errorf("capability %d: payload is not valid JSON", i)
		}
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteByte('{')
		if c.ID != "" {
			id, err := json.Marshal(c.ID)
			if err != nil {
				return "", fmt.Errorf("capability %d: id: %w", i, err)
			}
			b.WriteString(`"id":`)
			b.Write(id)
			b.WriteByte(',')
		}
		b.WriteString(`"kind":`)
		b.Write(c.Kind)
		if len(c.Payload) > 0 {
			b.WriteString(`,"payload":`)
			b.Write(c.Payload)
		}
		b.WriteByte('}')
	}
	b.WriteByte(']')
	return b.String(), nil
}

// decodeCapabilities reads what encodeCapabilities wrote.
func decodeCapabilities(text string) ([]meup.Capability, error) {
	var caps []meup.Capability
	if err := json.Unmarshal([]byte(text), &caps); err != nil {
		return nil, fmt.Errorf("capabilities do not decode: %w", err)
	}
	for i, c := range caps {
		if len(c.Kind) == 0 {
			return nil, fmt.Errorf("capability %d has no kind", i)
		}
	}
	if len(caps) == 0 {
		caps = nil
	}
	return caps, nil
}

// readArgs runs query with args outside the committer (WAL readers do not
// block it) and calls scan for every row. Errors start with prefix.
func (s *Store) readArgs(prefix, query string, args []any, scan func(*sql.Rows) error) error {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.closed {
		return ErrClosed
	}
	rows, err := s.db.Query(query, args...)
	if err != nil {
		return fmt.Errorf("%s: %w", prefix, err)
	}
	defer rows.Close()
	for rows.Next() {
		if err := scan(rows); err != nil {
			return fmt.Errorf("%s: %w", prefix, err)
		}
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("%s: %w", prefix, err)
	}
	if err := s.awaitSynced(); err != nil {
		return fmt.Errorf("%s: %w", prefix, err)
	}
	return nil
}

const (
	sqlSpaceRemember = `INSERT INTO space_seen (space, sender, id, copy, at) VALUES (?, ?, ?, ?, ?)
		ON CONFLICT (space, sender, id) DO NOTHING`
	sqlSpaceSeenCopy = `SELECT copy FROM space_seen WHERE space = ? AND sender = ? AND id = ?`
	sqlSpaceForget   = `DELETE FROM space_seen WHERE space = ? AND sender = ? AND id = ?`
	sqlSpacePutGrant = `INSERT OR REPLACE INTO space_grants (space, id, granter, grantee, capabilities, created)
		VALUES (?, ?, ?, ?, ?, ?)`
	sqlSpaceDeleteGrant = `DELETE FROM space_grants WHERE space = ? AND id = ?`
	sqlSpacePutProposal = `INSERT OR REPLACE INTO space_proposals (space, id, proposer, proposer_key, addressed, payload, state,
		created, expires, updated, closed_by, reason, request_id, response_id, request_to)
		VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`
	// A NULL time is the zero time, before every cutoff.
	sqlSpaceExpireSeen      = `DELETE FROM space_seen WHERE at IS NULL OR at < ?`
	sqlSpaceExpireProposals = `DELETE FROM space_proposals WHERE (state <> '` + space.ProposalPending + `'
		AND (updated IS NULL OR updated < ?1)) OR (state = '` + space.ProposalPending + `' AND (expires IS NULL OR expires < ?1))`
)

// spaceTx runs space ops inside a committer transaction. It shares the
// batch's statement cache with the outbox ops (outboxTx holds it).
type spaceTx struct{ *outboxTx }

// run executes req, setting res. A returned error is the transaction's
// (the batch fails).
func (t spaceTx) run(req *request, res *result) error {
	r := req.sp
	switch req.op {
	case opSpaceRemember:
		n, err := t.exec(sqlSpaceRemember, r.space, r.sender[:], r.id, r.copy, nanos(r.at))
		if err != nil {
			return err
		}
		res.n = int(space.RememberNew)
		if n == 1 {
			return nil
		}
		st, err := t.stmt(sqlSpaceSeenCopy)
		if err != nil {
			return err
		}
		var first string
		if err := st.QueryRowContext(t.ctx, r.space, r.sender[:], r.id).Scan(&first); err != nil {
			return err
		}
		res.n = int(space.RememberRepeat)
		if first == r.copy {
			res.n = int(space.RememberSameCopy)
		}
	case opSpaceForget:
		_, err := t.exec(sqlSpaceForget, r.space, r.sender[:], r.id)
		return err
	case opSpacePutGrant:
		g := r.grant
		_, err := t.exec(sqlSpacePutGrant, g.Space, g.ID, g.Granter[:], g.Grantee[:], r.caps, nanos(g.Created))
		return err
	case opSpaceDeleteGrants:
		for _, id := range r.ids {
			n, err := t.exec(sqlSpaceDeleteGrant, r.space, id)
			if err != nil {
				return err
			}
			res.n += int(n)
		}
	case opSpacePutProposal:
		p := r.prop
		var payload sql.NullString
		if len(p.Payload) > 0 {
			payload = sql.NullString{String: string(p.Payload), Valid: true}
		}
		addressed, err := json.Marshal(p.To)
		if err != nil {
			return err
		}
		if p.To == nil {
			addressed = []byte("[]")
		}
		var requestTo sql.NullString // none: any member's response is recorded
		if len(p.RequestTo) > 0 {
			b, err := json.Marshal(p.RequestTo)
			if err != nil {
				return err
			}
			requestTo = sql.NullString{String: string(b), Valid: true}
		}
		_, err = t.exec(sqlSpacePutProposal, p.Space, p.ID, p.Proposer, p.Key[:], string(addressed), payload, p.State,
			nanos(p.Created), nanos(p.Expires), nanos(p.Updated), p.By, p.Reason, p.RequestID, p.ResponseID, requestTo)
		return err
	case opSpaceExpire:
		if !r.seenBefore.IsZero() {
			n, err := t.exec(sqlSpaceExpireSeen, r.seenBefore.UnixNano())
			if err != nil {
				return err
			}
			res.n = int(n)
		}
		if !r.closedBefore.IsZero() {
			m, err := t.exec(sqlSpaceExpireProposals, r.closedBefore.UnixNano())
			if err != nil {
				return err
			}
			res.m = int(m)
		}
	default:
		panic("bug: store: unknown space op " + strconv.Itoa(int(req.op)))
	}
	return nil
}
