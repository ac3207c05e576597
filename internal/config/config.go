// Package config reads the settings of the stockflow binaries from flags and environment variables: every
// setting has an environment variable in capitals (REDIS_URL) and a flag (--redis-url) that overrides it.
// A value that does not parse fails at start with a message naming the setting.
package config

import (
	"flag"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"
)

// Set is a flag set whose flags also read an environment variable.
type Set struct {
	*flag.FlagSet
	env    func(string) (string, bool)
	errs   []error
	params []Param
}

// Param describes one setting, for help and documentation.
type Param struct {
	Env     string // "" for a flag-only setting
	Flag    string
	Default string
	Usage   string
}

// NewSet returns a set named like the binary, reading the environment through env (os.LookupEnv when nil).
func NewSet(name string, env func(string) (string, bool)) *Set {
	if env == nil {
		env = os.LookupEnv
	}
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	return &Set{FlagSet: fs, env: env}
}

// FlagName is the flag of an environment variable: REDIS_URL -> redis-url.
func FlagName(env string) string { return strings.ReplaceAll(strings.ToLower(env), "_", "-") }

// Var defines a setting. A name in capitals (REDIS_URL) is an environment variable, with a flag derived
// from it (--redis-url) that overrides it; a lower-case name (orders) is a flag only.
func (s *Set) Var(value flag.Value, name, usage string) {
	if strings.ToUpper(name) != name {
		s.params = append(s.params, Param{Flag: "--" + name, Default: value.String(), Usage: usage})
		s.FlagSet.Var(value, name, usage)
		return
	}
	env, flagName := name, FlagName(name)
	s.params = append(s.params, Param{Env: env, Flag: "--" + flagName, Default: value.String(), Usage: usage})
	if v, ok := s.env(env); ok {
		if err := value.Set(v); err != nil {
			s.errs = append(s.errs, fmt.Errorf("invalid %s %s: %v", env, shown(value, v), err))
		}
	}
	s.FlagSet.Var(value, flagName, usage+" (env "+env+")")
}

// String defines a string setting.
func (s *Set) String(p *string, name, def, usage string) {
	*p = def
	s.Var((*stringValue)(p), name, usage)
}

// Int defines an integer setting.
func (s *Set) Int(p *int, name string, def int, usage string) {
	*p = def
	s.Var((*intValue)(p), name, usage)
}

// Duration defines a duration setting ("30s", "1m").
func (s *Set) Duration(p *time.Duration, name string, def time.Duration, usage string) {
	*p = def
	s.Var((*durationValue)(p), name, usage)
}

// Bool defines a boolean setting; the flag needs no value (--wait).
func (s *Set) Bool(p *bool, name string, usage string) {
	s.Var((*boolValue)(p), name, usage)
}

// Float defines a number setting.
func (s *Set) Float(p *float64, name string, def float64, usage string) {
	*p = def
	s.Var((*floatValue)(p), name, usage)
}

// Parse parses args after the environment; it reports the first bad value, naming its variable or flag.
func (s *Set) Parse(args []string) error {
	if len(s.errs) > 0 {
		return s.errs[0]
	}
	return s.FlagSet.Parse(args)
}

// Params lists the settings defined so far.
func (s *Set) Params() []Param { return s.params }

type stringValue string

func (v *stringValue) Set(s string) error { *v = stringValue(s); return nil }
func (v *stringValue) String() string     { return string(*v) }

type intValue int

func (v *intValue) Set(s string) error {
	n, err := strconv.Atoi(s)
	*v = intValue(n)
	return err
}
func (v *intValue) String() string { return strconv.Itoa(int(*v)) }

type boolValue bool

func (v *boolValue) Set(s string) error {
	b, err := strconv.ParseBool(s)
	*v = boolValue(b)
	return err
}
func (v *boolValue) String() string   { return strconv.FormatBool(bool(*v)) }
func (v *boolValue) IsBoolFlag() bool { return true }

type floatValue float64

func (v *floatValue) Set(s string) error {
	f, err := strconv.ParseFloat(s, 64)
	*v = floatValue(f)
	return err
}
func (v *floatValue) String() string { return strconv.FormatFloat(float64(*v), 'g', -1, 64) }

type durationValue time.Duration

func (v *durationValue) Set(s string) error {
	d, err := time.ParseDuration(s)
	*v = durationValue(d)
	return err
}
func (v *durationValue) String() string { return time.Duration(*v).String() }
