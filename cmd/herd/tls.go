package main

import (
	"fmt"
	"path/filepath"
	"strings"
	"time"

	"herd/config"
	"herd/internal/pki"
)

func runTLS(e *env, args []string) error {
	return subcommands(e, "tls", args, []command{
		{"ca", "create the cluster's certificate authority", func(e *env, args []string) error {
			return subcommands(e, "tls ca", args, []command{{"create", "write DIR/ca.pem and DIR/ca-key.pem", runTLSCACreate}})
		}},
		{"cert", "issue a server, agent or client certificate", func(e *env, args []string) error {
			return subcommands(e, "tls cert", args, []command{{"create", "write DIR/ID.pem and DIR/ID-key.pem signed by DIR's CA", runTLSCertCreate}})
		}},
	})
}

func runTLSCACreate(e *env, args []string) error {
	fs := newFlags(e, "tls ca create", "", "Create a cluster CA (ECDSA P-256) in -dir. Keep ca-key.pem off the servers once\nthe certificates are issued; every replica, agent and client needs ca.pem.")
	dir := fs.String("dir", ".", "directory to write ca.pem and ca-key.pem to")
	name := fs.String("name", "herd cluster CA", "the CA's common name")
	days := fs.Int("days", int(pki.DefaultCAValidity/(24*time.Hour)), "validity in days")
	if err := parse(e, fs, args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return usagef("tls ca create takes no arguments")
	}
	if *days <= 0 {
		return usagef("-days must be positive")
	}
	if err := pki.CreateCA(*dir, *name, time.Duration(*days)*24*time.Hour); err != nil {
		return err
	}
	fmt.Fprintf(e.stdout, "wrote %s and %s\n", filepath.Join(*dir, pki.CAFile), filepath.Join(*dir, pki.CAKeyFile))
	return nil
}

func runTLSCertCreate(e *env, args []string) error {
	fs := newFlags(e, "tls cert create", "", "Issue a certificate signed by the CA in -dir. The role and id are written into\nit: a server certificate lets a replica join and replicate, an agent's acts for\nits node id alone, a client's is an operator's identity on the API.")
	server := fs.Bool("server", false, "a replica's certificate")
	agentRole := fs.Bool("agent", false, "an agent's certificate; -id is its node id")
	client := fs.Bool("client", false, "a client's (operator's) certificate")
	id := fs.String("id", "", "server id, node id or client name (also the file name)")
	dir := fs.String("dir", ".", "directory holding ca.pem and ca-key.pem; the pair is written here")
	hosts := fs.String("hosts", "", "comma-separated DNS names and IPs the holder serves on (servers: loopback is always added)")
	days := fs.Int("days", int(pki.DefaultCertValidity/(24*time.Hour)), "validity in days")
	if err := parse(e, fs, args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return usagef("tls cert create takes no arguments, got %q", strings.Join(fs.Args(), " "))
	}
	var roles []pki.Role
	if *server {
		roles = append(roles, pki.RoleServer)
	}
	if *agentRole {
		roles = append(roles, pki.RoleAgent)
	}
	if *client {
		roles = append(roles, pki.RoleClient)
	}
	if len(roles) != 1 {
		return usagef("give exactly one of -server, -agent, -client")
	}
	if *id == "" {
		return usagef("-id is required")
	}
	if *days <= 0 {
		return usagef("-days must be positive")
	}
	identity := pki.Identity{Role: roles[0], ID: *id}
	if err := identity.Validate(); err != nil {
		return usagef("%v", err)
	}
	path, err := pki.CreateCert(*dir, pki.CertRequest{Identity: identity, Hosts: config.SplitList(*hosts), Validity: time.Duration(*days) * 24 * time.Hour})
	if err != nil {
		return err
	}
	fmt.Fprintf(e.stdout, "wrote %s and %s for %s\n", path, pki.KeyFile(*dir, *id), identity)
	return nil
}
