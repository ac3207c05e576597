package harness

import (
	"context"
	"fmt"
	"os"
	"runtime"
	"strings"

	"github.com/redis/go-redis/v9"
)

// Machine is what the numbers were measured on.
type Machine struct {
	CPU   string `json:"cpu"`
	Cores int    `json:"cores"`
	// Load is /proc/loadavg at the start and the end of the run: anything else running skews the numbers.
	LoadStart string `json:"load_start"`
	LoadEnd   string `json:"load_end"`
	Kernel    string `json:"kernel"`
	Go        string `json:"go"`
	Redis     string `json:"redis"`
}

func (m Machine) String() string {
	return fmt.Sprintf("%d x %s, Linux %s, %s, redis %s; load average %s at the start, %s at the end", m.Cores, m.CPU,
		m.Kernel, m.Go, m.Redis, m.LoadStart, m.LoadEnd)
}

// machine describes this machine and the Redis rdb talks to; the load at the end is filled in later.
func machine(ctx context.Context, rdb *redis.Client) Machine {
	return Machine{Cores: runtime.NumCPU(), Go: runtime.Version(), CPU: cpuModel(), LoadStart: loadAvg(),
		Kernel: readTrimmed("/proc/sys/kernel/osrelease"), Redis: redisVersion(ctx, rdb)}
}

// loadAvg is the 1, 5 and 15 minute load averages.
func loadAvg() string {
	data, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "?"
	}
	f := strings.Fields(string(data))
	return strings.Join(f[:min(3, len(f))], " ")
}

func cpuModel() string {
	data, _ := os.ReadFile("/proc/cpuinfo")
	for _, line := range strings.Split(string(data), "\n") {
		if k, v, ok := strings.Cut(line, ":"); ok && strings.TrimSpace(k) == "model name" {
			return strings.TrimSpace(v)
		}
	}
	return ""
}

func readTrimmed(path string) string {
	data, _ := os.ReadFile(path)
	return strings.TrimSpace(string(data))
}

func redisVersion(ctx context.Context, rdb *redis.Client) string {
	info, _ := rdb.Info(ctx, "server").Result()
	return infoFields(info)["redis_version"]
}

// infoFields are the field: value lines of an INFO reply.
func infoFields(info string) map[string]string {
	fields := map[string]string{}
	for _, line := range strings.Split(info, "\r\n") {
		if k, v, ok := strings.Cut(line, ":"); ok {
			fields[k] = v
		}
	}
	return fields
}
