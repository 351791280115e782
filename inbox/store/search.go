package store

import (
	"cmp"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"
)

// Limits of search.
const (
	// MaxSearchText bounds the text indexed for one item: a longer text
	// is indexed up to that many bytes (cut at a character boundary), so
	// the index grows at most by that much per item.
	MaxSearchText = 64 << 10
	// MaxQueryBytes bounds a search query's text.
	MaxQueryBytes = 1024
	// MaxQueryTerms bounds the words and phrases of one query.
	MaxQueryTerms = 16
	// MaxQueryPrefixes bounds its prefix* terms: each may match much of
	// the index.
	MaxQueryPrefixes = 4
	// MaxSearchHits bounds the hits one Search returns.
	MaxSearchHits = 1000
)

// Errors of ParseSearch. Each wraps ErrBadQuery.
var (
	// ErrBadQuery is the class of every query ParseSearch refuses.
	ErrBadQuery = errors.New("store: bad search query")
	// ErrEmptyQuery means the query holds no word to search for.
	ErrEmptyQuery = fmt.Errorf("%w: no words to search for", ErrBadQuery)
)

// Snippet markers around the matched words, and the mark of text left
// out, in the snippets Search returns (and SearchTerms.Snippet makes).
const (
	SnippetOpen  = "«"
	SnippetClose = "»"
	SnippetCut   = "…"
)

// snippetTokens is about how many words a snippet shows.
const snippetTokens = 16

// SearchTerms is a parsed search query: every term must match. The zero
// value has no terms and matches nothing; build one with ParseSearch.
// It is immutable and safe for concurrent use.
type SearchTerms struct {
	terms []searchTerm
}

// searchTerm is a word (one token) or a phrase (tokens in a row); with
// prefix, its last token matches any word it starts.
type searchTerm struct {
	tokens []string // lower case
	prefix bool
}

// ParseSearch parses a user's query: words, all of which must match
// (case-insensitively), "quoted phrases" whose words must come in a row,
// and prefix* words (or "phrase"*) whose last word matches any word it
// starts. Words are runs of letters and digits; everything else
// separates them, so punctuation in a query never has a meaning of its
// own ("foo-bar" is the phrase "foo bar"). An unterminated quote runs to
// the end. A term with no letters or digits is ignored, and so is a
// term given twice; a query left with none fails with ErrEmptyQuery, one
// over MaxQueryBytes, over MaxQueryTerms terms, over MaxQueryPrefixes
// prefix terms or not valid UTF-8 with an error wrapping ErrBadQuery.
func ParseSearch(q string) (SearchTerms, error) {
	if len(q) > MaxQueryBytes {
		return SearchTerms{}, fmt.Errorf("%w: longer than %d bytes", ErrBadQuery, MaxQueryBytes)
	}
	if !utf8.ValidString(q) {
		return SearchTerms{}, fmt.Errorf("%w: not valid UTF-8", ErrBadQuery)
	}
	var st SearchTerms
	add := func(text string, prefix bool) error {
		var toks []string
		for _, t := range tokenize(text) {
			w := text[t.start:t.end]
			if !strings.ContainsFunc(w, func(r rune) bool { return !unicode.Is(unicode.Mn, r) }) {
				continue // marks alone: the index keeps nothing of them
			}
			toks = append(toks, strings.ToLower(w))
		}
		if len(toks) == 0 {
			return nil
		}
		t := searchTerm{tokens: toks, prefix: prefix}
		if slices.ContainsFunc(st.terms, func(o searchTerm) bool { return o.prefix == prefix && slices.Equal(o.tokens, toks) }) {
			return nil // all terms must match: a repeat adds nothing but cost
		}
		if len(st.terms) == MaxQueryTerms {
			return fmt.Errorf("%w: more than %d words and phrases", ErrBadQuery, MaxQueryTerms)
		}
		if prefix && st.prefixes() == MaxQueryPrefixes {
			return fmt.Errorf("%w: more than %d prefix* terms (each may match much of the index)", ErrBadQuery, MaxQueryPrefixes)
		}
		st.terms = append(st.terms, t)
		return nil
	}
	for i := 0; i < len(q); {
		r, size := utf8.DecodeRuneInString(q[i:])
		switch {
		case unicode.IsSpace(r):
			i += size
		case r == '"':
			end := strings.IndexByte(q[i+1:], '"')
			var text string
			if end < 0 {
				text, i = q[i+1:], len(q)
			} else {
				text, i = q[i+1:i+1+end], i+1+end+1
			}
			prefix := false
			for i < len(q) && q[i] == '*' {
				prefix, i = true, i+1
			}
			if err := add(text, prefix); err != nil {
				return SearchTerms{}, err
			}
		default:
			end := strings.IndexFunc(q[i:], func(r rune) bool { return unicode.IsSpace(r) || r == '"' })
			if end < 0 {
				end = len(q) - i
			}
			word := q[i : i+end]
			i += end
			trimmed := strings.TrimRight(word, "*")
			if err := add(trimmed, len(trimmed) < len(word)); err != nil {
				return SearchTerms{}, err
			}
		}
	}
	if len(st.terms) == 0 {
		return SearchTerms{}, ErrEmptyQuery
	}
	return st, nil
}

