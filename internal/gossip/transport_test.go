package gossip

import (
	"bytes"
	"fmt"
	"github.com/hashicorp/go-hclog"
	"io"
	"log"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/memberlist"
)

// A packet arrives whole, in a buffer of its own size: nothing of the
// 64 KiB read buffer is kept with it.
func TestTransportHandsOverPacketsOfTheirOwnSize(t *testing.T) {
	quiet := log.New(io.Discard, "", 0)
	a, err := newTransport("127.0.0.1", 0, quiet)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Shutdown()
	b, err := newTransport("127.0.0.1", 0, quiet)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Shutdown()
	for _, size := range []int{1, 700, 1400, 9000} {
		msg := bytes.Repeat([]byte{byte(size)}, size)
		if _, err := a.WriteTo(msg, fmt.Sprintf("127.0.0.1:%d", b.port())); err != nil {
			t.Fatal(err)
		}
		select {
		case p := <-b.PacketCh():
			if !bytes.Equal(p.Buf, msg) || cap(p.Buf) > 2*size+64 { // a size class, not the read buffer
				t.Fatalf("a %d-byte packet arrived as %d bytes in a buffer of %d", size, len(p.Buf), cap(p.Buf))
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("the %d-byte packet never arrived", size)
		}
	}
}

// Two members on this transport find each other.
func TestMembersJoinOverTheTransport(t *testing.T) {
	tune := func(c *memberlist.Config) {
		c.ProbeInterval, c.GossipInterval = 100*time.Millisecond, 20*time.Millisecond
	}
	logs := &syncWriter{w: &bytes.Buffer{}}
	logger := hclog.New(&hclog.LoggerOptions{Level: hclog.Info, Output: logs})
	m1, err := Create(Options{Name: "one", BindHost: "127.0.0.1", Tune: tune, Logger: logger})
	if err != nil {
		t.Fatal(err)
	}
	defer m1.Shutdown()
	m2, err := Create(Options{Name: "two", BindHost: "127.0.0.1", Tune: tune})
	if err != nil {
		t.Fatal(err)
	}
	defer m2.Shutdown()
	if _, err := m2.Join([]string{m1.LocalNode().Address()}); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for m1.NumMembers() != 2 || m2.NumMembers() != 2 {
		if time.Now().After(deadline) {
			t.Fatalf("members: %d and %d", m1.NumMembers(), m2.NumMembers())
		}
		time.Sleep(10 * time.Millisecond)
	}
	// memberlist's debug lines (the join's stream) stay out of INFO.
	m1.Shutdown()
	if out := logs.String(); strings.Contains(out, "[DEBUG]") {
		t.Fatalf("memberlist's debug lines reached the INFO log:\n%s", out)
	}
}

type syncWriter struct {
	mu sync.Mutex
	w  *bytes.Buffer
}

func (s *syncWriter) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.w.String()
}

func (s *syncWriter) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.w.Write(p)
}
