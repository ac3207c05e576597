// Package netns builds hosts for network-partition tests: each Host is a Linux network namespace joined to
// the test's own namespace by a veth pair, with an address of its own. A process started in it (Command)
// is reached at Host.IP, and Cut takes the link down: packets are dropped in both directions, connections
// stay open and hang, as in a real partition (no reset, no refusal). Heal brings the link back.
//
// It needs root and iproute2's ip; Available says why not. Close removes the namespace and its link; a
// namespace whose processes still run stays until they exit, so stop them first.
package netns

import (
	"bytes"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"strings"
	"sync/atomic"
)

// Host is a network namespace with a veth link to the test's namespace.
type Host struct {
	// Name is the namespace's name (ip netns).
	Name string
	// IP is the host's address, reachable from the test's namespace while the link is up.
	IP string
	// link is the veth end in the test's namespace; peer the end in the host's, the one Cut takes down.
	link, peer string
}

var hosts atomic.Uint32

// Available reports why hosts cannot be built here, or nil.
func Available() error {
	if os.Geteuid() != 0 {
		return errors.New("netns: network namespaces need root")
	}
	if _, err := exec.LookPath("ip"); err != nil {
		return errors.New("netns: iproute2's ip not found (apt-get install iproute2)")
	}
	return nil
}

// New builds a host. Names and addresses carry the process id, so concurrent test binaries rarely collide
// (address blocks repeat for pids 512 apart, or past 32 hosts per binary; names never do):
// namespace sf<pid>n<k> (prefixed with sf-run<id>- when STOCKFLOW_TEST_RUN names the test run), links
// sf<pid>h<k> and sf<pid>p<k>, addresses from 10.233.0.0/16 in /30 blocks.
func New() (*Host, error) {
	if err := Available(); err != nil {
		return nil, err
	}
	pid, k := os.Getpid(), hosts.Add(1)
	block := (uint32(pid)*32 + k) % (1 << 14) // 16384 /30 blocks in 10.233.0.0/16
	base := netip.AddrFrom4([4]byte{10, 233, byte(block >> 6), byte(block&63) << 2})
	outer, inner := base.Next(), base.Next().Next()
	h := &Host{Name: fmt.Sprintf("sf%dn%d", pid, k), IP: inner.String(), link: fmt.Sprintf("sf%dh%d", pid, k),
		peer: fmt.Sprintf("sf%dp%d", pid, k)}
	if run := os.Getenv("STOCKFLOW_TEST_RUN"); run != "" { // scripts/test.sh finds a run's leftovers by it
		h.Name = "sf-run" + run + "-" + h.Name
	}
	err := run(
		[]string{"netns", "add", h.Name},
		[]string{"link", "add", h.link, "type", "veth", "peer", "name", h.peer},
		[]string{"link", "set", h.peer, "netns", h.Name},
		[]string{"addr", "add", outer.String() + "/30", "dev", h.link},
		[]string{"link", "set", h.link, "up"},
		[]string{"-n", h.Name, "addr", "add", h.IP + "/30", "dev", h.peer},
		[]string{"-n", h.Name, "link", "set", h.peer, "up"},
		[]string{"-n", h.Name, "link", "set", "lo", "up"},
	)
	if err != nil {
		return nil, errors.Join(err, h.Close())
	}
	return h, nil
}

// Command returns a command that runs name in the host's namespace. ip netns exec execs name, so the
// process keeps the command's pid: signals (kill, SIGSTOP) reach it directly.
func (h *Host) Command(name string, args ...string) *exec.Cmd {
	return exec.Command("ip", append([]string{"netns", "exec", h.Name, name}, args...)...)
}

// Cut takes the host's link down: from now on nothing reaches it and nothing leaves it. It is the host's
// end that goes down: the test's end stays up with its route (marked linkdown), so packets for the host
// are dropped on the dead link. Taking the test's end down would remove the route, and the packets would
// follow the default route off the machine (seen here: a gateway answering Redis commands with HTTP 400).
func (h *Host) Cut() error { return run([]string{"-n", h.Name, "link", "set", h.peer, "down"}) }

// Heal brings the host's link up again.
func (h *Host) Heal() error { return run([]string{"-n", h.Name, "link", "set", h.peer, "up"}) }

// Close deletes the namespace and the link. Safe to call more than once.
func (h *Host) Close() error {
	var errs []error
	if err := run([]string{"link", "del", h.link}); err != nil && !strings.Contains(err.Error(), "Cannot find device") {
		errs = append(errs, err)
	}
	if err := run([]string{"netns", "del", h.Name}); err != nil && !strings.Contains(err.Error(), "No such file") {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// run runs ip with each argument list in turn and stops at the first failure.
func run(cmds ...[]string) error {
	for _, args := range cmds {
		var stderr bytes.Buffer
		cmd := exec.Command("ip", args...)
		cmd.Stderr = &stderr
		if err := cmd.Run(); err != nil {
			return fmt.Errorf("netns: ip %s: %v: %s", strings.Join(args, " "), err, strings.TrimSpace(stderr.String()))
		}
	}
	return nil
}
