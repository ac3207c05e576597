package rlock

import (
	"errors"
	"strings"
)

// prefix begins the message of every error of the package; a joined error says it once.
const prefix = "rlock: "

// join is errors.Join on one line: "rlock: lock not obtained: context deadline exceeded", not one line per
// error. The first error leads; every other one is said once: one that another of errs already matches
// (ctx.Err() next to a cause that wraps it, or the same error twice) is left out, and still matches
// through the one kept. Joined errors are flattened, so joining again dedupes across them. Nil errors are
// dropped; nil when none is left.
func join(errs ...error) error {
	flat := flatten(errs)
	var kept []error
	for i, err := range flat {
		if i == 0 || !said(flat, i) {
			kept = append(kept, err)
		}
	}
	switch len(kept) {
	case 0:
		return nil
	case 1:
		return kept[0]
	}
	return &joinError{errs: kept, sep: ": "}
}

// flatten drops the nil errors of errs and replaces the joined ones by theirs.
func flatten(errs []error) []error {
	var flat []error
	for _, err := range errs {
		if j, ok := err.(*joinError); ok && j.sep == ": " {
			flat = append(flat, j.errs...)
		} else if err != nil {
			flat = append(flat, err)
		}
	}
	return flat
}

// said reports whether another error of errs already says errs[i]: it matches errs[i] (wraps it), and is
// not just an equal one that comes later.
func said(errs []error, i int) bool {
	for j, other := range errs {
		if j != i && errors.Is(other, errs[i]) && (j < i || !errors.Is(errs[i], other)) {
			return true
		}
	}
	return false
}

// joinError is the error of join, and of joinNodes with "; " between the failures of several masters.
type joinError struct {
	errs []error
	sep  string
}

func (e *joinError) Error() string {
	var b strings.Builder
	for i, err := range e.errs {
		msg := err.Error()
		if i > 0 {
			b.WriteString(e.sep)
			msg = strings.TrimPrefix(msg, prefix)
		}
		b.WriteString(msg)
	}
	return b.String()
}

func (e *joinError) Unwrap() []error { return e.errs }

// joinNodes joins the failures of several masters (*NodeError) into one error, which join keeps whole:
// "node a: ...; node b: ...".
func joinNodes(failures []error) error {
	if len(failures) < 2 {
		return join(failures...)
	}
	return &joinError{errs: failures, sep: "; "}
}
