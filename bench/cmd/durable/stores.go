package main

import (
	"context"
	"flag"
	"fmt"
	"net/url"
	"os"
	"path/filepath"

	"github.com/jackc/pgx/v5"

	"github.com/orrery-run/orrery/store"
	"github.com/orrery-run/orrery/store/postgres"
	"github.com/orrery-run/orrery/store/sqlite"
)

var pgConns = flag.Int("pg-conns", 0, "pg: the store's connection pool size (0: the store's default)")

// pgDSN is the server's DSN (PEERS_PG_DSN, as the peers read it), in URL
// form.
func pgDSN() string {
	if s := os.Getenv("PEERS_PG_DSN"); s != "" {
		return s
	}
	return "postgres://orrery:orrery@127.0.0.1:5432/orrery?sslmode=disable"
}

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
	case "pg":
		// A database of its own, dropped and recreated, as the peers do.
		admin := pgDSN()
		c, err := pgx.Connect(ctx, admin)
		must(err)
		db := pgx.Identifier{*pgDB}.Sanitize()
		_, err = c.Exec(ctx, "DROP DATABASE IF EXISTS "+db+" WITH (FORCE)")
		must(err)
		_, err = c.Exec(ctx, "CREATE DATABASE "+db)
		must(err)
		var sc, fs, ver string
		must(c.QueryRow(ctx, "select current_setting('synchronous_commit'), current_setting('fsync'), current_setting('server_version')").Scan(&sc, &fs, &ver))
		fmt.Printf("# %s postgres %s synchronous_commit=%s fsync=%s (database %s, dropped at exit; the store's defaults)\n", lib, ver, sc, fs, *pgDB)
		_ = c.Close(ctx)
		u, err := url.Parse(admin)
		must(err)
		u.Path = "/" + *pgDB
		var opts []postgres.Option
		if *pgConns > 0 {
			opts = append(opts, postgres.WithMaxConns(*pgConns))
			fmt.Printf("# %s pool: MaxConns=%d\n", lib, *pgConns)
		}
		st, err := postgres.Open(ctx, u.String(), opts...)
		must(err)
		return st, func() {
			_ = st.Close()
			if c, err := pgx.Connect(ctx, admin); err == nil {
				_, _ = c.Exec(ctx, "DROP DATABASE IF EXISTS "+db+" WITH (FORCE)")
				_ = c.Close(ctx)
			}
		}
	default:
		must(fmt.Errorf("unknown -store %q (sqlite or pg)", *backend))
		return nil, nil
	}
}
