package main

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/spf13/cobra"

	idemddb "github.com/idemguard/idemguard/store/dynamodb"
	"github.com/idemguard/idemguard/store/postgres"
)

// createTableTimeout bounds create-table, which waits for a new DynamoDB
// table to become active.
const createTableTimeout = 5 * time.Minute

func (a *app) createTableCmd() *cobra.Command {
	var print bool
	c := &cobra.Command{
		Use:   "create-table [--print]",
		Short: "Create the store's table (DynamoDB, PostgreSQL)",
		Long: `create-table creates what the store needs:

  DynamoDB    the table with the key schema of the URL's options (partition key
              "id", or key-attr; plus the sort key in sort-key mode), on-demand
              capacity, and TTL on the expiry attribute; it waits until the
              table is active. An existing table with the same key schema is
              kept, and TTL enabled on it if it is off.
  PostgreSQL  the table (?table=, default "idempotency") and its index, if they
              do not exist. --print prints the statements instead, for a
              migration tool, without connecting.
  Redis       nothing: records are hashes under the prefix. It says so.

In production, declare the table in your infrastructure code (docs/dynamodb.md,
docs/postgres.md); create-table is for development and first setups.`,
		Example: `  idemguard create-table --store 'dynamodb://idempotency?endpoint=http://127.0.0.1:8000'
  idemguard create-table --print --store 'postgres://idemguard@127.0.0.1:5432/app?table=idempotency'`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			u, err := a.storeURLFlag()
			if err != nil {
				return err
			}
			if print {
				p, err := parseStoreURL(u)
				if err != nil {
					return usage("%v", err)
				}
				if p.kind != "postgres" {
					return usage("--print prints PostgreSQL's DDL; for %s, create-table creates the table itself (and docs/dynamodb.md has CloudFormation and Terraform)", kindName(p.kind))
				}
				ddl, err := postgres.DDL(p.table)
				if err != nil {
					return usage("%v", err)
				}
				fmt.Fprintln(a.stdout, ddl)
				return nil
			}
			ctx, cancel := context.WithTimeout(cmd.Context(), max(createTableTimeout, a.timeout))
			defer cancel()
			b, err := a.open(ctx)
			if err != nil {
				return err
			}
			defer b.Close()
			switch b.kind {
			case "dynamodb":
				err := idemddb.CreateTable(ctx, b.ddb, b.table, b.ddbOpts...)
				if errors.Is(err, idemddb.ErrTTLNotEnabled) {
					fmt.Fprintf(a.stderr, "idemguard: warning: %v\n  the store works without TTL (it checks expiry itself), but expired items then stay until overwritten\n", err)
					err = nil
				}
				if err != nil {
					return a.storeErr(b, "creating the table", err)
				}
				fmt.Fprintf(a.stdout, "%s is ready\n", b.desc)
			case "postgres":
				if err := postgres.CreateTable(ctx, b.pg, b.table); err != nil {
					return a.storeErr(b, "creating the table", err)
				}
				fmt.Fprintf(a.stdout, "%s is ready\n", b.desc)
			default:
				fmt.Fprintf(a.stdout, "nothing to create: Redis keeps each record as a hash under the prefix %q, created on first use\n", b.prefix)
			}
			return nil
		},
	}
	c.Flags().BoolVar(&print, "print", false, "PostgreSQL: print the CREATE statements instead of running them")
	return c
}
