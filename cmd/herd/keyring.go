package main

import (
	"crypto/rand"
	"encoding/base64"
	"fmt"
	"strings"

	"herd/api"
	"herd/config"
)

func runOperatorGossip(e *env, args []string) error {
	return subcommands(e, "operator gossip", args, []command{
		{"keyring", "list, install, use or remove gossip keys (rotation without downtime)", runKeyring},
		{"keygen", "print a new random gossip key (32 bytes, base64)", runKeygen},
	})
}

func runKeygen(e *env, args []string) error {
	fs := newFlags(e, "operator gossip keygen", "", "Print a new random gossip key for gossip_key or keyring install.")
	if err := parse(e, fs, args); err != nil {
		return err
	}
	var k [32]byte
	if _, err := rand.Read(k[:]); err != nil {
		return fmt.Errorf("random key: %w", err)
	}
	fmt.Fprintln(e.stdout, base64.StdEncoding.EncodeToString(k[:]))
	return nil
}

func runKeyring(e *env, args []string) error {
	return subcommands(e, "operator gossip keyring", args, []command{
		{"list", "the keys every member accepts, the primary, and the nodes still without them", func(e *env, a []string) error { return keyringCmd(e, "list", a) }},
		{"install", "KEY: every server and agent accepts it too", func(e *env, a []string) error { return keyringCmd(e, "install", a) }},
		{"use", "KEY: members encrypt with it (install it, and wait until list shows no node behind, first)", func(e *env, a []string) error { return keyringCmd(e, "use", a) }},
		{"remove", "KEY: no member accepts it any longer", func(e *env, a []string) error { return keyringCmd(e, "remove", a) }},
	})
}

func keyringCmd(e *env, op string, args []string) error {
	want, usage := 1, "KEY"
	if op == "list" {
		want, usage = 0, ""
	}
	fs := newFlags(e, "operator gossip keyring "+op, usage, "Rotate the gossip key as Consul does: install the new key, wait until list shows\nno node behind, use it, then remove the old one.")
	var cf clientFlags
	cl, ctx, cancel, err := aclCommand(e, fs, &cf, args, want)
	if err != nil {
		return err
	}
	defer cancel()
	var kr api.GossipKeyring
	if op == "list" {
		kr, err = cl.GossipKeyring(ctx)
	} else {
		key := strings.TrimSpace(fs.Arg(0))
		if _, derr := config.DecodeGossipKey(key); derr != nil {
			return usagef("KEY: %v (herd operator gossip keygen makes one)", derr)
		}
		kr, err = cl.ChangeGossipKeyring(ctx, op, key)
	}
	if err != nil {
		return fmt.Errorf("gossip keyring %s: %w", op, err)
	}
	if cf.structured() {
		return cf.print(e.stdout, kr)
	}
	t := &table{}
	t.add("KEY", "PRIMARY")
	for _, k := range kr.Keys {
		primary := ""
		if k == kr.Primary {
			primary = "yes"
		}
		t.add(k, primary)
	}
	t.write(e.stdout)
	behind := "none"
	if len(kr.NodesBehind) > 0 {
		behind = strings.Join(kr.NodesBehind, ", ")
	}
	fmt.Fprintf(e.stdout, "\nkeyring index %d; nodes running it: %d; behind: %s\n", kr.Index, kr.NodesCurrent, behind)
	return nil
}
