// Package cluster runs one scheduler replica: hashicorp/raft over TCP with
// a raft-wal (or raft-boltdb) log and stable store and a file snapshot store,
// the FSM, bootstrap and join, the leadership lifecycle with its
// leader-only loops, and the HTTP API served on top of them.
package cluster

import (
	"context"
	"errors"
	"fmt"
	"herd/internal/httpapi"
	"herd/internal/version"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"

	"herd/api"
	"herd/config"
	"herd/fsm"
	"herd/internal/pki"
	"herd/internal/steady"
)

// LeaderLoop is work only the leader does (scheduling, liveness). It runs
// after the new leader's Barrier, and must return when ctx is cancelled,
// which happens as soon as leadership is lost or the server shuts down.
type LeaderLoop func(ctx context.Context, s *Server)

// Options are runtime collaborators that do not belong in a config file.
type Options struct {
	Logger hclog.Logger
	// HTTPListener and RaftListener, when set, are used instead of binding
	// the configured addresses (tests and dev mode bind port 0 first).
	HTTPListener net.Listener
	RaftListener net.Listener
	// LeaderLoops start on every leadership gain and stop on its loss.
	LeaderLoops []LeaderLoop
	// Now is the wall clock the replica's clock follows (time.Now when
	// nil): the timestamps the leader writes into commands, and the
	// deadlines it judges, come from it (see internal/steady).
	Now func() time.Time
	// Elapsed is the replica's monotonic time passed since some fixed
	// start (the process's monotonic clock when nil). The replica's clock
	// advances at its rate and absorbs a jump of Now slowly; a test that
	// moves time by hand moves both.
	Elapsed func() time.Duration
	// AfterApply observes the state after every applied entry (tests use
	// it to check invariants at every index).
	AfterApply func(index uint64, st *fsm.State)
	// Gossip shapes the memberlist pool (tests).
	Gossip GossipOptions
	// Dial, when set, opens every outgoing TCP connection of the replica
	// (Raft, forwarding to the leader, asking peers to join); fault tests
	// route links through it.
	Dial func(ctx context.Context, network, addr string) (net.Conn, error)
}

// Server is one running replica.
type Server struct {
	cfg    config.Server
	logger hclog.Logger
	dial   func(ctx context.Context, network, addr string) (net.Conn, error)
	// peerHTTP carries requests to other replicas (join, peer info).
	peerHTTP *http.Client
	// tls is the replica's certificate and CA (nil without TLS): HTTPS on
	// the API, mutual TLS on Raft, forwarding and joins.
	tls *pki.Material

	// replica is this server's member of the Raft group: raft, the FSM,
	// the stores, proposing commands.
	*replica
	metrics *serverMetrics

	httpServer *http.Server
	httpLn     net.Listener

	leaderLoops []LeaderLoop
	schedStats  SchedulerStats
	keyringSeen keyringReports
	monitor     *monitor
	gossip      *serverGossip
	notifyCh    chan bool
	// leaderSince is when this replica last became a ready leader (its
	// clock, Unix nanoseconds): it judges only the leases it gave since.
	leaderSince atomic.Int64

	shutdownCtx    context.Context
	shutdownCancel context.CancelFunc
	wg             sync.WaitGroup
	shutdownOnce   sync.Once
	// halting makes Shutdown stop as a crash looks to clients and peers
	// (Halt).
	halting atomic.Bool

	// The endpoint families served over this replica (roles.go).
	statusEndpoints
	membershipEndpoints
	taskEndpoints
	jobEndpoints
	nodeEndpoints
	aclEndpoints
	attemptEndpoints
	agentEndpoints
	keyringEndpoints
	sessionEndpoints
}

