package cli

import (
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
)

// Both forms of a multi-host PostgreSQL DSN reach serve intact, from the
// flag, the environment and the config file, name PostgreSQL (not a SQLite
// file), and keep both hosts and target_session_attrs after serve adds
// its idle-transaction limit; a DSN's own limit is kept.
func TestMultiHostDSNs(t *testing.T) {
	const (
		urlDSN = "postgres://u:p@db1:5432,db2:5433/orrery?sslmode=disable&target_session_attrs=read-write"
		kvDSN  = "host=db1,db2 port=5432,5433 user=u password=p dbname=orrery sslmode=disable target_session_attrs=read-write"
	)
	file := writeConfig(t, `store = "`+kvDSN+`"`)
	for _, tc := range []struct {
		name string
		env  map[string]string
		args []string
		want string
	}{
		{"flag url", nil, []string{"serve", "--store", urlDSN}, urlDSN},
		{"flag key/value", nil, []string{"serve", "--store", kvDSN}, kvDSN},
		{"env url", map[string]string{"ORRERY_STORE": urlDSN}, []string{"serve"}, urlDSN},
		{"file key/value", nil, []string{"--config", file, "serve"}, kvDSN},
	} {
		seen, err := settingsSeen(t, tc.env, tc.args...)
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		if seen["store"] != tc.want {
			t.Fatalf("%s: store %q, want %q", tc.name, seen["store"], tc.want)
		}
	}
	for _, dsn := range []string{urlDSN, kvDSN} {
		if !isPostgresDSN(dsn) {
			t.Fatalf("%q is not taken for PostgreSQL", dsn)
		}
		got, err := withIdleTxTimeout(dsn, 10*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		cfg, err := pgconn.ParseConfig(got)
		if err != nil {
			t.Fatalf("%q: %v", got, err)
		}
		if cfg.Host != "db1" || cfg.Port != 5432 || len(cfg.Fallbacks) != 1 || cfg.Fallbacks[0].Host != "db2" || cfg.Fallbacks[0].Port != 5433 {
			t.Fatalf("%q parses to %s:%d with %d fallbacks, want db1:5432 then db2:5433", got, cfg.Host, cfg.Port, len(cfg.Fallbacks))
		}
		if cfg.ValidateConnect == nil {
			t.Fatalf("%q lost target_session_attrs", got)
		}
		if cfg.RuntimeParams[idleTxParam] != "5000" {
			t.Fatalf("%q: %s = %q, want 5000 (half the lease TTL)", got, idleTxParam, cfg.RuntimeParams[idleTxParam])
		}
	}
	own := kvDSN + " " + idleTxParam + "=123"
	if got, _ := withIdleTxTimeout(own, 10*time.Second); got != own {
		t.Fatalf("a DSN's own %s was overridden: %q", idleTxParam, got)
	}
	for _, notPG := range []string{"orrery.db", "./data/orrery.db", "file:orrery.db?mode=rwc", "memory"} {
		if isPostgresDSN(notPG) {
			t.Fatalf("%q is taken for PostgreSQL", notPG)
		}
	}
}
