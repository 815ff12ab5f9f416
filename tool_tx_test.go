package helix_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	helix "github.com/helix-agents/helix-dbos"
)

type refundIn struct {
	Order string `json:"order"`
}

func refundFn(context.Context, pgx.Tx, refundIn, helix.ToolContext) (string, error) { return "ok", nil }

// A transactional tool's definition: its options are checked, it reports
// what the engine needs, and it runs only in a transaction.
func TestTxToolDefinition(t *testing.T) {
	tool, err := helix.NewTxTool("refund", "Refund an order", refundFn,
		helix.TxIsolation(pgx.Serializable), helix.TxTimeout(2*time.Second), helix.RequireApproval())
	require.NoError(t, err)
	require.True(t, tool.IsTransactional())
	require.Equal(t, pgx.Serializable, tool.TxIsolation())
	require.Equal(t, 2*time.Second, tool.TxTimeout())
	require.True(t, tool.NeedsApprovalCheck())
	require.JSONEq(t, `{"type":"object","properties":{"order":{"type":"string"}},"required":["order"],"additionalProperties":false}`,
		string(tool.InputSchema()))

	plain := helix.MustNewTxTool("book", "Book", refundFn)
	require.Equal(t, helix.DefaultTxToolTimeout, plain.TxTimeout())
	require.Equal(t, pgx.TxIsoLevel(""), plain.TxIsolation())

	_, err = tool.Execute(t.Context(), json.RawMessage(`{"order":"A"}`), nil)
	require.ErrorContains(t, err, "is transactional")
	_, err = tool.ExecuteTx(t.Context(), nil, json.RawMessage(`{"order":"A"}`), nil)
	require.ErrorContains(t, err, "needs a transaction")
	notTx := helix.MustNewTool("note", "Note", func(context.Context, refundIn, helix.ToolContext) (string, error) { return "", nil })
	require.False(t, notTx.IsTransactional())
	_, err = notTx.ExecuteTx(t.Context(), nil, json.RawMessage(`{"order":"A"}`), nil)
	require.ErrorContains(t, err, "not transactional")

	for name, opt := range map[string]helix.ToolOption{
		"TxIsolation on a plain tool": helix.TxIsolation(pgx.Serializable),
		"TxTimeout on a plain tool":   helix.TxTimeout(time.Second),
	} {
		_, err := helix.NewTool("note", "Note", func(context.Context, refundIn, helix.ToolContext) (string, error) { return "", nil }, opt)
		require.ErrorContains(t, err, "only transactional tools", name)
	}
	_, err = helix.NewTxTool("refund", "Refund", refundFn, helix.TxTimeout(0))
	require.ErrorContains(t, err, "the timeout must be positive")
	_, err = helix.NewTxTool[refundIn, string]("refund", "Refund", nil)
	require.ErrorContains(t, err, "the tool function is nil")
}
