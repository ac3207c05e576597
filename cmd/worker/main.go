// Command worker consumes order events from a Redis Stream and reserves stock for them, one SKU lock at a
// time. Settings come from flags and environment variables; see README.md or run worker -h.
package main

import (
	"os"

	"github.com/stockflow/stockflow/internal/worker"
)

func main() {
	os.Exit(worker.Main("worker", os.Args[1:], nil))
}
