package rlock

import (
	"bytes"
	"net"
	"sync/atomic"
	"testing"
	"time"
)

// delayProxy forwards TCP to target; client->server bytes are delayed by delay, server->client bytes by
// replyDelay (when set). held counts the client->server chunks it has delayed (or is delaying). holdNext
// delays one command more than the others.
type delayProxy struct {
	ln         net.Listener
	delay      atomic.Int64
	replyDelay atomic.Int64
	held       atomic.Int64
	late       atomic.Pointer[lateRule]
}

// lateRule delays the next client chunk that contains pattern by d more.
type lateRule struct {
	pattern []byte
	d       time.Duration
	sent    chan struct{} // closed once that chunk was forwarded
}

func newDelayProxy(t *testing.T, target string) *delayProxy {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &delayProxy{ln: ln}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			s, err := net.Dial("tcp", target)
			if err != nil {
				c.Close()
				continue
			}
			go forward(c, s, func([]byte) (time.Duration, func()) { return time.Duration(p.replyDelay.Load()), nil }, nil)
			go forward(s, c, p.toServerDelay, &p.held)
		}
	}()
	return p
}

// holdNext makes the next command that contains pattern reach the server d later than the commands its
// client sends after it on other connections would (a command still on its way when its caller gave up).
// The channel returned is closed once that command was forwarded.
func (p *delayProxy) holdNext(pattern string, d time.Duration) <-chan struct{} {
	r := &lateRule{pattern: []byte(pattern), d: d, sent: make(chan struct{})}
	p.late.Store(r)
	return r.sent
}

// toServerDelay is the delay of one client chunk: delay, plus a held command's, whose rule is told once
// the chunk was forwarded.
func (p *delayProxy) toServerDelay(chunk []byte) (time.Duration, func()) {
	d := time.Duration(p.delay.Load())
	if r := p.late.Load(); r != nil && bytes.Contains(chunk, r.pattern) && p.late.CompareAndSwap(r, nil) {
		return d + r.d, func() { close(r.sent) }
	}
	return d, nil
}

// forward copies from src to dst, each chunk delayed by delay(chunk) (when positive, counted in held; the
// function it returns, if any, runs once the chunk was written), and closes dst when src ends.
func forward(dst, src net.Conn, delay func([]byte) (time.Duration, func()), held *atomic.Int64) {
	buf := make([]byte, 64<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			d, written := delay(buf[:n])
			if d > 0 {
				if held != nil {
					held.Add(1)
				}
				time.Sleep(d)
			}
			_, werr := dst.Write(buf[:n])
			if written != nil {
				written()
			}
			if werr != nil {
				return
			}
		}
		if err != nil {
			dst.Close()
			return
		}
	}
}
