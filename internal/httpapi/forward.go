package httpapi

import (
	"errors"
	"fmt"
	"herd/api"
	"herd/internal/version"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"sync"
)

// forward proxies a request to the leader. A request that already came
// through another replica is refused (503 not_applied) rather than sent
// on: leadership is moving, and the client retries.
func (h *Handler) forward(w http.ResponseWriter, r *http.Request) {
	if by := r.Header.Get(api.HeaderForwarded); by != "" {
		writeErr(w, notApplied(fmt.Sprintf("%s: forwarded by %s but not the leader (leadership is changing)", h.backend.ID(), by)))
		return
	}
	addr, ok := h.backend.LeaderHTTPAddress()
	if !ok {
		writeErr(w, notApplied("no cluster leader is known; retry shortly"))
		return
	}
	target := &url.URL{Scheme: h.scheme(), Host: addr}
	proxy := &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.SetURL(target)
			pr.Out.Host = addr
			pr.Out.Header.Set(api.HeaderForwarded, h.backend.ID())
			pr.Out.Header.Set(api.HeaderForwardedVersion, version.Version())
			// The leader sees this replica's certificate, not the
			// caller's: say whose it was (the leader trusts this header
			// from a server's certificate only).
			pr.Out.Header.Del(api.HeaderIdentity)
			if id, ok, err := callerIdentity(r); err == nil && ok {
				pr.Out.Header.Set(api.HeaderIdentity, id.String())
			}
			pr.Out.Header.Set(api.HeaderForwardedFor, callerAddress(r))
		},
		ModifyResponse: func(resp *http.Response) error {
			resp.Header.Set(api.HeaderLeaderAddress, addr)
			return nil
		},
		FlushInterval: -1,
		Transport:     h.forwardTransport,
		BufferPool:    proxyBuffers{},
		ErrorHandler: func(w http.ResponseWriter, _ *http.Request, err error) {
			h.logger.Warn("forwarding to leader failed", "leader", addr, "error", err)
			var op *net.OpError
			if errors.As(err, &op) && op.Op == "dial" {
				writeErr(w, notApplied(fmt.Sprintf("leader at %s unreachable: %v", addr, err)))
				return
			}
			// The request may have reached the leader before the link broke.
			writeErr(w, &requestError{status: http.StatusServiceUnavailable, code: api.CodeOutcomeUnknown,
				msg: fmt.Sprintf("lost the leader at %s mid-request (outcome unknown): %v", addr, err)})
		},
	}
	proxy.ServeHTTP(w, r)
}

// proxyBuffers lends forwarded responses their 32 KiB copy buffers from a
// pool, so that a follower forwarding every request of its agents does
// not allocate one per request.
type proxyBuffers struct{}

var proxyBufferPool = sync.Pool{New: func() any { return new([32 << 10]byte) }}

func (proxyBuffers) Get() []byte { return proxyBufferPool.Get().(*[32 << 10]byte)[:] }

func (proxyBuffers) Put(b []byte) {
	if len(b) == 32<<10 {
		proxyBufferPool.Put((*[32 << 10]byte)(b))
	}
}
