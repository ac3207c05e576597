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
)

// What the processes of a run cost: CPU time of the redis-servers and of processes, peak memory.

// redisCPU is the CPU time (user + system) the servers at addrs have used.
func (b *bench) redisCPU(ctx context.Context, addrs ...string) (time.Duration, error) {
	var sum time.Duration
	for _, addr := range addrs {
		c := b.infoClients[addr]
		if c == nil {
			c = newClient(addr)
			b.infoClients[addr] = c
		}
		d, err := serverCPU(ctx, c)
		if err != nil {
			return 0, err
		}
		sum += d
	}
	return sum, nil
}

func serverCPU(ctx context.Context, rdb *redis.Client) (time.Duration, error) {
	info, err := rdb.Info(ctx, "cpu").Result()
	if err != nil {
		return 0, err
	}
	var total float64
	for _, line := range strings.Split(info, "\r\n") {
		for _, field := range []string{"used_cpu_sys:", "used_cpu_user:"} {
			if v, ok := strings.CutPrefix(line, field); ok {
				f, _ := strconv.ParseFloat(v, 64)
				total += f
			}
		}
	}
	return time.Duration(total * float64(time.Second)), nil
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
