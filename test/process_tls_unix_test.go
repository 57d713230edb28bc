//go:build unix

package test

import (
	"crypto/tls"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"herd/api"
	"herd/internal/pki"
)

// Real processes with TLS and ACLs: each `herd server` gets new
// certificate files and SIGHUP in turn while a client submits; each then
// serves the new certificate, keeps running, and no acknowledged task is
// lost nor any error seen beyond retryable ones.
func TestProcessesRotateCertificatesOnSIGHUP(t *testing.T) {
	bin := buildHerd(t)
	base := t.TempDir()
	dir := filepath.Join(base, "pki")
	if err := pki.CreateCA(dir, "", 0); err != nil {
		t.Fatal(err)
	}
	procs := make([]*serverProc, 3)
	var join []string
	for i := range procs {
		id := fmt.Sprintf("p%d", i+1)
		if _, err := pki.CreateCert(dir, pki.CertRequest{Identity: pki.Identity{Role: pki.RoleServer, ID: id}}); err != nil {
			t.Fatal(err)
		}
		procs[i] = &serverProc{id: id, http: FreeAddr(t), raft: FreeAddr(t), dir: filepath.Join(base, id), extra: []string{
			"-tls-ca-file", filepath.Join(dir, pki.CAFile), "-tls-cert-file", pki.CertFile(dir, id), "-tls-key-file", pki.KeyFile(dir, id), "-acl"}}
		join = append(join, procs[i].http)
	}
	for _, p := range procs {
		p.start(t, bin, join)
	}
	stopAtCleanup(t, procs)
	ctx := Ctx(t, 3*time.Minute)
	anon := secureClient(t, dir, join, "", nil)
	anon.Retries = 120
	boot, err := anon.BootstrapACL(ctx)
	if err != nil {
		t.Fatal(err)
	}
	cl := secureClient(t, dir, join, boot.SecretID, nil)

	const total = 200
	load := startSubmitLoad(ctx, cl, "hup", total)
	for i, p := range procs {
		Eventually(60*time.Second, func() bool { return load.reached((i + 1) * total / 4) })
		if _, err := pki.CreateCert(dir, pki.CertRequest{Identity: pki.Identity{Role: pki.RoleServer, ID: p.id}}); err != nil {
			t.Fatal(err)
		}
		want := serialOf(t, pki.CertFile(dir, p.id))
		if err := p.cmd.Process.Signal(syscall.SIGHUP); err != nil {
			t.Fatal(err)
		}
		if !Eventually(20*time.Second, func() bool {
			conn, err := tls.Dial("tcp", p.http, &tls.Config{RootCAs: poolOf(t, dir), ServerName: "127.0.0.1"})
			if err != nil {
				return false
			}
			defer conn.Close()
			return conn.ConnectionState().PeerCertificates[0].SerialNumber.Cmp(want) == 0
		}) {
			t.Fatalf("%s does not serve its new certificate after SIGHUP", p.id)
		}
	}
	acked, err := load.wait()
	if err != nil {
		t.Fatalf("non-retryable error during rotation: %v", err)
	}
	if len(acked) != total {
		t.Fatalf("%d of %d acknowledged", len(acked), total)
	}
	for _, id := range acked {
		if _, _, err := cl.GetTask(ctx, id, api.ReadOptions{Consistent: true}); err != nil {
			t.Fatalf("acknowledged task %s lost: %v", id, err)
		}
	}
	for _, p := range procs {
		if p.cmd.ProcessState != nil {
			t.Fatalf("%s exited: %v", p.id, p.cmd.ProcessState)
		}
		b, _ := os.ReadFile(p.dir + ".log")
		if !strings.Contains(string(b), "TLS certificates reloaded") {
			t.Errorf("%s's log does not say it reloaded", p.id)
		}
	}
}
