package node

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
)

// pairAPI answers PairWait from a script (then blocks until the wait's
// context ends) and records PairCancel.
type pairAPI struct {
	API
	mu        sync.Mutex
	script    []error // nil: paired
	cancelled []string
}

func (p *pairAPI) PairWait(ctx context.Context, id string) (Paired, error) {
	p.mu.Lock()
	if len(p.script) > 0 {
		err := p.script[0]
		p.script = p.script[1:]
		p.mu.Unlock()
		if err != nil {
			return Paired{}, err
		}
		return Paired{Name: "bob"}, nil
	}
	p.mu.Unlock()
	<-ctx.Done()
	return Paired{}, ctx.Err()
}

func (p *pairAPI) PairCancel(_ context.Context, id string) (int, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.cancelled = append(p.cancelled, id)
	return 1, nil
}

func TestAwaitPairing(t *testing.T) {
	pending := &Error{Code: CodePairPending, Msg: "still open"}
	offer := PairOffer{ID: "o1", Expires: time.Now().Add(time.Minute)}
	ctx := context.Background()

	api := &pairAPI{script: []error{pending, context.DeadlineExceeded, nil}}
	p, err := AwaitPairing(ctx, api, offer)
	if err != nil || p.Name != "bob" || len(api.cancelled) != 0 {
		t.Fatalf("used after two waits: %+v, %v, cancelled %v", p, err, api.cancelled)
	}

	api = &pairAPI{script: []error{&Error{Code: CodePairFailed, Msg: "a failed proof"}}}
	if _, err := AwaitPairing(ctx, api, offer); CodeOf(err) != CodePairFailed || !strings.Contains(err.Error(), "proof") || len(api.cancelled) != 1 {
		t.Fatalf("a failed exchange: %v, cancelled %v", err, api.cancelled)
	}

	api = &pairAPI{}
	ictx, cancel := context.WithCancel(ctx)
	time.AfterFunc(20*time.Millisecond, cancel)
	if _, err := AwaitPairing(ictx, api, offer); err == nil || !strings.Contains(err.Error(), "withdrawn") || len(api.cancelled) != 1 {
		t.Fatalf("interrupted: %v, cancelled %v", err, api.cancelled)
	}
}

// An offer that cannot be left for local nodes (the discovery directory
// cannot be written) is withdrawn: nobody could use it.
func TestShareOfferLocallyWithdrawsOnFailure(t *testing.T) {
	h, _ := testHome(t, "alice", nil)
	notDir := filepath.Join(t.TempDir(), "file")
	if err := os.WriteFile(notDir, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	api := &pairAPI{}
	remove, err := ShareOfferLocally(context.Background(), notDir, h, api, PairOffer{ID: "o1", Line: "meerkat-pair/1 x y", Expires: time.Now().Add(time.Minute)})
	if err == nil {
		remove()
		t.Fatal("ShareOfferLocally succeeded with a file as $XDG_RUNTIME_DIR")
	}
	if !slices.Equal(api.cancelled, []string{"o1"}) {
		t.Fatalf("withdrawn %v, want [o1]", api.cancelled)
	}
}
