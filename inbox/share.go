package inbox

import (
	"errors"
	"fmt"
)

// ErrShare is returned when a sender already holds its fair share of a
// fuller than half inbox ([FairShare]); the item was not stored, and items
// of other senders still are. It wraps [ErrFull], so callers that treat
// a full inbox as "not stored, retry later" need no change.
var ErrShare = fmt.Errorf("%w: the sender holds its share", ErrFull)

// IsShare reports whether err refused an item for its sender's share.
func IsShare(err error) bool { return errors.Is(err, ErrShare) }

// DefaultShare is the default percentage of an inbox the senders holding
// items in it share once it is over half full.
const DefaultShare = 50

// Usage is what an inbox, or one sender in it, holds: items and bytes.
type Usage struct {
	Items, Bytes int64
}

// FairShare reports whether a sender holding held may store one more item
// of n bytes in an inbox holding total of limit (limit.Bytes <= 0: no byte
// limit), where senders is the number of senders holding items (the
// sender included). The inbox's own limits are checked elsewhere.
//
// While the inbox stays at most half full, anyone may store. Past that a
// sender may hold at most percent% of the limit (items, and bytes)
// divided by senders, so one sender flooding the inbox stops at its share
// and leaves room for the others; a sender holding nothing is always
// admitted.
func FairShare(percent int, held, total, limit Usage, n int64, senders int) bool {
	if held.Items == 0 || percent >= 100 && senders <= 1 {
		return true
	}
	if (total.Items+1)*2 <= limit.Items && (limit.Bytes <= 0 || (total.Bytes+n)*2 <= limit.Bytes) {
		return true
	}
	senders = max(senders, 1)
	capItems := max(percentOf(limit.Items, percent)/int64(senders), 1)
	if held.Items+1 > capItems {
		return false
	}
	if limit.Bytes > 0 {
		capBytes := percentOf(limit.Bytes, percent) / int64(senders)
		if held.Bytes+n > capBytes {
			return false
		}
	}
	return true
}

// percentOf is percent% of v (v ≥ 0), without overflowing for any v.
func percentOf(v int64, percent int) int64 {
	return v/100*int64(percent) + v%100*int64(percent)/100
}

// Shares counts what each sender holds in an inbox, for [FairShare]. The
// zero value is empty and ready; it is not safe for concurrent use.
type Shares struct {
	by map[string]Usage
}

// Of returns what sender holds.
func (s *Shares) Of(sender string) Usage { return s.by[sender] }

// Senders returns how many senders hold items.
func (s *Shares) Senders() int { return len(s.by) }

// Add changes what sender holds by items and bytes (negative to remove).
func (s *Shares) Add(sender string, items, bytes int64) {
	if s.by == nil {
		s.by = map[string]Usage{}
	}
	u := s.by[sender]
	u.Items += items
	u.Bytes += bytes
	if u.Items <= 0 {
		delete(s.by, sender)
		return
	}
	s.by[sender] = u
}

// Admit reports whether sender may store an item of n bytes by
// [FairShare], counting sender among the senders if it holds nothing yet.
func (s *Shares) Admit(percent int, sender string, total, limit Usage, n int64) bool {
	held := s.by[sender]
	senders := len(s.by)
	if held.Items == 0 {
		senders++
	}
	return FairShare(percent, held, total, limit, n, senders)
}

// Clone returns a copy of s.
func (s *Shares) Clone() Shares {
	c := Shares{by: make(map[string]Usage, len(s.by))}
	for k, v := range s.by {
		c.by[k] = v
	}
	return c
}
