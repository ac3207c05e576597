package stockctl

import (
	"errors"
	"strings"
)

// Exit codes of Run.
const (
	ExitOK       = 0
	ExitFailure  = 1 // Redis unreachable, a script or command failed, the timeout passed
	ExitUsage    = 2 // unknown command, bad argument or setting
	ExitNotFound = 3 // unknown SKU, no such poison id, stream or group missing
	// ExitNothingDone: a command that changes things changed nothing (a replay whose every entry was
	// skipped, a prune that kept every consumer; not a dry run); its report says why.
	ExitNothingDone = 4
)

// codeError is an error with the exit code it ends the command with.
type codeError struct {
	code int
	err  error
}

func (e *codeError) Error() string { return e.err.Error() }
func (e *codeError) Unwrap() error { return e.err }

func usageError(msg string) error { return &codeError{code: ExitUsage, err: errors.New(msg)} }

// asUsage marks err (an invalid argument) as a usage error; nil stays nil.
func asUsage(err error) error {
	if err == nil {
		return nil
	}
	return &codeError{code: ExitUsage, err: err}
}

func nothingDone(msg string) error { return &codeError{code: ExitNothingDone, err: errors.New(msg)} }

func notFound(msg string) error { return &codeError{code: ExitNotFound, err: errors.New(msg)} }

// missing is the not-found error that lists names under what, nil when names is empty.
func missing(what string, names []string) error {
	if len(names) == 0 {
		return nil
	}
	return notFound(what + ": " + strings.Join(names, ", "))
}

func exitCode(err error) int {
	var ce *codeError
	switch {
	case err == nil:
		return ExitOK
	case errors.As(err, &ce):
		return ce.code
	}
	return ExitFailure
}

// firstErr returns the first of errs that is not nil.
func firstErr(errs ...error) error {
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}
