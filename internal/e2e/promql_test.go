package e2e

import (
	"fmt"
	"slices"
	"strings"
	"testing"
)

// A small reader of PromQL, enough to list what an expression of the dashboard or the alert rules refers
// to: the series it selects (metric name and label matchers), the labels it groups or matches by, and the
// functions it calls. It does not evaluate, nor check the grammar beyond that: Prometheus does. It takes
// Grafana's variables ($__rate_interval, ${name}) where PromQL takes a value.

// selector is one vector selector: a metric name and its label matchers.
type selector struct {
	name     string
	matchers []matcher
}

// matcher is one label matcher of a selector: label op value, op one of = != =~ !~.
type matcher struct{ label, op, value string }

func (s selector) String() string {
	var m []string
	for _, x := range s.matchers {
		m = append(m, fmt.Sprintf("%s%s%q", x.label, x.op, x.value))
	}
	return s.name + "{" + strings.Join(m, ", ") + "}"
}

// promqlRefs is what one expression refers to.
type promqlRefs struct {
	selectors []selector
	labels    []string // of by, without, on, ignoring, group_left and group_right
	functions []string // functions and aggregation operators called
}

type tokenKind int

const (
	tIdent tokenKind = iota
	tString
	tNumber
	tVariable
	tPunct
)

type token struct {
	kind tokenKind
	text string // a string's value, unquoted
}

// labelListKeywords take a parenthesised list of label names.
var labelListKeywords = map[string]bool{"by": true, "without": true, "on": true, "ignoring": true, "group_left": true, "group_right": true}

// keywords are the other words of PromQL that are not metric names.
var keywords = map[string]bool{"and": true, "or": true, "unless": true, "bool": true, "offset": true, "atan2": true, "inf": true, "nan": true}

// promqlFunctions are PromQL's functions and aggregation operators (Prometheus 3).
var promqlFunctions = strings.Fields(`abs absent absent_over_time acos acosh asin asinh atan atanh avg_over_time ceil changes
	clamp clamp_max clamp_min cos cosh count_over_time days_in_month day_of_month day_of_week day_of_year deg delta deriv
	double_exponential_smoothing end exp floor histogram_avg histogram_count histogram_fraction histogram_quantile
	histogram_stddev histogram_stdvar histogram_sum holt_winters hour idelta increase info irate label_join label_replace
	last_over_time ln log10 log2 mad_over_time max_over_time min_over_time minute month pi predict_linear
	present_over_time quantile_over_time rad rate resets round scalar sgn sin sinh sort sort_by_label
	sort_by_label_desc sort_desc sqrt start stddev_over_time stdvar_over_time sum_over_time tan tanh time timestamp
	vector year` + " " + strings.Join(aggregations, " "))

// aggregations are PromQL's aggregation operators, which take by (...) or without (...) after the name too.
var aggregations = strings.Fields(`avg bottomk count count_values group limit_ratio limitk max min quantile stddev stdvar sum topk`)

// parsePromQL lists what expr refers to; it fails on what it cannot read, and on an unknown function.
func parsePromQL(expr string) (promqlRefs, error) {
	toks, err := lexPromQL(expr)
	if err != nil {
		return promqlRefs{}, err
	}
	var refs promqlRefs
	for i := 0; i < len(toks); i++ {
		if i, err = refs.read(toks, i); err != nil {
			return promqlRefs{}, err
		}
	}
	return refs, nil
}

// read reads what starts at toks[i] and returns the index of its last token.
func (r *promqlRefs) read(toks []token, i int) (int, error) {
	t, next := toks[i], peek(toks, i+1)
	switch {
	case t.kind == tPunct && t.text == "[": // a range or subquery: durations and variables only
		return closing(toks, i, "]")
	case t.kind == tPunct && t.text == "{": // a selector without a name before its braces
		return r.selector(toks, i, "")
	case t.kind != tIdent:
		return i, nil
	}
	word := strings.ToLower(t.text)
	switch {
	case labelListKeywords[word] && next == "(":
		end, err := closing(toks, i+1, ")")
		for _, l := range toks[i+2 : max(end, i+2)] {
			if l.kind == tIdent || l.kind == tString {
				r.labels = append(r.labels, l.text)
			}
		}
		return end, err
	case next == "(" || (slices.Contains(aggregations, t.text) && (next == "by" || next == "without")):
		if !slices.Contains(promqlFunctions, t.text) {
			return i, fmt.Errorf("unknown function %q", t.text)
		}
		r.functions = append(r.functions, t.text)
		return i, nil
	case keywords[word] || labelListKeywords[word]:
		return i, nil
	case next == "{":
		return r.selector(toks, i+1, t.text)
	}
	r.selectors = append(r.selectors, selector{name: t.text})
	return i, nil
}

