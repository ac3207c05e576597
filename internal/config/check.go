package config

import "fmt"

// Check returns nil when ok, and otherwise an error naming the setting, its value and what is wanted:
// "invalid LOCK_WAIT 0s: must be positive".
func Check(ok bool, name string, value any, want string) error {
	if ok {
		return nil
	}
	return fmt.Errorf("invalid %s %v: %s", name, value, want)
}

// CheckNotEmpty returns an error naming the setting when value is empty.
func CheckNotEmpty(name, value string) error {
	if value != "" {
		return nil
	}
	return fmt.Errorf("invalid %s: must not be empty", name)
}
