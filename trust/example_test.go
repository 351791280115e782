package trust_test

import (
	"errors"
	"fmt"
	"log"

	"github.com/meerkatd/meerkatd/identity"
	"github.com/meerkatd/meerkatd/transport"
	"github.com/meerkatd/meerkatd/trust"
)

func ExampleParse() {
	l, err := trust.Parse([]byte(`{"peers": [
		{"name": "bob", "pubkey": "ed25519:PUAXw+hDiVqStwqnTRt+vJyYLM8uxJaMwM1V8Sr0Zgw=", "addr": "tcp://10.0.0.2"},
		{"name": "alice", "pubkey": "ed25519:11qYAYKxCrfVS/7TyWQHOg7hcvPapiMlrwIaaPcHURo=", "addr": "uds:///tmp/alice.sock", "meta": {"team": "ops"}}
	]}`))
	if err != nil {
		log.Fatal(err)
	}
	for _, p := range l.Peers() {
		fmt.Println(p.Name, p.ID.Short(), p.Addr)
		if p.Meta != nil {
			fmt.Println("  meta:", string(p.Meta))
		}
	}
	id, _ := identity.ParsePeerID("ed25519:PUAXw+hDiVqStwqnTRt+vJyYLM8uxJaMwM1V8Sr0Zgw=")
	if p, ok := l.Lookup(id); ok {
		fmt.Println("message from", p.Name)
	}
	// Output:
	// alice ed25519:11qYAYKx uds:///tmp/alice.sock
	//   meta: {"team":"ops"}
	// bob ed25519:PUAXw+hD tcp://10.0.0.2:4200
	// message from bob
}

func ExampleParse_errors() {
	_, err := trust.Parse([]byte(`{"peers": [
		{"name": "alice", "pubkey": "ed25519:11qYAYKxCrfVS/7TyWQHOg7hcvPapiMlrwIaaPcHURo=", "addr": "uds:///tmp/alice.sock"},
		{"name": "bob", "pubkey": "ed25519:11qYAYKxCrfVS/7TyWQHOg7hcvPapiMlrwIaaPcHURo=", "addr": "tcp://10.0.0.2:99999"}
	]}`))
	fmt.Println(err)
	var re *trust.RowError
	if errors.As(err, &re) {
		fmt.Println("first bad row:", re.Index, re.Name, re.Field)
	}
	fmt.Println(errors.Is(err, trust.ErrDuplicateKey), errors.Is(err, transport.ErrBadAddr))
	// Output:
	// trust: peers[1] ("bob"): addr: transport: malformed address "tcp://10.0.0.2:99999": port must be 1-65535
	// trust: peers[1] ("bob"): pubkey: duplicate peer key: same pubkey as peers[0] ("alice")
	// first bad row: 1 bob addr
	// true true
}

func ExampleList_With() {
	var l *trust.List // nil is the empty list
	id, _ := identity.ParsePeerID("ed25519:11qYAYKxCrfVS/7TyWQHOg7hcvPapiMlrwIaaPcHURo=")
	addr, _ := transport.ParseAddr("uds:///tmp/alice.sock")
	l2, err := l.With(trust.Peer{Name: "alice", ID: id, Addr: addr})
	if err != nil {
		log.Fatal(err)
	}
	_, err = l2.With(trust.Peer{Name: "Alice", ID: id, Addr: addr})
	fmt.Println(l.Len(), l2.Len())
	fmt.Println(err)
	// Output:
	// 0 1
	// trust: peer ("Alice"): name: duplicate peer name: "Alice" clashes with "alice" in the list; names are unique ignoring case
	// trust: peer ("Alice"): pubkey: duplicate peer key: same pubkey as "alice"
}
