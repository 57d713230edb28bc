package main

import (
	"context"
	"flag"
	"fmt"
	"strconv"
	"strings"
	"time"

	"herd/api"
)

func runACL(e *env, args []string) error {
	return subcommands(e, "acl", args, []command{
		{"bootstrap", "create the first management token (works once per cluster)", runACLBootstrap},
		{"token", "create, list, delete tokens; show your own", func(e *env, args []string) error {
			return subcommands(e, "acl token", args, []command{
				{"create", "create a token and print its secret (shown only once)", runACLTokenCreate},
				{"list", "list tokens (no secrets)", runACLTokenList},
				{"delete", "delete a token by accessor id", runACLTokenDelete},
				{"self", "show the token in use", runACLTokenSelf},
			})
		}},
		{"policy", "list the built-in policies", func(e *env, args []string) error {
			return subcommands(e, "acl policy", args, []command{{"list", "list the built-in policies", runACLPolicyList}})
		}},
	})
}

// aclCommand parses a client command with no positional arguments beyond
// want, and returns its client and a deadline.
func aclCommand(e *env, fs *flag.FlagSet, cf *clientFlags, args []string, want int) (*api.Client, context.Context, context.CancelFunc, error) {
	cf.register(e, fs, true)
	if err := parse(e, fs, args); err != nil {
		return nil, nil, nil, err
	}
	if fs.NArg() != want {
		return nil, nil, nil, usagef("%s takes %d argument(s), got %d", fs.Name(), want, fs.NArg())
	}
	cl, err := cf.client()
	if err != nil {
		return nil, nil, nil, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	return cl, ctx, cancel, nil
}

func runACLBootstrap(e *env, args []string) error {
	fs := newFlags(e, "acl bootstrap", "", "Create the cluster's first management token and print it. It works once per\ncluster: keep the secret safe, and make narrower tokens with it.")
	var cf clientFlags
	cl, ctx, cancel, err := aclCommand(e, fs, &cf, args, 0)
	if err != nil {
		return err
	}
	defer cancel()
	tok, err := cl.BootstrapACL(ctx)
	if err != nil {
		return fmt.Errorf("acl bootstrap: %w", err)
	}
	if cf.structured() {
		return cf.print(e.stdout, map[string]string{"accessor_id": tok.AccessorID, "secret_id": tok.SecretID})
	}
	printToken(e, tok)
	return nil
}

// listFlag collects a repeatable (or comma-separated) flag.
type listFlag []string

func (l *listFlag) String() string { return strings.Join(*l, ",") }

func (l *listFlag) Set(s string) error {
	for _, p := range strings.Split(s, ",") {
		if p = strings.TrimSpace(p); p != "" {
			*l = append(*l, p)
		}
	}
	return nil
}

func runACLTokenCreate(e *env, args []string) error {
	fs := newFlags(e, "acl token create", "", "Create a token. Policies: management, operator, submit, read; -agent NODE_ID\nmakes a node-scoped token for that node's agent.")
	var cf clientFlags
	var policies, submitters listFlag
	fs.Var(&policies, "policy", "a policy to hold (repeatable or comma-separated)")
	fs.Var(&submitters, "submitter", "limit the token to these submitters' work: submitting, cancelling and reading it (repeatable)")
	node := fs.String("agent", "", "make a node-scoped agent token for this node id")
	name := fs.String("name", "", "a description")
	cl, ctx, cancel, err := aclCommand(e, fs, &cf, args, 0)
	if err != nil {
		return err
	}
	defer cancel()
	if *node != "" {
		if len(policies) > 0 {
			return usagef("-agent makes a token with the agent policy alone; drop -policy")
		}
		policies = listFlag{"agent"}
	}
	if len(policies) == 0 {
		return usagef("give -policy NAME (or -agent NODE_ID)")
	}
	tok, err := cl.CreateToken(ctx, api.ACLTokenRequest{Name: *name, Policies: policies, NodeID: *node, Submitters: submitters})
	if err != nil {
		return fmt.Errorf("acl token create: %w", err)
	}
	if cf.structured() {
		return cf.print(e.stdout, tok)
	}
	printToken(e, tok)
	return nil
}

func printToken(e *env, tok api.ACLToken) {
	t := &table{}
	t.add("Accessor ID", tok.AccessorID)
	if tok.SecretID != "" {
		t.add("Secret ID", tok.SecretID)
	}
	if tok.Name != "" {
		t.add("Name", tok.Name)
	}
	t.add("Policies", strings.Join(tok.Policies, ", "))
	if tok.NodeID != "" {
		t.add("Node", tok.NodeID)
	}
	if len(tok.Submitters) > 0 {
		t.add("Submitters", strings.Join(tok.Submitters, ", "))
	}
	if !tok.CreateTime.IsZero() {
		t.add("Created", ago(tok.CreateTime))
	}
	t.write(e.stdout)
}

func runACLTokenList(e *env, args []string) error {
	fs := newFlags(e, "acl token list", "", "List tokens (their secrets are never stored, so never shown).")
	var cf clientFlags
	cl, ctx, cancel, err := aclCommand(e, fs, &cf, args, 0)
	if err != nil {
		return err
	}
	defer cancel()
	toks, err := cl.ListTokens(ctx)
	if err != nil {
		return fmt.Errorf("acl token list: %w", err)
	}
	if cf.structured() {
		return cf.print(e.stdout, toks)
	}
	t := &table{}
	t.add("ACCESSOR", "NAME", "POLICIES", "NODE", "CREATED")
	for _, tok := range toks {
		t.add(tok.AccessorID, orDash(tok.Name), strings.Join(tok.Policies, ","), orDash(tok.NodeID), ago(tok.CreateTime))
	}
	t.write(e.stdout)
	return nil
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func runACLTokenDelete(e *env, args []string) error {
	fs := newFlags(e, "acl token delete", "ACCESSOR_ID", "Delete a token; requests carrying it are refused from then on.")
	var cf clientFlags
	cl, ctx, cancel, err := aclCommand(e, fs, &cf, args, 1)
	if err != nil {
		return err
	}
	defer cancel()
	if err := cl.DeleteToken(ctx, fs.Arg(0)); err != nil {
		return fmt.Errorf("acl token delete: %w", err)
	}
	fmt.Fprintln(e.stdout, "deleted", fs.Arg(0))
	return nil
}

func runACLTokenSelf(e *env, args []string) error {
	fs := newFlags(e, "acl token self", "", "Show the token this client uses.")
	var cf clientFlags
	cl, ctx, cancel, err := aclCommand(e, fs, &cf, args, 0)
	if err != nil {
		return err
	}
	defer cancel()
	tok, err := cl.TokenSelf(ctx)
	if err != nil {
		return fmt.Errorf("acl token self: %w", err)
	}
	if cf.structured() {
		return cf.print(e.stdout, tok)
	}
	printToken(e, tok)
	return nil
}

func runACLPolicyList(e *env, args []string) error {
	fs := newFlags(e, "acl policy list", "", "List the built-in policies a token may hold.")
	asJSON := fs.Bool("json", false, "print JSON")
	if err := parse(e, fs, args); err != nil {
		return err
	}
	if *asJSON {
		return printJSON(e.stdout, api.Policies)
	}
	t := &table{}
	t.add("POLICY", "GRANTS")
	for _, p := range api.Policies {
		t.add(p.Name, p.Description)
	}
	t.write(e.stdout)
	return nil
}

func runOperatorAudit(e *env, args []string) error {
	fs := newFlags(e, "operator audit", "", "List the audit trail: operator actions (peer removal, leadership transfer,\nsnapshot restore, drain, eligibility, token changes) and refused agent requests,\nwith who did them and when.")
	var cf clientFlags
	after := fs.Uint64("after", 0, "only records after this index")
	limit := fs.Int("limit", 100, "at most this many records")
	cl, ctx, cancel, err := aclCommand(e, fs, &cf, args, 0)
	if err != nil {
		return err
	}
	defer cancel()
	if *limit < 1 {
		return usagef("-limit must be at least 1")
	}
	l, err := cl.AuditLog(ctx, *after, *limit)
	if err != nil {
		return fmt.Errorf("operator audit: %w", err)
	}
	if cf.structured() {
		return cf.print(e.stdout, l.Entries)
	}
	t := &table{}
	t.add("INDEX", "TIME", "ACTOR", "FROM", "ACTION", "TARGET", "OUTCOME")
	for _, r := range l.Entries {
		t.add(strconv.FormatUint(r.Index, 10), ago(r.Time), r.Actor, orDash(r.From), r.Action, orDash(r.Target), r.Outcome)
	}
	t.write(e.stdout)
	return nil
}