// prefixes counts the prefix terms.
func (st SearchTerms) prefixes() int {
	n := 0
	for _, t := range st.terms {
		if t.prefix {
			n++
		}
	}
	return n
}

// Match returns the terms as an FTS5 MATCH expression: every term a
// quoted string of its words (which hold only letters, digits and
// marks, never a quote), a * after a prefix term, all of them required.
// It is "" for the zero SearchTerms.
func (st SearchTerms) Match() string {
	var b strings.Builder
	for i, t := range st.terms {
		if i > 0 {
			b.WriteByte(' ')
		}
		b.WriteByte('"')
		b.WriteString(strings.Join(t.tokens, " "))
		b.WriteByte('"')
		if t.prefix {
			b.WriteByte('*')
		}
	}
	return b.String()
}

// String returns the terms as a normalised query (lower case, phrases
// quoted): ParseSearch of it gives the same terms.
func (st SearchTerms) String() string {
	var b strings.Builder
	for i, t := range st.terms {
		if i > 0 {
			b.WriteByte(' ')
		}
		if len(t.tokens) > 1 {
			b.WriteString(`"` + strings.Join(t.tokens, " ") + `"`)
		} else {
			b.WriteString(t.tokens[0])
		}
		if t.prefix {
			b.WriteByte('*')
		}
	}
	return b.String()
}

// Matches reports whether text holds every term: the same words in
// lower case (strings.ToLower; unlike the SQLite index, accents are not
// folded). The zero SearchTerms matches nothing.
func (st SearchTerms) Matches(text string) bool {
	_, ok := st.find(text, tokenize(text))
	return ok
}

// find returns the token index of the first term's first match in text,
// and whether every term matches.
func (st SearchTerms) find(text string, toks []span) (first int, ok bool) {
	if len(st.terms) == 0 {
		return 0, false
	}
	words := make([]string, len(toks))
	for i, t := range toks {
		words[i] = strings.ToLower(text[t.start:t.end])
	}
	first = -1
	for _, t := range st.terms {
		at := t.find(words)
		if at < 0 {
			return 0, false
		}
		if first < 0 || at < first {
			first = at
		}
	}
	return first, true
}

// find returns where t first matches in words, or -1.
func (t searchTerm) find(words []string) int {
	n := len(t.tokens)
outer:
	for i := 0; i+n <= len(words); i++ {
		for j, tok := range t.tokens {
			w := words[i+j]
			if j == n-1 && t.prefix {
				if !strings.HasPrefix(w, tok) {
					continue outer
				}
			} else if w != tok {
				continue outer
			}
		}
		return i
	}
	return -1
}

