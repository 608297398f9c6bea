package main

import (
	"context"
	"fmt"
	"io"

	"github.com/spf13/cobra"

	"github.com/ax-scheduler/ax/store"
)

func newTokenCmd(g *cli) *cobra.Command {
	cmd := &cobra.Command{
		Use:     "token",
		Aliases: []string{"tokens"},
		Short:   "Make, list and revoke API tokens (talks to PostgreSQL directly)",
		Long: `Manage the API's tokens. Every route of the API but /healthz takes a token,
sent as Authorization: Bearer <token> (ax sends $AX_TOKEN or --token), whose
role says what it may do:

  viewer    every GET: tasks, instances, logs, audit, workers, streams
  operator  also fire, rerun, cancel, enable, disable, pause, resume, acknowledge alerts
  admin     everything: apply task definitions, tokens, alert rules and channels

The API records a token's name as the operator of every change made with it.
These commands talk to PostgreSQL directly (--database-url or DATABASE_URL),
so that the first admin token can be made before any exists; the API stores
only a hash of each secret, which ax token create prints once.`,
		Example: `  DATABASE_URL=postgres://ax@db/ax ax token create --role admin --name alice
  ax token list
  ax token revoke ci`,
		Args: cobra.NoArgs,
	}
	cmd.AddCommand(newTokenCreateCmd(g), newTokenListCmd(g), newTokenRevokeCmd(g))
	return cmd
}

// withTokenStore opens the store of c for one token command.
func withTokenStore(ctx context.Context, c *conn, fn func(st *store.Store) error) error {
	pool, st, err := c.openStore(ctx)
	if err != nil {
		return err
	}
	defer pool.Close()
	return fn(st)
}

func newTokenCreateCmd(g *cli) *cobra.Command {
	var (
		c    conn
		name string
		role string
	)
	cmd := &cobra.Command{
		Use:   "create",
		Short: "Make an API token and print its secret, once",
		Long: `Make a live API token with a role and print its secret on standard output —
the only time it is shown: the store keeps only its SHA-256. The name (default
$AX_OPERATOR or your user name) is recorded as the operator of every change
made with the token; no two live tokens share a name.`,
		Example: `  DATABASE_URL=postgres://ax@db/ax ax token create --role admin --name alice
  export AX_TOKEN=$(ax token create --role operator --name ci)`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			asJSON, err := g.json()
			if err != nil {
				return err
			}
			r, err := store.ParseRole(role)
			if err != nil {
				return fmt.Errorf("--role: %w", err)
			}
			if name == "" {
				return fmt.Errorf("--name: name the token's holder, e.g. --name alice")
			}
			if err := store.ValidateTokenName(name); err != nil {
				return fmt.Errorf("--name: %w", err)
			}
			return withTokenStore(cmd.Context(), &c, func(st *store.Store) error {
				tok, secret, err := st.CreateToken(cmd.Context(), name, r)
				if err != nil {
					return err
				}
				if asJSON {
					return g.printData(cmd.OutOrStdout(), map[string]any{"token": tok, "secret": secret})
				}
				fmt.Fprintf(cmd.ErrOrStderr(), "token %d %q (%s) made; its secret, shown only now:\n", tok.ID, tok.Name, tok.Role)
				fmt.Fprintln(cmd.OutOrStdout(), secret)
				return nil
			})
		},
	}
	c.databaseFlags(cmd)
	f := cmd.Flags()
	f.StringVar(&role, "role", "", "viewer, operator or admin (required)")
	f.StringVar(&name, "name", operatorName(), "who holds the token; recorded as the operator of its changes")
	_ = cmd.MarkFlagRequired("role")
	return cmd
}

func newTokenListCmd(g *cli) *cobra.Command {
	var c conn
	cmd := &cobra.Command{
		Use:   "list",
		Short: "List the API tokens, the revoked ones too",
		Example: `  ax token list
  ax token list -o json`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			asJSON, err := g.json()
			if err != nil {
				return err
			}
			return withTokenStore(cmd.Context(), &c, func(st *store.Store) error {
				toks, err := st.ListTokens(cmd.Context())
				if err != nil {
					return err
				}
				if asJSON {
					if toks == nil {
						toks = []store.Token{}
					}
					return g.printData(cmd.OutOrStdout(), toks)
				}
				printTokens(cmd.OutOrStdout(), toks)
				return nil
			})
		},
	}
	c.databaseFlags(cmd)
	return cmd
}

func printTokens(out io.Writer, toks []store.Token) {
	if len(toks) == 0 {
		fmt.Fprintln(out, "no tokens; make one with ax token create --role admin --name <you>")
		return
	}
	tw := newTable(out)
	fmt.Fprintln(tw, "ID\tNAME\tROLE\tCREATED\tLAST USED\tREVOKED")
	for _, t := range toks {
		fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%s\t%s\n", t.ID, t.Name, t.Role, timeOrDash(&t.CreatedAt), timeOrDash(t.LastUsedAt), timeOrDash(t.RevokedAt))
	}
	tw.Flush()
}

func newTokenRevokeCmd(g *cli) *cobra.Command {
	var c conn
	cmd := &cobra.Command{
		Use:   "revoke ID|NAME",
		Short: "Revoke a live API token, for good",
		Long: `Revoke the live token with this id or name. The API refuses it within a few
seconds (it caches what it learns of a token that long). A revoked token stays
in ax token list, and its name may be given to a new token.`,
		Example: `  ax token revoke ci
  ax token revoke 7`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			asJSON, err := g.json()
			if err != nil {
				return err
			}
			return withTokenStore(cmd.Context(), &c, func(st *store.Store) error {
				tok, err := st.RevokeToken(cmd.Context(), args[0])
				if err != nil {
					return err
				}
				if asJSON {
					return g.printData(cmd.OutOrStdout(), tok)
				}
				fmt.Fprintf(cmd.OutOrStdout(), "revoked token %d %q (%s)\n", tok.ID, tok.Name, tok.Role)
				return nil
			})
		},
	}
	c.databaseFlags(cmd)
	return cmd
}