// Start opens the data directory, starts Raft and the HTTP API, and
// begins bootstrapping or joining as configured. It returns once the
// replica serves requests; the cluster may still be forming.
func Start(cfg config.Server, opts Options) (_ *Server, err error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	logger := opts.Logger
	if logger == nil {
		logger = hclog.New(&hclog.LoggerOptions{Name: "herd", Level: hclog.LevelFromString(cfg.LogLevel)})
	}
	logger = logger.With("server", cfg.ID)
	var material *pki.Material
	if cfg.TLSEnabled() {
		m, err := loadServerTLS(cfg)
		if err != nil {
			return nil, err
		}
		material = m
	}
	s := newServer(cfg, opts, logger, material)
	ctx, cancel := s.shutdownCtx, s.shutdownCancel
	var cleanups []func()
	defer func() {
		if err != nil {
			cancel()
			for i := len(cleanups) - 1; i >= 0; i-- {
				cleanups[i]()
			}
		}
	}()

	if err := os.MkdirAll(filepath.Join(cfg.DataDir, "raft"), 0o750); err != nil {
		return nil, fmt.Errorf("create data dir: %w", err)
	}
	if err := checkDataFormat(cfg.DataDir); err != nil {
		return nil, err
	}

	httpLn := opts.HTTPListener
	if httpLn == nil {
		if httpLn, err = net.Listen("tcp", cfg.HTTPAddr); err != nil {
			return nil, fmt.Errorf("listen for HTTP on %s: %w", cfg.HTTPAddr, err)
		}
	}
	cleanups = append(cleanups, func() { httpLn.Close() })
	raftLn := opts.RaftListener
	if raftLn == nil {
		if raftLn, err = net.Listen("tcp", cfg.RaftAddr); err != nil {
			return nil, fmt.Errorf("listen for raft on %s: %w", cfg.RaftAddr, err)
		}
	}
	cleanups = append(cleanups, func() { raftLn.Close() })

	if err := s.setupRaft(raftLn); err != nil {
		return nil, err
	}
	cleanups = append(cleanups, func() { _ = s.raft.Shutdown().Error(); s.rpcs.stop(); s.stable.close(); s.store.Close() })
	s.proposals = newCoalescer(gatedRaft{s.replica}, cfg.Raft.ApplyTimeout)
	s.wg.Add(1)
	go func() { defer s.wg.Done(); s.proposals.run(ctx, &s.entryWaiters) }()
	if err := s.startGossip(opts.Gossip); err != nil {
		return nil, err
	}
	cleanups = append(cleanups, s.stopGossip)

	s.serveHTTP(httpLn)

	s.wg.Add(6)
	go func() { defer s.wg.Done(); s.keyringLoop() }()
	go func() {
		defer s.wg.Done()
		s.watch.run(s.shutdownCtx)
	}()
	go func() { defer s.wg.Done(); s.joinGossip() }()
	go func() { defer s.wg.Done(); s.monitorLeadership() }()
	go func() { defer s.wg.Done(); s.formCluster() }()
	go func() { defer s.wg.Done(); s.reconcileServerMeta() }()
	s.logger.Info("server started", "http", cfg.HTTPAdvertise, "raft", cfg.RaftAdvertise, "data_dir", cfg.DataDir, "tls", s.tls != nil, "acl", cfg.ACL)
	if cfg.Insecure && cfg.Open() {
		s.logger.Warn("running INSECURE: without TLS and ACLs anyone who reaches these ports can run commands on every node", "tls", s.tls != nil, "acl", cfg.ACL)
	}
	return s, nil
}