// Snippet returns a short part of text around the first match, the
// matched words between SnippetOpen and SnippetClose, SnippetCut where
// text was left out, like the snippets Search returns; "" if text does
// not match.
func (st SearchTerms) Snippet(text string) string {
	toks := tokenize(text)
	first, ok := st.find(text, toks)
	if !ok {
		return ""
	}
	words := make([]string, len(toks))
	for i, t := range toks {
		words[i] = strings.ToLower(text[t.start:t.end])
	}
	from := max(first-snippetTokens/4, 0)
	to := min(from+snippetTokens, len(toks))
	marked := make([]bool, len(toks))
	for _, t := range st.terms {
		for i := from; i < to; i++ {
			if t.find(words[i:min(i+len(t.tokens), len(words))]) == 0 {
				for j := i; j < i+len(t.tokens) && j < len(toks); j++ {
					marked[j] = true
				}
			}
		}
	}
	var b strings.Builder
	if from > 0 {
		b.WriteString(SnippetCut)
	}
	pos := toks[from].start
	for i := from; i < to; i++ {
		b.WriteString(text[pos:toks[i].start])
		if marked[i] {
			b.WriteString(SnippetOpen + text[toks[i].start:toks[i].end] + SnippetClose)
		} else {
			b.WriteString(text[toks[i].start:toks[i].end])
		}
		pos = toks[i].end
	}
	if to < len(toks) {
		b.WriteString(SnippetCut)
	}
	return clipSnippet(b.String())
}

// maxSnippetRun bounds, in characters, each word of a snippet and each
// run of what separates words: a hex dump or a long token is one word to
// the index, and a snippet of 16 words must stay a few lines long.
const maxSnippetRun = 48

// clipSnippet cuts every word (a run of letters and digits, as the index
// sees them) and every run between words longer than maxSnippetRun
// characters to that many, followed by SnippetCut. The markers around
// matched words are kept, and so is every byte of what is not cut.
func clipSnippet(s string) string {
	var b *strings.Builder // nil until something is cut
	run, word := 0, false
	for i := 0; i < len(s); {
		r, size := utf8.DecodeRuneInString(s[i:])
		marker := strings.HasPrefix(s[i:], SnippetOpen) || strings.HasPrefix(s[i:], SnippetClose)
		if w := isTokenRune(r); w != word || marker {
			run, word = 0, w
		}
		run++
		switch {
		case run <= maxSnippetRun || marker:
			if b != nil {
				b.WriteString(s[i : i+size])
			}
		case b == nil:
			b = &strings.Builder{}
			b.WriteString(s[:i])
			fallthrough
		case run == maxSnippetRun+1:
			b.WriteString(SnippetCut)
		}
		i += size
	}
	if b == nil {
		return s
	}
	return b.String()
}

// span is one token of a text: text[start:end].
type span struct{ start, end int }

// isTokenRune reports whether r belongs to a word: letters, digits,
// private-use characters (as SQLite's unicode61 tokenizer counts them)
// and combining marks (accents written as a separate character).
func isTokenRune(r rune) bool {
	return unicode.IsLetter(r) || unicode.IsNumber(r) || unicode.Is(unicode.Co, r) || unicode.Is(unicode.Mn, r)
}

// tokenize splits text into words.
func tokenize(text string) []span {
	var out []span
	start := -1
	for i, r := range text {
		if r == utf8.RuneError {
			r = ' ' // invalid bytes separate words
		}
		if isTokenRune(r) {
			if start < 0 {
				start = i
			}
			continue
		}
		if start >= 0 {
			out = append(out, span{start, i})
			start = -1
		}
	}
	if start >= 0 {
		out = append(out, span{start, len(text)})
	}
	return out
}

// ClipText cuts text to at most MaxSearchText bytes, at a character
// boundary; a text it cuts is copied, so that what is kept (in memory, for
// the index) holds no more than that. A NUL becomes a space: SQLite's
// text functions end a text at its first NUL, so the index and the
// snippets would lose what follows it.
func ClipText(text string) string {
	if strings.IndexByte(text, 0) >= 0 {
		text = strings.ReplaceAll(text, "\x00", " ")
	}
	if len(text) <= MaxSearchText {
		return text
	}
	cut := MaxSearchText
	for cut > 0 && !utf8.RuneStart(text[cut]) {
		cut--
	}
	return strings.Clone(text[:cut])
}

// Search selects items for [Store.Search].
type Search struct {
	Terms SearchTerms // required
	// Sender, if set, keeps only items from that key; Peer, if not "",
	// only items whose sender had that trust-list name when they arrived.
	Sender *[32]byte
	Peer   string
	Kinds  []string  // only these kinds (empty: all)
	Since  time.Time // only items received at or after it (zero: no bound)
	Until  time.Time // only items received at or before it (zero: no bound)
	Before uint64    // only items with a Seq below it (0: no bound): the cursor
	Limit  int       // at most this many (0 or above MaxSearchHits: MaxSearchHits)
}

