package v1alpha1

import (
	"encoding/json"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"time"
)

// Duration is a length of time written as in the seed documents: a Go duration ("500ms", "30s",
// "1m30s") that may also use days ("7d"). Negative durations are rejected.
//
// +kubebuilder:validation:Type=string
// +kubebuilder:validation:MaxLength=32
// +kubebuilder:validation:Pattern=`^([0-9]+(\.[0-9]+)?(ns|us|µs|ms|s|m|h|d))+$`
type Duration string

var durationPart = regexp.MustCompile(`([0-9]+(?:\.[0-9]+)?)(ns|us|µs|ms|s|m|h|d)`)

// Parse returns the duration as a time.Duration. "d" counts 24 hours.
func (d Duration) Parse() (time.Duration, error) {
	s := string(d)
	if s == "" {
		return 0, fmt.Errorf("empty duration")
	}
	if !strings.Contains(s, "d") {
		v, err := time.ParseDuration(s)
		if err != nil {
			return 0, fmt.Errorf("parse duration %q: %w", s, err)
		}
		if v < 0 {
			return 0, fmt.Errorf("duration %q is negative", s)
		}
		return v, nil
	}
	// Days: rewrite each "<n>d" part into hours, then parse.
	var b strings.Builder
	rest := s
	for _, m := range durationPart.FindAllStringSubmatchIndex(s, -1) {
		if m[0] != len(s)-len(rest) {
			return 0, fmt.Errorf("parse duration %q: unexpected text", s)
		}
		num, unit := s[m[2]:m[3]], s[m[4]:m[5]]
		if unit == "d" {
			f, err := strconv.ParseFloat(num, 64)
			if err != nil {
				return 0, fmt.Errorf("parse duration %q: %w", s, err)
			}
			b.WriteString(strconv.FormatFloat(f*24, 'f', -1, 64) + "h")
		} else {
			b.WriteString(num + unit)
		}
		rest = s[m[1]:]
	}
	if rest != "" {
		return 0, fmt.Errorf("parse duration %q: unexpected text %q", s, rest)
	}
	return Duration(b.String()).Parse()
}

// DurationOr parses d, returning def when d is empty or invalid.
func (d Duration) DurationOr(def time.Duration) time.Duration {
	v, err := d.Parse()
	if err != nil {
		return def
	}
	return v
}

// Decimal is a JSON number kept in its decimal text form, so that values such as 99.5 or 0.7 can
// be declared without floating-point fields in the API (controller-gen's allowDangerousTypes stays
// off). It marshals as a JSON number.
//
// +kubebuilder:validation:Type=number
type Decimal string

// Float64 returns the value as a float64; an empty Decimal is 0.
func (d Decimal) Float64() (float64, error) {
	if d == "" {
		return 0, nil
	}
	f, err := strconv.ParseFloat(string(d), 64)
	if err != nil {
		return 0, fmt.Errorf("parse decimal %q: %w", string(d), err)
	}
	return f, nil
}

// MarshalJSON writes the decimal as a JSON number.
func (d Decimal) MarshalJSON() ([]byte, error) {
	if d == "" {
		return []byte("0"), nil
	}
	if _, err := d.Float64(); err != nil {
		return nil, err
	}
	return []byte(d), nil
}

// UnmarshalJSON accepts a JSON number or a string holding one.
func (d *Decimal) UnmarshalJSON(b []byte) error {
	s := strings.TrimSpace(string(b))
	if s == "null" {
		*d = ""
		return nil
	}
	if strings.HasPrefix(s, `"`) {
		if err := json.Unmarshal(b, &s); err != nil {
			return fmt.Errorf("decimal: %w", err)
		}
	}
	if _, err := strconv.ParseFloat(s, 64); err != nil {
		return fmt.Errorf("decimal %q: %w", s, err)
	}
	*d = Decimal(s)
	return nil
}

// LocalObjectReference names an object in the same namespace.
type LocalObjectReference struct {
	// Name of the referenced object.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	Name string `json:"name"`
}
