package rlock

import (
	"net"
	"sync/atomic"
	"testing"
	"time"
)

// delayProxy forwards TCP to target; client->server bytes are delayed by delay, server->client bytes by
// replyDelay (when set). held counts the client->server chunks it has delayed (or is delaying).
type delayProxy struct {
	ln         net.Listener
	delay      atomic.Int64
	replyDelay atomic.Int64
	held       atomic.Int64
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
			go forward(c, s, &p.replyDelay, new(atomic.Int64))
			go forward(s, c, &p.delay, &p.held)
		}
	}()
	return p
}

// forward copies from src to dst, each chunk delayed by delay (when set, counted in held), and closes dst
// when src ends.
func forward(dst, src net.Conn, delay, held *atomic.Int64) {
	buf := make([]byte, 64<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			if d := delay.Load(); d > 0 {
				held.Add(1)
				time.Sleep(time.Duration(d))
			}
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			dst.Close()
			return
		}
	}
}
