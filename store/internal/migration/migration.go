// Package migration loads the embedded, versioned schema migrations that the
// SQL backends apply at open: files named NNNN_name.sql, versions 1, 2, 3, …
// without gaps. Each backend applies them its own way (SQLite in one
// BEGIN IMMEDIATE, Postgres under an advisory lock); this package only reads
// and checks them.
package migration

import (
	"fmt"
	"io/fs"
	"path"
	"sort"
	"strconv"
	"strings"
)

// Migration is one schema migration.
type Migration struct {
	Version int
	Name    string // the name part of NNNN_name.sql
	File    string // the file name
	SQL     string
}

// Load reads the .sql files of dir in fsys, in version order, and checks
// that versions run 1, 2, 3, … without gaps or duplicates.
func Load(fsys fs.FS, dir string) ([]Migration, error) {
	entries, err := fs.ReadDir(fsys, dir)
	if err != nil {
		return nil, err
	}
	var out []Migration
	for _, e := range entries {
		file := e.Name()
		if !strings.HasSuffix(file, ".sql") {
			continue
		}
		num, name, ok := strings.Cut(strings.TrimSuffix(file, ".sql"), "_")
		v, err := strconv.Atoi(num)
		if !ok || err != nil || v <= 0 {
			return nil, fmt.Errorf("migration file %q: want NNNN_name.sql", file)
		}
		b, err := fs.ReadFile(fsys, path.Join(dir, file))
		if err != nil {
			return nil, err
		}
		out = append(out, Migration{Version: v, Name: name, File: file, SQL: string(b)})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Version < out[j].Version })
	for i, m := range out {
		if m.Version != i+1 {
			return nil, fmt.Errorf("migration %q: versions must run 1, 2, 3, … without gaps", m.File)
		}
	}
	return out, nil
}
