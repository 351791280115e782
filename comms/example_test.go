package comms_test

import (
	"context"
	"fmt"
	"log"
	"os"
	"path/filepath"

	"github.com/meerkatd/meerkatd/comms"
	"github.com/meerkatd/meerkatd/comms/wire"
	"github.com/meerkatd/meerkatd/identity"
	"github.com/meerkatd/meerkatd/transport"
	"github.com/meerkatd/meerkatd/trust"
)

// An agent loop: bob drains his inbox at each turn, answers "add" requests,
// and alice waits for the answer to hers.
func Example_agentLoop() {
	dir, err := os.MkdirTemp("", "mkex")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)
	aliceKey, _ := identity.GenerateKeypair()
	bobKey, _ := identity.GenerateKeypair()
	aliceAddr := transport.Addr{Scheme: transport.SchemeUDS, Path: filepath.Join(dir, "alice.sock")}
	bobAddr := transport.Addr{Scheme: transport.SchemeUDS, Path: filepath.Join(dir, "bob.sock")}
	aliceTrusts, _ := trust.New(trust.Peer{Name: "bob", ID: bobKey.ID(), Addr: bobAddr})
	bobTrusts, _ := trust.New(trust.Peer{Name: "alice", ID: aliceKey.ID(), Addr: aliceAddr})

	start := func(kp *identity.Keypair, l *trust.List, a transport.Addr) *comms.Router {
		r, err := comms.New(kp, l, comms.Options{})
		if err != nil {
			log.Fatal(err)
		}
		ln, err := transport.Listen(context.Background(), a)
		if err != nil {
			log.Fatal(err)
		}
		go r.Serve(ln)
		return r
	}
	alice := start(aliceKey, aliceTrusts, aliceAddr)
	defer alice.Close()
	bob := start(bobKey, bobTrusts, bobAddr)
	defer bob.Close()

	ctx := context.Background()
	// Bob's agent loop: one turn per batch of inbox items.
	go func() {
		for {
			items, err := bob.Inbox().Wait(ctx)
			if err != nil {
				return // closed
			}
			for _, it := range items {
				k := it.Envelope.Kind
				if k.Type() != wire.TypeRequest || k.Intent() != "add" {
					continue
				}
				a, _ := k.Params().Get("a")
				b, _ := k.Params().Get("b")
				x, _ := a.Int()
				y, _ := b.Int()
				bob.SendResponse(ctx, it.PeerName, it.Envelope.ID, wire.StatusCompleted, wire.Int(x+y))
			}
		}
	}()

	params, _ := wire.ParseJSON([]byte(`{"a": 2, "b": 40}`))
	id, err := alice.SendRequest(ctx, "bob", "add", params)
	if err != nil {
		log.Fatal(err)
	}
	resp, err := alice.AwaitResponse(ctx, id)
	if err != nil {
		log.Fatal(err)
	}
	sum, _ := resp.Kind.Result().Int()
	fmt.Println(resp.Kind.Status(), sum)
	// Output: completed 42
}
