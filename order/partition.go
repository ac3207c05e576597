package order

import (
	"hash/crc32"
	"strconv"
)

// Partition names the streams of one partition of the orders: its orders, their outcomes, and the entries
// that can never be processed.
type Partition struct {
	Index                   int
	Orders, Results, Poison string
}

// Partitions lists the streams of n partitions of the streams named orders, results and poison. One
// partition on one Redis (tagged false) keeps the names as they are; otherwise partition i's are
// <name>:{i}, whose hash tag keeps the three in one Redis Cluster slot (a worker's scripts and transactions
// touch an orders stream with its poison or results stream) and spreads the partitions over the masters.
func Partitions(n int, tagged bool, orders, results, poison string) []Partition {
	n = max(n, 1)
	parts := make([]Partition, n)
	for i := range parts {
		parts[i] = Partition{Index: i, Orders: orders, Results: results, Poison: poison}
		if n > 1 || tagged {
			tag := ":{" + strconv.Itoa(i) + "}"
			parts[i].Orders += tag
			parts[i].Results += tag
			parts[i].Poison += tag
		}
	}
	return parts
}

// PartitionOf is the partition of sku's orders among n: crc32.ChecksumIEEE(sku) % n (IEEE CRC-32, which
// every language has, so any producer routes the same way). An order goes to its RouteSKU's partition.
func PartitionOf(sku string, n int) int {
	return int(crc32.ChecksumIEEE([]byte(sku)) % uint32(max(n, 1)))
}
