package pick

import (
	"fmt"
	"strconv"
	"strings"
)

// FormatConsidered writes a decision's candidates as the gateway logs them ("Picked" at
// verbosity 5): `pod=backlog+uncached@rate`, with `!` appended when the load bound ruled the
// pod out, separated by `;`. ParseConsidered reads it back.
func FormatConsidered(cs []Considered) string {
	var b strings.Builder
	for i, c := range cs {
		if i > 0 {
			b.WriteByte(';')
		}
		fmt.Fprintf(&b, "%s=%d+%d@%.0f", c.Pod, c.Backlog, c.Uncached, c.Rate)
		if c.OverBound {
			b.WriteByte('!')
		}
	}
	return b.String()
}

// ParseConsidered reads what FormatConsidered wrote.
func ParseConsidered(s string) ([]Considered, error) {
	if s == "" {
		return nil, nil
	}
	var out []Considered
	for _, part := range strings.Split(s, ";") {
		eq := strings.LastIndexByte(part, '=')
		if eq < 0 {
			return nil, fmt.Errorf("candidate %q has no '='", part)
		}
		c := Considered{Pod: part[:eq]}
		rest := part[eq+1:]
		if c.OverBound = strings.HasSuffix(rest, "!"); c.OverBound {
			rest = rest[:len(rest)-1]
		}
		costs, rate, ok1 := strings.Cut(rest, "@")
		backlog, uncached, ok2 := strings.Cut(costs, "+")
		if !ok1 || !ok2 {
			return nil, fmt.Errorf("candidate %q is not pod=backlog+uncached@rate", part)
		}
		var err error
		if c.Backlog, err = strconv.Atoi(backlog); err != nil {
			return nil, fmt.Errorf("candidate %q: %w", part, err)
		}
		if c.Uncached, err = strconv.Atoi(uncached); err != nil {
			return nil, fmt.Errorf("candidate %q: %w", part, err)
		}
		if c.Rate, err = strconv.ParseFloat(rate, 64); err != nil {
			return nil, fmt.Errorf("candidate %q: %w", part, err)
		}
		out = append(out, c)
	}
	return out, nil
}
