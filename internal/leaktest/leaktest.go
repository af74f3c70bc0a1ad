// Package leaktest checks, once a package's tests have passed, that they
// left no goroutine running: goleak's check, waited for as long as a busy
// machine needs.
//
// goleak.VerifyTestMain gives the last tests' goroutines about half a
// second to end (its retries), and nothing in goleak's API makes that
// longer. A goroutine that has been told to stop (a closed store's
// committer, a pool's health check, an HTTP connection's reader) still has
// to be given a core to return, and on a loaded two-core machine that can
// take longer: the verdict would then depend on the machine's load. Here
// the check is repeated until it passes or a minute has passed, a hang
// guard far above the milliseconds such goroutines take; a goroutine still
// running after a minute is a leak.
//
// It is the one goleak entry point of the module: every package with
// tests has a main_test.go holding exactly
//
//	func TestMain(m *testing.M) { leaktest.VerifyTestMain(m) }
//
// and a package whose tests must tolerate a goroutine they do not own
// passes goleak options to VerifyTestMain rather than calling goleak
// itself.
package leaktest

import (
	"fmt"
	"os"
	"testing"
	"time"

	"go.uber.org/goleak"
)

// patience is how long goroutines left by the tests may take to end.
const patience = time.Minute

// VerifyTestMain runs the tests and, if they passed, fails the run when a
// goroutine they started is still running after patience. Use it as a
// package's TestMain: func TestMain(m *testing.M) { leaktest.VerifyTestMain(m) }.
func VerifyTestMain(m *testing.M, opts ...goleak.Option) {
	code := m.Run()
	if code == 0 {
		if err := Find(opts...); err != nil {
			fmt.Fprintf(os.Stderr, "goleak: Errors on successful test run: %v\n", err)
			code = 1
		}
	}
	os.Exit(code)
}

// Find is goleak.Find, repeated until no unexpected goroutine remains or
// patience has passed; it returns goleak's last report.
func Find(opts ...goleak.Option) error { return find(patience, opts...) }

func find(patience time.Duration, opts ...goleak.Option) error {
	deadline := time.Now().Add(patience)
	for {
		err := goleak.Find(opts...)
		if err == nil || time.Now().After(deadline) {
			return err
		}
	}
}
