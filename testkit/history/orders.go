package history

import (
	"cmp"
	"hash/maphash"
	"strings"

	"github.com/stockflow/stockflow/order"
)

// decision is what the store recorded for an order: what a redelivery gets back.
type decision struct {
	status   order.Status
	reason   order.Reason
	quantity int64
	after    int64 // available stock right after the deciding operation
}

// orders is an immutable map from order id to decision. porcupine keeps every state it visited to
// backtrack, so a step may not change a state; copying a map of thousands of orders on every step
// would make a 5,000-operation check quadratic. This is a treap ordered by the ids' hashes with
// priorities from a second hash, copied along one path per change: its shape depends only on the ids
// it holds, so two equal maps built from a common state share every subtree off the paths where
// they were changed, and comparing them (which porcupine's cache does constantly) stops at shared
// subtrees.
type orders struct {
	root *orderNode
	n    int
	sum  uint64 // sum of the entries' hashes: equal maps have equal sums, whatever the insertion order
}

type orderNode struct {
	hash, priority uint64
	id             string
	d              decision
	left, right    *orderNode
}

// seed and prioritySeed hash within this process only: nothing hashed is stored.
var seed, prioritySeed = maphash.MakeSeed(), maphash.MakeSeed()

type entry struct {
	id string
	d  decision
}

func (t orders) get(id string) (decision, bool) {
	h := maphash.String(seed, id)
	for n := t.root; n != nil; {
		switch c := n.compare(h, id); {
		case c == 0:
			return n.d, true
		case c < 0:
			n = n.left
		default:
			n = n.right
		}
	}
	return decision{}, false
}

// compare orders (h, id) against n's entry: by hash, then by id for the rare equal hashes.
func (n *orderNode) compare(h uint64, id string) int {
	return cmp.Or(cmp.Compare(h, n.hash), strings.Compare(id, n.id))
}

// put returns the map with id set to d; t is unchanged.
func (t orders) put(id string, d decision) orders {
	prev, found := t.get(id)
	if found {
		t.sum -= maphash.Comparable(seed, entry{id, prev})
	} else {
		t.n++
	}
	t.sum += maphash.Comparable(seed, entry{id, d})
	add := &orderNode{hash: maphash.String(seed, id), priority: maphash.String(prioritySeed, id), id: id, d: d}
	t.root = t.root.with(add)
	return t
}

// with returns a copy of the subtree n with add's entry set, sharing every node off the path.
func (n *orderNode) with(add *orderNode) *orderNode {
	if n == nil {
		return add
	}
	c := *n
	switch order := n.compare(add.hash, add.id); {
	case order == 0:
		c.d = add.d
	case order < 0:
		c.left = n.left.with(add)
		if c.left.priority > c.priority { // rotate right: the left child moves up
			l := *c.left
			c.left, l.right = l.right, &c
			return &l
		}
	default:
		c.right = n.right.with(add)
		if c.right.priority > c.priority { // rotate left
			r := *c.right
			c.right, r.left = r.left, &c
			return &r
		}
	}
	return &c
}

// equal reports whether t and u hold the same entries. Trees of the same ids have the same shape; should
// two priorities ever tie, equal maps may differ in shape and compare unequal, which costs porcupine a
// cache miss, never a wrong answer.
func (t orders) equal(u orders) bool {
	return t.n == u.n && t.sum == u.sum && sameTree(t.root, u.root)
}

func sameTree(a, b *orderNode) bool {
	if a == b {
		return true
	}
	if a == nil || b == nil || a.hash != b.hash || a.id != b.id || a.d != b.d {
		return false
	}
	return sameTree(a.left, b.left) && sameTree(a.right, b.right)
}
