package helix_test

import (
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	helix "github.com/helix-agents/helix-dbos"
)

func TestCheckpointIDRoundTrip(t *testing.T) {
	t.Parallel()
	for _, sessionID := range []string{"session-123", "a", "parent-sub-call_1-agent-helper", "s-5-t10-abc", "weird-s1-t2", "ünïcode-会话", "x-s-t-"} {
		before := time.Now().UnixMilli()
		id := helix.GenerateCheckpointID(sessionID, 5)
		require.True(t, strings.HasPrefix(id, helix.CheckpointIDPrefix+sessionID+"-s5-t"))
		p, err := helix.ParseCheckpointID(id)
		require.NoError(t, err, id)
		require.Equal(t, sessionID, p.SessionID, "session IDs with dashes parse back exactly")
		require.Equal(t, 5, p.StepCount)
		require.Equal(t, helix.CheckpointIDVersion, p.Version)
		require.GreaterOrEqual(t, p.Timestamp, before)
		require.Len(t, p.Random, 6)
		require.Equal(t, id, helix.FormatCheckpointID(p))
	}
	require.NotEqual(t, helix.GenerateCheckpointID("s", 1), helix.GenerateCheckpointID("s", 1))
	p, err := helix.ParseCheckpointID("cpv1-session-123-s5-t1703123456789-a1b2c3")
	require.NoError(t, err)
	require.Equal(t, helix.ParsedCheckpointID{Version: 1, SessionID: "session-123", StepCount: 5, Timestamp: 1703123456789, Random: "a1b2c3"}, p)
}

func TestParseCheckpointIDRejects(t *testing.T) {
	t.Parallel()
	for _, id := range []string{
		"", "cp_123", "cpv2-s-s1-t1-abc", "cpv1-", "cpv1--s1-t1-abc", "cpv1-s-s1-t1-", "cpv1-s-s1-t1-ab!c",
		"cpv1-s-s1-tnow-abc", "cpv1-s-sx-t1-abc", "cpv1-s-s-1-t1-abc", "cpv1-s-s+1-t1-abc", "cpv1-s-s01-t1-abc", "cpv1-s1-t1",
	} {
		_, err := helix.ParseCheckpointID(id)
		require.Error(t, err, id)
	}
}

func FuzzParseCheckpointID(f *testing.F) {
	for _, s := range []string{"cpv1-session-123-s5-t1703123456789-a1b2c3", "cpv1-a-b-s0-t0-z", "cpv1-s-s1-t2-x-s3-t4-y"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, id string) {
		p, err := helix.ParseCheckpointID(id)
		if err != nil {
			return
		}
		if got := helix.FormatCheckpointID(p); got != id {
			t.Fatalf("parse(%q) formats back as %q", id, got)
		}
	})
}