// newServer builds the server's value: its FSM, leader loops, liveness
// monitor and peer HTTP client; nothing is started.
func newServer(cfg config.Server, opts Options, logger hclog.Logger, material *pki.Material) *Server {
	now := steady.New(opts.Now, opts.Elapsed).Now
	ctx, cancel := context.WithCancel(context.Background())
	s := &Server{
		cfg: cfg, logger: logger, tls: material,
		replica: &replica{id: cfg.ID, applyTimeout: cfg.Raft.ApplyTimeout, logger: logger, now: now, fsm: fsm.New(logger), stop: ctx.Done()},
		leaderLoops: append([]LeaderLoop{
			func(ctx context.Context, s *Server) {
				(&scheduleLoop{cfg: s.cfg.Scheduler, profiles: s.cfg.Profiles, wakeTimeout: s.cfg.Liveness.WakeTimeout,
					view: serverPassView{s}, out: serverCommitter{s}, kick: s.monitor.kick, stats: &s.schedStats, logger: s.logger}).run(ctx)
			},
			func(ctx context.Context, s *Server) {
				(&reclaimLoop{r: s.replica, timeout: s.cfg.Scheduler.ScheduleToStartTimeout, batchSize: s.cfg.Scheduler.BatchSize, logger: s.logger}).run(ctx)
			},
			func(ctx context.Context, s *Server) {
				(&livenessLoop{r: s.replica, sessions: &s.sessionEndpoints, cfg: s.cfg.Liveness, batchSize: s.cfg.Scheduler.BatchSize, logger: s.logger}).run(ctx)
			},
			func(ctx context.Context, s *Server) {
				(&retentionLoop{r: s.replica, keep: s.cfg.Scheduler.TaskRetention, logger: s.logger}).run(ctx)
			},
			func(ctx context.Context, s *Server) {
				(&profileLoop{r: s.replica, profiles: s.cfg.Profiles, sched: s.cfg.Scheduler, logger: s.logger}).run(ctx)
			},
			func(ctx context.Context, s *Server) { (&cronLoop{r: s.replica, logger: s.logger}).run(ctx) },
		}, opts.LeaderLoops...),
		notifyCh:       make(chan bool, 16),
		monitor:        newMonitor(cfg.Liveness),
		shutdownCtx:    ctx,
		shutdownCancel: cancel,
	}
	s.replica.entries = &s.schedStats.Entries
	s.statusEndpoints = statusEndpoints{r: s.replica, self: cfg, tls: material != nil, forms: fsm.CommandForms, stats: &s.schedStats, logger: logger}
	s.taskEndpoints = taskEndpoints{r: s.replica, sched: cfg.Scheduler}
	s.jobEndpoints = jobEndpoints{r: s.replica, sched: cfg.Scheduler}
	s.nodeEndpoints = nodeEndpoints{r: s.replica, profiles: cfg.Profiles, observe: func(n *fsm.Node) api.NodeObservation { return s.sessionEndpoints.Observation(n) }}
	s.aclEndpoints = aclEndpoints{r: s.replica, enforced: cfg.ACL, refusals: &refusalLimiter{}}
	s.metrics = newServerMetrics(s)
	s.attemptEndpoints = attemptEndpoints{r: s.replica, sched: cfg.Scheduler, metrics: s.metrics}
	s.agentEndpoints = agentEndpoints{r: s.replica, tls: material}
	// startGossip gives the keyring family this replica's gossip member.
	s.keyringEndpoints = keyringEndpoints{r: s.replica, seen: &s.keyringSeen, logger: logger}
	s.sessionEndpoints = sessionEndpoints{r: s.replica, monitor: s.monitor, liveness: cfg.Liveness, keyring: &s.keyringEndpoints, leaderSince: &s.leaderSince, logger: logger}
	if opts.AfterApply != nil {
		s.fsm.SetAfterApply(opts.AfterApply)
	}
	s.dial = opts.Dial
	if s.dial == nil {
		s.dial = (&net.Dialer{}).DialContext
	}
	peerTransport := api.NewTransport()
	peerTransport.DialContext = s.dial
	if s.tls != nil {
		peerTransport.DialTLSContext = func(ctx context.Context, _, addr string) (net.Conn, error) {
			return pki.Dial(ctx, s.dial, addr, s.tls.ClientConfig(pki.RoleServer))
		}
	}
	s.peerHTTP = &http.Client{Transport: peerTransport, Timeout: 60 * time.Second}
	s.membershipEndpoints = membershipEndpoints{r: s.replica, status: &s.statusEndpoints, tls: material, dial: s.dial, logger: logger}
	return s
}

