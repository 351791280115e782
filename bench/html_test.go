package bench

import (
	"bytes"
	"context"
	"encoding/xml"
	"fmt"
	"io"
	"io/fs"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

// hostile is a name that must reach the page escaped, never as markup.
const hostile = `<script>&"`

// pageNode is an element of the page, parsed with encoding/xml: the page is
// written well-formed, so a strict XML parser reads it whole.
type pageNode struct {
	name     string
	attr     map[string]string
	children []*pageNode
	text     string // all text inside, concatenated
}

func parsePage(t *testing.T, page []byte) *pageNode {
	t.Helper()
	d := xml.NewDecoder(bytes.NewReader(page))
	d.Strict = true
	root := &pageNode{name: "#document"}
	stack := []*pageNode{root}
	for {
		tok, err := d.Token()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatalf("page is not well-formed: %v\n%s", err, page)
		}
		switch tok := tok.(type) {
		case xml.StartElement:
			n := &pageNode{name: tok.Name.Local, attr: map[string]string{}}
			for _, a := range tok.Attr {
				n.attr[a.Name.Local] = a.Value
			}
			top := stack[len(stack)-1]
			top.children = append(top.children, n)
			stack = append(stack, n)
		case xml.EndElement:
			stack = stack[:len(stack)-1]
		case xml.CharData:
			for _, n := range stack {
				n.text += string(tok)
			}
		}
	}
	if len(stack) != 1 {
		t.Fatalf("page ends with %d elements open", len(stack)-1)
	}
	return root
}

// all returns the elements under n (n included) that match.
func (n *pageNode) all(match func(*pageNode) bool) []*pageNode {
	var out []*pageNode
	if match(n) {
		out = append(out, n)
	}
	for _, c := range n.children {
		out = append(out, c.all(match)...)
	}
	return out
}

func hasClass(n *pageNode, class string) bool {
	return slices.Contains(strings.Fields(n.attr["class"]), class)
}

// checkSelfContained fails on anything that reaches outside the page.
func checkSelfContained(t *testing.T, page string) {
	t.Helper()
	low := strings.ToLower(page)
	for _, bad := range []string{"http://", "https://", "<script", "url(", "@import", "src=", "href=", "<link", "<iframe", "<object", "<img"} {
		if strings.Contains(low, bad) {
			t.Errorf("page contains %q", bad)
		}
	}
	if n, m := strings.Count(page, "<svg"), strings.Count(page, "</svg>"); n != m {
		t.Errorf("%d <svg and %d </svg>", n, m)
	}
	// Every SVG on its own is well-formed XML too.
	rest := page
	for {
		i := strings.Index(rest, "<svg")
		if i < 0 {
			break
		}
		j := strings.Index(rest[i:], "</svg>")
		if j < 0 {
			t.Fatalf("<svg not closed")
		}
		frag := rest[i : i+j+len("</svg>")]
		var v struct {
			XMLName xml.Name
		}
		if err := xml.Unmarshal([]byte(frag), &v); err != nil || v.XMLName.Local != "svg" {
			t.Errorf("SVG fragment does not parse: %v\n%s", err, frag)
		}
		rest = rest[i+j:]
	}
}

func testSettings(transports ...string) settings {
	return settings{reps: 3, warmup: true, transports: transports, duration: 2 * time.Second, msgs: 2000, idleConns: 1000,
		nats: "bin/natsbench", only: map[string]bool{"sequential": true, "pipelined": true}}
}

var testMeta = htmlMeta{Date: time.Date(2026, 1, 2, 3, 4, 0, 0, time.UTC), GOOS: "linux", GOARCH: "amd64", GoVersion: "go1.99"}

