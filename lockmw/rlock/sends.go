package rlock

import (
	"strconv"
	"sync/atomic"
)

// sends is a script argument that tells the script whether its request went out before: "0" the first
// time go-redis writes it to a connection, "1" every time after. go-redis writes a command's arguments
// anew each time it sends it (encoding.BinaryMarshaler), and sends a command again after a lost connection
// (Options.MaxRetries), with the same arguments; this package's own retries of a release pass the same
// sends too. So a script can tell its request's first send, which nothing ran before, from a later one,
// which may find the request done already, and keep its latch for the later ones (release.lua).
//
// A write counts even if the command never reached Redis (a write that failed): a later send is then taken
// for a repeat, which is the safe side. A reply that says the script did not run (NOSCRIPT) takes its
// sends back (rewind). A client that marshals arguments without sending them (go-redis's AutoPipeliner
// sizes its batches so) makes a first send look like a later one: that release would answer a hold gone
// meanwhile as freed rather than ErrNotHeld; nothing else changes.
type sends struct{ n atomic.Int32 }

var sentFirst, sentAgain = []byte("0"), []byte("1")

// MarshalBinary is called by go-redis as it writes the argument.
func (s *sends) MarshalBinary() ([]byte, error) {
	if s.n.Add(1) == 1 {
		return sentFirst, nil
	}
	return sentAgain, nil
}

// String shows the sends so far, for logs and hooks that print commands (fmt does not marshal).
func (s *sends) String() string { return strconv.Itoa(int(s.n.Load())) }

// count returns how often s was written; 0 for nil.
func (s *sends) count() int32 {
	if s == nil {
		return 0
	}
	return s.n.Load()
}

// rewind takes back the writes after the first n: their command did not run.
func (s *sends) rewind(n int32) {
	if s != nil {
		s.n.Store(n)
	}
}

// sendsIn returns the sends among a script's args, or nil.
func sendsIn(args []any) *sends {
	for _, a := range args {
		if s, ok := a.(*sends); ok {
			return s
		}
	}
	return nil
}
