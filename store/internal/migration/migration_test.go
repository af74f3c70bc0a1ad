package migration

import (
	"testing"
	"testing/fstest"
)

func TestLoadOrdersAndChecksVersions(t *testing.T) {
	ok := fstest.MapFS{
		"m/0002_more.sql": {Data: []byte("B")},
		"m/0001_init.sql": {Data: []byte("A")},
		"m/README":        {Data: []byte("not a migration")},
	}
	ms, err := Load(ok, "m")
	if err != nil || len(ms) != 2 || ms[0].Name != "init" || ms[0].File != "0001_init.sql" || ms[1].SQL != "B" {
		t.Fatalf("Load = %+v, %v", ms, err)
	}
	for name, fsys := range map[string]fstest.MapFS{
		"gap":       {"m/0001_a.sql": {}, "m/0003_c.sql": {}},
		"duplicate": {"m/0001_a.sql": {}, "m/01_b.sql": {}},
		"bad name":  {"m/first.sql": {}},
		"zero":      {"m/0000_a.sql": {}},
	} {
		if _, err := Load(fsys, "m"); err == nil {
			t.Errorf("%s: Load accepted an invalid migration set", name)
		}
	}
}
