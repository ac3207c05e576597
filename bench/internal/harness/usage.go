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

	"github.com/stockflow/stockflow/internal/redisproc"
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

// processCPU is the CPU time (user + system) of a process, 0 when unknown: the sum of its threads' run
// times in nanoseconds (/proc/<pid>/task/*/schedstat), or, where the kernel keeps no such counts, its
// /proc/<pid>/stat times in clock ticks (10 ms: a drain of 20,000 orders by the minimal ideal takes about
// 12 ticks, too coarse for a ratio). A Go process's threads live as long as it does, so no thread's time
// is lost with the thread.
func processCPU(pid int) time.Duration {
	if d, ok := threadsCPU(pid); ok {
		return d
	}
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

// threadsCPU sums the first field of /proc/<pid>/task/*/schedstat, each thread's time on a CPU in
// nanoseconds; ok is false when a thread has none to give (schedstats off: "0 0 0").
func threadsCPU(pid int) (sum time.Duration, ok bool) {
	tasks, err := os.ReadDir(fmt.Sprintf("/proc/%d/task", pid))
	if err != nil || len(tasks) == 0 {
		return 0, false
	}
	for _, t := range tasks {
		data, err := os.ReadFile(fmt.Sprintf("/proc/%d/task/%s/schedstat", pid, t.Name()))
		if err != nil {
			continue // the thread ended meanwhile
		}
		first, _, _ := strings.Cut(string(data), " ")
		ns, err := strconv.ParseInt(first, 10, 64)
		if err != nil {
			return 0, false
		}
		sum += time.Duration(ns)
	}
	return sum, sum > 0
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
