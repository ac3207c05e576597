package redistest

import (
	"bytes"
	"net"
	"sync"
	"testing"
)

// ReplyDropper is a TCP proxy in front of a Redis server that reproduces the most common ambiguous
// failure of a Redis client: a command reaches Redis and runs, and its reply is lost (a reset connection,
// a middlebox timeout, a partition that heals after the write). Armed with DropReplyTo, it forwards the
// next command that contains a pattern, lets Redis answer, drops the answer and closes the client's
// connection. go-redis then resends the command on a new connection (MaxRetries, 3 by default), which is
// exactly what a mutating call must survive.
//
// The pattern is matched within one read of the client's connection: a command is written in one write
// by go-redis, so a key name, a script SHA or an argument of it is found.
type ReplyDropper struct {
	// Addr is the address clients dial instead of the server's.
	Addr string

	target string
	ln     net.Listener
	mu     sync.Mutex
	armed  []dropRule
	drops  int
	conns  map[net.Conn]struct{}
	wg     sync.WaitGroup
}

type dropRule struct {
	pattern []byte
	left    int
	then    func() // run once the reply is discarded, before the connection closes; nil: nothing
}

// NewReplyDropper starts a proxy to the Redis server at target, stopped by t.Cleanup.
func NewReplyDropper(t testing.TB, target string) *ReplyDropper {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("redistest: reply dropper: %v", err)
	}
	p := &ReplyDropper{Addr: ln.Addr().String(), target: target, ln: ln, conns: map[net.Conn]struct{}{}}
	p.wg.Go(p.accept)
	t.Cleanup(p.close)
	return p
}

// DropReplyTo drops the replies of the next times commands whose bytes contain pattern.
func (p *ReplyDropper) DropReplyTo(pattern string, times int) { p.DropReplyThen(pattern, times, nil) }

// DropReplyThen is DropReplyTo, running then after each reply dropped, before the client sees its
// connection closed (and sends the command again): a failover's new master, say, with SCRIPT FLUSH. then
// runs in the proxy's goroutine: keep it short, talk to the server directly (not through the proxy), and do
// not call t.Fatal in it.
func (p *ReplyDropper) DropReplyThen(pattern string, times int, then func()) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.armed = append(p.armed, dropRule{pattern: []byte(pattern), left: times, then: then})
}

// Dropped is how many replies were dropped so far.
func (p *ReplyDropper) Dropped() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.drops
}

func (p *ReplyDropper) accept() {
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		s, err := net.Dial("tcp", p.target)
		if err != nil {
			c.Close()
			continue
		}
		p.mu.Lock()
		p.conns[c], p.conns[s] = struct{}{}, struct{}{}
		p.mu.Unlock()
		drop := make(chan func(), 1)
		p.wg.Go(func() { p.toServer(c, s, drop) })
		p.wg.Go(func() { p.toClient(c, s, drop) })
	}
}

// toServer forwards the client's commands; one that matches an armed rule is forwarded after drop is
// signalled, so its reply is the one toClient throws away.
func (p *ReplyDropper) toServer(c, s net.Conn, drop chan<- func()) {
	buf := make([]byte, 64<<10)
	for {
		n, err := c.Read(buf)
		if n > 0 {
			if then, ok := p.matches(buf[:n]); ok {
				drop <- then
			}
			if _, werr := s.Write(buf[:n]); werr != nil {
				err = werr
			}
		}
		if err != nil {
			p.closePair(c, s)
			return
		}
	}
}

// toClient forwards the server's replies until it is told to drop one: then it waits for the reply (Redis
// ran the command), discards it and closes both connections.
func (p *ReplyDropper) toClient(c, s net.Conn, drop <-chan func()) {
	buf := make([]byte, 64<<10)
	for {
		n, err := s.Read(buf)
		select {
		case then := <-drop:
			if then != nil {
				then()
			}
			p.closePair(c, s)
			return
		default:
		}
		if n > 0 {
			if _, werr := c.Write(buf[:n]); werr != nil {
				err = werr
			}
		}
		if err != nil {
			p.closePair(c, s)
			return
		}
	}
}

func (p *ReplyDropper) matches(b []byte) (then func(), ok bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for i, r := range p.armed {
		if r.left > 0 && bytes.Contains(b, r.pattern) {
			p.armed[i].left--
			p.drops++
			return r.then, true
		}
	}
	return nil, false
}

func (p *ReplyDropper) closePair(c, s net.Conn) {
	c.Close()
	s.Close()
	p.mu.Lock()
	delete(p.conns, c)
	delete(p.conns, s)
	p.mu.Unlock()
}

func (p *ReplyDropper) close() {
	p.ln.Close()
	p.mu.Lock()
	for c := range p.conns {
		c.Close()
	}
	p.mu.Unlock()
	p.wg.Wait()
}
