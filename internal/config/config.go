// Package config reads the settings of the stockflow binaries from flags and environment variables: every
// setting has an environment variable in capitals (REDIS_URL) and a flag (--redis-url) that overrides it.
// A value that does not parse fails at start with a message naming the setting.
package config

import (
	"bytes"
	"cmp"
	"errors"
	"flag"
	"fmt"
	"io"
	"maps"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Set is a flag set whose flags also read an environment variable. Besides its settings it has --version,
// which prints the build's version (Version) and makes Parse return ErrVersion.
type Set struct {
	*flag.FlagSet
	env          func(string) (string, bool)
	errs         []error
	params       []Param
	placeholders map[string]string // by flag name: what -h shows for the value
	showVersion  bool
	versionOut   io.Writer
	required     map[string]string // by environment variable: why it has no default (Require)
	from         map[string]string // by environment variable: where its value came from (Source)
	environ      func() []string   // the environment, for CheckEnv; nil: not checked
	noArgs       bool              // Parse refuses arguments (NoArguments)
}

// Param describes one setting, for help and documentation.
type Param struct {
	Env     string // "" for a flag-only setting
	Flag    string
	Default string
	Usage   string
	// Placeholder names the value in help: "url" in "--redis-url url"; "" for a boolean flag, which takes
	// none. See Var for where it comes from.
	Placeholder string
	// File is the variable naming a file that holds the value (Env + FileSuffix), for a secret; else "".
	File string
}

// NewSet returns a set named like the binary, reading the environment through env (os.LookupEnv when nil,
// and then Parse also refuses unknown variables that look like settings: CheckEnv).
func NewSet(name string, env func(string) (string, bool)) *Set {
	s := &Set{FlagSet: flag.NewFlagSet(name, flag.ContinueOnError), env: env,
		placeholders: map[string]string{}, versionOut: os.Stdout, from: map[string]string{}}
	if env == nil {
		s.env, s.environ = os.LookupEnv, os.Environ
	}
	s.FlagSet.BoolVar(&s.showVersion, "version", false, "print the version and commit of this build, and exit")
	s.FlagSet.Usage = s.usage
	return s
}

// FlagName is the flag of an environment variable: REDIS_URL -> redis-url.
func FlagName(env string) string { return strings.ReplaceAll(strings.ToLower(env), "_", "-") }

// Var defines a setting. A name in capitals (REDIS_URL) is an environment variable, with a flag derived
// from it (--redis-url) that overrides it; a lower-case name (orders) is a flag only.
//
// Help names the value with a placeholder, as the flag package does: the first back-quoted word of usage
// ("comma-separated `skus` to use") is the placeholder and loses its quotes; without one, it comes from the
// kind of value and the name (see placeholderOf): "url", "duration", "n", "file", "addr", ...
func (s *Set) Var(value flag.Value, name, usage string) {
	placeholder, usage := placeholderOf(value, name, usage)
	if strings.ToUpper(name) != name {
		s.placeholders[name] = placeholder
		s.params = append(s.params, Param{Flag: "--" + name, Default: value.String(), Usage: usage, Placeholder: placeholder})
		s.FlagSet.Var(value, name, usage)
		return
	}
	env, flagName := name, FlagName(name)
	s.placeholders[flagName] = placeholder
	p := Param{Env: env, Flag: "--" + flagName, Default: value.String(), Usage: usage, Placeholder: placeholder}
	source := "env " + env
	if _, secret := value.(redactor); secret {
		p.File = env + FileSuffix
		source += ", or a file named by " + p.File
	}
	s.params = append(s.params, p)
	if v, from, ok := s.lookup(value, env); ok {
		s.from[env] = from
		if err := value.Set(v); err != nil {
			s.errs = append(s.errs, fmt.Errorf("invalid %s %s: %v", from, shown(value, v), err))
		}
	}
	s.FlagSet.Var(value, flagName, usage+" ("+source+")")
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

// Parse parses args after the environment; it reports the first bad value, naming its variable or flag,
// then every unknown variable that looks like a setting (CheckEnv) and, with NoArguments, an argument.
// Its errors are usage errors (ErrUsage), a flag's the name of the flag meant when one is close. After -h
// it returns flag.ErrHelp (the usage is printed), after --version ErrVersion (the version is printed),
// whatever the environment holds. Nothing is printed after an error: the binary logs it.
func (s *Set) Parse(args []string) error {
	if err := s.parseFlags(args); err != nil {
		return err
	}
	if s.showVersion {
		fmt.Fprintln(s.versionOut, Version(s.Name()))
		return ErrVersion
	}
	if len(s.errs) > 0 {
		return Usage(s.errs[0])
	}
	return Usage(cmp.Or(s.checkRequired(), s.checkArgs(), s.CheckEnv()))
}

// parseFlags parses the flags, printing the usage after -h only: the flag package prints it after every
// error too, as text, which would break a JSON log.
func (s *Set) parseFlags(args []string) error {
	out := s.Output()
	var buf bytes.Buffer
	s.SetOutput(&buf)
	err := s.FlagSet.Parse(args)
	s.SetOutput(out)
	if errors.Is(err, flag.ErrHelp) {
		_, _ = buf.WriteTo(out)
		return err
	}
	if err != nil {
		return Usage(s.suggestFlag(err))
	}
	return nil
}

// NoArguments makes Parse refuse arguments other than flags (a binary without commands): "worker version"
// is a mistake, not a request that can be ignored.
func (s *Set) NoArguments() { s.noArgs = true }

// Source says where the value of setting env came from, after Parse: "--redis-url", "REDIS_URL",
// "REDIS_URL_FILE (/run/secrets/url)", or "default" when neither the command line nor the environment gave it.
func (s *Set) Source(env string) string {
	given := false
	s.Visit(func(f *flag.Flag) { given = given || f.Name == FlagName(env) })
	switch {
	case given:
		return "--" + FlagName(env)
	case s.from[env] != "":
		return s.from[env]
	}
	return "default"
}

// Require makes the setting env (an environment variable, defined before) one that must be given, by the
// environment or its flag: Parse fails without it, saying why (a setting whose default would be a guess
// at where to write, as the producer's REDIS_URL), and help shows "(required)" instead of its default.
func (s *Set) Require(env, why string) {
	if s.required == nil {
		s.required = map[string]string{}
	}
	s.required[env] = why
}

// checkRequired reports a required setting that neither the environment nor the command line gives.
func (s *Set) checkRequired() error {
	visited := map[string]bool{}
	s.Visit(func(f *flag.Flag) { visited[f.Name] = true })
	for _, env := range slices.Sorted(maps.Keys(s.required)) {
		_, given := s.env(env)
		if file, ok := s.env(env + FileSuffix); ok && file != "" {
			given = true // read, or reported, by lookup
		}
		if !given && !visited[FlagName(env)] {
			return fmt.Errorf("%s is not set: give %s or --%s (%s)", env, env, FlagName(env), s.required[env])
		}
	}
	return nil
}

// unset reports whether flag name is a required setting that the environment does not give, for help.
func (s *Set) unset(name string) bool {
	for env := range s.required {
		if _, ok := s.env(env); !ok && FlagName(env) == name {
			return true
		}
	}
	return false
}

// SetVersionOutput sets where --version prints the version; standard output by default.
func (s *Set) SetVersionOutput(w io.Writer) { s.versionOut = w }

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
