package helixtest

import (
	"context"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5"
)

// RequireRowsOnce fails the test unless table, an application table in
// the engine's database (schema-qualified as "schema.table" or not),
// holds want rows and no two of them share the same values of the
// columns key: each effect of a transactional tool (helix.NewTxTool)
// applied once, whatever crashed. Give key the columns that name one
// effect (an order ID, an idempotency key); without a UNIQUE constraint
// on them a repeated effect is a duplicate row, which this reports with
// its count.
func (e *Engine) RequireRowsOnce(table string, want int, key ...string) {
	e.t.Helper()
	if len(key) == 0 {
		e.t.Fatalf("helixtest: RequireRowsOnce(%q): name the key columns of one effect", table)
	}
	ctx, cancel := e.context()
	defer cancel()
	conn, err := pgx.Connect(ctx, e.url)
	if err != nil {
		e.t.Fatalf("helixtest: connect to read table %s: %v", table, err)
	}
	defer func() { _ = conn.Close(context.WithoutCancel(ctx)) }()
	cols := make([]string, len(key))
	for i, k := range key {
		cols[i] = pgx.Identifier{k}.Sanitize()
	}
	keyExpr := strings.Join(cols, ", ")
	sql := fmt.Sprintf(`SELECT (SELECT count(*) FROM %[1]s),
		(SELECT coalesce(string_agg(k || ' (' || n || ' rows)', ', '), '') FROM (
			SELECT row(%[2]s)::text AS k, count(*) AS n FROM %[1]s GROUP BY %[2]s HAVING count(*) > 1 ORDER BY 1) d)`,
		pgx.Identifier(strings.Split(table, ".")).Sanitize(), keyExpr)
	var rows int
	var repeated string
	if err := conn.QueryRow(ctx, sql).Scan(&rows, &repeated); err != nil {
		e.t.Fatalf("helixtest: read table %s: %v", table, err)
	}
	if repeated != "" {
		e.t.Fatalf("helixtest: table %s holds an effect more than once, by %s: %s", table, strings.Join(key, ", "), repeated)
	}
	if rows != want {
		e.t.Fatalf("helixtest: table %s holds %d rows, want %d (one per effect)", table, rows, want)
	}
}
