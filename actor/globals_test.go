package actor_test

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestNoExportedMutableGlobals enforces issue 8 item 14 and the house rule "no
// package-level mutable state" for what users can reach: the actor layer,
// supervisor, registry and lab export no package-level variables (error
// sentinels and the lab's epoch are constants), so nothing another package
// does can change a sentinel's identity or every run's fingerprint.
func TestNoExportedMutableGlobals(t *testing.T) {
	dirs := []string{".", "./dispatch", "../supervisor", "../registry", "../lab"}
	checked := 0
	for _, dir := range dirs {
		entries, err := os.ReadDir(dir)
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range entries {
			name := e.Name()
			if e.IsDir() || !strings.HasSuffix(name, ".go") || strings.HasSuffix(name, "_test.go") {
				continue
			}
			path := filepath.Join(dir, name)
			fset := token.NewFileSet()
			f, err := parser.ParseFile(fset, path, nil, parser.SkipObjectResolution)
			if err != nil {
				t.Fatalf("parse %s: %v", path, err)
			}
			checked++
			for _, d := range f.Decls {
				g, ok := d.(*ast.GenDecl)
				if !ok || g.Tok != token.VAR {
					continue
				}
				for _, spec := range g.Specs {
					for _, id := range spec.(*ast.ValueSpec).Names {
						if id.IsExported() {
							t.Errorf("%s: exported package-level variable %s: make it a constant or a function", fset.Position(id.Pos()), id.Name)
						}
					}
				}
			}
		}
	}
	if checked < 20 {
		t.Fatalf("checked only %d files: wrong directories?", checked)
	}
}
