package history

import (
	"fmt"
	"maps"
	"slices"
	"sort"
)

// Rule is a fencing rule a violation broke.
type Rule string

// The fencing rules, checked per SKU on the writes the store accepted with a token (Op.Write).
const (
	// StaleToken: a write was accepted with a token lower than one whose acquisition had returned before
	// the write was invoked: a stale holder wrote after a newer token was issued.
	StaleToken Rule = "stale token"
	// TokenOrder: a write returned before another was invoked, and had the higher token.
	TokenOrder Rule = "token order"
)

// Violation is one broken fencing rule, with the events that show it.
type Violation struct {
	Rule  Rule
	SKU   string
	Write *Op   // the write that should have been refused
	Newer *Hold // StaleToken: the acquisition of the newer token
	Prior *Op   // TokenOrder: the earlier write with the higher token
}

// String names the rule, the SKU and the tokens on one line, then one line per event involved.
func (v Violation) String() string {
	if v.Rule == StaleToken {
		return fmt.Sprintf("%s: %s: token %d accepted after token %d was issued\n      write:    %s\n      newer:    %s",
			v.SKU, v.Rule, v.Write.Token, v.Newer.Token, v.Write, v.Newer)
	}
	return fmt.Sprintf("%s: %s: token %d accepted after a write with token %d had returned\n      write:    %s\n"+
		"      earlier:  %s", v.SKU, v.Rule, v.Write.Token, v.Prior.Token, v.Write, v.Prior)
}

// checkFencing checks both rules on every SKU. The lock key of a SKU is the SKU.
func checkFencing(h History) []Violation {
	writes := make(map[string][]*Op)
	for i := range h.Ops {
		if op := &h.Ops[i]; op.Write() {
			writes[op.SKU] = append(writes[op.SKU], op)
		}
	}
	holds := make(map[string][]*Hold)
	for i := range h.Holds {
		holds[h.Holds[i].Key] = append(holds[h.Holds[i].Key], &h.Holds[i])
	}
	var vs []Violation
	for _, sku := range slices.Sorted(maps.Keys(writes)) {
		found := append(staleTokens(sku, writes[sku], holds[sku]), outOfOrder(sku, writes[sku])...)
		slices.SortStableFunc(found, func(a, b Violation) int { return a.Write.Invoked.Compare(b.Write.Invoked) })
		vs = append(vs, found...)
	}
	return vs
}

// staleTokens finds the writes below the highest token acquired before they were invoked. holds are in
// acquisition order.
func staleTokens(sku string, writes []*Op, holds []*Hold) []Violation {
	top := runningMax(len(holds), func(i int) int64 { return holds[i].Token })
	var vs []Violation
	for _, w := range writes {
		n := sort.Search(len(holds), func(i int) bool { return !holds[i].Acquired.Before(w.Invoked) })
		if n > 0 && holds[top[n-1]].Token > w.Token {
			vs = append(vs, Violation{Rule: StaleToken, SKU: sku, Write: w, Newer: holds[top[n-1]]})
		}
	}
	return vs
}

// outOfOrder finds the writes below the highest token of a write that returned before they were invoked.
func outOfOrder(sku string, writes []*Op) []Violation {
	byReturn := slices.Clone(writes)
	slices.SortStableFunc(byReturn, func(a, b *Op) int { return a.Returned.Compare(b.Returned) })
	top := runningMax(len(byReturn), func(i int) int64 { return byReturn[i].Token })
	var vs []Violation
	for _, w := range writes {
		n := sort.Search(len(byReturn), func(i int) bool { return !byReturn[i].Returned.Before(w.Invoked) })
		if n > 0 && byReturn[top[n-1]].Token > w.Token {
			vs = append(vs, Violation{Rule: TokenOrder, SKU: sku, Write: w, Prior: byReturn[top[n-1]]})
		}
	}
	return vs
}

// runningMax returns, for each i < n, the index of the first highest token among 0..i.
func runningMax(n int, token func(int) int64) []int {
	top := make([]int, n)
	for i := range n {
		top[i] = i
		if i > 0 && token(top[i-1]) >= token(i) {
			top[i] = top[i-1]
		}
	}
	return top
}

// forSKU returns the violations about sku.
func forSKU(vs []Violation, sku string) []Violation {
	var out []Violation
	for _, v := range vs {
		if v.SKU == sku {
			out = append(out, v)
		}
	}
	return out
}
