package inventory

// WithCrashAfterLine makes every basket go line by line and runs crash after each line reserved; an
// error stops the basket there, as a crash of the process would.
func WithCrashAfterLine(crash func(line int) error) Option {
	return func(s *Store) { s.crashAfterLine = crash }
}

// SlotMoveAttempts is how often a script call that meets a slot move is sent before it fails.
var SlotMoveAttempts = len(slotMoveBackoff) + 1
