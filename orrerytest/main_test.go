package orrerytest_test

import (
	"fmt"
	"os"
	"regexp"
	"runtime"
	"strings"
	"testing"

	"github.com/orrery-run/orrery/internal/leaktest"
	"github.com/orrery-run/orrery/orrerytest"
)

func TestMain(m *testing.M) { leaktest.VerifyTestMain(m) }

// inTest runs body as a test would (orrerytest.Test in a Test function),
// so that an Example can show the kit and check its output: an Example
// has no *testing.T of its own. The test's own lines (=== RUN, --- PASS)
// stay out of the example's output; a failure prints its log, so the
// example fails with it.
func inTest(body func(t *testing.T)) {
	name := "Example"
	if pc, _, _, ok := runtime.Caller(1); ok {
		f := runtime.FuncForPC(pc).Name()
		name = f[strings.LastIndex(f, ".")+1:]
	}
	out := os.Stdout
	log, err := os.CreateTemp("", "orrerytest-example-*")
	if err != nil {
		fmt.Println(err)
		return
	}
	defer os.Remove(log.Name())
	defer log.Close()
	ran := false
	os.Stdout = log
	ok := testing.RunTests(func(string, string) (bool, error) { return true, nil }, []testing.InternalTest{{
		Name: name,
		F: func(t *testing.T) {
			if ran { // -count=N: the example's output is once
				return
			}
			ran = true
			os.Stdout = out
			defer func() { os.Stdout = log }()
			orrerytest.Test(t, body)
		},
	}})
	os.Stdout = out
	if !ok || !ran {
		b, _ := os.ReadFile(log.Name())
		fmt.Printf("the example's test failed (ran: %v):\n%s", ran, regexp.MustCompile(`\(\d+\.\d+s\)`).ReplaceAll(b, nil))
	}
}
