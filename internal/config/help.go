package config

import (
	"flag"
	"fmt"
	"strings"
)

// The flag package names the value of a flag of its own types in -h (-lock-lease duration) but shows
// "value" for every other flag.Value, which every setting of a Set is. A Set prints its help itself, with
// a placeholder per setting.

// namedBySuffix are the placeholders of string and integer settings whose name ends the same way.
var namedBySuffix = []struct{ suffix, placeholder string }{
	{"_URL", "url"},
	{"_FILE", "file"},
	{"_DIR", "dir"},
	{"_PATH", "path"},
	{"_ADDR", "addr"},
	{"_STREAM", "stream"},
	{"_GROUP_START", "id"},
	{"_GROUP", "group"},
	{"_NAME", "name"},
	{"_TOKEN", "token"},
}

// placeholderOf returns the placeholder of a setting, and its usage without the back quotes around it:
// the first back-quoted word of usage, as flag.UnquoteUsage reads it; none for a boolean flag; else one
// that follows from the kind of value or, for strings and integers, from the end of the name
// (REDIS_TLS_CA_FILE: file); "n" for another integer. What is left is "value", as the flag package says:
// give such a setting a back-quoted word.
func placeholderOf(value flag.Value, name, usage string) (placeholder, unquoted string) {
	if word, rest, ok := backQuoted(usage); ok {
		return word, rest
	}
	if b, ok := value.(interface{ IsBoolFlag() bool }); ok && b.IsBoolFlag() {
		return "", usage
	}
	switch value.(type) {
	case *urlValue:
		return "url", usage
	case *urlListValue:
		return "urls", usage
	case *secretValue:
		return "token", usage
	case *durationValue:
		return "duration", usage
	case *floatValue:
		return "number", usage
	}
	upper := strings.ToUpper(strings.ReplaceAll(name, "-", "_"))
	for _, n := range namedBySuffix {
		if strings.HasSuffix(upper, n.suffix) {
			return n.placeholder, usage
		}
	}
	if _, ok := value.(*intValue); ok {
		return "n", usage
	}
	return "value", usage
}

// backQuoted finds the first back-quoted word of usage: the word, and usage without its quotes.
func backQuoted(usage string) (word, unquoted string, ok bool) {
	before, rest, found := strings.Cut(usage, "`")
	if !found {
		return "", usage, false
	}
	word, after, found := strings.Cut(rest, "`")
	if !found || word == "" {
		return "", usage, false
	}
	return word, before + word + after, true
}

// usage is the help of -h and of a bad flag.
func (s *Set) usage() {
	fmt.Fprintf(s.Output(), "Usage of %s (a setting with an env variable reads it; the flag wins):\n", s.Name())
	s.PrintDefaults()
}

// PrintDefaults prints every flag as flag.PrintDefaults does, with its placeholder, and its default when
// that is not the zero value. A default is the flag's value before the command line: the environment's
// when it is set, shown redacted for a URL and not at all for a secret. A required setting that the
// environment does not give shows "(required)".
func (s *Set) PrintDefaults() {
	w := s.Output()
	s.VisitAll(func(f *flag.Flag) {
		line := "  --" + f.Name
		if p := s.placeholders[f.Name]; p != "" {
			line += " " + p
		}
		line += "\n    \t" + strings.ReplaceAll(f.Usage, "\n", "\n    \t")
		switch {
		case s.unset(f.Name):
			line += " (required)"
		case !zeroValue(f.DefValue):
			line += " (default " + f.DefValue + ")"
		}
		fmt.Fprintln(w, line)
	})
}

// zeroValue reports whether a default is the zero value of its kind, which help does not show.
func zeroValue(def string) bool {
	switch def {
	case "", "0", "0s", "false":
		return true
	}
	return false
}
