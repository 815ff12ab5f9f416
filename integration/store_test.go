package integration_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	helix "github.com/helix-agents/helix-dbos"
	"github.com/helix-agents/helix-dbos/internal/pgtest"
	"github.com/helix-agents/helix-dbos/store"
	"github.com/helix-agents/helix-dbos/store/postgres"
)

func newStore(t *testing.T, url string) *postgres.Store {
	t.Helper()
	pool, err := pgxpool.New(t.Context(), url)
	require.NoError(t, err)
	st, err := postgres.New(pool, postgres.WithPollInterval(500*time.Millisecond),
		postgres.WithRetryTimeout(20*time.Second))
	require.NoError(t, err)
	t.Cleanup(func() {
		_ = st.Close()
		pool.Close()
	})
	return st
}

// TestStreamAcrossStoresSurvivesConnectionKills writes a live stream through
// one store (one process) while another store (another process) reads it,
// and kills every database connection of the test database again and again
// meanwhile. Every chunk must arrive exactly once, in order: writes retry
// with their batch token, and the reader's listener reconnects (polling
// covers the notifications lost in between).
func TestStreamAcrossStoresSurvivesConnectionKills(t *testing.T) {
	t.Parallel()
	admin := serverURL(t)
	url := pgtest.NewURLOn(t, admin)
	writerStore, readerStore := newStore(t, url), newStore(t, url)
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()

	_, err := writerStore.CreateSession(ctx, store.CreateSessionParams{SessionID: "live", AgentType: "a"})
	require.NoError(t, err)
	r, err := readerStore.NewReader(ctx, "live", nil)
	require.NoError(t, err)
	defer r.Close()

	cfg, err := pgx.ParseConfig(url)
	require.NoError(t, err)
	chaosDone := make(chan struct{})
	stopChaos := make(chan struct{})
	kills := 0
	go func() { // kill every connection to the test database, repeatedly
		defer close(chaosDone)
		conn, err := pgx.Connect(ctx, admin)
		if err != nil {
			return
		}
		defer conn.Close(context.Background())
		for {
			select {
			case <-stopChaos:
				return
			case <-time.After(150 * time.Millisecond):
			}
			var n int
			if err := conn.QueryRow(ctx, `SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity
				WHERE datname = $1 AND pid <> pg_backend_pid()`, cfg.Database).Scan(&n); err == nil {
				kills += n
			}
		}
	}()

	const n = 300
	w := writerStore.NewWriter("live", nil)
	for i := range n {
		c := &helix.TextDeltaChunk{Base: helix.Base{AgentID: "live", AgentType: "a", Step: 1}, Delta: fmt.Sprintf("%03d", i)}
		if i%50 == 49 {
			require.NoError(t, w.Flush(ctx))
		}
		require.NoError(t, w.Write(ctx, c))
		time.Sleep(2 * time.Millisecond) // a model's pace, so the chaos lands mid-stream
	}
	require.NoError(t, w.Close(ctx))
	close(stopChaos)
	<-chaosDone
	require.NoError(t, writerStore.EndStream(ctx, "live", nil))

	var got []string
	for {
		c, err := r.Next(ctx)
		require.NoError(t, err)
		if c.Chunk.ChunkType() == helix.ChunkStreamEnd {
			break
		}
		got = append(got, c.Chunk.(*helix.TextDeltaChunk).Delta)
	}
	require.Len(t, got, n, "no chunk lost or duplicated")
	for i, d := range got {
		require.Equal(t, fmt.Sprintf("%03d", i), d, "in order")
	}
	require.Positive(t, kills, "the chaos actually killed connections")
	stats := writerStore.StreamStats()
	t.Logf("killed %d connections; %d batches, %d retries", kills, stats.Batches, stats.Retries)
}
