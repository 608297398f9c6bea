package main

import (
	"context"
	"fmt"
	"io"
	"os/user"
	"strconv"

	"github.com/spf13/cobra"

	"github.com/ax-scheduler/ax/schemas"
	"github.com/ax-scheduler/ax/store"
)

func newTokenCmd(g *cli) *cobra.Command {
	cmd := &cobra.Command{
		Use:     "token",
		Aliases: []string{"tokens"},
		Short:   "Make, list and revoke API tokens (through the API, or PostgreSQL directly)",
		Long: `Manage the API's tokens. Every route of the API but /healthz takes a token,
sent as Authorization: Bearer <token> (ax sends $AX_TOKEN or --token), whose
role says what it may do:

  viewer    every GET: tasks, instances, logs, audit, workers, streams
  operator  also fire, rerun, cancel, enable, disable, pause, resume, acknowledge alerts
  admin     everything: apply task definitions, tokens, alert rules and channels

The API records a token's name as the operator of every change made with it.
With --database-url (or DATABASE_URL) these commands talk to PostgreSQL
directly, so that the first admin token can be made before any exists;
without, they go through the API with an admin token ($AX_TOKEN or --token),
as under ax dev, whose admin token they can use. The API stores only a hash
of each secret, which ax token create prints once.`,
		Example: `  DATABASE_URL=postgres://ax@db/ax ax token create --role admin --name alice
  AX_TOKEN=$(cat .ax/admin.token) ax token create --role operator --name ci   # through the API (ax dev)
  ax token list
  ax token revoke ci`,
		Args: cobra.NoArgs,
	}
	cmd.AddCommand(newTokenCreateCmd(g), newTokenListCmd(g), newTokenRevokeCmd(g))
	return cmd
}

// tokens is where a token command makes, lists and revokes tokens: the
// store, when the command has a database URL, or else the API.
type tokens interface {
	create(ctx context.Context, name string, role schemas.Role) (schemas.Token, string, error)
	list(ctx context.Context) ([]schemas.Token, error)
	revoke(ctx context.Context, idOrName string) (schemas.Token, error)
}

// withTokens runs fn with the tokens of the store of c when c has a
// database URL, else with those of the API.
func withTokens(ctx context.Context, g *cli, c *conn, fn func(tokens) error) error {
	if c.databaseURL == "" {
		return fn(apiTokens{g})
	}
	pool, st, err := c.openStore(ctx)
	if err != nil {
		return err
	}
	defer pool.Close()
	return fn(storeTokens{st})
}

type storeTokens struct{ st *store.Store }

// localOperator is the operator the audit trail records for a token made
// or revoked in PostgreSQL directly: the machine's user that ran ax.
func localOperator() string {
	name := "unknown"
	if u, err := user.Current(); err == nil && u.Username != "" {
		name = u.Username
	}
	return "local:" + name
}

func (s storeTokens) create(ctx context.Context, name string, role schemas.Role) (schemas.Token, string, error) {
	return s.st.CreateToken(ctx, name, role, localOperator())
}
func (s storeTokens) list(ctx context.Context) ([]schemas.Token, error) { return s.st.ListTokens(ctx) }
func (s storeTokens) revoke(ctx context.Context, idOrName string) (schemas.Token, error) {
	return s.st.RevokeToken(ctx, idOrName, localOperator())
}

// apiTokens are the tokens of the API, which an admin token may manage.
type apiTokens struct{ g *cli }

func (a apiTokens) create(ctx context.Context, name string, role schemas.Role) (schemas.Token, string, error) {
	made, err := a.g.client().CreateToken(ctx, name, role)
	if err != nil {
		return schemas.Token{}, "", a.g.apiError(err)
	}
	return made.Token, made.Secret, nil
}

func (a apiTokens) list(ctx context.Context) ([]schemas.Token, error) {
	toks, err := a.g.client().ListTokens(ctx)
	if err != nil {
		return nil, a.g.apiError(err)
	}
	return toks, nil
}

// revoke revokes the live token whose id or name is idOrName, as the
// store does: the API's route takes an id.
func (a apiTokens) revoke(ctx context.Context, idOrName string) (schemas.Token, error) {
	toks, err := a.list(ctx)
	if err != nil {
		return schemas.Token{}, err
	}
	for _, t := range toks {
		if t.RevokedAt == nil && (t.Name == idOrName || strconv.FormatInt(t.ID, 10) == idOrName) {
			tok, err := a.g.client().RevokeToken(ctx, t.ID)
			if err != nil {
				return schemas.Token{}, a.g.apiError(err)
			}
			return tok, nil
		}
	}
	return schemas.Token{}, fmt.Errorf("revoke token %q: no live token has this id or name (ax token list shows them)", idOrName)
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
			r, err := schemas.ParseRole(role)
			if err != nil {
				return fmt.Errorf("--role: %w", err)
			}
			if name == "" {
				return fmt.Errorf("--name: name the token's holder, e.g. --name alice")
			}
			if err := store.ValidateTokenName(name); err != nil {
				return fmt.Errorf("--name: %w", err)
			}
			return withTokens(cmd.Context(), g, &c, func(ts tokens) error {
				tok, secret, err := ts.create(cmd.Context(), name, r)
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
			return withTokens(cmd.Context(), g, &c, func(ts tokens) error {
				toks, err := ts.list(cmd.Context())
				if err != nil {
					return err
				}
				if asJSON {
					if toks == nil {
						toks = []schemas.Token{}
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

func printTokens(out io.Writer, toks []schemas.Token) {
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
			return withTokens(cmd.Context(), g, &c, func(ts tokens) error {
				tok, err := ts.revoke(cmd.Context(), args[0])
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