// selector reads the matchers in the braces at toks[open] of a selector named name ("" when the name, if
// any, is a matcher or a string inside the braces).
func (r *promqlRefs) selector(toks []token, open int, name string) (int, error) {
	sel := selector{name: name}
	i := open + 1
	for i < len(toks) && toks[i].text != "}" {
		switch {
		case toks[i].kind == tString && (peek(toks, i+1) == "," || peek(toks, i+1) == "}"): // {"metric.name"}
			sel.name = toks[i].text
			i++
		case i+2 < len(toks) && (toks[i].kind == tIdent || toks[i].kind == tString) && isMatchOp(toks[i+1].text) && toks[i+2].kind == tString:
			m := matcher{label: toks[i].text, op: toks[i+1].text, value: toks[i+2].text}
			if m.label == "__name__" && m.op == "=" {
				sel.name = m.value
			} else {
				sel.matchers = append(sel.matchers, m)
			}
			i += 3
		default:
			return i, fmt.Errorf("cannot read the label matchers at %q", toks[i].text)
		}
		if peek(toks, i) == "," {
			i++
		}
	}
	if i >= len(toks) {
		return i, fmt.Errorf("selector %s: no closing }", sel)
	}
	if sel.name == "" {
		return i, fmt.Errorf("selector %s has no metric name", sel)
	}
	r.selectors = append(r.selectors, sel)
	return i, nil
}

func isMatchOp(s string) bool { return s == "=" || s == "!=" || s == "=~" || s == "!~" }

// peek is the text of toks[i], "" past the end.
func peek(toks []token, i int) string {
	if i < len(toks) {
		return toks[i].text
	}
	return ""
}

// closing returns the index of the first punctuation close after toks[open].
func closing(toks []token, open int, close string) (int, error) {
	for i := open + 1; i < len(toks); i++ {
		if toks[i].kind == tPunct && toks[i].text == close {
			return i, nil
		}
	}
	return len(toks), fmt.Errorf("no closing %s", close)
}

// lexPromQL splits expr into tokens.
func lexPromQL(expr string) ([]token, error) {
	var toks []token
	for i := 0; i < len(expr); {
		c := expr[i]
		n, tok, err := lexOne(expr[i:])
		switch {
		case err != nil:
			return nil, fmt.Errorf("at %q: %w", expr[i:min(len(expr), i+20)], err)
		case c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '#':
		default:
			toks = append(toks, tok)
		}
		i += n
	}
	return toks, nil
}

// lexOne reads the token at the start of s (white space and comments too) and returns its length.
func lexOne(s string) (int, token, error) {
	c := s[0]
	switch {
	case c == ' ' || c == '\t' || c == '\n' || c == '\r':
		return 1, token{}, nil
	case c == '#':
		return strings.IndexByte(s+"\n", '\n'), token{}, nil
	case c == '"' || c == '\'' || c == '`':
		return lexString(s)
	case isDigit(c) || (c == '.' && len(s) > 1 && isDigit(s[1])):
		n := lexNumber(s)
		return n, token{kind: tNumber, text: s[:n]}, nil
	case c == '$':
		n := lexVariable(s)
		return n, token{kind: tVariable, text: s[:n]}, nil
	case isIdentStart(c):
		n := 1
		for n < len(s) && (isIdentStart(s[n]) || isDigit(s[n])) {
			n++
		}
		return n, token{kind: tIdent, text: s[:n]}, nil
	}
	for _, op := range []string{"!=", "=~", "!~", "==", ">=", "<="} {
		if strings.HasPrefix(s, op) {
			return 2, token{kind: tPunct, text: op}, nil
		}
	}
	if strings.ContainsRune("{}()[],=+-*/%^<>@:", rune(c)) {
		return 1, token{kind: tPunct, text: s[:1]}, nil
	}
	return 0, token{}, fmt.Errorf("unexpected character %q", c)
}

