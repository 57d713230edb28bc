package test

import (
	"bytes"
	"crypto/tls"
	"io"
	"net"
	"net/http"
	"slices"
	"sync"
	"testing"
	"time"

	"herd/api"
)

// One secured replica under abuse keeps serving everyone else: 300
// connections that never start their TLS handshake, 100 that finish it
// and then send their headers a byte a second (slowloris), a flood of
// full TLS handshakes from four loops, and requests with bodies over the
// 1 MiB limit, all at once, while an honest client reads from the same
// replica. Every honest request is answered; an
// oversized body gets 413 with a JSON error, never a 5xx. The honest
// client's latencies are logged (measured, not asserted).
func TestSecureReplicaKeepsServingUnderAbuse(t *testing.T) {
	c := NewClusterWith(t, 3, Setup{Secure: true})
	target := c.Replicas[c.WaitForLeader()].Cfg.HTTPAddr
	honest, err := api.NewClient(target)
	if err != nil {
		t.Fatal(err)
	}
	c.Secure(honest, nil, 30*time.Second)
	honest.Retries = 0
	ctx := Ctx(t, 2*time.Minute)
	if _, err := honest.Self(ctx); err != nil {
		t.Fatal(err)
	}

	var conns []net.Conn
	var mu sync.Mutex
	keep := func(cn net.Conn) {
		mu.Lock()
		conns = append(conns, cn)
		mu.Unlock()
	}
	defer func() {
		for _, cn := range conns {
			cn.Close()
		}
	}()
	// Silent connections: the server waits for a TLS ClientHello.
	for range 300 {
		cn, err := net.Dial("tcp", target)
		if err != nil {
			t.Fatalf("silent connection: %v", err)
		}
		keep(cn)
	}
	// Slowloris: a finished handshake, then a header a byte a second,
	// until the abuse ends (bounded: the loop stops with done).
	done := make(chan struct{})
	var slow sync.WaitGroup
	for range 100 {
		cn, err := tls.Dial("tcp", target, &tls.Config{InsecureSkipVerify: true})
		if err != nil {
			t.Fatalf("slow connection's handshake: %v", err)
		}
		keep(cn)
		slow.Add(1)
		go func() {
			defer slow.Done()
			line := []byte("GET /v1/status/self HTTP/1.1\r\nHost: x\r\nX-Slow: ")
			for i := 0; ; i++ {
				select {
				case <-done:
					return
				case <-time.After(time.Second):
				}
				if _, err := cn.Write(line[i%len(line) : i%len(line)+1]); err != nil {
					return // the server gave up on it: as it should
				}
			}
		}()
	}
	// Oversized bodies, through the honest client's credentials (a
	// client that may submit, sending too much).
	tr := api.NewTransport()
	tr.TLSClientConfig = &tls.Config{RootCAs: c.sec.pool, MinVersion: tls.VersionTLS12}
	tr.ExpectContinueTimeout = 10 * time.Second
	hc := &http.Client{Transport: tr, Timeout: 30 * time.Second}
	big := bytes.Repeat([]byte("x"), api.MaxRequestBytes+1024)
	var bigCodes []int
	var bigWG sync.WaitGroup
	for range 4 {
		bigWG.Add(1)
		go func() {
			defer bigWG.Done()
			req, err := http.NewRequest(http.MethodPost, "https://"+target+"/v1/tasks", bytes.NewReader(big))
			if err != nil {
				t.Error(err)
				return
			}
			req.Header.Set(api.HeaderToken, c.sec.token)
			// As curl sends for a large body: the answer comes before it.
			req.Header.Set("Expect", "100-continue")
			resp, err := hc.Do(req)
			if err != nil {
				t.Errorf("oversized body: %v", err)
				return
			}
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			mu.Lock()
			bigCodes = append(bigCodes, resp.StatusCode)
			mu.Unlock()
			if resp.StatusCode != http.StatusRequestEntityTooLarge || !bytes.Contains(body, []byte(`"error"`)) {
				t.Errorf("oversized body: %d %s, want 413 with a JSON error", resp.StatusCode, body)
			}
		}()
	}
	// A flood of full TLS handshakes, each connection closed at once:
	// four loops, each bounded, until the honest client is done.
	var handshakes sync.WaitGroup
	var shook int
	for range 4 {
		handshakes.Add(1)
		go func() {
			defer handshakes.Done()
			for i := 0; i < 1000; i++ {
				select {
				case <-done:
					return
				default:
				}
				cn, err := tls.Dial("tcp", target, &tls.Config{InsecureSkipVerify: true})
				if err != nil {
					continue
				}
				cn.Close()
				mu.Lock()
				shook++
				mu.Unlock()
			}
		}()
	}
	// The honest client meanwhile.
	var took []time.Duration
	for i := range 100 {
		start := time.Now()
		if _, err := honest.Self(ctx); err != nil {
			t.Fatalf("honest request %d under abuse: %v", i, err)
		}
		took = append(took, time.Since(start))
		time.Sleep(20 * time.Millisecond)
	}
	bigWG.Wait()
	close(done)
	slow.Wait()
	handshakes.Wait()
	slices.Sort(took)
	t.Logf("100 honest requests beside 300 silent connections, 100 slowloris, %d TLS handshakes and %d oversized bodies: p50 %v, p99 %v, max %v; oversized answered %v",
		shook, len(bigCodes), took[49].Round(time.Microsecond), took[98].Round(time.Microsecond), took[99].Round(time.Microsecond), bigCodes)
}
