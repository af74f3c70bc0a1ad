package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"

	"github.com/orrery-run/orrery/store"
	"github.com/orrery-run/orrery/store/sqlite"
)

// openStore opens a fresh store for -store and returns it with its
// cleanup.
func openStore(ctx context.Context) (store.Store, func()) {
	switch *backend {
	case "sqlite":
		d := *dir
		rm := func() {}
		if d == "" {
			tmp, err := os.MkdirTemp("", "orrery-durable-")
			must(err)
			d, rm = tmp, func() { _ = os.RemoveAll(tmp) }
		}
		path := filepath.Join(d, "orrery-bench.db")
		for _, f := range []string{path, path + "-wal", path + "-shm"} {
			_ = os.Remove(f)
		}
		st, err := sqlite.Open(ctx, path)
		must(err)
		fmt.Printf("# %s sqlite file %s (synchronous=FULL, WAL; the store's defaults)\n", lib, path)
		return st, func() {
			_ = st.Close()
			for _, f := range []string{path, path + "-wal", path + "-shm"} {
				_ = os.Remove(f)
			}
			rm()
		}
	default:
		must(fmt.Errorf("unknown -store %q (sqlite or pg)", *backend))
		return nil, nil
	}
}
