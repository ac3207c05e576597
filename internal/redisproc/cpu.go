package redisproc

import (
	"context"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// ServerCPU is the CPU time (user and system, INFO cpu) the server behind rdb has used so far.
func ServerCPU(ctx context.Context, rdb redis.Cmdable) (time.Duration, error) {
	info, err := rdb.Info(ctx, "cpu").Result()
	if err != nil {
		return 0, err
	}
	var seconds float64
	for _, line := range strings.Split(info, "\r\n") {
		if name, value, _ := strings.Cut(line, ":"); name == "used_cpu_user" || name == "used_cpu_sys" {
			v, err := strconv.ParseFloat(value, 64)
			if err != nil {
				return 0, err
			}
			seconds += v
		}
	}
	return time.Duration(seconds * float64(time.Second)), nil
}