func (s *Server) setupRaft(ln net.Listener) error {
	cfg := s.cfg
	rc := raft.DefaultConfig()
	rc.LocalID = raft.ServerID(cfg.ID)
	rc.HeartbeatTimeout = cfg.Raft.HeartbeatTimeout
	rc.ElectionTimeout = cfg.Raft.ElectionTimeout
	rc.LeaderLeaseTimeout = cfg.Raft.LeaderLeaseTimeout
	rc.CommitTimeout = cfg.Raft.CommitTimeout
	rc.MaxAppendEntries = cfg.Raft.MaxAppendEntries
	rc.SnapshotInterval = cfg.Raft.SnapshotInterval
	rc.SnapshotThreshold = cfg.Raft.SnapshotThreshold
	rc.TrailingLogs = cfg.Raft.TrailingLogs
	rc.NotifyCh = s.notifyCh
	rc.Logger = s.logger.Named("raft")
	if err := raft.ValidateConfig(rc); err != nil {
		return fmt.Errorf("raft config: %w", err)
	}

	dir := filepath.Join(cfg.DataDir, "raft")
	store, err := openLogStore(dir, cfg.Raft.LogStore, s.logger.Named("logstore"))
	if err != nil {
		return err
	}
	s.store = store
	snaps, err := raft.NewFileSnapshotStoreWithLogger(dir, cfg.Raft.SnapshotRetain, s.logger.Named("snapshot"))
	if err != nil {
		store.Close()
		return fmt.Errorf("open snapshot store: %w", err)
	}
	s.snaps = snaps
	dial := s.dial
	if s.tls != nil {
		// Raft accepts servers only, and dials servers only.
		ln = pki.Listener(ln, s.tls.ServerConfig(pki.ClientCertRequired, pki.RequireRole(pki.RoleServer)))
		dial = func(ctx context.Context, _, addr string) (net.Conn, error) {
			return pki.Dial(ctx, s.dial, addr, s.tls.ClientConfig(pki.RoleServer))
		}
	}
	layer, err := newStreamLayer(ln, cfg.RaftAdvertise, dial)
	if err != nil {
		store.Close()
		return err
	}
	s.transport = raft.NewNetworkTransportWithConfig(&raft.NetworkTransportConfig{
		Stream:  layer,
		MaxPool: 3,
		Timeout: 10 * time.Second,
		Logger:  s.logger.Named("transport"),
	})
	// A small cache in front of the log store saves disk reads when
	// followers replicate recent entries.
	logs, err := raft.NewLogCache(512, store)
	if err != nil {
		store.Close()
		return fmt.Errorf("log cache: %w", err)
	}
	s.stable = &guardedStable{s: store}
	s.rpcs = newPreVoteLook(s.transport)
	r, err := raft.NewRaft(rc, s.fsm, logs, s.stable, snaps, s.rpcs)
	if err != nil {
		s.rpcs.stop()
		s.transport.Close()
		store.Close()
		return fmt.Errorf("start raft: %w", err)
	}
	s.raft = r
	s.watch = newLeaderWatch(r, s.logger.Named("leaderwatch"))
	s.watch.placeAmong(func() (int, int) { return voterPlace(r, rc.LocalID) })
	s.rpcs.setLook(s.watch.beforePreVote)
	return nil
}

// Shutdown stops the replica: leader loops, HTTP, Raft, then the stores.
// Its data directory stays valid for a restart.
func (s *Server) Shutdown() error {
	var err error
	s.shutdownOnce.Do(func() {
		s.logger.Info("shutting down")
		s.shutdownCancel()
		if s.halting.Load() {
			// As a crash: requests in flight are cut off, entries in flight
			// are left unanswered, nothing is handed over.
			_ = s.httpServer.Close()
			s.gate.close()
		} else {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			if e := s.httpServer.Shutdown(ctx); e != nil {
				_ = s.httpServer.Close()
			}
			s.drainRaft()
			s.handOver()
		}
		if e := s.raft.Shutdown().Error(); e != nil {
			err = fmt.Errorf("raft shutdown: %w", e)
		}
		s.wg.Wait()
		if !waitWithin(&s.entryWaiters, 5*time.Second) {
			s.logger.Warn("raft never answered some entries proposed before the shutdown; their waiters are left")
		}
		s.stopGossip()
		s.rpcs.stop()
		if e := s.transport.Close(); e != nil && err == nil {
			err = fmt.Errorf("close transport: %w", e)
		}
		s.stable.close()
		if e := s.store.Close(); e != nil && err == nil {
			err = fmt.Errorf("close raft store: %w", e)
		}
	})
	return err
}