// handMade is a report of three repetitions over uds, tcp, tls and a
// transport with a hostile name, with the NATS bench's figures, the
// anchors, and one failed check.
func handMade() (*results, []string) {
	trs := []string{"uds", "tcp", "tls", hostile}
	r := newResults()
	r.reps, r.cores = 3, 8
	for i := range 3 {
		f := float64(i)
		r.add(implMeerkatd, scAnchorExch, transportNone, inboxNone, mUS, 100+f)
		for j, tr := range trs {
			r.add(implMeerkatd, scSequential, tr, "memory", mP50, 150+10*float64(j)+f)
			r.add(implMeerkatd, scSequential, tr, "memory", mP99, 300+10*float64(j)+5*f)
			r.add(implMeerkatd, scPipelined, tr, "memory", mRate, 50000+1000*float64(j)+100*f)
			if tr == "uds" || tr == "tcp" {
				r.add(implMeerkatd, scAnchorRawPipe, tr, inboxNone, mRate, 70000+100*f)
				r.add(implMeerkatd, scAnchorRawBatch, tr, inboxNone, mRate, 90000+100*f)
			}
		}
	}
	r.add(implNATS, scSequential, "tcp", "", mP50, 400)
	r.add(implNATS, scPipelined, "tcp", "", mRate, 30000)
	r.find(implMeerkatd, scPipelined, "uds").checks = []Check{
		{Target: "exchanges/s >= 2.0 x crypto ceiling (cores / exchange)", Value: 0.63, Limit: 2.0, Pass: false, Bound: 1.8, BoundBasis: "its CPU"},
	}
	r.find(implMeerkatd, scSequential, "tcp").checks = []Check{
		{Target: "p99 <= 2 x p50", Value: 1.9, Limit: 2, Pass: true},
		{Target: "p50 <= 0.50 x NATS p50", Value: 0.4, Limit: 0.5, Pass: true},
	}
	r.find(implMeerkatd, scSequential, hostile).checks = []Check{
		{Target: "a target named " + hostile, Value: 1, Limit: 2, Pass: true},
	}
	r.notes = append(r.notes, "a note about "+hostile)
	return r, trs
}

