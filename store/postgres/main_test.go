package postgres_test

import (
	"testing"

	"github.com/helix-agents/helix-dbos/internal/pgtest"
	"github.com/helix-agents/helix-dbos/store/postgres"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

// newTestStore returns a store on a fresh migrated database, closed at
// cleanup (before the pool, which pgtest closes).
func newTestStore(tb testing.TB, opts ...postgres.Option) *postgres.Store {
	tb.Helper()
	st, err := postgres.New(pgtest.NewPool(tb), opts...)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { _ = st.Close() })
	return st
}