// Halt stops the replica as a crash looks from outside: requests in
// flight are cut off, entries in flight are not waited for, and a leader
// does not hand its leadership over, so its peers elect a new one after
// their heartbeat timeout. What is on disk is what Shutdown leaves. The
// bench and the tests use it to measure and exercise that failover.
func (s *Server) Halt() error {
	s.halting.Store(true)
	return s.Shutdown()
}

// HTTPAddr is the advertised HTTP address.
func (s *Server) HTTPAddr() string { return s.cfg.HTTPAdvertise }

// RaftAddr is the advertised Raft address.
func (s *Server) RaftAddr() string { return s.cfg.RaftAdvertise }

// Config returns the configuration the server runs with.
func (s *Server) Config() config.Server { return s.cfg }

// FSM exposes the replicated state (read-only use: State()).
func (s *Server) FSM() *fsm.FSM { return s.fsm }

// Raft exposes the raft instance for tests and operator tooling.
func (s *Server) Raft() *raft.Raft { return s.raft }

// Logger returns the server's logger.
func (s *Server) Logger() hclog.Logger { return s.logger }

// monitorLeadership starts and stops the leader-only work as raft reports
// leadership changes.
func (s *Server) monitorLeadership() {
	var (
		stop func()
	)
	for {
		select {
		case isLeader := <-s.notifyCh:
			if isLeader && stop == nil {
				ctx, cancel := context.WithCancel(s.shutdownCtx)
				done := make(chan struct{})
				go func() { defer close(done); s.leadership(ctx) }()
				stop = func() { cancel(); <-done }
				s.logger.Info("gained leadership")
			} else if !isLeader && stop != nil {
				s.logger.Info("lost leadership")
				stop()
				stop = nil
			}
		case <-s.shutdownCtx.Done():
			if stop != nil {
				stop()
			}
			return
		}
	}
}

// leadership runs for as long as this replica leads: it first waits for a
// Barrier so the FSM reflects every entry of earlier terms, records its own
// address, then runs the leader loops until ctx ends.
func (s *Server) leadership(ctx context.Context) {
	defer s.leaderReady.Store(false)
	// Each Barrier gets ApplyTimeout: raft may never answer one across a
	// leadership change, and a leader that never became ready would leave
	// the cluster refusing every write. After three failures in a row the
	// replica hands leadership to another server instead of waiting on.
	for failures := 0; ; failures++ {
		bctx, cancel := context.WithTimeout(ctx, s.cfg.Raft.ApplyTimeout)
		err := s.await(bctx, s.raft.Barrier(s.cfg.Raft.ApplyTimeout))
		cancel()
		if err == nil {
			break
		}
		if ctx.Err() != nil {
			return
		}
		s.logger.Warn("leader barrier failed, retrying", "error", err, "failures", failures+1)
		if failures+1 >= 3 {
			s.logger.Error("leadership could not be established; handing it over", "error", err)
			tctx, cancel := context.WithTimeout(ctx, s.cfg.Raft.ApplyTimeout)
			if terr := s.await(tctx, s.raft.LeadershipTransfer()); terr != nil {
				s.logger.Warn("leadership transfer failed", "error", terr)
			}
			cancel()
			failures = -1
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(100 * time.Millisecond):
		}
	}
	s.leaderSince.Store(s.now().UnixNano())
	s.leaderReady.Store(true)
	if err := s.upsertServerMeta(ctx, s.selfJoinRequest()); err != nil {
		s.logger.Warn("could not record own address", "error", err)
	}
	s.logger.Info("leadership established", "index", s.fsm.Index())
	var wg sync.WaitGroup
	for _, loop := range s.leaderLoops {
		wg.Add(1)
		go func() { defer wg.Done(); loop(ctx, s) }()
	}
	<-ctx.Done()
	s.leaderReady.Store(false)
	wg.Wait()
}

