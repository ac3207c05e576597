package redisstream

import (
	"math/rand/v2"
	"strconv"
	"sync/atomic"
)

// requests numbers a subscriber's fetch.lua calls (their request ids) and keeps, by mode and partition, the id
// of a call that failed: the next call of that mode and partition is made with it again, so that the entries
// Redis handed over to the call whose reply never came (go-redis gave up resending it) come back at once,
// rather than after the claim idle time with one more delivery counted. Only the read loop touches it.
type requests struct {
	ids   *requestIDs
	again map[requestOf]string
}

type requestOf struct {
	mode      string
	partition int
}

// requestIDs draws request ids, safe for concurrent use: a random prefix (a process of the same consumer
// name later starts anew) and a counter.
type requestIDs struct {
	prefix string
	seq    atomic.Uint64
}

func newRequestIDs() *requestIDs {
	return &requestIDs{prefix: strconv.FormatUint(rand.Uint64(), 36) + "-"}
}

func (r *requestIDs) next() string { return r.prefix + strconv.FormatUint(r.seq.Add(1), 36) }

func newRequests() requests {
	return requests{ids: newRequestIDs(), again: map[requestOf]string{}}
}

// next is the request id of call c: that of the call of its mode and partition that failed, or a new one.
func (r *requests) next(c fetchCall) string {
	if id, ok := r.again[requestOf{c.mode, c.Index}]; ok {
		return id
	}
	return r.ids.next()
}

// done notes how call c went: failed, the next call of its mode and partition is made with its id again.
func (r *requests) done(c fetchCall, err error) {
	if err != nil {
		r.again[requestOf{c.mode, c.Index}] = c.req
	} else {
		delete(r.again, requestOf{c.mode, c.Index})
	}
}

// retried reports whether call c is made again, with the id of a call of its mode and partition that failed.
func (r *requests) retried(c fetchCall) bool {
	id, ok := r.again[requestOf{c.mode, c.Index}]
	return ok && id == c.req
}
