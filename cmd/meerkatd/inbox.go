package main

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/meerkatd/meerkatd/comms/node"
	"github.com/meerkatd/meerkatd/comms/node/nodetext"
	"github.com/meerkatd/meerkatd/config"
)

func runInbox(e *env, args []string) error {
	flags, homeFlag, asJSON := e.newCmd("inbox", "print JSON: the same batch as MCP's receive_messages (all pages in one)")
	wait := flags.Duration("wait", 0, "if nothing matches yet, wait up to `DUR` (30s, 2m) for the first item")
	after := flags.Uint64("after", 0, "only items with a sequence number above `SEQ`")
	limit := flags.Int("limit", 0, "show at most `N` items (default: all, a page at a time)")
	page := flags.Int("page", 500, "items per call to the node (at most 1000)")
	ack := flags.Bool("ack", false, "acknowledge (remove) each page once it is printed")
	order := flags.String("order", node.OrderPriority, "`ORDER` of the items: priority (by class, then oldest first) or arrival (oldest first)")
	var kinds stringList
	flags.Var(&kinds, "kind", "only items of this `kind` (message, request, response, meup; repeatable)")
	from := flags.String("from", "", "only items from this `peer` (name, key or UUID)")
	var mf node.MEUPFilter
	flags.StringVar(&mf.Space, "space", "", "only envelopes of this `space`")
	flags.Var((*stringList)(&mf.MEUPKinds), "meup-kind", "only envelopes of spaces of this MEUP `kind` (mcp/proposal, chat, …; repeatable)")
	flags.StringVar(&mf.Context, "context", "", "only envelopes of spaces in this `context`")
	if err := parseNoArgs(e, flags, args); err != nil {
		return err
	}
	if *order != node.OrderPriority && *order != node.OrderArrival {
		return fmt.Errorf("%w: --order is priority or arrival", errUsage)
	}
	switch {
	case *wait < 0:
		return fmt.Errorf("%w: --wait must not be negative", errUsage)
	case *limit < 0:
		return fmt.Errorf("%w: --limit must not be negative", errUsage)
	case *page < 1 || *page > node.MaxBatchItems:
		return fmt.Errorf("%w: --page is from 1 to %d", errUsage, node.MaxBatchItems)
	}
	h, b, err := e.openBackend(*homeFlag, node.ModeSend) // the daemon's inbox while meerkat.toml is being edited
	if err != nil {
		return err
	}
	defer b.Close()
	if !b.Daemon && (*ack || *wait > 0) { // with no daemon nothing arrives to wait for
		flag := map[bool]string{false: "--wait", true: "--ack"}[*ack]
		return &node.Error{Code: node.CodeNoDaemon, Msg: "no daemon is running for " + h.Dir + ": " + flag + " needs it (start it with: meerkatd run --home " + h.Dir + ")"}
	}
	if !b.Daemon && h.Config.Store.Mode != config.StoreMemory { // a memory inbox: Receive says there is none
		fmt.Fprintln(e.stderr, "no daemon is running: reading the stored inbox")
	}
	sig, stop := interruptible()
	defer stop()
	out := inboxPrinter{e: e}
	if *asJSON {
		out.json = nodetext.NewBatchJSON(e.stdout)
	}
	q := node.Query{After: *after, Kinds: kinds, From: *from, Wait: *wait, MEUPFilter: mf, Order: *order}
	// A priority read's cursor stays below the oldest item it left out,
	// so a next page may show again what a page showed: shown skips it.
	shownSeqs := map[uint64]bool{}
	shown := 0
	for {
		q.Limit = *page
		if *limit > 0 {
			q.Limit = min(q.Limit, *limit-shown)
		}
		ctx, cancel := context.WithTimeout(sig, q.Wait+30*time.Second)
		batch, err := b.Receive(ctx, q)
		cancel()
		if sig.Err() != nil { // no "inbox empty": the wait did not end
			return jsonShown(errInterrupted)
		}
		if err != nil {
			return out.fail(err)
		}
		stuck := !*ack && batch.More && batch.Cursor == q.After
		fresh := batch.Messages[:0:0]
		for _, m := range batch.Messages {
			if !shownSeqs[m.Seq] {
				fresh = append(fresh, m)
				if *order == node.OrderPriority {
					shownSeqs[m.Seq] = true
				}
			}
		}
		batch.Messages = fresh
		if err := out.page(batch); err != nil {
			return err
		}
		if stuck && len(fresh) == 0 {
			fmt.Fprintln(e.stderr, "more items follow those shown: acknowledge them (--ack), or list with --order arrival")
			return out.end()
		}
		shown += len(batch.Messages)
		if *ack && len(batch.Messages) > 0 {
			seqs := make([]uint64, 0, len(batch.Messages))
			for _, m := range batch.Messages {
				seqs = append(seqs, m.Seq)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			a, err := b.Ack(ctx, node.AckRequest{Seqs: seqs})
			cancel()
			if err != nil {
				return out.fail(err)
			} else if out.json != nil {
				out.json.Acked(batch.Messages, a.Pending)
			}
		}
		q.After, q.Wait = batch.Cursor, 0 // only the first call waits
		if !batch.More || *limit > 0 && shown >= *limit {
			if batch.More && !*asJSON {
				fmt.Fprintln(e.stderr, "more items follow those shown: raise --limit to see them")
			}
			return out.end()
		}
	}
}

// stringList is a repeatable string flag.
type stringList []string

func (l *stringList) String() string     { return strings.Join(*l, ",") }
func (l *stringList) Set(s string) error { *l = append(*l, s); return nil }

// inboxPrinter prints inbox pages as they come: as text, or with json
// as one batch (nodetext.BatchJSON).
type inboxPrinter struct {
	e    *env
	json *nodetext.BatchJSON // nil: text
	n    int
}

func (p *inboxPrinter) page(b node.Batch) error {
	if p.json != nil {
		return p.json.Page(b)
	}
	for _, m := range b.Messages {
		p.n++
		nodetext.Message(p.e.stdout, m)
	}
	return nil
}

// fail ends a listing that broke off with err: with json, the document
// is closed (or is the error) and err is returned as shown.
func (p *inboxPrinter) fail(err error) error {
	if p.json == nil {
		return err
	} else if !p.json.Started() {
		printJSONError(p.e.stdout, err)
	}
	p.json.Abort()
	return jsonShown(err)
}

func (p *inboxPrinter) end() error {
	if p.json != nil {
		return p.json.End()
	} else if p.n == 0 {
		fmt.Fprintln(p.e.stderr, "inbox empty")
	}
	return nil
}
