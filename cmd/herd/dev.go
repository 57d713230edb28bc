package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"path/filepath"
	"time"

	"github.com/hashicorp/go-hclog"

	"herd/cluster"
	"herd/config"
)

// devCluster is three replicas in one process, for trying herd out.
type devCluster struct {
	servers []*cluster.Server
}

func startDevCluster(dir string, logger hclog.Logger) (*devCluster, error) {
	const n = 3
	type listeners struct{ http, raft net.Listener }
	var (
		ls   []listeners
		join []string
	)
	closeAll := func() {
		for _, l := range ls {
			l.http.Close()
			l.raft.Close()
		}
	}
	for i := 0; i < n; i++ {
		h, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			closeAll()
			return nil, fmt.Errorf("listen: %w", err)
		}
		r, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			h.Close()
			closeAll()
			return nil, fmt.Errorf("listen: %w", err)
		}
		ls = append(ls, listeners{h, r})
		join = append(join, h.Addr().String())
	}
	d := &devCluster{}
	for i, l := range ls {
		cfg := config.DefaultServer()
		cfg.ID = fmt.Sprintf("dev%d", i+1)
		cfg.DataDir = filepath.Join(dir, cfg.ID)
		cfg.HTTPAddr = l.http.Addr().String()
		cfg.RaftAddr = l.raft.Addr().String()
		cfg.BootstrapExpect = n
		cfg.Join = join
		srv, err := cluster.Start(cfg, cluster.Options{Logger: logger, HTTPListener: l.http, RaftListener: l.raft})
		if err != nil {
			for _, rest := range ls[i+1:] {
				rest.http.Close()
				rest.raft.Close()
			}
			d.shutdown()
			return nil, fmt.Errorf("start %s: %w", cfg.ID, err)
		}
		d.servers = append(d.servers, srv)
	}
	return d, nil
}

func (d *devCluster) waitForLeader(timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	for _, s := range d.servers {
		if err := s.WaitForLeader(ctx); err != nil {
			return fmt.Errorf("dev cluster did not elect a leader: %w", err)
		}
	}
	return nil
}

func (d *devCluster) shutdown() {
	var errs []error
	for _, s := range d.servers {
		errs = append(errs, s.Shutdown())
	}
	_ = errors.Join(errs...)
}

func (d *devCluster) printBanner(w io.Writer, dir string) {
	fmt.Fprintln(w, "herd dev cluster is up: 3 replicas, data in", dir)
	fmt.Fprintln(w)
	fmt.Fprintf(w, "  %-6s %-22s %-22s\n", "ID", "HTTP", "RAFT")
	for _, s := range d.servers {
		fmt.Fprintf(w, "  %-6s %-22s %-22s\n", s.ID(), s.HTTPAddr(), s.RaftAddr())
	}
	addr := "http://" + d.servers[0].HTTPAddr()
	fmt.Fprintln(w)
	fmt.Fprintln(w, "Next, in another terminal:")
	fmt.Fprintf(w, "  export HERD_ADDR=%s\n", addr)
	fmt.Fprintln(w, "  go run ./cmd/herd operator raft list-peers")
	fmt.Fprintln(w, "  go run ./cmd/herd task submit -name hello -- echo hello")
	fmt.Fprintln(w, "  go run ./cmd/herd task list")
	fmt.Fprintf(w, "  curl -s %s/v1/status/leader\n", addr)
	fmt.Fprintln(w)
	fmt.Fprintln(w, "Press Ctrl-C to stop.")
}
