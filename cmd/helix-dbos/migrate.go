package main

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"text/tabwriter"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/stdlib"
	"github.com/spf13/cobra"

	"github.com/helix-agents/helix-dbos/migrations"
)

func newMigrateCmd(g *globals) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "migrate",
		Short: "Apply, inspect or roll back the helix schema migrations",
		Long: "Manage the helix schema (Postgres schema \"helix\"). Up is safe to run from several\n" +
			"processes at once and is a no-op when nothing is pending.",
	}
	var asJSON bool
	// open connects, within connectTimeout, with the errors of the other
	// commands (sql.Open alone connects lazily and quotes a URL that does
	// not parse).
	open := func(ctx context.Context) (*sql.DB, error) {
		url, err := g.requireDatabaseURL()
		if err != nil {
			return nil, err
		}
		cfg, err := pgx.ParseConfig(url)
		if err != nil {
			return nil, errUnparsableURL
		}
		db := stdlib.OpenDB(*cfg)
		pctx, cancel := context.WithTimeout(ctx, connectTimeout)
		defer cancel()
		start := time.Now()
		if err := db.PingContext(pctx); err != nil {
			_ = db.Close()
			return nil, connectError(ctx, url, err, time.Since(start))
		}
		return db, nil
	}
	up := &cobra.Command{
		Use:   "up",
		Short: "Apply every pending migration",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			db, err := open(cmd.Context())
			if err != nil {
				return err
			}
			defer db.Close()
			applied, err := migrations.Up(cmd.Context(), db)
			for _, r := range applied {
				fmt.Fprintf(cmd.OutOrStdout(), "applied %s (%s)\n", r.Name, r.Duration.Round(1e6))
			}
			if err != nil {
				return err
			}
			if len(applied) == 0 {
				fmt.Fprintln(cmd.OutOrStdout(), "schema is up to date")
			}
			return nil
		},
	}
	status := &cobra.Command{
		Use:   "status",
		Short: "List migrations and whether each is applied",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			db, err := open(cmd.Context())
			if err != nil {
				return err
			}
			defer db.Close()
			st, err := migrations.Status(cmd.Context(), db)
			if err != nil {
				return err
			}
			if asJSON {
				enc := json.NewEncoder(cmd.OutOrStdout())
				enc.SetIndent("", "  ")
				return enc.Encode(st)
			}
			w := tabwriter.NewWriter(cmd.OutOrStdout(), 0, 4, 2, ' ', 0)
			fmt.Fprintln(w, "VERSION\tMIGRATION\tSTATE\tAPPLIED AT")
			for _, s := range st {
				state, at := "pending", ""
				if s.Applied {
					state, at = "applied", s.AppliedAt.Format("2006-01-02 15:04:05Z07:00")
				}
				fmt.Fprintf(w, "%d\t%s\t%s\t%s\n", s.Version, s.Name, state, at)
			}
			return w.Flush()
		},
	}
	status.Flags().BoolVar(&asJSON, "json", false, "print JSON for scripts")
	down := &cobra.Command{
		Use:   "down",
		Short: "Roll back the most recent migration (drops helix tables: data is lost)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			db, err := open(cmd.Context())
			if err != nil {
				return err
			}
			defer db.Close()
			r, err := migrations.Down(cmd.Context(), db)
			if err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "rolled back %s (%s)\n", r.Name, r.Duration.Round(1e6))
			return nil
		},
	}
	cmd.AddCommand(up, status, down)
	return cmd
}
