package cli_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/orrery-run/orrery/internal/cli"
	"github.com/orrery-run/orrery/internal/demo"
)

// One real run of `orrery demo` (its package tests every claim it makes;
// this shows the command runs it, prints it and keeps the database where
// --dir says).
func TestDemoCommand(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	dir := t.TempDir()
	r := runCLI(ctx, nil, "demo", "--dir", dir)
	if r.code != cli.ExitOK {
		t.Fatalf("orrery demo: %s", r)
	}
	at := 0
	for _, step := range []string{"1. Start a node", "2. A call with a reply", "3. A transfer saga", "4. A large withdrawal, audited", "5. A worker crash", "6. A fork", "7. Summary"} {
		i := strings.Index(r.out[at:], "\n"+step)
		if i < 0 {
			t.Fatalf("the demo's output lacks step %q after offset %d:\n%s", step, at, r.out)
		}
		at += i + len(step)
	}
	if _, err := os.Stat(filepath.Join(dir, demo.DBName)); err != nil {
		t.Fatalf("the demo's database is not in --dir: %v", err)
	}
}
