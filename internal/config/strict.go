package config

import (
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"maps"
	"regexp"
	"slices"
	"strings"
)

// Exit codes of every stockflow binary (stockctl adds 3, not found).
const (
	ExitOK      = 0
	ExitFailure = 1 // it ran, or tried to, and failed: Redis unreachable within its budget, refused by Redis, ...
	ExitUsage   = 2 // a setting, flag or argument it refused: nothing was done
)

// ErrUsage is in every error of a setting, flag or argument that a binary refused before doing anything
// (errors.Is): Parse's errors, and those a main marks with Usage.
var ErrUsage = errors.New("config: refused setting, flag or argument")

type usageError struct{ err error }

func (e usageError) Error() string   { return e.err.Error() }
func (e usageError) Unwrap() []error { return []error{e.err, ErrUsage} }

// Usage marks err as an error of the settings or arguments (nil stays nil), for ExitCode.
func Usage(err error) error {
	if err == nil || errors.Is(err, ErrUsage) {
		return err
	}
	return usageError{err}
}

// ExitCode is the exit code of a binary whose run ended with err: ExitOK for nil and after -h or --version
// (flag.ErrHelp), the code of an error in err's chain that has one (an ExitCode method: stockctl's not
// found, 3), ExitUsage for a refused setting (ErrUsage), ExitFailure for anything else.
func ExitCode(err error) int {
	var coded interface{ ExitCode() int }
	switch {
	case err == nil, errors.Is(err, flag.ErrHelp):
		return ExitOK
	case errors.As(err, &coded):
		return coded.ExitCode()
	case errors.Is(err, ErrUsage):
		return ExitUsage
	}
	return ExitFailure
}

// Exit logs the error that ended a binary's run, as the last line of its log (JSON when the log is), and
// returns the exit code. It logs nothing for ExitOK.
func Exit(logger *slog.Logger, name string, err error) int {
	code := ExitCode(err)
	switch code {
	case ExitOK:
	case ExitUsage:
		logger.Error(name+" refused its settings or arguments ("+name+" -h lists them)", "err", err, "exit_code", code)
	default:
		logger.Error(name+" failed", "err", err, "exit_code", code)
	}
	return code
}

// settings are the environment variables of every stockflow binary, a test holds them to the binaries'
// settings. A binary ignores another one's (one env file may serve a worker and a producer, and stockctl
// runs in a worker's pod) and refuses an unknown variable that looks like one of them (CheckEnv).
var settings = []string{
	"ALLOW_EVICTION", "CLAIM_IDLE", "CONSUMER_GROUP", "CONSUMER_GROUP_START", "KEYSPACE_EVENTS",
	"LOCK_ELISION", "LOCK_LEASE", "LOCK_WAIT", "LOG_LEVEL", "MAX_ATTEMPTS", "METRICS_ADDR", "METRICS_TOKEN",
	"METRICS_TOKEN_FILE", "ORDERS_PARTITIONS", "ORDERS_STREAM", "OUTCOME_TTL", "POISON_MAXLEN", "POISON_STREAM",
	"PPROF_ADDR", "REDIS_CLUSTER", "REDIS_TLS_CA_FILE", "REDIS_TLS_CERT_FILE", "REDIS_TLS_KEY_FILE", "REDIS_URL",
	"REDIS_URL_FILE", "REDLOCK_URLS", "REDLOCK_URLS_FILE", "REPLICA_ACKS", "REPLICA_ACK_TIMEOUT", "REQUIRE_DURABLE",
	"RESULTS_MAXLEN", "RESULTS_STREAM", "SHUTDOWN_TIMEOUT", "STARTUP_TIMEOUT", "STREAM_RETENTION",
	"TRACE_REDIS_COMMANDS", "WORKER_CONCURRENCY", "WORKER_NAME",
}

// Settings lists the environment variables of every stockflow binary, sorted.
func Settings() []string { return slices.Clone(settings) }

// serviceLink matches the variables Kubernetes gives every pod for each Service of its namespace
// (enableServiceLinks): a Service named redis brings REDIS_PORT, REDIS_SERVICE_HOST, REDIS_PORT_6379_TCP_ADDR...
var serviceLink = regexp.MustCompile(`^[A-Z0-9_]+_(SERVICE_HOST|SERVICE_PORT(_[A-Z0-9_]+)?|PORT(_[0-9]+_(TCP|UDP|SCTP)(_(ADDR|PORT|PROTO))?)?)$`)

