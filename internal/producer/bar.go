package producer

import (
	"fmt"
	"io"
	"strings"
	"sync"
	"time"
)

// bar draws a progress bar on a terminal, at most ten times a second. A nil writer draws nothing.
type bar struct {
	w     io.Writer
	label string
	total int

	mu   sync.Mutex
	n    int
	last time.Time
}

func newBar(w io.Writer, label string, total int) *bar { return &bar{w: w, label: label, total: total} }

func (b *bar) add(n int) {
	if b.w == nil {
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	b.n += n
	if time.Since(b.last) >= 100*time.Millisecond || b.n == b.total {
		b.last = time.Now()
		b.draw()
	}
}

func (b *bar) draw() {
	const width = 30
	filled := width * b.n / max(b.total, 1)
	fmt.Fprintf(b.w, "\r%-9s [%s%s] %d/%d", b.label, strings.Repeat("=", filled), strings.Repeat(" ", width-filled), b.n, b.total)
}

func (b *bar) done() {
	if b.w == nil {
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	b.draw()
	fmt.Fprintln(b.w)
}
