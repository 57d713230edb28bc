package localcluster

import (
	"errors"
	"math/rand/v2"
	"net"
	"os"
	"strconv"
	"strings"
	"sync"
)

// FreeAddr returns a loopback address whose port was free for both TCP and
// UDP just now (memberlist uses both on one port).
//
// Ports come from below the kernel's ephemeral range (read from
// /proc/sys/net/ipv4/ip_local_port_range), so outgoing connections made in
// this process can never take a port a replica is about to bind, or to
// bind again after a restart; and no port is handed out twice in one
// process, since an address picked for a replica that has not bound it
// yet still looks free. Safe for concurrent use.
func FreeAddr() (string, error) {
	low := ephemeralLow()
	for i := 0; i < 1000; i++ {
		port := 10000 + rand.IntN(low-10000)
		handedOutMu.Lock()
		taken := handedOut[port]
		handedOut[port] = true
		handedOutMu.Unlock()
		if taken {
			continue
		}
		addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
		ln, err := net.Listen("tcp", addr)
		if err != nil {
			continue
		}
		pc, err := net.ListenPacket("udp", addr)
		ln.Close()
		if err != nil {
			continue
		}
		pc.Close()
		return addr, nil
	}
	return "", errors.New("no loopback port free for TCP and UDP below the ephemeral range")
}

var (
	handedOutMu sync.Mutex
	handedOut   = map[int]bool{}
)

// ephemeralLow is the first port of the kernel's ephemeral range, or
// 32768 (Linux's default) where it cannot be read.
func ephemeralLow() int {
	b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range")
	if err == nil {
		if f := strings.Fields(string(b)); len(f) == 2 {
			if n, err := strconv.Atoi(f[0]); err == nil && n > 11000 {
				return n
			}
		}
	}
	return 32768
}