// Hit is one item Search found.
type Hit struct {
	Record
	AckedAt time.Time // when it was acknowledged; zero while it is not
	Snippet string    // the indexed text around the match (see SnippetOpen)
}

// Search returns the items, unacknowledged or in history, whose indexed
// text matches q.Terms and that pass q's filters, newest (highest Seq)
// first. Pass the last hit's Seq as q.Before for the next page: pages
// stay consistent while items arrive (they get higher seqs). Items
// acknowledged and then expired or trimmed from history are not found.
//
// It first has the committer index the items admitted until then that
// are not indexed yet (see Options.SearchText), so it finds every item
// whose Admit returned before it was called. A read-only store searches
// what its writer has indexed, and reads the items above it. The index
// finds the lumps of items whose words match (see lumpItems); Search
// reads their items, newest first, and keeps those whose text
// (Options.SearchText, which Search needs) matches q.Terms as an index
// of each item's text would: the same tokenizer, phrases and prefixes,
// and the same snippets.
func (s *Store) Search(ctx context.Context, q Search) ([]Hit, error) {
	if err := s.catchUp(ctx); err != nil {
		return nil, err
	}
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.closed {
		return nil, ErrClosed
	}
	match := q.Terms.Match()
	if match == "" {
		return nil, ErrEmptyQuery
	}
	limit := q.Limit
	if limit <= 0 || limit > MaxSearchHits {
		limit = MaxSearchHits
	}
	before := int64(math.MaxInt64)
	if q.Before > 0 && q.Before < math.MaxInt64 {
		before = int64(q.Before)
	}
	if s.opts.SearchText == nil {
		return nil, errors.New("store: search: no search text (Options.SearchText) to check the items against")
	}
	var filter strings.Builder
	var params []any
	if q.Sender != nil {
		filter.WriteString(` AND sender = ?`)
		params = append(params, q.Sender[:])
	}
	if q.Peer != "" {
		filter.WriteString(` AND peer = ?`)
		params = append(params, q.Peer)
	}
	if len(q.Kinds) > 0 {
		if len(q.Kinds) > 16 {
			return nil, fmt.Errorf("%w: more than 16 kinds", ErrBadQuery)
		}
		filter.WriteString(` AND kind IN (?` + strings.Repeat(`, ?`, len(q.Kinds)-1) + `)`)
		for _, k := range q.Kinds {
			params = append(params, k)
		}
	}
	if !q.Since.IsZero() {
		filter.WriteString(` AND received >= ?`)
		params = append(params, q.Since.UnixNano())
	}
	if !q.Until.IsZero() {
		filter.WriteString(` AND received <= ?`)
		params = append(params, q.Until.UnixNano())
	}
	v, err := s.verifier()
	if err != nil {
		return nil, fmt.Errorf("store: search: %w", err)
	}
	select {
	case v.sem <- struct{}{}:
		defer func() { <-v.sem }()
	case <-ctx.Done():
		return nil, fmt.Errorf("store: search: %w", ctx.Err())
	}
	// Made here rather than once: a connection database/sql replaced
	// (one it found broken) is a new, empty database.
	if _, err := v.db.ExecContext(ctx, `CREATE VIRTUAL TABLE IF NOT EXISTS v USING fts5(text, tokenize = 'unicode61 remove_diacritics 2')`); err != nil {
		return nil, fmt.Errorf("store: search: %w", err)
	}
	out, err := s.search(ctx, v, match, before, filter.String(), params, limit)
	if err != nil {
		if cerr := ctx.Err(); cerr != nil {
			err = cerr // what cut the search short, whatever the driver said
		}
		return nil, fmt.Errorf("store: search: %w", err)
	}
	if err := s.awaitSynced(); err != nil {
		return nil, fmt.Errorf("store: search: %w", err)
	}
	return out, nil
}

