package redisproc

import (
	"slices"
	"testing"
)

// CLUSTER NODES as a node prints it mid-failover: a failed master without slots, a promoted replica with
// a range, a single slot and a migrating one, and an address with a hostname.
func TestParseClusterNodes(t *testing.T) {
	const text = "a1 127.0.0.1:7001@17001 master,fail - 0 0 1 disconnected\n" +
		"b2 127.0.0.1:7002@17002,host-b myself,master - 0 0 3 connected 0-5460 5462 [5463->-c3]\n" +
		"c3 127.0.0.1:7003@17003 slave,fail? b2 0 0 3 connected\n"
	nodes := parseClusterNodes(text)
	if len(nodes) != 3 {
		t.Fatalf("%d nodes, want 3", len(nodes))
	}
	a, b, c := nodes[0], nodes[1], nodes[2]
	if a.addr != "127.0.0.1:7001" || !a.failing() || !a.has("master") || a.slotCount() != 0 {
		t.Errorf("failed master: %+v", a)
	}
	if b.addr != "127.0.0.1:7002" || b.failing() || !b.has("myself") || !slices.Equal(b.slots, [][2]int{{0, 5460}, {5462, 5462}}) {
		t.Errorf("promoted replica: %+v", b)
	}
	if b.slotCount() != 5462 || !b.serves(5462) || b.serves(5461) || b.serves(5463) {
		t.Errorf("promoted replica serves %d slots (5461: %v, 5462: %v, 5463: %v)", b.slotCount(), b.serves(5461), b.serves(5462), b.serves(5463))
	}
	if c.masterID != "b2" || !c.has("slave") || !c.failing() {
		t.Errorf("replica: %+v", c)
	}
}