// WaitForLeader blocks until some replica is an established leader known
// to this one, or ctx ends.
func (s *Server) WaitForLeader(ctx context.Context) error {
	for {
		if _, ok := s.LeaderHTTPAddress(); ok {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("wait for leader: %w", ctx.Err())
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// FirstLogIndex is the oldest entry still in the log store; it grows when
// snapshots truncate the log.
func (s *Server) FirstLogIndex() (uint64, error) {
	idx, err := s.store.FirstIndex()
	if err != nil {
		return 0, fmt.Errorf("first log index: %w", err)
	}
	return idx, nil
}

func (s *Server) selfJoinRequest() api.JoinRequest {
	return api.JoinRequest{ID: s.cfg.ID, RaftAddress: s.cfg.RaftAdvertise, HTTPAddress: s.cfg.HTTPAdvertise, GossipAddress: s.cfg.GossipAdvertise,
		CommandForms: s.statusEndpoints.forms, Version: version.Version()}
}

// handOver, on a leader that stops, asks the most up-to-date follower to
// stand for election at once (Raft's leadership transfer): the cluster
// then has a leader again within a round trip or two, instead of after
// the followers' heartbeat timeout and an election. It waits at most
// handOverWait; a follower that cannot take over (none reachable, or it
// lags) leaves the cluster to elect one after the heartbeat timeout, as
// when a leader crashes.
func (s *Server) handOver() {
	if s.raft.State() != raft.Leader {
		return
	}
	f := s.raft.GetConfiguration()
	if f.Error() != nil {
		return
	}
	voters := 0
	for _, srv := range f.Configuration().Servers {
		if srv.Suffrage == raft.Voter {
			voters++
		}
	}
	if voters < 2 {
		return
	}
	done := make(chan error, 1)
	go func() { done <- s.raft.LeadershipTransfer().Error() }()
	select {
	case err := <-done:
		if err != nil {
			s.logger.Info("leadership not handed over before stopping", "error", err)
			return
		}
		_, to := s.raft.LeaderWithID()
		s.logger.Info("leadership handed over before stopping", "to", string(to))
	case <-time.After(handOverWait):
		s.logger.Info("leadership not handed over before stopping: no follower took over in time", "waited", handOverWait)
	}
}

// handOverWait bounds how long a stopping leader waits for a follower to
// take over.
const handOverWait = 2 * time.Second

// drainRaft closes the proposal gate and, on a leader, waits for a
// barrier (elsewhere, for what is committed to be applied): once it is applied, every entry proposed before the gate
// closed has been applied and answered, and raft can stop without
// leaving an entry unanswered. The wait lasts as long as the FSM works
// through what is committed (no new proposal is admitted, so that is
// finite) and gives up after drainStall without progress: a leader that
// cannot commit steps down within its lease, which answers what it had
// in flight.
func (s *Server) drainRaft() {
	s.gate.close()
	// Raft's own view: IsLeader also asks for the leader's loops, which
	// the shutdown has already stopped.
	if s.raft.State() != raft.Leader {
		s.awaitApplied(s.raft.CommitIndex())
		return
	}
	barrier := s.raft.Barrier(drainStall)
	done := make(chan error, 1)
	go func() { done <- barrier.Error() }()
	applied, progressed := s.fsm.Index(), time.Now()
	tick := time.NewTicker(250 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case err := <-done:
			if err == nil {
				return
			}
			// Leadership was lost meanwhile: what was in flight is answered,
			// and what was committed is still applied, and answered, as
			// long as raft runs.
			s.awaitApplied(s.raft.CommitIndex())
			return
		case <-tick.C:
		}
		if now := s.fsm.Index(); now != applied {
			applied, progressed = now, time.Now()
		} else if time.Since(progressed) > drainStall {
			s.logger.Warn("entries in flight may be left unanswered at shutdown: the state machine made no progress", "for", drainStall)
			return
		}
	}
}

// awaitApplied waits until raft has applied index, or has applied
// nothing more for drainStall.
func (s *Server) awaitApplied(index uint64) {
	applied, progressed := s.raft.AppliedIndex(), time.Now()
	for applied < index {
		time.Sleep(10 * time.Millisecond)
		if now := s.raft.AppliedIndex(); now != applied {
			applied, progressed = now, time.Now()
		} else if time.Since(progressed) > drainStall {
			s.logger.Warn("committed entries left unapplied at shutdown", "applied", applied, "committed", index)
			return
		}
	}
}

// drainStall is how long drainRaft waits for the state machine to apply
// anything more before it gives up.
const drainStall = 5 * time.Second

// waitWithin waits for wg, at most d; it reports whether wg finished.
func waitWithin(wg *sync.WaitGroup, d time.Duration) bool {
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
		return true
	case <-time.After(d):
		return false
	}
}

// awaitFuture waits for a raft future, or for ctx to end, or for stop to
// close (the server shutting down: raft.ErrRaftShutdown, the outcome
// unknown). Raft may never answer a future: one in flight when leadership
// is lost, or one committed but not yet applied when raft shuts down. So
// no caller waits on a future unconditionally; the goroutine reading it
// ends when raft answers, if ever.
func awaitFuture(ctx context.Context, stop <-chan struct{}, f raft.Future) error {
	done := make(chan error, 1)
	go func() { done <- f.Error() }()
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
		return ctx.Err()
	case <-stop:
		return raft.ErrRaftShutdown
	}
}

