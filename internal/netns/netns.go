//go:build linux

// Package netns runs herd's fault measurements in Linux network
// namespaces the caller makes: a namespace's loopback and links exist
// only inside it, so faults injected there (nftables rules dropping a
// share of the packets, or every packet to some peers) touch nothing
// else on the machine. Creating namespaces needs root and iproute2.
package netns

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"runtime"
	"strings"

	"golang.org/x/sys/unix"
)

// Run runs a command and returns its combined output in the error when
// it fails.
func Run(args ...string) error {
	out, err := exec.Command(args[0], args[1:]...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("%s: %v: %s", strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return nil
}

// Usable says why namespaces cannot be made here (empty when they can):
// not root, or no iproute2.
func Usable() string {
	if os.Geteuid() != 0 {
		return "network namespaces need root"
	}
	if _, err := exec.LookPath("ip"); err != nil {
		return "network namespaces need iproute2 (ip)"
	}
	return ""
}

// Add creates the namespace name with its loopback up.
func Add(name string) error {
	if err := Run("ip", "netns", "add", name); err != nil {
		return err
	}
	if err := Run("ip", "-n", name, "link", "set", "lo", "up"); err != nil {
		_ = Delete(name)
		return err
	}
	return nil
}

// Delete removes the namespace and everything in it (links, addresses,
// nftables rules).
func Delete(name string) error { return Run("ip", "netns", "del", name) }

// Command is bin with args, to be run inside the namespace.
func Command(name, bin string, args ...string) *exec.Cmd {
	return exec.Command("ip", append([]string{"netns", "exec", name, bin}, args...)...)
}

// Nft loads an nftables ruleset inside the namespace.
func Nft(name, rules string) error {
	cmd := exec.Command("ip", "netns", "exec", name, "nft", "-f", "-")
	cmd.Stdin = strings.NewReader(rules)
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("nft: %v: %s", err, out)
	}
	return nil
}

// Dialer dials from inside the namespace: a socket belongs to the
// namespace of the thread that creates it, so a locked thread enters the
// namespace, connects, and is thrown away (never returned to the pool).
func Dialer(name string) func(ctx context.Context, network, addr string) (net.Conn, error) {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		type result struct {
			c   net.Conn
			err error
		}
		ch := make(chan result, 1)
		go func() {
			runtime.LockOSThread() // not unlocked: the thread exits with the goroutine
			f, err := os.Open("/run/netns/" + name)
			if err != nil {
				ch <- result{nil, err}
				return
			}
			defer f.Close()
			if err := unix.Unshare(unix.CLONE_FS); err != nil {
				ch <- result{nil, fmt.Errorf("unshare: %w", err)}
				return
			}
			if err := unix.Setns(int(f.Fd()), unix.CLONE_NEWNET); err != nil {
				ch <- result{nil, fmt.Errorf("setns %s: %w", name, err)}
				return
			}
			var d net.Dialer
			c, err := d.DialContext(ctx, network, addr)
			ch <- result{c, err}
		}()
		r := <-ch
		return r.c, r.err
	}
}
