package identity_test

import (
	"bytes"
	"encoding/hex"
	"errors"
	"fmt"
	"log"
	"os"

	"github.com/meerkatd/meerkatd/identity"
)

func ExampleParsePeerID() {
	id, err := identity.ParsePeerID("ed25519:11qYAYKxCrfVS/7TyWQHOg7hcvPapiMlrwIaaPcHURo=")
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(id)
	fmt.Println(id.UUID())
	fmt.Println(id.Short())
	// Output:
	// ed25519:11qYAYKxCrfVS/7TyWQHOg7hcvPapiMlrwIaaPcHURo=
	// 799d7474-517f-5045-9ae5-ca7af62e35c6
	// ed25519:11qYAYKx
}

func ExampleParsePeerID_errors() {
	for _, s := range []string{
		"11qYAYKxCrfVS/7TyWQHOg7hcvPapiMlrwIaaPcHURo=",
		"ed25519:11qYAYKxCrfVS/7TyWQHOg7hcvPapiMlrwIaaPcHURo",
		"ed25519:11qYAYKxCrfVS_7TyWQHOg7hcvPapiMlrwIaaPcHURo=",
		"ed25519:AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA=",
	} {
		_, err := identity.ParsePeerID(s)
		switch {
		case errors.Is(err, identity.ErrBadPrefix):
			fmt.Println("bad prefix")
		case errors.Is(err, identity.ErrBadLength):
			fmt.Println("bad length")
		case errors.Is(err, identity.ErrBadBase64):
			fmt.Println("bad base64")
		case errors.Is(err, identity.ErrZeroKey):
			fmt.Println("zero key")
		}
	}
	// Output:
	// bad prefix
	// bad length
	// bad base64
	// zero key
}

func ExampleKeypairFromSeed() {
	// The secret key of RFC 8032, section 7.1, TEST 1.
	seed, _ := hex.DecodeString("9d61b19deffd5a60ba844af492ec2cc44449c5697b326919703bac031cae7f60")
	kp, err := identity.KeypairFromSeed(seed)
	if err != nil {
		log.Fatal(err)
	}
	sig := kp.Sign(nil) // the empty message
	fmt.Println(kp)
	fmt.Println(hex.EncodeToString(sig[:32]))
	fmt.Println(hex.EncodeToString(sig[32:]))
	fmt.Println(kp.ID().Verify(nil, sig))
	// Output:
	// Keypair(ed25519:11qYAYKxCrfVS/7TyWQHOg7hcvPapiMlrwIaaPcHURo=)
	// e5564300c360ac729086e2cc806e828a84877f1eb8e5d974d873e06522490155
	// 5fb8821590a33bacc61e39701cf9b46bd25bf5f0595bbe24655141438e7a100b
	// true
}

func ExampleLoadKeypair() {
	dir, err := os.MkdirTemp("", "meerkat-example")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)

	kp, err := identity.GenerateKeypair()
	if err != nil {
		log.Fatal(err)
	}
	if err := kp.Save(dir); err != nil {
		log.Fatal(err)
	}
	loaded, err := identity.LoadKeypair(dir)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(loaded.ID() == kp.ID())
	// Output:
	// true
}

func ExampleParseUUID() {
	u, err := identity.ParseUUID("550E8400-E29B-41D4-A716-446655440000")
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(u)
	// Output:
	// 550e8400-e29b-41d4-a716-446655440000
}

func ExampleBatch() {
	alice, _ := identity.KeypairFromSeed(bytes.Repeat([]byte{1}, 32))
	bob, _ := identity.KeypairFromSeed(bytes.Repeat([]byte{2}, 32))
	msgs := [][]byte{[]byte("one"), []byte("two"), []byte("three")}

	// A receive loop keeps one Batch and reuses it.
	var b identity.Batch
	b.Add(alice.ID(), msgs[0], alice.Sign(msgs[0]))
	b.Add(bob.ID(), msgs[1], alice.Sign(msgs[1])) // not bob's signature
	b.Add(bob.ID(), msgs[2], bob.Sign(msgs[2]))
	ok := make([]bool, b.Len())
	fmt.Println(b.Verify(ok), ok)
	b.Reset()
	// Output:
	// false [true false true]
}
