package migrate

import (
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"strings"

	"github.com/jackc/pgx/v5/pgconn"
)

// Spec is a parsed store spec: a SQLite file path or a PostgreSQL DSN.
type Spec struct {
	// Kind is "sqlite" or "postgres".
	Kind string
	// Path is the SQLite file, made absolute.
	Path string
	// DSN is the PostgreSQL DSN without the schema parameter; Schema is
	// that parameter ("" for the store's default schema).
	DSN, Schema string
	// key identifies the store for ErrSameStore.
	key string
}

// SchemaParam is the query parameter of a postgres:// DSN that names the
// schema holding the store (default: the store's own, "orrery"). It is
// Orrery's, not PostgreSQL's: it is taken out before the DSN reaches the
// server. Two stores in one database differ by it.
const SchemaParam = "schema"

var schemaName = regexp.MustCompile(`^[a-z_][a-z0-9_]{0,47}$`)

// keywordDSN matches the start of a PostgreSQL key/value DSN
// ("host=a,b port=5432,5433 dbname=orrery target_session_attrs=read-write").
var keywordDSN = regexp.MustCompile(`^\s*[a-z_]+\s*=`)

// IsPostgres reports whether spec names a PostgreSQL store: a URL
// (postgres:// or postgresql://) or a key/value DSN. Either may list
// several hosts, the standby after the primary, for a cluster that fails
// over.
func IsPostgres(spec string) bool {
	return strings.HasPrefix(spec, "postgres://") || strings.HasPrefix(spec, "postgresql://") || keywordDSN.MatchString(spec)
}

// SplitSchema takes SchemaParam out of a postgres:// DSN: the DSN to
// connect with and the schema ("" when the DSN names none). A bad URL or
// schema name is ErrBadSpec. A key/value DSN names no schema: it is
// returned as it is.
func SplitSchema(dsn string) (string, string, error) {
	if keywordDSN.MatchString(dsn) {
		return dsn, "", nil
	}
	u, err := url.Parse(dsn)
	if err != nil {
		return "", "", fmt.Errorf("%w: %v", ErrBadSpec, err)
	}
	q := u.Query()
	if !q.Has(SchemaParam) {
		return dsn, "", nil
	}
	schema := q.Get(SchemaParam)
	if !schemaName.MatchString(schema) {
		return "", "", fmt.Errorf("%w: schema %q: want a lower-case identifier of at most 48 bytes", ErrBadSpec, schema)
	}
	q.Del(SchemaParam)
	u.RawQuery = q.Encode()
	return u.String(), schema, nil
}

// ParseSpec parses a store spec as `serve --store` reads it, refusing what
// a migration cannot use: the empty spec, "memory" (nothing survives the
// process), a URL of another scheme, a DSN PostgreSQL's client cannot
// parse. Errors match ErrBadSpec.
func ParseSpec(spec string) (Spec, error) {
	switch {
	case strings.TrimSpace(spec) == "":
		return Spec{}, fmt.Errorf("%w: empty", ErrBadSpec)
	case spec == "memory":
		return Spec{}, fmt.Errorf("%w: %q keeps nothing after the process ends: give a SQLite path or a postgres:// DSN", ErrBadSpec, spec)
	case IsPostgres(spec):
		dsn, schema, err := SplitSchema(spec)
		if err != nil {
			return Spec{}, err
		}
		cfg, err := pgconn.ParseConfig(dsn)
		if err != nil {
			// pgconn's message may quote the DSN, password included.
			return Spec{}, fmt.Errorf("%w: not a valid PostgreSQL DSN (%s)", ErrBadSpec, redact(err.Error(), spec))
		}
		if cfg.Database == "" {
			return Spec{}, fmt.Errorf("%w: the DSN names no database", ErrBadSpec)
		}
		s := schema
		if s == "" {
			s = "orrery"
		}
		return Spec{Kind: "postgres", DSN: dsn, Schema: schema,
			key: fmt.Sprintf("postgres|%s|%d|%s|%s", strings.ToLower(cfg.Host), cfg.Port, cfg.Database, s)}, nil
	case strings.Contains(spec, "://"):
		return Spec{}, fmt.Errorf("%w: %q: a store is a SQLite path or a postgres:// DSN", ErrBadSpec, redact(spec, spec))
	}
	abs, err := filepath.Abs(spec)
	if err != nil {
		return Spec{}, fmt.Errorf("%w: %v", ErrBadSpec, err)
	}
	key := abs
	if real, err := filepath.EvalSymlinks(abs); err == nil {
		key = real
	}
	if fi, err := os.Stat(abs); err == nil && fi.IsDir() {
		return Spec{}, fmt.Errorf("%w: %s is a directory, not a SQLite file", ErrBadSpec, abs)
	}
	return Spec{Kind: "sqlite", Path: abs, key: "sqlite|" + key}, nil
}

// redact hides a password of spec wherever it appears in s.
func redact(s, spec string) string {
	if u, err := url.Parse(spec); err == nil && u.User != nil {
		if p, ok := u.User.Password(); ok && p != "" {
			s = strings.ReplaceAll(s, p, "xxxxx")
		}
	}
	return s
}

// Same reports whether a and b name one store.
func (a Spec) Same(b Spec) bool { return a.key == b.key }

// String names the store for humans, without a password.
func (a Spec) String() string {
	if a.Kind == "sqlite" {
		return "sqlite " + a.Path
	}
	u, err := url.Parse(a.DSN)
	if err != nil {
		return "postgres"
	}
	if u.User != nil {
		u.User = url.User(u.User.Username())
	}
	s := "postgres " + u.Redacted()
	if a.Schema != "" {
		s += " schema " + a.Schema
	}
	return s
}

// ParsePair parses a migration's source and target specs and refuses a
// pair that names one store twice (ErrSameStore).
func ParsePair(from, to string) (Spec, Spec, error) {
	src, err := ParseSpec(from)
	if err != nil {
		return Spec{}, Spec{}, fmt.Errorf("--from: %w", err)
	}
	dst, err := ParseSpec(to)
	if err != nil {
		return Spec{}, Spec{}, fmt.Errorf("--to: %w", err)
	}
	if src.Same(dst) {
		return Spec{}, Spec{}, fmt.Errorf("%w: %s", ErrSameStore, src)
	}
	return src, dst, nil
}