// search runs Search with its verifier: the items above the index's
// high-water mark (those a writer without SearchText admitted, or a
// read-only store's writer has not indexed yet) and the items of the
// lumps whose words match, newest first, those of each that match (a
// SearchTerms.Match) and pass filter, until limit.
func (s *Store) search(ctx context.Context, v *verifier, match string, before int64, filter string, params []any, limit int) ([]Hit, error) {
	var mark, last int64
	if err := s.db.QueryRowContext(ctx, `SELECT (SELECT CAST(value AS INTEGER) FROM meta WHERE key = 'search_indexed'),
		(SELECT coalesce(max(seq), 0) FROM items)`).Scan(&mark, &last); err != nil {
		return nil, err
	}
	var out []Hit
	take := func(l lump) error {
		hits, err := s.searchLump(ctx, v, match, l, before, filter, params, limit-len(out))
		out = append(out, hits...)
		before = min(before, l.first) // only lumps and items below it now
		return err
	}
	for hi := min(before-1, last); hi > mark && len(out) < limit; {
		lo := max(mark+1, hi-lumpSpan+1)
		if err := take(lump{lo, hi}); err != nil {
			return nil, err
		}
		hi = lo - 1
	}
	for len(out) < limit && before > 0 {
		page, err := s.candidates(ctx, match, before)
		if err != nil {
			return nil, err
		}
		for _, l := range page {
			if err := take(l); err != nil {
				return nil, err
			}
			if len(out) >= limit {
				break
			}
		}
		if len(page) < candidatePage {
			break
		}
	}
	return out, nil
}

// candidatePage is how many lumps Search reads at a time.
const candidatePage = 16

// lump is a row of the search index: the items from first to last.
type lump struct{ first, last int64 }

// candidates returns up to candidatePage lumps whose words match
// (a lump's texts are one text to the index: an item that matches is in
// a lump that does), starting below seq before, newest first.
func (s *Store) candidates(ctx context.Context, match string, before int64) ([]lump, error) {
	rows, err := s.db.QueryContext(ctx, `SELECT l.first, l.last FROM items_fts f JOIN search_lumps l ON l.first = f.rowid
		WHERE items_fts MATCH ? AND f.rowid < ? ORDER BY f.rowid DESC LIMIT ?`, match, before, candidatePage)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []lump
	for rows.Next() {
		var l lump
		if err := rows.Scan(&l.first, &l.last); err != nil {
			return nil, err
		}
		out = append(out, l)
	}
	return out, rows.Err()
}

// searchLump returns the items of l below seq before that pass filter
// (SQL on items, with its params) and match (terms.Match()), newest
// first, at most limit: each item's text goes into the verifier's table,
// which finds them with the same tokenizer and query as an index of
// items would, and makes their snippets. The texts of a lump are at most
// lumpItems × MaxSearchText; the hits' payloads (up to a MiB each) are
// read again, for the hits only, rather than kept for every item.
func (s *Store) searchLump(ctx context.Context, v *verifier, match string, l lump, before int64, filter string, params []any, limit int) ([]Hit, error) {
	texts, _, _, err := s.readTexts(ctx, s.db, func(r Record) string { return ClipText(s.opts.SearchText(r)) },
		`SELECT seq, sender, id, kind, peer, received, payload FROM items
		WHERE seq >= ? AND seq <= ? AND seq < ?`+filter+` ORDER BY seq`,
		append([]any{l.first, l.last, before}, params...)...)
	if err != nil || len(texts) == 0 {
		return nil, err
	}
	// The texts go into v in a transaction that is rolled back: v is
	// empty again after, and FTS5 writes no segment to its file. They go
	// in in seq order: a rowid below the last would have FTS5 write what
	// it holds in memory first.
	vtx, err := v.db.BeginTx(ctx, nil)
	if err != nil {
		return nil, err
	}
	defer vtx.Rollback()
	insert, err := vtx.PrepareContext(ctx, `INSERT INTO v (rowid, text) VALUES (?, ?)`)
	if err != nil {
		return nil, err
	}
	defer insert.Close()
	for _, t := range texts {
		if _, err := insert.ExecContext(ctx, t.seq, t.text); err != nil {
			return nil, err
		}
	}
	found, err := vtx.QueryContext(ctx, `SELECT rowid, snippet(v, 0, '`+SnippetOpen+`', '`+SnippetClose+`', '`+SnippetCut+`', `+strconv.Itoa(snippetTokens)+`)
		FROM v WHERE v MATCH ? ORDER BY rowid DESC LIMIT ?`, match, limit)
	if err != nil {
		return nil, err
	}
	type matched struct {
		seq     int64
		snippet string
	}
	var matches []matched
	for found.Next() {
		var m matched
		var snippet sql.NullString
		if err := found.Scan(&m.seq, &snippet); err != nil {
			found.Close()
			return nil, err
		}
		m.snippet = snippet.String
		matches = append(matches, m)
	}
	if err := found.Close(); err != nil {
		return nil, err
	}
	out := make([]Hit, 0, len(matches))
	for _, m := range matches {
		h, err := s.hit(ctx, m.seq)
		switch {
		case errors.Is(err, sql.ErrNoRows):
			continue // deleted since
		case err != nil:
			return nil, err
		}
		h.Snippet = clipSnippet(m.snippet)
		out = append(out, h)
	}
	return out, nil
}

