package aisdk_test

import (
	"testing"

	"github.com/helix-agents/helix-dbos/internal/pgtest"
)

func TestMain(m *testing.M) { pgtest.Main(m) }