// TestHTMLPage builds the page of a hand-made report and reads it back:
// well-formed, self-contained, the hostile name escaped, one row per
// check with its verdict, one pipelined bar per transport, a dot per
// repetition and percentile per transport.
func TestHTMLPage(t *testing.T) {
	r, trs := handMade()
	var buf bytes.Buffer
	if err := r.writeHTML(&buf, testSettings("uds", "tcp", "tls"), testMeta); err != nil {
		t.Fatal(err)
	}
	page := buf.String()
	checkSelfContained(t, page)
	if strings.Contains(page, hostile) || strings.Contains(page, "<script") {
		t.Errorf("the hostile name appears raw")
	}
	if !strings.Contains(page, "&lt;script&gt;&amp;&#34;") {
		t.Errorf("the hostile name does not appear escaped")
	}
	if n := strings.Count(page, "<svg"); n != 2 {
		t.Errorf("%d SVGs; want 2 (latency, throughput)", n)
	}
	doc := parsePage(t, buf.Bytes())

	for _, want := range []string{"2026-01-02 03:04 UTC", "linux/amd64, 8 CPUs, go1.99",
		"--reps 3 --transport uds,tcp,tls --duration 2s --msgs 2000 --idle-conns 1000 --only sequential,pipelined --nats bin/natsbench",
		"8 cores / 101.0 µs per exchange = 79208 exchanges/s", "note: a note about " + hostile} {
		if !strings.Contains(doc.text, want) {
			t.Errorf("page text lacks %q", want)
		}
	}

	// The checks: one row per check, in report order, verdicts as decided.
	tables := doc.all(func(n *pageNode) bool { return n.name == "table" && hasClass(n, "checks") })
	if len(tables) != 1 {
		t.Fatalf("%d checks tables", len(tables))
	}
	var rows []*pageNode
	for _, tr := range tables[0].all(func(n *pageNode) bool { return n.name == "tr" }) {
		if len(tr.all(func(n *pageNode) bool { return n.name == "td" })) > 0 {
			rows = append(rows, tr)
		}
	}
	type want struct{ verdict, where, target string }
	var wants []want
	for _, s := range r.series {
		for _, c := range s.checks {
			v := "PASS"
			if !c.Pass {
				v = "FAIL"
			}
			wants = append(wants, want{v, s.key.scenario + "/" + s.key.transport, c.Target})
		}
	}
	if len(rows) != len(wants) || len(wants) != 4 {
		t.Fatalf("%d check rows; want %d", len(rows), len(wants))
	}
	for i, row := range rows {
		tds := row.all(func(n *pageNode) bool { return n.name == "td" })
		if tds[0].text != wants[i].verdict || tds[1].text != wants[i].where || tds[2].text != wants[i].target {
			t.Errorf("check row %d: %q %q %q; want %+v", i, tds[0].text, tds[1].text, tds[2].text, wants[i])
		}
		if (wants[i].verdict == "FAIL") != hasClass(row, "fail") {
			t.Errorf("check row %d: class %q for %s", i, row.attr["class"], wants[i].verdict)
		}
		// The bound, with why it is short of the limit, as the text says.
		if bound := tds[len(tds)-1].text; i == 0 && bound != "1.8 (limited by its own CPU cost)" || i > 0 && bound != "" {
			t.Errorf("check row %d: bound %q", i, bound)
		}
	}
	if !strings.Contains(doc.text, "4 checks, 1 failed") {
		t.Errorf("page does not count the failed check")
	}

	// Throughput: one meerkatd bar per transport, the anchors and NATS.
	bars := func(class string) []string {
		var out []string
		for _, n := range doc.all(func(n *pageNode) bool { return n.name == "rect" && hasClass(n, class) }) {
			out = append(out, n.text)
		}
		return out
	}
	if got := bars("pipelined"); len(got) != len(trs) {
		t.Errorf("%d pipelined bars; want one per transport, %d", len(got), len(trs))
	}
	for _, tr := range trs {
		g := doc.all(func(n *pageNode) bool {
			return n.name == "g" && n.attr["data-transport"] == tr && len(n.all(func(c *pageNode) bool { return c.name == "rect" && hasClass(c, "pipelined") })) == 1
		})
		if len(g) != 1 {
			t.Errorf("transport %q: %d pipelined bars", tr, len(g))
		}
	}
	if got := bars("anchor"); len(got) != 4 {
		t.Errorf("%d raw anchor bars; want 4 (raw and raw batched, over uds and tcp)", len(got))
	}
	if got := bars("batched"); len(got) != 2 {
		t.Errorf("%d raw batched anchor bars; want 2 (uds, tcp), drawn apart", len(got))
	}
	for _, tr := range []string{"uds", "tcp"} {
		if !strings.Contains(doc.text, "raw batched anchor · "+tr) {
			t.Errorf("no raw batched anchor bar over %s", tr)
		}
	}
	if got := bars("nats"); len(got) != 1 || !strings.Contains(got[0], "30000") {
		t.Errorf("NATS bars %q; want one of 30000", got)
	}
	if n := len(doc.all(func(n *pageNode) bool { return n.name == "line" && hasClass(n, "ref") && !hasClass(n, "target") })); n != 1 {
		t.Errorf("%d crypto ceiling lines; want 1", n)
	}
	// And the pipelined check's target, at twice the ceiling's x from
	// the axis's start.
	refX := func(target bool) float64 {
		for _, n := range doc.all(func(n *pageNode) bool {
			return n.name == "line" && hasClass(n, "ref") && hasClass(n, "target") == target
		}) {
			v, _ := strconv.ParseFloat(n.attr["x1"], 64)
			return v
		}
		return math.NaN()
	}
	if c, tg := refX(false)-chartLeft, refX(true)-chartLeft; !(math.Abs(tg-2*c) <= 0.2) || !strings.Contains(doc.text, "target 2 × ceiling") {
		t.Errorf("target line at %v from the axis start, ceiling at %v; want twice, labelled", tg, c)
	}

	// Latency: per transport a p50 and a p99 dot per repetition, and a
	// median mark of each.
	for _, tr := range trs {
		g := doc.all(func(n *pageNode) bool {
			return n.name == "g" && n.attr["data-impl"] == implMeerkatd && n.attr["data-transport"] == tr && len(n.all(func(c *pageNode) bool { return c.name == "circle" })) > 0
		})
		if len(g) != 1 {
			t.Fatalf("transport %q: %d latency rows", tr, len(g))
		}
		for _, pc := range []string{"p50", "p99"} {
			if n := len(g[0].all(func(n *pageNode) bool { return n.name == "circle" && hasClass(n, pc) })); n != 3 {
				t.Errorf("transport %q: %d %s dots; want 3", tr, n, pc)
			}
			if n := len(g[0].all(func(n *pageNode) bool { return n.name == "line" && hasClass(n, "median") && hasClass(n, pc) })); n != 1 {
				t.Errorf("transport %q: %d %s medians; want 1", tr, n, pc)
			}
		}
	}
	if n := len(doc.all(func(n *pageNode) bool {
		return n.name == "g" && n.attr["data-impl"] == implNATS && len(n.all(func(c *pageNode) bool { return c.name == "circle" && hasClass(c, "p50") })) == 1
	})); n != 1 {
		t.Errorf("%d NATS latency rows; want 1", n)
	}
	if !strings.Contains(doc.text, "sequential (µs)") {
		t.Errorf("latency axis has no µs title")
	}
}

// TestHTMLEmpty: a report without scenarios is still a page, which says
// there is nothing to show.
func TestHTMLEmpty(t *testing.T) {
	var buf bytes.Buffer
	if err := newResults().writeHTML(&buf, testSettings("uds"), testMeta); err != nil {
		t.Fatal(err)
	}
	page := buf.String()
	checkSelfContained(t, page)
	doc := parsePage(t, buf.Bytes())
	if !strings.Contains(doc.text, "Nothing to show") || !strings.Contains(doc.text, "No checks were computed") {
		t.Errorf("empty page does not say so:\n%s", page)
	}
	if strings.Contains(page, "<svg") {
		t.Errorf("empty page has a chart")
	}
}