// hit reads item seq as a Hit.
func (s *Store) hit(ctx context.Context, seq int64) (Hit, error) {
	var (
		h          Hit
		received   int64
		acked      sql.NullInt64
		sender, id []byte
	)
	err := s.db.QueryRowContext(ctx, `SELECT sender, id, kind, peer, received, payload, acked_at, class FROM items WHERE seq = ?`, seq).
		Scan(&sender, &id, &h.Kind, &h.Peer, &received, &h.Payload, &acked, &h.Class)
	if err != nil {
		return h, err
	}
	if err := h.setRow(seq, sender, id, received); err != nil {
		return h, err
	}
	if acked.Valid {
		h.AckedAt = time.Unix(0, acked.Int64)
	}
	if h.Payload == nil {
		h.Payload = []byte{}
	}
	return h, nil
}

// setRow sets r's Seq, key and receipt time from an items row.
func (r *Record) setRow(seq int64, sender, id []byte, received int64) error {
	if len(sender) != len(r.Sender) || len(id) != len(r.ID) {
		return fmt.Errorf("item %d has a malformed key", seq)
	}
	r.Seq = uint64(seq)
	copy(r.Sender[:], sender)
	copy(r.ID[:], id)
	r.Received = time.Unix(0, received)
	return nil
}

// verifier is an FTS5 table in memory, with the index's tokenizer, into
// which Search puts the texts of a lump's items to find those that
// match and make their snippets. Its one connection is a Search's while
// it holds sem.
type verifier struct {
	sem chan struct{}
	db  *sql.DB
}

// verifier returns the store's verifier, made at first use.
func (s *Store) verifier() (*verifier, error) {
	s.verifyOnce.Do(func() {
		db, err := sql.Open("sqlite", "file::memory:")
		if err != nil {
			s.verifyErr = err
			return
		}
		db.SetMaxOpenConns(1)
		db.SetMaxIdleConns(1)
		db.SetConnMaxLifetime(0)
		db.SetConnMaxIdleTime(0)
		s.verify = &verifier{sem: make(chan struct{}, 1), db: db}
	})
	return s.verify, s.verifyErr
}

// indexPage is how many items the index takes per transaction: the
// background indexing and the catching up of Search alike.
const indexPage = 512

// indexIdle is how long the committer waits for a request before it
// indexes a partial page in the background.
const indexIdle = 2 * time.Millisecond

// The search index: admission does not touch items_fts, which would
// slow every group commit (FTS5 work per transaction); instead
// the committer indexes the items above a high-water mark (meta
// search_indexed: every item with a seq up to it is indexed, or was
// deleted or had no text) in pages of indexPage, oldest first, each page
// and the mark moving past it in one transaction, so a crash never
// loses or repeats a row. It runs on the committer, between groups: a
// full page as soon as one waits (one page, then the queued requests
// again), a partial one once no request came for indexIdle. Search
// first has the committer catch up to the last admitted seq, page by
// page, so it never misses an item admitted before it started. Without
// Options.SearchText nothing is indexed and the mark stays, for a later
// Open that has it.

// loadIndexMark reads the high-water mark and the last seq. Open runs
// it before the committer starts.
//
// The last seq is the highest ever used, in items or in its
// AUTOINCREMENT counter (sqlite_sequence), which is higher once the
// newest items were deleted: admission numbers new items from it
// (admitRun.flush), so none is reused.
func (s *Store) loadIndexMark(ctx context.Context) error {
	var mark, last int64
	if err := s.db.QueryRowContext(ctx, `SELECT CAST(value AS INTEGER) FROM meta WHERE key = 'search_indexed'`).Scan(&mark); err != nil {
		return fmt.Errorf("read the search index mark: %w", err)
	}
	if err := s.db.QueryRowContext(ctx, sqlLastSeq).Scan(&last); err != nil {
		return fmt.Errorf("read the last seq: %w", err)
	}
	s.indexed = mark
	s.indexedSeq.Store(mark)
	s.lastSeq.Store(last)
	s.recentFrom = last
	return nil
}

