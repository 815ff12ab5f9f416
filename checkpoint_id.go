package helix

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// Checkpoint ID format constants. IDs look like
// cpv1-{sessionId}-s{stepCount}-t{unixMillis}-{random}.
const (
	CheckpointIDVersion = 1
	CheckpointIDPrefix  = "cpv1-"
)

// ParsedCheckpointID is the decoded form of a checkpoint ID.
type ParsedCheckpointID struct {
	Version   int
	SessionID string
	StepCount int
	Timestamp int64 // milliseconds since the Unix epoch
	Random    string
}

// GenerateCheckpointID returns a new checkpoint ID for step of sessionID,
// stamped with the current time and 6 random hex characters. It is not
// deterministic: inside a workflow, call it from a step.
func GenerateCheckpointID(sessionID string, step int) string {
	var b [3]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails (Go 1.24+)
	return FormatCheckpointID(ParsedCheckpointID{
		Version:   CheckpointIDVersion,
		SessionID: sessionID,
		StepCount: step,
		Timestamp: time.Now().UnixMilli(),
		Random:    hex.EncodeToString(b[:]),
	})
}

// FormatCheckpointID renders p in the cpv1 format. Version is ignored: only
// version 1 exists.
func FormatCheckpointID(p ParsedCheckpointID) string {
	return fmt.Sprintf("%s%s-s%d-t%d-%s", CheckpointIDPrefix, p.SessionID, p.StepCount, p.Timestamp, p.Random)
}

// ParseCheckpointID decodes a cpv1 checkpoint ID. It parses from the right, so
// session IDs that contain dashes (or even "-s1-t2"-like fragments) come back
// exactly.
func ParseCheckpointID(id string) (ParsedCheckpointID, error) {
	bad := func(why string) (ParsedCheckpointID, error) {
		return ParsedCheckpointID{}, fmt.Errorf("helix: invalid checkpoint ID %q: %s (want cpv1-{sessionId}-s{step}-t{millis}-{random})", id, why)
	}
	rest, ok := strings.CutPrefix(id, CheckpointIDPrefix)
	if !ok {
		return bad("missing cpv1- prefix")
	}
	i := strings.LastIndexByte(rest, '-')
	if i < 0 {
		return bad("missing random suffix")
	}
	random := rest[i+1:]
	if random == "" || strings.IndexFunc(random, func(r rune) bool {
		return !(r >= '0' && r <= '9' || r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z')
	}) >= 0 {
		return bad("random suffix must be alphanumeric")
	}
	rest = rest[:i]
	i = strings.LastIndex(rest, "-t")
	if i < 0 {
		return bad("missing -t{millis}")
	}
	ts, err := strconv.ParseInt(rest[i+2:], 10, 64)
	if err != nil || !decimal(rest[i+2:]) {
		return bad("timestamp is not a non-negative integer")
	}
	rest = rest[:i]
	i = strings.LastIndex(rest, "-s")
	if i < 0 {
		return bad("missing -s{step}")
	}
	step, err := strconv.Atoi(rest[i+2:])
	if err != nil || !decimal(rest[i+2:]) {
		return bad("step is not a non-negative integer")
	}
	sessionID := rest[:i]
	if sessionID == "" {
		return bad("empty session ID")
	}
	return ParsedCheckpointID{
		Version:   CheckpointIDVersion,
		SessionID: sessionID,
		StepCount: step,
		Timestamp: ts,
		Random:    random,
	}, nil
}

// decimal reports whether s is a canonical non-negative decimal: digits only,
// no sign, no leading zero (so formatting the parsed value gives s back).
func decimal(s string) bool {
	if s == "" || (len(s) > 1 && s[0] == '0') {
		return false
	}
	for _, r := range s {
		if r < '0' || r > '9' {
			return false
		}
	}
	return true
}
