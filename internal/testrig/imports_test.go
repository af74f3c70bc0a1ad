package testrig_test

import (
	"go/parser"
	"go/token"
	"io/fs"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// TestOnlyTestsImportTheRig: the rig and the shared test worlds are test
// support, so no file the module builds into a program or library imports
// them; only _test.go files do.
func TestOnlyTestsImportTheRig(t *testing.T) {
	banned := map[string]bool{
		"github.com/orrery-run/orrery/internal/testrig":    true,
		"github.com/orrery-run/orrery/internal/testworlds": true,
	}
	root := filepath.Join("..", "..")
	fset := token.NewFileSet()
	seen := 0
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if name := d.Name(); path != root && (name == "testdata" || name == "bench" || strings.HasPrefix(name, ".")) {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		dir := filepath.ToSlash(filepath.Dir(path))
		if strings.HasSuffix(dir, "internal/testrig") || strings.HasSuffix(dir, "internal/testworlds") {
			return nil
		}
		f, err := parser.ParseFile(fset, path, nil, parser.ImportsOnly)
		if err != nil {
			return err
		}
		seen++
		for _, imp := range f.Imports {
			if p, _ := strconv.Unquote(imp.Path.Value); banned[p] {
				t.Errorf("%s imports %s, which only tests may", path, p)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if seen < 50 {
		t.Fatalf("read %d non-test files: the walk missed the module", seen)
	}
}
