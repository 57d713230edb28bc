package agent

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"herd/internal/version"
	"maps"
	"net/http"
	"time"

	"herd/api"
)

// register registers through any server, retrying with backoff.
func (a *Agent) register(ctx context.Context) error {
	labels := maps.Clone(a.cfg.Labels)
	if labels == nil {
		labels = map[string]string{}
	}
	labels["herd.limits"] = a.limiter.Name()
	// One token per registration: its retries (a lost answer, a failover)
	// return the same session instead of starting new ones.
	token := make([]byte, 12)
	_, _ = rand.Read(token)
	profile, datasets := a.profile.forRegistration()
	reg := api.NodeRegistration{
		NodeSpec: api.NodeSpec{
			ID: a.cfg.ID, Labels: labels, Capabilities: a.cfg.Capabilities,
			Resources: a.cfg.Resources, Slots: a.cfg.Slots, Weight: a.cfg.Weight,
		},
		Version: version.Version(), Address: a.cfg.Address, Token: hex.EncodeToString(token),
		Profile: profile, Datasets: datasets, DataAddr: a.dataAddr,
	}
	backoff := 200 * time.Millisecond
	for {
		sentAt := time.Now()
		res, err := a.client.RegisterNode(ctx, reg)
		if err == nil {
			a.session.Store(res.SessionGeneration)
			a.lease.renew(sentAt, time.Duration(res.LeaseMs)*time.Millisecond)
			a.refreshKeyring(ctx, res.KeyringIndex, false)
			a.logger.Info("registered", "session", res.SessionGeneration, "cpu_millis", reg.Resources.CPUMillis,
				"memory_mb", reg.Resources.MemoryMB, "slots", reg.Slots, "limits", a.limiter.Name())
			return nil
		}
		var se *api.StatusError
		if errors.As(err, &se) && se.Code == http.StatusBadRequest {
			return fmt.Errorf("registration refused: %w", err)
		}
		a.logger.Warn("registration failed, retrying", "in", backoff, "error", err)
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(backoff):
		}
		backoff = min(backoff*2, 10*time.Second)
	}
}

func (a *Agent) requestReregister() {
	select {
	case a.reregister <- struct{}{}:
	default:
	}
}

// heartbeatLoop keeps the session alive and registers again when the
// cluster declared the node down or its session is no longer current.
func (a *Agent) heartbeatLoop(ctx context.Context) {
	every := a.cfg.HeartbeatInterval
	if a.gossip != nil {
		// Gossip carries liveness; HTTP heartbeats only check the session.
		every *= 6
	}
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-a.reregister:
			a.logger.Warn("registering again: the cluster no longer knows the agent's session")
			if err := a.register(ctx); err != nil {
				return
			}
			continue
		case <-t.C:
		case <-a.renewNow:
		}
		sentAt, session := time.Now(), a.session.Load()
		hb, err := a.client.HeartbeatWith(ctx, a.cfg.ID, api.HeartbeatRequest{SessionGeneration: session, KeyringIndex: a.keyringIndex()})
		if err == nil {
			a.refreshKeyring(ctx, hb.KeyringIndex, false)
		}
		var se *api.StatusError
		switch {
		case err == nil && hb.SessionGeneration == session && hb.LeaseMs > 0:
			a.lease.renew(sentAt, time.Duration(hb.LeaseMs)*time.Millisecond)
		case err == nil && hb.Liveness == api.LivenessDown:
			a.requestReregister()
		case errors.As(err, &se) && (se.Reason == "session_changed" || se.Code == http.StatusNotFound):
			a.requestReregister()
		case err != nil && ctx.Err() == nil:
			a.logger.Warn("heartbeat failed", "error", err)
		}
	}
}
