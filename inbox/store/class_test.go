package store

import (
	"context"
	"maps"
	"path/filepath"
	"slices"
	"testing"
)

// Records keep the class they were admitted with; ListClass pages through
// one class's unacknowledged records in seq order and CountClasses counts
// them, acknowledged ones left out of both.
func TestListClass(t *testing.T) {
	s, _ := openStore(t, Options{})
	ctx := context.Background()
	classes := []string{"normal", "interrupt", "", "system", "interrupt", "normal", "interrupt"}
	for i, c := range classes {
		r := rec(1, uint64(i+1))
		r.Class = c
		if _, err := s.Admit(ctx, r); err != nil {
			t.Fatal(err)
		}
	}
	tests := []struct {
		class string
		after uint64
		limit int
		want  []uint64
	}{
		{"interrupt", 0, 0, []uint64{2, 5, 7}},
		{"interrupt", 2, 0, []uint64{5, 7}},
		{"interrupt", 0, 2, []uint64{2, 5}},
		{"normal", 0, 0, []uint64{1, 3, 6}}, // "" is stored as normal
		{"system", 0, 0, []uint64{4}},
		{"system", 4, 0, nil},
		{"user", 0, 0, nil},
	}
	for _, tt := range tests {
		got, err := s.ListClass(tt.class, tt.after, tt.limit)
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(seqsOf(got), tt.want) {
			t.Errorf("ListClass(%q, %d, %d) = %v, want %v", tt.class, tt.after, tt.limit, seqsOf(got), tt.want)
		}
		for _, r := range got {
			if r.Class != tt.class {
				t.Errorf("record %d: class %q, want %q", r.Seq, r.Class, tt.class)
			}
		}
	}
	all, err := s.List(0, 0)
	if err != nil {
		t.Fatal(err)
	}
	if all[2].Class != DefaultClass || all[3].Class != "system" {
		t.Errorf("List classes: %q %q", all[2].Class, all[3].Class)
	}
	if _, err := s.Ack(2, 4); err != nil {
		t.Fatal(err)
	}
	got, err := s.ListClass("interrupt", 0, 0)
	if err != nil || !slices.Equal(seqsOf(got), []uint64{5, 7}) {
		t.Errorf("after ack: %v, %v", seqsOf(got), err)
	}
	if last, err := s.LastSeq(); err != nil || last != 7 {
		t.Errorf("LastSeq = %d, %v; want 7", last, err)
	}
	counts, err := s.CountClasses()
	if err != nil {
		t.Fatal(err)
	}
	if want := map[string]int{"normal": 3, "interrupt": 2}; !maps.Equal(counts, want) {
		t.Errorf("CountClasses = %v, want %v", counts, want)
	}
	// The newest item gone from history (trimmed): its seq was handed
	// out all the same.
	if _, err := s.db.Exec(`DELETE FROM items WHERE seq = 7`); err != nil {
		t.Fatal(err)
	}
	if last, err := s.LastSeq(); err != nil || last != 7 {
		t.Errorf("LastSeq with seq 7 trimmed = %d, %v; want 7", last, err)
	}
	s.Close()
	if _, err := s.ListClass("normal", 0, 0); err == nil {
		t.Error("ListClass after Close: no error")
	}
	if _, err := s.CountClasses(); err == nil {
		t.Error("CountClasses after Close: no error")
	}
	if _, err := s.LastSeq(); err == nil {
		t.Error("LastSeq after Close: no error")
	}
}

// Items stored before classes existed read as normal after the upgrade.
func TestClassUpgrade(t *testing.T) {
	path := filepath.Join(t.TempDir(), "meerkat.db")
	makeV4(t, path)
	s := reopen(t, path, Options{})
	got, err := s.ListClass(DefaultClass, 0, 0)
	if err != nil || len(got) != 1 || got[0].Class != DefaultClass {
		t.Fatalf("old item after upgrade: %+v, %v", got, err)
	}
}

// ListKind pages through one kind's unacknowledged records in seq order,
// with their keys and without their payloads.
func TestListKind(t *testing.T) {
	s, _ := openStore(t, Options{})
	ctx := context.Background()
	kinds := []string{"request", "message", "request", "response", "request"}
	for i, k := range kinds {
		r := rec(1, uint64(i+1))
		r.Kind = k
		if _, err := s.Admit(ctx, r); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := s.Ack(3); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		kind  string
		after uint64
		limit int
		want  []uint64
	}{
		{"request", 0, 0, []uint64{1, 5}}, // 3 is acknowledged
		{"request", 0, 1, []uint64{1}},
		{"request", 1, 1, []uint64{5}},
		{"request", 5, 0, nil},
		{"response", 0, 0, []uint64{4}},
		{"ack", 0, 0, nil},
	}
	for _, tt := range tests {
		got, err := s.ListKind(tt.kind, tt.after, tt.limit)
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(seqsOf(got), tt.want) {
			t.Errorf("ListKind(%q, %d, %d) = %v, want %v", tt.kind, tt.after, tt.limit, seqsOf(got), tt.want)
		}
		for _, r := range got {
			want := rec(1, r.Seq)
			if r.Kind != tt.kind || r.ID != want.ID || r.Sender != want.Sender || len(r.Payload) != 0 {
				t.Errorf("record %d: kind %q, id %x, sender %x, %d payload bytes; want %q, its key, none", r.Seq, r.Kind, r.ID, r.Sender[:2], len(r.Payload), tt.kind)
			}
		}
	}
}