// lexString reads a quoted string: "..." and '...' with backslash escapes, `...` without.
func lexString(s string) (int, token, error) {
	quote := s[0]
	var b strings.Builder
	for i := 1; i < len(s); i++ {
		switch c := s[i]; {
		case c == quote:
			return i + 1, token{kind: tString, text: b.String()}, nil
		case c == '\\' && quote != '`' && i+1 < len(s):
			i++
			b.WriteByte(unescape(s[i]))
		default:
			b.WriteByte(c)
		}
	}
	return 0, token{}, fmt.Errorf("unterminated string")
}

// unescape is the byte that a backslash and c stand for.
func unescape(c byte) byte {
	switch c {
	case 'n':
		return '\n'
	case 't':
		return '\t'
	}
	return c
}

// lexNumber reads a number or a duration: 0.99, 1e-09, 0x1f, 5m, 1h30m.
func lexNumber(s string) int {
	n := 0
	for n < len(s) && (isIdentStart(s[n]) || isDigit(s[n]) || s[n] == '.') {
		if (s[n] == 'e' || s[n] == 'E') && n+1 < len(s) && (s[n+1] == '-' || s[n+1] == '+') && !strings.HasPrefix(s, "0x") {
			n++
		}
		n++
	}
	return n
}

// lexVariable reads a Grafana variable: $name or ${name...}.
func lexVariable(s string) int {
	if strings.HasPrefix(s, "${") {
		if end := strings.IndexByte(s, '}'); end > 0 {
			return end + 1
		}
	}
	n := 1
	for n < len(s) && (isIdentStart(s[n]) || isDigit(s[n])) && s[n] != ':' {
		n++
	}
	return n
}

func isDigit(c byte) bool { return '0' <= c && c <= '9' }
func isIdentStart(c byte) bool {
	return c == '_' || c == ':' || 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z'
}

func TestDashboardPromQLReader(t *testing.T) {
	cases := []struct {
		expr      string
		selectors []string
		labels    []string
		fail      string
	}{
		{expr: `sum by (le) (rate(stockflow_lock_wait_seconds_bucket{stockflow_lock_result="acquired"}[$__rate_interval]))`,
			selectors: []string{`stockflow_lock_wait_seconds_bucket{stockflow_lock_result="acquired"}`}, labels: []string{"le"}},
		{expr: `max(stockflow_consumer_lag) > 1000 and max(delta(stockflow_consumer_lag[10m])) > 0`,
			selectors: []string{`stockflow_consumer_lag{}`, `stockflow_consumer_lag{}`}},
		{expr: "sum(rate(a_total[5m])) by (x, y) / on(x) group_left(z) b{c!~'d.*', e=\"f\\\"g\"} offset 5m # a comment",
			selectors: []string{`a_total{}`, `b{c!~"d.*", e="f\"g"}`}, labels: []string{"x", "y", "x", "z"}},
		{expr: `histogram_quantile(0.99, sum by (le) (rate({__name__="x_bucket", job="w"}[${__range}]))) * 1e-09 or vector(0)`,
			selectors: []string{`x_bucket{job="w"}`}, labels: []string{"le"}},
		{expr: `topk(10, sum without (instance) (increase(ns:recorded:rate5m[1h:5m]))) and on() up == bool 1`,
			selectors: []string{`ns:recorded:rate5m{}`, `up{}`}, labels: []string{"instance"}},
		{expr: `label_replace(up, "dst", "$1", "src", "(.*)")`, selectors: []string{`up{}`}},
		{expr: `rat(up[5m])`, fail: `unknown function "rat"`},
		{expr: `up{job=}`, fail: "label matchers"},
		{expr: `{job="x"}`, fail: "no metric name"},
		{expr: `up{job="x"`, fail: "no closing }"},
	}
	for _, c := range cases {
		refs, err := parsePromQL(c.expr)
		if c.fail != "" {
			if err == nil || !strings.Contains(err.Error(), c.fail) {
				t.Errorf("%s: error %v, want one saying %q", c.expr, err, c.fail)
			}
			continue
		}
		var got []string
		for _, s := range refs.selectors {
			got = append(got, s.String())
		}
		if err != nil || !slices.Equal(got, c.selectors) || !slices.Equal(refs.labels, c.labels) {
			t.Errorf("%s:\n got selectors %q labels %q (%v)\nwant selectors %q labels %q", c.expr, got, refs.labels, err, c.selectors, c.labels)
		}
	}
}