// sqlLastSeq reads the highest seq ever used (see loadIndexMark).
const sqlLastSeq = `SELECT max(
	coalesce((SELECT max(seq) FROM items), 0),
	coalesce((SELECT seq FROM sqlite_sequence WHERE name = 'items'), 0))`

// Lumps of the search index: a row of items_fts holds the words of up
// to lumpItems items in a row, or of fewer whose texts reach lumpBytes.
// Writing one row per item cost several times more than the words: the
// row, its statement and FTS5's work per row.
// A lump's range of seqs spans at most lumpSpan, however many of its
// items have no text: Search reads every item of a lump's range.
const (
	lumpItems = 64
	lumpBytes = 256 << 10
	lumpSpan  = 4 * lumpItems
)

// indexLumps writes page (texts in seq order, above every lump) as
// lumps: each row of items_fts under the seq of its first item, and in
// search_lumps its last and how many items of its range are stored (the
// items without text too, whose deletion the trigger counts as well).
func (s *Store) indexLumps(ctx context.Context, tx *sql.Tx, page []indexed) error {
	var text strings.Builder
	for len(page) > 0 {
		n, size := 0, 0
		for n < len(page) && n < lumpItems && (n == 0 || size+len(page[n].text) <= lumpBytes && page[n].seq-page[0].seq < lumpSpan) {
			size += len(page[n].text) + 1
			n++
		}
		first, last := page[0].seq, page[n-1].seq
		text.Reset()
		for i, it := range page[:n] {
			if i > 0 {
				text.WriteByte('\n')
			}
			text.WriteString(it.text)
		}
		page = page[n:]
		count, err := s.txStmt(ctx, tx, `SELECT count(*) FROM items WHERE seq >= ? AND seq <= ?`)
		if err != nil {
			return err
		}
		var live int64
		if err := count.QueryRowContext(ctx, first, last).Scan(&live); err != nil {
			return err
		}
		if live == 0 {
			continue
		}
		if err := s.txExec(ctx, tx, `INSERT INTO items_fts (rowid, text) VALUES (?, ?)`, first, text.String()); err != nil {
			return err
		}
		if err := s.txExec(ctx, tx, `INSERT INTO search_lumps (first, last, live) VALUES (?, ?, ?)`, first, last, live); err != nil {
			return err
		}
	}
	return nil
}

// indexBehind reports whether admitted items wait to be indexed. Only
// commitLoop calls it.
func (s *Store) indexBehind() bool {
	return s.opts.SearchText != nil && !s.opts.indexOnSearch && s.indexed < s.lastSeq.Load()
}

// indexPage indexes up to indexPage items with a seq above the mark and
// at most upTo, oldest first, and moves the mark past them (to upTo when
// none are left below it), in one transaction. Items deleted meanwhile
// are simply not there. Only commitLoop calls it.
func (s *Store) indexPage(upTo int64) error {
	if s.opts.SearchText == nil || s.indexed >= upTo {
		return nil
	}
	ctx := context.Background()
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("store: index for search: %w", err)
	}
	defer tx.Rollback()
	var (
		page   []indexed
		mark   = upTo
		memory = s.indexed >= s.recentFrom
	)
	if memory {
		// Every text to index is in memory: those up to upTo, at most a
		// page of them.
		n, _ := slices.BinarySearchFunc(s.recent, upTo+1, func(t indexed, seq int64) int { return cmp.Compare(t.seq, seq) })
		if n > indexPage {
			n = indexPage
			mark = s.recent[n-1].seq
		}
		page = s.recent[:n]
	} else {
		// The items up to recentFrom are read back from the database.
		mark = min(upTo, s.recentFrom)
		var (
			n    int
			last int64
		)
		page, n, last, err = s.readTexts(ctx, tx, s.searchText, `SELECT seq, sender, id, kind, peer, received, payload FROM items
			WHERE seq > ? AND seq <= ? ORDER BY seq LIMIT ?`, s.indexed, mark, indexPage)
		if err != nil {
			return fmt.Errorf("store: index for search: %w", err)
		}
		if n == indexPage {
			mark = last
		}
	}
	if err := s.indexLumps(ctx, tx, page); err != nil {
		return fmt.Errorf("store: index for search: %w", err)
	}
	if err := s.txExec(ctx, tx, `UPDATE meta SET value = ? WHERE key = 'search_indexed'`, strconv.FormatInt(mark, 10)); err != nil {
		return fmt.Errorf("store: index for search: %w", err)
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("store: index for search: %w", err)
	}
	if memory {
		n := copy(s.recent, s.recent[len(page):])
		clear(s.recent[n:])
		s.recent = s.recent[:n]
		for _, t := range page {
			s.recentBytes -= len(t.text)
		}
	}
	s.indexed = mark
	s.indexedSeq.Store(mark)
	return nil
}