// TestHTMLUnwritable: Run fails on an --html path it cannot write before
// it starts anything, and says which path.
func TestHTMLUnwritable(t *testing.T) {
	dir := t.TempDir()
	for path, want := range map[string]string{
		filepath.Join(dir, "missing", "page.html"): "cannot write",
		dir:        "is not a regular file",
		os.DevNull: "is not a regular file", // it opens, but takes no page as a file
	} {
		var stdout, stderr bytes.Buffer
		start := time.Now()
		err := Run(context.Background(), Options{Exe: "/nonexistent/meerkatd", HTML: path, Quick: true}, &stdout, &stderr)
		if err == nil || !strings.Contains(err.Error(), "--html") || !strings.Contains(err.Error(), path) || !strings.Contains(err.Error(), want) {
			t.Errorf("--html %s: %v; want %q", path, err, want)
		}
		if stdout.Len()+stderr.Len() != 0 || time.Since(start) > 5*time.Second {
			t.Errorf("--html %s: the run started (%v; stderr %q)", path, time.Since(start), stderr.String())
		}
	}
}

// TestHTMLFileReplace: checking the path writes nothing (no file, no
// temporary left); a file that was there is left as it was until the
// page replaces it whole; a write that fails leaves nothing behind.
func TestHTMLFileReplace(t *testing.T) {
	dir := t.TempDir()
	onlyFiles := func(want ...string) {
		t.Helper()
		ents, err := os.ReadDir(dir)
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, e := range ents {
			got = append(got, e.Name())
		}
		if !slices.Equal(got, want) {
			t.Errorf("the directory holds %q, want %q", got, want)
		}
	}
	fresh := filepath.Join(dir, "fresh.html")
	if _, err := openHTML(fresh); err != nil {
		t.Fatal(err)
	}
	onlyFiles()
	old := filepath.Join(dir, "old.html")
	if err := os.WriteFile(old, bytes.Repeat([]byte("x"), 100000), 0o644); err != nil {
		t.Fatal(err)
	}
	h, err := openHTML(old)
	if err != nil {
		t.Fatal(err)
	}
	if b, err := os.ReadFile(old); err != nil || len(b) != 100000 {
		t.Errorf("checking the path changed the file: %d bytes, %v", len(b), err)
	}
	if err := h.write(newResults(), testSettings("uds"), testMeta); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(old)
	if err != nil || !bytes.HasPrefix(b, []byte("<!DOCTYPE html>")) || bytes.Contains(b, []byte("xxx")) {
		t.Errorf("written page: %v\n%.200s", err, b)
	}
	onlyFiles("old.html")

	// A symbolic link is followed: the file it leads to takes the page,
	// keeping its permissions; a link to nothing is refused.
	target := filepath.Join(dir, "target.html")
	if err := os.WriteFile(target, []byte("old"), 0o600); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(dir, "link.html")
	if err := os.Symlink(target, link); err != nil {
		t.Fatal(err)
	}
	if h, err = openHTML(link); err != nil {
		t.Fatal(err)
	}
	if err := h.write(newResults(), testSettings("uds"), testMeta); err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Lstat(link); err != nil || fi.Mode()&fs.ModeSymlink == 0 {
		t.Errorf("the link was replaced: %v, %v", fi.Mode(), err)
	}
	if fi, err := os.Stat(target); err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("the link's file: %v, %v; want mode 0600", fi.Mode(), err)
	}
	if b, _ := os.ReadFile(target); !bytes.HasPrefix(b, []byte("<!DOCTYPE html>")) {
		t.Errorf("the link's file holds %.40q", b)
	}
	dangling := filepath.Join(dir, "dangling.html")
	if err := os.Symlink(filepath.Join(dir, "nowhere", "x.html"), dangling); err != nil {
		t.Fatal(err)
	}
	if _, err := openHTML(dangling); err == nil || !strings.Contains(err.Error(), "symbolic link to nothing") {
		t.Errorf("a dangling link: %v", err)
	}
	if err := os.Remove(dangling); err != nil {
		t.Fatal(err)
	}
	onlyFiles("link.html", "old.html", "target.html")

	// The directory gone between the check and the write: an error
	// naming the path, nothing written.
	sub := filepath.Join(dir, "sub")
	if err := os.Mkdir(sub, 0o755); err != nil {
		t.Fatal(err)
	}
	gone := filepath.Join(sub, "page.html")
	if h, err = openHTML(gone); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(sub); err != nil {
		t.Fatal(err)
	}
	if err := h.write(newResults(), testSettings("uds"), testMeta); err == nil || !strings.Contains(err.Error(), gone) {
		t.Errorf("write into a removed directory: %v, want an error naming %s", err, gone)
	}
	onlyFiles("link.html", "old.html", "target.html")
}

