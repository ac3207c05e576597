package harness

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/stockflow/stockflow/internal/testing/redisproc"
)

// What the processes of a run cost: CPU time of the redis-servers and of processes, peak memory.

// cpuTime is CPU time (user + system) used: by redis-servers (in all, and by server), and by processes.
type cpuTime struct {
	redis, procs time.Duration
	nodes        []time.Duration
}

// measureCPU runs run and says how much CPU the servers at addrs and the processes pids used meanwhile.
// The INFO calls to the servers are made outside the processes' measurement.
func (b *bench) measureCPU(ctx context.Context, addrs []string, pids []int, run func() error) (cpuTime, error) {
	before, err := b.redisCPU(ctx, addrs)
	if err != nil {
		return cpuTime{}, err
	}
	procs0 := processesCPU(pids)
	if err := run(); err != nil {
		return cpuTime{}, err
	}
	used := cpuTime{procs: processesCPU(pids) - procs0}
	after, err := b.redisCPU(ctx, addrs)
	for i := range after {
		used.nodes = append(used.nodes, after[i]-before[i])
		used.redis += after[i] - before[i]
	}
	return used, err
}

// redisCPU is the CPU time each of the servers at addrs has used.
func (b *bench) redisCPU(ctx context.Context, addrs []string) ([]time.Duration, error) {
	used := make([]time.Duration, len(addrs))
	for i, addr := range addrs {
		var err error
		if used[i], err = redisproc.ServerCPU(ctx, b.infoClient(addr)); err != nil {
			return nil, err
		}
	}
	return used, nil
}

// infoClient is the client that asks the server at addr for INFO, made on first use.
func (b *bench) infoClient(addr string) *redis.Client {
	if b.infoClients[addr] == nil {
		b.infoClients[addr] = newClient(addr)
	}
	return b.infoClients[addr]
}

func processesCPU(pids []int) time.Duration {
	var sum time.Duration
	for _, pid := range pids {
		sum += processCPU(pid)
	}
	return sum
}

// processCPU is the CPU time (user + system) of a process, 0 when unknown.
func processCPU(pid int) time.Duration {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	// Fields after the command (which may hold spaces): state is field 3, utime 14, stime 15.
	_, rest, ok := strings.Cut(string(data), ") ")
	if !ok {
		return 0
	}
	fields := strings.Fields(rest)
	if len(fields) < 13 {
		return 0
	}
	utime, _ := strconv.ParseInt(fields[11], 10, 64)
	stime, _ := strconv.ParseInt(fields[12], 10, 64)
	return time.Duration(utime+stime) * time.Second / clockTicks
}

// clockTicks is USER_HZ, the unit of /proc/<pid>/stat times: 100 on every Linux architecture Go runs on.
const clockTicks = 100

// peakRSSKiB is VmHWM of a process: its peak resident set.
func peakRSSKiB(pid int) (int64, error) {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, err
	}
	for _, line := range strings.Split(string(data), "\n") {
		if rest, ok := strings.CutPrefix(line, "VmHWM:"); ok {
			return strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 10, 64)
		}
	}
	return 0, errors.New("no VmHWM")
}