// Limits of the texts kept in memory for the index (Store.recent): past
// either, the committer forgets them and reads the items back from the
// database until the index has caught up.
const (
	recentMax      = 4 * indexPage
	recentMaxBytes = 4 << 20
)

// searchText is r's text for the index, computed by the admitting
// goroutine, so that the committer (the database's one writer) only
// writes it; "" when r has none or the store indexes nothing.
func (s *Store) searchText(r Record) string {
	if s.opts.SearchText == nil || s.opts.ReadOnly {
		return ""
	}
	if r.Text != "" {
		return ClipText(r.Text)
	}
	return ClipText(s.opts.SearchText(r))
}

// keepTexts keeps the texts of the items batch admitted for indexPage,
// which then need not read them back. Memory holds the text of every item
// above recentFrom that has one; when batch may have deleted items (an
// Expire, the history cap: their texts must not be indexed) or too many
// texts wait, the texts are dropped and
// recentFrom moves to the last seq: indexPage reads the items up to it
// from the database. Only commit calls it, after batch committed.
func (s *Store) keepTexts(batch []*request, res []result) {
	if s.opts.SearchText == nil {
		return
	}
	if !s.deleted {
		for i, req := range batch {
			if req.op == opAdmit && res[i].seq != 0 && req.text != "" {
				s.recent = append(s.recent, indexed{int64(res[i].seq), req.text})
				s.recentBytes += len(req.text)
			}
		}
		if len(s.recent) <= recentMax && s.recentBytes <= recentMaxBytes {
			return
		}
	}
	s.recent, s.recentBytes = nil, 0
	s.recentFrom = s.lastSeq.Load()
}

// catchUp has the committer index every item admitted so far, a page per
// request, so that admissions interleave. A read-only store, or one
// without Options.SearchText, searches what is indexed.
func (s *Store) catchUp(ctx context.Context) error {
	if s.opts.SearchText == nil || s.opts.ReadOnly {
		return nil
	}
	target := s.lastSeq.Load()
	for s.indexedSeq.Load() < target {
		if res := s.do(ctx, &request{op: opIndex, upTo: target}); res.err != nil {
			return res.err
		}
	}
	return nil
}

// indexed is an item's text to index.
type indexed struct {
	seq  int64
	text string
}

// readTexts runs q, a query of items (seq, sender, id, kind, peer,
// received, payload) on db, and returns the texts (textOf) of those that
// have one, how many rows it read and the seq of the last.
func (s *Store) readTexts(ctx context.Context, db queryer, textOf func(Record) string, q string, args ...any) (page []indexed, n int, last int64, err error) {
	rows, err := db.QueryContext(ctx, q, args...)
	if err != nil {
		return nil, 0, 0, err
	}
	defer rows.Close()
	for rows.Next() {
		var (
			r             Record
			seq, received int64
			sender, id    []byte
		)
		if err := rows.Scan(&seq, &sender, &id, &r.Kind, &r.Peer, &received, &r.Payload); err != nil {
			return nil, 0, 0, err
		}
		if err := r.setRow(seq, sender, id, received); err != nil {
			return nil, 0, 0, err
		}
		n, last = n+1, seq
		if text := textOf(r); text != "" {
			page = append(page, indexed{seq, text})
		}
	}
	return page, n, last, rows.Err()
}

// queryer is a *sql.DB or a *sql.Tx.
type queryer interface {
	QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error)
}
