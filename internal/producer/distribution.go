package producer

import "math/rand/v2"

// distributions are the ways orders spread over n SKUs, by the name --distribution takes: each returns a
// function choosing the SKU index of each order from r.
var distributions = map[string]func(n int, r *rand.Rand) func() int{
	"uniform": uniform,
	"zipf":    zipf,
	"hot":     hot,
}

// picker returns a function choosing the SKU index of each order, with its own random source.
func (c *Config) picker(n int, r *rand.Rand) func() int {
	return distributions[c.Distribution](n, r)
}

func uniform(n int, r *rand.Rand) func() int {
	return func() int { return r.IntN(n) }
}

// zipf gives a few SKUs most orders, as best sellers get (s = 1.1).
func zipf(n int, r *rand.Rand) func() int {
	z := rand.NewZipf(r, 1.1, 1, uint64(n-1))
	return func() int { return int(z.Uint64()) }
}

// hot puts half of the orders on the first SKU and spreads the other half over all of them.
func hot(n int, r *rand.Rand) func() int {
	return func() int {
		if r.IntN(2) == 0 {
			return 0
		}
		return r.IntN(n)
	}
}
