package api_test

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/orrery-run/orrery/store/postgres"
	"github.com/orrery-run/orrery/store/postgres/pgtest"
	"github.com/orrery-run/orrery/store/sqlite"
)

// dsnEnv names the PostgreSQL test database; when it is set the
// PostgreSQL tests run, never skip (.ci/run sets it).
const dsnEnv = "ORRERY_TEST_POSTGRES_DSN"

// TestCreateSendCallStateOnSQLite runs the create, send, call and state
// subset over the embedded default, in a temporary file.
func TestCreateSendCallStateOnSQLite(t *testing.T) {
	ctx := context.Background()
	st, err := sqlite.Open(ctx, filepath.Join(t.TempDir(), "api.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st.Close() })
	createSendCallState(t, newRig(t, rigOptions{store: st}))
}

// TestCreateSendCallStateOnPostgres runs the same subset over PostgreSQL,
// in a schema of its own that is dropped afterwards.
func TestCreateSendCallStateOnPostgres(t *testing.T) {
	dsn := os.Getenv(dsnEnv)
	if dsn == "" {
		t.Skipf("%s is not set: skipping PostgreSQL (.ci/run sets it)", dsnEnv)
	}
	ctx := context.Background()
	schema := pgtest.FreshSchema(t, dsn, "orrery_api")
	st, err := postgres.Open(ctx, dsn, postgres.WithSchema(schema), postgres.WithMaxConns(8), postgres.WithWarmConns(1))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st.Close() })
	createSendCallState(t, newRig(t, rigOptions{store: st}))
}

// TestViewsAndEventsOnSQLite runs the inbox depth, the queue depths and
// the event stream over the embedded default.
func TestViewsAndEventsOnSQLite(t *testing.T) {
	ctx := context.Background()
	st, err := sqlite.Open(ctx, filepath.Join(t.TempDir(), "api.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st.Close() })
	viewsAndEvents(t, newRig(t, rigOptions{store: st, cfg: fastEvents}))
}

// TestViewsAndEventsOnPostgres runs the same over PostgreSQL.
func TestViewsAndEventsOnPostgres(t *testing.T) {
	dsn := os.Getenv(dsnEnv)
	if dsn == "" {
		t.Skipf("%s is not set: skipping PostgreSQL (.ci/run sets it)", dsnEnv)
	}
	st, err := postgres.Open(context.Background(), dsn, postgres.WithSchema(pgtest.FreshSchema(t, dsn, "orrery_api")), postgres.WithMaxConns(8), postgres.WithWarmConns(1))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st.Close() })
	viewsAndEvents(t, newRig(t, rigOptions{store: st, cfg: fastEvents}))
}

// viewsAndEvents: a paused world's two waiting inputs are its inbox depth
// in its view, the inbox backlog in the queue depths, and in its row on a
// new event stream.
func viewsAndEvents(t *testing.T, r *rig) {
	t.Helper()
	r.Create("dq", universe)
	must(r.Client.Pause(r.Ctx, "dq", "backlog"))(t)
	for _, k := range []string{"a", "b"} {
		must(r.Client.Send(r.Ctx, "dq", typeName(t, Add{}), Add{By: 1}, k))(t)
	}
	if v := must(r.Client.GetWorld(r.Ctx, "dq"))(t); v.InboxDepth != 2 || v.InboxDepthMore || v.InboxCursor == nil || *v.InboxCursor != 0 {
		t.Fatalf("view: %+v", v)
	}
	if q := must(r.Client.Queues(r.Ctx))(t); q.InboxBacklog != 2 {
		t.Fatalf("queues: %+v", q)
	}
	f := follow(t, r.Ctx, r.Client)
	found := false
	for _, e := range f.untilSynced() {
		if v, ok := worldEvent(t, e); ok && v.ID == "dq" {
			found = v.InboxDepth == 2 && v.Status == "paused"
		}
	}
	if !found {
		t.Fatal("the stream's initial state lacks dq paused with 2 waiting")
	}
}
