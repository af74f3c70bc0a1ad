package registry

import (
	"go/ast"
	"go/parser"
	"go/token"
	"path/filepath"
	"strings"
	"testing"
)

// parseDir parses the package's non-test files.
func parseDir(t *testing.T) map[string]*ast.File {
	t.Helper()
	paths, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	fset := token.NewFileSet()
	files := map[string]*ast.File{}
	for _, p := range paths {
		if strings.HasSuffix(p, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, p, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		files[p] = f
	}
	if len(files) == 0 {
		t.Fatal("no Go files found")
	}
	return files
}

// checkNoPackageState fails if a non-test file declares a package-level
// variable other than an errors.New sentinel: no global registry, table or
// default instance can exist.
func checkNoPackageState(t *testing.T) {
	t.Helper()
	for path, f := range parseDir(t) {
		for _, d := range f.Decls {
			g, ok := d.(*ast.GenDecl)
			if !ok || g.Tok != token.VAR {
				continue
			}
			for _, s := range g.Specs {
				vs := s.(*ast.ValueSpec)
				for i, name := range vs.Names {
					if name.Name == "_" {
						continue // compile-time assertions
					}
					if i >= len(vs.Values) || !isErrorsNew(vs.Values[i]) {
						t.Errorf("%s: package-level var %s is mutable state", path, name.Name)
					}
				}
			}
		}
	}
}

func isErrorsNew(e ast.Expr) bool {
	c, ok := e.(*ast.CallExpr)
	if !ok {
		return false
	}
	sel, ok := c.Fun.(*ast.SelectorExpr)
	if !ok {
		return false
	}
	x, ok := sel.X.(*ast.Ident)
	return ok && x.Name == "errors" && sel.Sel.Name == "New"
}