// serveHTTP serves the API on ln until Shutdown.
func (s *Server) serveHTTP(ln net.Listener) {
	s.httpLn = ln
	s.httpServer = &http.Server{
		Handler:           s.httpHandler(s.logger),
		ReadHeaderTimeout: 10 * time.Second,
		IdleTimeout:       120 * time.Second,
		ErrorLog:          s.logger.Named("http").StandardLogger(&hclog.StandardLoggerOptions{InferLevels: true}),
	}
	serve := s.httpServer.Serve
	if s.tls != nil {
		s.httpServer.TLSConfig = s.tls.ServerConfig(pki.ClientCertOptional, nil)
		serve = func(ln net.Listener) error { return s.httpServer.ServeTLS(ln, "", "") }
	}
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		if err := serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			s.logger.Error("HTTP server stopped", "error", err)
		}
	}()
}

func (s *Server) httpHandler(logger hclog.Logger) http.Handler {
	h := httpapi.NewHandler(s, logger).WithForwardTransport(s.peerHTTP.Transport)
	if s.tls != nil {
		h = h.WithHTTPS()
	}
	if s.cfg.EnableDebug {
		h = h.WithDebug()
	}
	return h
}

// loadServerTLS reads the replica's TLS material; the certificate must be
// a server certificate issued for this replica's id.
func loadServerTLS(cfg config.Server) (*pki.Material, error) {
	m, err := pki.Load(pki.Files{CA: cfg.TLSCAFile, Cert: cfg.TLSCertFile, Key: cfg.TLSKeyFile})
	if err != nil {
		return nil, fmt.Errorf("TLS: %w", err)
	}
	if id := m.Identity(); id != (pki.Identity{Role: pki.RoleServer, ID: cfg.ID}) {
		return nil, fmt.Errorf("TLS: %s holds the identity %s, not server/%s (issue one with herd tls cert create -server -id %s)", cfg.TLSCertFile, id, cfg.ID, cfg.ID)
	}
	return m, nil
}

// ReloadTLS reads the certificate, key and CA again (on SIGHUP): new
// connections use them, established ones keep theirs. On an error the
// material in use stays.
func (s *Server) ReloadTLS() error {
	if s.tls == nil {
		return nil
	}
	if err := s.tls.Reload(); err != nil {
		s.logger.Error("TLS reload failed; keeping the certificates in use", "error", err)
		return err
	}
	s.logger.Info("TLS certificates reloaded", "expires", s.tls.NotAfter())
	return nil
}
