// Package testutil holds the test helpers that several packages share: a
// goroutine-leak check ([CheckGoroutines]) and a polling wait ([WaitFor]).
//
// # What it is not
//
// It is not a test framework and holds no assertions or fakes: fakes live
// beside what they fake, in xxxtest packages. Only _test.go files may
// import it, so that the testing package never ends up in a binary; a test
// in this package checks that no other code does.
//
// # Concurrency
//
// Both helpers must be called from the goroutine running the test, as
// t.Fatal must. [CheckGoroutines] cannot tell one test's goroutines from
// another's: do not use it in tests that call t.Parallel.
package testutil
