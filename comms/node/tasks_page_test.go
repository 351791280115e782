package node

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/meerkatd/meerkatd/config"
	"github.com/meerkatd/meerkatd/identity"
	"github.com/meerkatd/meerkatd/inbox/store"
)

// A list of tasks whose results are large comes a page of about
// MaxBatchBytes at a time (list_tasks' answer must fit the control
// socket's reply and a model's context), never all at once: following
// the cursor reaches every task exactly once, in order, with both task
// tables.
func TestTasksPagedByBytes(t *testing.T) {
	for _, mode := range []string{config.StoreSQLite, config.StoreMemory} {
		t.Run(mode, func(t *testing.T) {
			h, _ := testHome(t, "alice", func(c *config.Config) { c.Store.Mode = mode })
			m := startTest(t, h, ModeServe)
			ctx := context.Background()
			result, _ := json.Marshal(strings.Repeat("r", store.MaxTaskResult-16))
			t0 := time.Now().Add(-time.Hour)
			const total = 120 // about 7.5 MiB of results
			for i := range total {
				id, at := fmt.Sprintf("task-%03d", i), t0.Add(time.Duration(i)*time.Millisecond)
				if _, err := m.tasks.st.Touch(id, identity.PeerID{}, true, at); err != nil {
					t.Fatal(err)
				}
				if _, err := m.tasks.st.Complete(id, m.h.Key.ID(), result, at); err != nil {
					t.Fatal(err)
				}
			}
			var got []string
			q := TaskQuery{Limit: MaxTasksListed}
			for pages := 0; ; pages++ {
				if pages > total {
					t.Fatal("the pages never end")
				}
				tl, err := m.Tasks(ctx, q)
				if err != nil {
					t.Fatal(err)
				}
				b, _ := json.Marshal(tl)
				if len(tl.Tasks) > 1 && len(b) > MaxBatchBytes+4096 {
					t.Fatalf("page %d: %d tasks, %d bytes of JSON", pages, len(tl.Tasks), len(b))
				}
				for _, task := range tl.Tasks {
					got = append(got, task.ID)
				}
				if !tl.More {
					if tl.Cursor != "" || pages == 0 {
						t.Fatalf("last page %d: %+v", pages, tl.Cursor)
					}
					break
				}
				q.Cursor = tl.Cursor
			}
			if len(got) != total {
				t.Fatalf("%d tasks listed, want %d", len(got), total)
			}
			for i, id := range got {
				if want := fmt.Sprintf("task-%03d", total-1-i); id != want {
					t.Fatalf("task #%d is %s, want %s (the most recently updated first, each once)", i, id, want)
				}
			}
		})
	}
}

// limit and the cursor: pages of limit tasks; a task updated between
// pages moves to the front and is not listed again; a cursor that is not
// one is bad_argument.
func TestTasksPagedByLimit(t *testing.T) {
	h, _ := testHome(t, "alice", func(c *config.Config) { c.Store.Mode = config.StoreMemory })
	m := startTest(t, h, ModeServe)
	ctx := context.Background()
	t0 := time.Now().Add(-time.Hour)
	for i := range 5 {
		if _, err := m.tasks.st.Touch(fmt.Sprint("t", i), identity.PeerID{}, true, t0.Add(time.Duration(i)*time.Second)); err != nil {
			t.Fatal(err)
		}
	}
	ids := func(tl TaskList) (out []string) {
		for _, task := range tl.Tasks {
			out = append(out, task.ID)
		}
		return out
	}
	first, err := m.Tasks(ctx, TaskQuery{Limit: 2})
	if err != nil || fmt.Sprint(ids(first)) != "[t4 t3]" || !first.More || first.Cursor == "" {
		t.Fatalf("first page: %+v, %v", first, err)
	}
	if _, err := m.tasks.st.Complete("t4", m.h.Key.ID(), nil, time.Now()); err != nil { // updated: to the front
		t.Fatal(err)
	}
	second, err := m.Tasks(ctx, TaskQuery{Limit: 2, Cursor: first.Cursor})
	if err != nil || fmt.Sprint(ids(second)) != "[t2 t1]" || !second.More {
		t.Fatalf("second page: %+v, %v", second, err)
	}
	last, err := m.Tasks(ctx, TaskQuery{Limit: 2, Cursor: second.Cursor})
	if err != nil || fmt.Sprint(ids(last)) != "[t0]" || last.More || last.Cursor != "" {
		t.Fatalf("last page: %+v, %v", last, err)
	}
	// AllTasks (the command line's list) reads every page.
	if all, err := AllTasks(ctx, m, TaskQuery{Limit: 2}); err != nil || len(all.Tasks) != 5 || all.More {
		t.Fatalf("AllTasks: %d tasks, more %v, %v; want 5", len(all.Tasks), all.More, err)
	}
	for _, bad := range []string{"x", "12", "/t1", "12/", "abc/t1", "12/a\tb"} {
		if _, err := m.Tasks(ctx, TaskQuery{Cursor: bad}); CodeOf(err) != CodeBadArgument {
			t.Errorf("cursor %q: %v, want bad_argument", bad, err)
		}
	}
}
