package engine

import (
	"testing"
	"time"

	"github.com/rs/zerolog"
	"github.com/stretchr/testify/require"

	"github.com/helix-agents/helix-dbos/internal/pgtest"
	"github.com/helix-agents/helix-dbos/store/postgres"
)

// An executor records the storage format level it reads at its claim and
// again when it rejoins after a takeover (which clears the level with
// started_at), and a failed record after a rejoin is
// retried by the next renewal, not left unrecorded for good.
func TestExecutorRecordsItsFormatLevel(t *testing.T) {
	t.Parallel()
	url := pgtest.NewURL(t)
	pool, err := openPool(t.Context(), url)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	level := func() *int {
		t.Helper()
		var l *int
		require.NoError(t, pool.QueryRow(t.Context(), `SELECT format_level FROM helix.executors WHERE executor_id = 'lvl-a'`).Scan(&l))
		return l
	}
	newest := int(postgres.FormatLevelNewest)
	h, err := claimExecutor(t.Context(), pool, "lvl-a", DefaultAppName, DefaultApplicationVersion, newLease(time.Minute))
	require.NoError(t, err)
	nop := zerolog.Nop()
	h.log = &nop
	require.Equal(t, &newest, level(), "recorded at the claim")

	// Taken over and recovered while this process was unresponsive: the
	// next beat rejoins, which resets started_at, and records the level.
	takeOver := func() {
		t.Helper()
		_, err := pool.Exec(t.Context(), `UPDATE helix.executors SET taken_over_by = 'lvl-b', taken_over_at = now(), recovered_at = now()
			WHERE executor_id = 'lvl-a'`)
		require.NoError(t, err)
	}
	takeOver()
	require.NoError(t, h.beat(t.Context()))
	require.False(t, h.takenOver, "rejoined")
	require.Equal(t, &newest, level(), "recorded again at the rejoin")

	// A rejoin whose record of the level failed: a renewal records it.
	takeOver()
	_, err = pool.Exec(t.Context(), `CREATE FUNCTION helix.refuse_level() RETURNS trigger LANGUAGE plpgsql AS $$
		BEGIN IF NEW.format_level IS NOT NULL THEN RAISE EXCEPTION 'refused'; END IF; RETURN NEW; END $$;
		CREATE TRIGGER refuse_level BEFORE UPDATE OF format_level ON helix.executors FOR EACH ROW EXECUTE FUNCTION helix.refuse_level()`)
	require.NoError(t, err)
	require.NoError(t, h.beat(t.Context()))
	require.False(t, h.takenOver, "the rejoin stands")
	require.Nil(t, level(), "none recorded meanwhile: the baseline")
	require.True(t, h.levelUnrecorded)
	_, err = pool.Exec(t.Context(), `DROP TRIGGER refuse_level ON helix.executors`)
	require.NoError(t, err)
	require.NoError(t, h.beat(t.Context()))
	require.Equal(t, &newest, level(), "recorded by the renewal")
	require.False(t, h.levelUnrecorded)
}