// TestHTMLDistribution: the round trips of the sequential scenario and its
// raw anchor drawn as histograms, every round trip counted once (in a bar,
// or in words beyond the axis), the quantiles in the table.
func TestHTMLDistribution(t *testing.T) {
	r := newResults()
	r.reps, r.cores = 2, 2
	var seq, raw []time.Duration
	for i := range 1000 {
		seq = append(seq, time.Duration(200+i%100)*time.Microsecond) // 200…299 µs
		raw = append(raw, time.Duration(150+i%50)*time.Microsecond)  // 150…199 µs
	}
	seq = append(seq, 50*time.Millisecond, 80*time.Millisecond) // far beyond the axis
	r.addLatencies(implMeerkatd, scAnchorRawSeq, hostile, inboxNone, raw)
	r.addLatencies(implMeerkatd, scSequential, hostile, "memory", seq)
	if got := r.values(implMeerkatd, scSequential, hostile, mP50); len(got) != 1 || got[0] != 250 {
		t.Fatalf("sequential p50 %v, want 250", got)
	}
	var buf bytes.Buffer
	if err := r.writeHTML(&buf, testSettings(hostile), testMeta); err != nil {
		t.Fatal(err)
	}
	checkSelfContained(t, buf.String())
	if strings.Contains(buf.String(), hostile) {
		t.Errorf("the hostile transport name appears raw")
	}
	doc := parsePage(t, buf.Bytes())
	rows := doc.all(func(n *pageNode) bool {
		return n.name == "g" && len(n.all(func(c *pageNode) bool { return c.name == "rect" && hasClass(c, "bin") })) > 0
	})
	if len(rows) != 2 {
		t.Fatalf("%d distribution rows, want 2 (raw anchor, sequential)", len(rows))
	}
	for i, want := range []struct {
		class string
		n     int // round trips in bars
		total int
	}{{"anchor", 1000, 1000}, {"", 1000, 1002}} {
		bins := rows[i].all(func(c *pageNode) bool { return c.name == "rect" && hasClass(c, "bin") })
		sum := 0
		for _, b := range bins {
			if want.class != "" && !hasClass(b, want.class) {
				t.Errorf("row %d: bin without class %q", i, want.class)
			}
			var k, of int
			if _, err := fmt.Sscanf(b.text[strings.Index(b.text, ": ")+2:], "%d of %d", &k, &of); err != nil || of != want.total {
				t.Fatalf("row %d: bin tooltip %q: %v", i, b.text, err)
			}
			sum += k
		}
		if sum != want.n {
			t.Errorf("row %d: %d round trips in bars, want %d", i, sum, want.n)
		}
		if n := len(rows[i].all(func(c *pageNode) bool { return c.name == "line" && hasClass(c, "median") })); n != 2 {
			t.Errorf("row %d: %d quantile marks, want p50 and p99", i, n)
		}
	}
	for _, want := range []string{"1002", "250", "290", "299", "80000", "2 above 300 µs", "0 above 300 µs"} {
		if !strings.Contains(doc.text, want) {
			t.Errorf("distribution table lacks %q", want)
		}
	}
}

// TestHTMLKeyFollowsBars: the throughput chart's key names only the kinds
// of bars drawn.
func TestHTMLKeyFollowsBars(t *testing.T) {
	r := newResults()
	r.reps, r.cores = 1, 2
	r.add(implMeerkatd, scAnchorExch, transportNone, inboxNone, mUS, 100)
	r.add(implMeerkatd, scPipelined, "uds", "memory", mRate, 30000)
	var buf bytes.Buffer
	if err := r.writeHTML(&buf, testSettings("uds"), testMeta); err != nil {
		t.Fatal(err)
	}
	page := buf.String()
	for _, absent := range []string{"NATS bench", "raw batched anchor (", "raw anchor (the crypto"} {
		if strings.Contains(page, absent) {
			t.Errorf("the key names %q with no such bar", absent)
		}
	}
	r.add(implNATS, scPipelined, "tcp", "", mRate, 9000)
	buf.Reset()
	if err := r.writeHTML(&buf, testSettings("uds"), testMeta); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(buf.String(), "NATS bench") {
		t.Errorf("the key lacks the NATS bar drawn")
	}
}
