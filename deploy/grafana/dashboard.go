// Package grafana holds the NeuroNetes Grafana dashboard (neuronetes-dashboard.json) and the code
// that reads the metric names its PromQL queries use, so tests can check them against what the
// components really export.
package grafana

import (
	_ "embed"
	"encoding/json"
	"fmt"
	"regexp"
	"sort"
	"strings"
)

// DashboardJSON is the dashboard, as shipped.
//
//go:embed neuronetes-dashboard.json
var DashboardJSON []byte

// Dashboard is the part of a Grafana dashboard model the tests read.
type Dashboard struct {
	Title  string  `json:"title"`
	UID    string  `json:"uid"`
	Panels []Panel `json:"panels"`
}

// Panel is one dashboard panel.
type Panel struct {
	Title   string   `json:"title"`
	Type    string   `json:"type"`
	Targets []Target `json:"targets"`
}

// Target is one query of a panel.
type Target struct {
	RefID string `json:"refId"`
	Expr  string `json:"expr"`
}

// Load parses the shipped dashboard. Every panel must have at least one target with an expr.
func Load() (*Dashboard, error) {
	var d Dashboard
	if err := json.Unmarshal(DashboardJSON, &d); err != nil {
		return nil, fmt.Errorf("neuronetes-dashboard.json: %w", err)
	}
	if len(d.Panels) == 0 {
		return nil, fmt.Errorf("neuronetes-dashboard.json: panels: empty")
	}
	for i, p := range d.Panels {
		if len(p.Targets) == 0 {
			return nil, fmt.Errorf("neuronetes-dashboard.json: panels[%d] (%q).targets: empty", i, p.Title)
		}
		for j, t := range p.Targets {
			if strings.TrimSpace(t.Expr) == "" {
				return nil, fmt.Errorf("neuronetes-dashboard.json: panels[%d] (%q).targets[%d].expr: empty", i, p.Title, j)
			}
		}
	}
	return &d, nil
}

// MetricNames returns the sorted, distinct series names every query of d selects.
func (d *Dashboard) MetricNames() ([]string, error) {
	set := map[string]bool{}
	for _, p := range d.Panels {
		for _, t := range p.Targets {
			names, err := ExprMetrics(t.Expr)
			if err != nil {
				return nil, fmt.Errorf("panel %q target %s: %w", p.Title, t.RefID, err)
			}
			for _, n := range names {
				set[n] = true
			}
		}
	}
	out := make([]string, 0, len(set))
	for n := range set {
		out = append(out, n)
	}
	sort.Strings(out)
	return out, nil
}

var (
	// Removed before looking for names: strings, label matchers, range/subquery selectors,
	// grouping clauses and dashboard variables.
	reString   = regexp.MustCompile(`"(?:[^"\\]|\\.)*"|'(?:[^'\\]|\\.)*'`)
	reMatchers = regexp.MustCompile(`\{[^{}]*\}`)
	reRange    = regexp.MustCompile(`\[[^\[\]]*\]`)
	reGrouping = regexp.MustCompile(`\b(?:by|without|on|ignoring|group_left|group_right)\s*\([^()]*\)`)
	reVariable = regexp.MustCompile(`\$\{?[A-Za-z_][A-Za-z0-9_]*\}?`)
	reOffset   = regexp.MustCompile(`\b(?:offset|@)\s*-?[0-9A-Za-z_.]+`)
	// A token is a number (consumed so that 1e-9 is not read as a name) or an identifier.
	reToken = regexp.MustCompile(`(?i)0x[0-9a-f]+|[0-9]*\.?[0-9]+(?:e[+-]?[0-9]+)?|[A-Za-z_:][A-Za-z0-9_:]*`)
)

// keywords are PromQL words that are not series names.
var keywords = map[string]bool{
	"by": true, "without": true, "on": true, "ignoring": true, "group_left": true, "group_right": true,
	"bool": true, "and": true, "or": true, "unless": true, "offset": true, "atan2": true,
	"inf": true, "nan": true,
}

// ExprMetrics returns the series names a PromQL expression selects: identifiers that are not
// functions or aggregations (followed by "("), keywords, labels or variables.
func ExprMetrics(expr string) ([]string, error) {
	if strings.Count(expr, "(") != strings.Count(expr, ")") {
		return nil, fmt.Errorf("unbalanced parentheses in %q", expr)
	}
	s := reString.ReplaceAllString(expr, `""`)
	s = reMatchers.ReplaceAllString(s, " ")
	s = reRange.ReplaceAllString(s, " ")
	s = reGrouping.ReplaceAllString(s, " ")
	s = reVariable.ReplaceAllString(s, " 0 ")
	s = reOffset.ReplaceAllString(s, " ")
	if strings.ContainsAny(s, "{}[]") {
		return nil, fmt.Errorf("unbalanced braces or brackets in %q", expr)
	}
	var out []string
	for _, loc := range reToken.FindAllStringIndex(s, -1) {
		tok := s[loc[0]:loc[1]]
		if c := tok[0]; c >= '0' && c <= '9' || c == '.' {
			continue
		}
		if keywords[strings.ToLower(tok)] {
			continue
		}
		if rest := strings.TrimLeft(s[loc[1]:], " \t\n"); strings.HasPrefix(rest, "(") {
			continue // function or aggregation
		}
		out = append(out, tok)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("no metric in %q", expr)
	}
	return out, nil
}

// Exported reports whether name is a series of the exported metric families: the family itself,
// or a histogram's/summary's _bucket, _sum and _count series. families maps a family name to its
// type ("counter", "gauge", "histogram", "summary", "untyped").
func Exported(name string, families map[string]string) bool {
	if _, ok := families[name]; ok {
		return true
	}
	for _, suffix := range []string{"_bucket", "_sum", "_count"} {
		base, ok := strings.CutSuffix(name, suffix)
		if !ok {
			continue
		}
		if typ := families[base]; typ == "histogram" || (typ == "summary" && suffix != "_bucket") {
			return true
		}
	}
	return false
}