// CheckEnv refuses the environment variables that look like settings and are none (a typo would otherwise
// be ignored and its default used): a name that starts with the first word of a setting (REDIS_PASSWORD)
// or is within two edits of one (WORKER_CONCURENCY), in any case. Settings of the other stockflow binaries
// and Kubernetes' service links are let through. Parse calls it; a set made with another env than
// os.LookupEnv lists no environment and checks nothing.
func (s *Set) CheckEnv() error {
	if s.environ == nil {
		return nil
	}
	known := map[string]bool{}
	for _, name := range settings {
		known[name] = true
	}
	for _, p := range s.params {
		for _, name := range []string{p.Env, p.File} {
			if name != "" {
				known[name] = true
			}
		}
	}
	var errs []error
	for _, kv := range s.environ() {
		name, _, _ := strings.Cut(kv, "=")
		if known[name] || serviceLink.MatchString(name) {
			continue
		}
		if hint, ours := s.lookalike(strings.ToUpper(name), known); ours {
			errs = append(errs, fmt.Errorf("unknown environment variable %s: %s", name, hint))
		}
	}
	return Usage(errors.Join(errs...))
}

// lookalike says whether name looks like one of the known settings, and what to do about it.
func (s *Set) lookalike(name string, known map[string]bool) (hint string, ours bool) {
	names := slices.Sorted(maps.Keys(known))
	if near := nearest(name, names); near != "" {
		return "did you mean " + near + "?", true
	}
	word, _, found := strings.Cut(name, "_")
	var same []string
	for _, n := range names {
		if strings.HasPrefix(n, word+"_") {
			same = append(same, n)
		}
	}
	if len(same) == 0 || !found {
		return "", false
	}
	return fmt.Sprintf("not a setting of %s (its %s_ settings: %s; %s -h lists them all)", s.Name(), word,
		strings.Join(s.own(same), ", "), s.Name()), true
}

// own keeps the names among names that are settings of this set (all of them when none is).
func (s *Set) own(names []string) []string {
	var out []string
	for _, p := range s.params {
		if slices.Contains(names, p.Env) {
			out = append(out, p.Env)
		}
	}
	if len(out) == 0 {
		return names
	}
	return out
}

// nearest is the first of names within two edits of name, "" when none is.
func nearest(name string, names []string) string {
	best, bestDist := "", 3
	for _, n := range names {
		if d := editDistance(name, n); d < bestDist {
			best, bestDist = n, d
		}
	}
	return best
}

// editDistance is the Levenshtein distance of a and b (bytes: the names are ASCII).
func editDistance(a, b string) int {
	row := make([]int, len(b)+1)
	for j := range row {
		row[j] = j
	}
	for i := 1; i <= len(a); i++ {
		diag := row[0]
		row[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			diag, row[j] = row[j], min(row[j]+1, row[j-1]+1, diag+cost)
		}
	}
	return row[len(b)]
}

// checkArgs refuses the arguments left after the flags of a set that takes none (NoArguments), suggesting
// the flag that an argument resembles: "worker version" is "worker --version".
func (s *Set) checkArgs() error {
	if !s.noArgs || s.NArg() == 0 {
		return nil
	}
	arg := s.Arg(0)
	msg := fmt.Sprintf("unexpected argument %q: %s takes no arguments, only flags and environment variables", arg, s.Name())
	if f := s.nearestFlag(strings.TrimLeft(arg, "-")); f != "" {
		msg += "; did you mean --" + f + "?"
	}
	return errors.New(msg)
}

// nearestFlag is the flag within two edits of name, or of name with the first word of the flag left out
// (concurency: worker-concurrency); "" when none is.
func (s *Set) nearestFlag(name string) string {
	var names, tails []string
	s.VisitAll(func(f *flag.Flag) {
		_, tail, _ := strings.Cut(f.Name, "-")
		names, tails = append(names, f.Name), append(tails, tail)
	})
	if near := nearest(name, names); near != "" {
		return near
	}
	if i := slices.Index(tails, nearest(name, tails)); i >= 0 && tails[i] != "" {
		return names[i]
	}
	return ""
}

// suggestFlag adds to the flag package's "flag provided but not defined: -concurency" the flag meant.
func (s *Set) suggestFlag(err error) error {
	name, ok := strings.CutPrefix(err.Error(), "flag provided but not defined: -")
	if !ok {
		return err
	}
	if f := s.nearestFlag(strings.TrimLeft(name, "-")); f != "" {
		return fmt.Errorf("%w; did you mean --%s?", err, f)
	}
	return err
}
