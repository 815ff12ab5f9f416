package main

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/helix-agents/helix-dbos/helixtest"
)

func TestMain(m *testing.M) { helixtest.Main(m) }

// The program opens a ticket with its session, has the refund approved
// with its audit row, and shows one refund and one audit row; the double
// click is refused and leaves no audit row. Run again on the same
// database, it opens a second ticket with rows of its own.
func TestRefunds(t *testing.T) {
	t.Parallel()
	url := helixtest.Database(t)
	var out strings.Builder
	require.NoError(t, run(t.Context(), url, &out))
	require.Equal(t, `ticket 1 opened for order A-17, triaged by session ticket-1
agent: suspended_client_tool, waiting for the approval of refund {"orderId": "A-17", "amountCents": 2500} (call-1)
alice approves: the approval and its audit row committed
alice approves again: refused (already_answered), the audit row rolled back
agent: completed "Order A-17 is refunded: 25.00 will be back on your card in a few days."
refunds of ticket 1:
  order A-17, 2500 cents, by call call-1
audit of ticket 1:
  call call-1 approved=true by alice: photo of the damage checked
`, out.String())

	out.Reset()
	require.NoError(t, run(t.Context(), url, &out))
	require.Contains(t, out.String(), "ticket 2 opened")
	require.Contains(t, out.String(), "refunds of ticket 2:\n  order A-17, 2500 cents, by call call-1\naudit of ticket 2:\n  call call-1 approved=true by alice")
}
