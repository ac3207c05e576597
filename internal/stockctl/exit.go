package stockctl

import (
	"errors"
	"strings"

	"github.com/stockflow/stockflow/internal/config"
)

// Exit codes of Run: those of every stockflow binary (package config), and two of stockctl's own.
const (
	ExitOK       = config.ExitOK
	ExitFailure  = config.ExitFailure // Redis unreachable, a script or command failed, the timeout passed
	ExitUsage    = config.ExitUsage   // unknown command, bad argument or setting
	ExitNotFound = 3                  // unknown SKU, no such poison id, stream or group missing
	// ExitNothingDone: a command that changes things changed nothing (a replay whose every entry was
	// skipped, a prune that kept every consumer; not a dry run); its report says why.
	ExitNothingDone = 4
)

// codeError is an error with the exit code it ends the command with, which config.ExitCode finds in an
// error's chain (ExitCode).
type codeError struct {
	code int
	err  error
}

func (e *codeError) Error() string { return e.err.Error() }
func (e *codeError) Unwrap() error { return e.err }
func (e *codeError) ExitCode() int { return e.code }

// usageError is a refused argument (config.Usage: exit 2).
func usageError(msg string) error { return config.Usage(errors.New(msg)) }

func nothingDone(msg string) error { return &codeError{code: ExitNothingDone, err: errors.New(msg)} }

func notFound(msg string) error { return &codeError{code: ExitNotFound, err: errors.New(msg)} }

// missing is the not-found error that lists names under what, nil when names is empty.
func missing(what string, names []string) error {
	if len(names) == 0 {
		return nil
	}
	return notFound(what + ": " + strings.Join(names, ", "))
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
