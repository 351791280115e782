package node

import (
	"testing"
	"time"
)

func TestParseSince(t *testing.T) {
	now := time.Date(2026, 11, 26, 12, 0, 0, 0, time.UTC)
	for _, c := range []struct {
		in   string
		want time.Time
		ok   bool
	}{
		{"1h", now.Add(-time.Hour), true},
		{"90s", now.Add(-90 * time.Second), true},
		{"0s", now, true},
		{"2026-11-25T08:00:00Z", time.Date(2026, 11, 25, 8, 0, 0, 0, time.UTC), true},
		{"2026-11-25T08:00:00+02:00", time.Date(2026, 11, 25, 6, 0, 0, 0, time.UTC), true},
		{"-1h", time.Time{}, false},
		{"yesterday", time.Time{}, false},
		{"2026-11-25", time.Time{}, false},
		{"", time.Time{}, false},
	} {
		got, err := ParseSince(c.in, now)
		if (err == nil) != c.ok || c.ok && !got.Equal(c.want) {
			t.Errorf("ParseSince(%q) = %v, %v; want %v ok=%v", c.in, got, err, c.want, c.ok)
		}
	}
}

func FuzzParseSince(f *testing.F) {
	for _, s := range []string{"1h", "0s", "-1h", "2026-11-25T08:00:00Z", "yesterday", ""} {
		f.Add(s)
	}
	now := time.Date(2026, 11, 26, 12, 0, 0, 0, time.UTC)
	f.Fuzz(func(t *testing.T, s string) {
		got, err := ParseSince(s, now)
		if err != nil {
			return
		}
		// A duration reads as that long before now, never after it.
		if d, derr := time.ParseDuration(s); derr == nil && (got.After(now) || !got.Equal(now.Add(-d))) {
			t.Fatalf("%q: %v, want %v", s, got, now.Add(-d))
		}
	})
}
