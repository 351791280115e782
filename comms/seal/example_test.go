package seal_test

import (
	"fmt"

	"github.com/meerkatd/meerkatd/comms/seal"
	"github.com/meerkatd/meerkatd/identity"
)

// A sender seals bytes to a recipient for one envelope; the recipient's
// Opener, made once per node, opens them with the same info.
func Example() {
	alice, _ := identity.GenerateKeypair()
	bob, _ := identity.GenerateKeypair()
	id := identity.NewUUID()

	info := seal.Info(alice.ID(), bob.ID(), id)
	box, err := seal.Seal(bob.ID(), info, []byte("signed inner envelope"))
	if err != nil {
		panic(err)
	}

	opener, err := seal.NewOpener(bob)
	if err != nil {
		panic(err)
	}
	plain, err := opener.Open(info, box)
	fmt.Printf("%s %v\n", plain, err)

	// Carol cannot open it, nor Bob for another envelope.
	carol, _ := identity.GenerateKeypair()
	other, _ := seal.NewOpener(carol)
	_, err = other.Open(info, box)
	fmt.Println(err != nil)
	_, err = opener.Open(seal.Info(alice.ID(), bob.ID(), identity.NewUUID()), box)
	fmt.Println(err != nil)
	// Output:
	// signed inner envelope <nil>
	// true
	// true
}
