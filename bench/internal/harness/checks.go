package harness

import (
	"cmp"
	"fmt"
	"slices"
)

// Check is one correctness check, over every round of a contender.
type Check struct {
	Name   string `json:"name"`
	Runs   int    `json:"runs"`
	Failed int    `json:"failed"`
	Detail string `json:"detail,omitempty"` // the first failure
}

// checks accumulates correctness checks by name.
type checks struct {
	list []*Check
}

// expect records one run of check name: ok, or failed with detail.
func (cs *checks) expect(name string, ok bool, detail string, args ...any) {
	c := cs.get(name)
	c.Runs++
	if !ok {
		c.Failed++
		c.Detail = cmp.Or(c.Detail, fmt.Sprintf(detail, args...))
	}
}

// get is the check called name, added when new.
func (cs *checks) get(name string) *Check {
	if i := slices.IndexFunc(cs.list, func(c *Check) bool { return c.Name == name }); i >= 0 {
		return cs.list[i]
	}
	c := &Check{Name: name}
	cs.list = append(cs.list, c)
	return c
}

// problems is a line for every check that failed, nil when none did.
func (cs *checks) problems() []string {
	var out []string
	for _, c := range cs.list {
		if c.Failed > 0 {
			out = append(out, fmt.Sprintf("%s: failed %d of %d runs: %s", c.Name, c.Failed, c.Runs, c.Detail))
		}
	}
	return out
}
