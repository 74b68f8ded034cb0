// Package pii is NeuroNetes' built-in PII and secret detector: pure Go, no network, no model.
//
// Each recognizer finds candidates with a cheap scan (a trigger byte or a literal prefix) and then
// validates them: e-mail syntax, phone numbers (validated by libphonenumber, international for
// every region and national for the configured ones, with the earlier shape rules as fallback),
// credit card numbers (IIN range and length of a network, and Luhn), IBANs (country length and
// ISO 7064 mod-97), US SSNs (SSA allocation rules), IPv4/IPv6 addresses, API keys and tokens of
// common providers and PEM private-key blocks. Entity names follow Microsoft Presidio
// so the same evaluation tools and policies work against either.
//
// Offsets are byte offsets into the scanned string; Findings are sorted by Start and never overlap.
package pii

import (
	"fmt"
	"sort"
	"strings"
)

// Entity is a PII or secret type, named as in Presidio where Presidio has the type.
type Entity string

// Entities the built-in detector knows.
const (
	Email      Entity = "EMAIL_ADDRESS"
	Phone      Entity = "PHONE_NUMBER"
	CreditCard Entity = "CREDIT_CARD"
	IBAN       Entity = "IBAN_CODE"
	USSSN      Entity = "US_SSN"
	IPAddress  Entity = "IP_ADDRESS"
	// APIKey is a provider API key or access token (AWS, GitHub, Slack, Stripe, ...).
	APIKey Entity = "API_KEY"
	// PrivateKey is a PEM/OpenSSH/PGP private-key block.
	PrivateKey Entity = "PRIVATE_KEY"
)

// AllEntities lists every entity the detector knows, in a stable order.
var AllEntities = []Entity{Email, Phone, CreditCard, IBAN, USSSN, IPAddress, APIKey, PrivateKey}

// ParseEntity returns the entity with the given name (case-insensitive), or false.
func ParseEntity(s string) (Entity, bool) {
	for _, e := range AllEntities {
		if strings.EqualFold(string(e), s) {
			return e, true
		}
	}
	return "", false
}

// Finding is one detected value.
type Finding struct {
	// Entity is the type of the value.
	Entity Entity `json:"entity_type"`
	// Start and End are byte offsets of the value: text[Start:End].
	Start int `json:"start"`
	End   int `json:"end"`
	// Score is the confidence in [0, 1]: 1 for checksum- or format-validated values, lower for
	// values that only match a shape; context words nearby raise it.
	Score float64 `json:"score"`
	// Kind refines the entity (e.g. "visa", "aws_access_key", "e164"); empty when not known.
	Kind string `json:"kind,omitempty"`
}

// Len is the length of the value in bytes.
func (f Finding) Len() int { return f.End - f.Start }

// recognizer appends the findings of one entity type in text to out.
type recognizer interface {
	entity() Entity
	find(text string, out []Finding) []Finding
}

// Detector runs a set of recognizers. The zero value is not usable; use New.
type Detector struct {
	recs     []recognizer
	minScore float64
}

// Options select what a Detector reports.
type Options struct {
	// Entities limits detection to these types; empty means all.
	Entities []Entity
	// MinScore drops findings scored below it (0 keeps all).
	MinScore float64
	// PhoneRegions are the regions (ISO 3166-1 alpha-2) whose national phone formats are
	// recognized; empty means DefaultPhoneRegions. Validate reports codes libphonenumber does
	// not know; New skips them.
	PhoneRegions []string
}

// Validate reports the first option that is not usable, naming the field.
func (o Options) Validate() error {
	for i, r := range o.PhoneRegions {
		if _, ok := newPhoneRegion(r); !ok {
			return fmt.Errorf("phoneRegions[%d]: %q is not a region libphonenumber knows", i, r)
		}
	}
	if o.MinScore < 0 || o.MinScore > 1 {
		return fmt.Errorf("minScore: %v is not in [0, 1]", o.MinScore)
	}
	return nil
}

// New returns a Detector for the options.
func New(o Options) *Detector {
	want := map[Entity]bool{}
	for _, e := range o.Entities {
		want[e] = true
	}
	num := numericRec{minScore: o.MinScore, noPhones: len(want) > 0 && !want[Phone]}
	regions := o.PhoneRegions
	if len(regions) == 0 {
		regions = DefaultPhoneRegions
	}
	for _, code := range regions {
		if r, ok := newPhoneRegion(code); ok {
			num.regions = append(num.regions, r)
		}
	}
	all := []recognizer{privateKeyRec{}, secretRec{}, emailRec{}, ibanRec{}, num, ipv6Rec{}}
	d := &Detector{minScore: o.MinScore}
	for _, r := range all {
		if len(want) == 0 || want[r.entity()] || r.entity() == numericEntity && wantsNumeric(want) {
			d.recs = append(d.recs, r)
		}
	}
	if len(want) > 0 {
		d.recs = append(d.recs, filterRec{want: want})
	}
	return d
}

// filterRec is a marker that makes Detect drop entities outside want (the numeric recognizer
// reports several types at once).
type filterRec struct{ want map[Entity]bool }

func (filterRec) entity() Entity                         { return "" }
func (filterRec) find(_ string, out []Finding) []Finding { return out }

func wantsNumeric(want map[Entity]bool) bool {
	return want[Phone] || want[CreditCard] || want[USSSN] || want[IPAddress]
}

// Detect returns the findings in text, sorted by Start, without overlaps (where two overlap, the
// higher score wins, then the longer one).
func (d *Detector) Detect(text string) []Finding {
	var out []Finding
	var want map[Entity]bool
	for _, r := range d.recs {
		if f, ok := r.(filterRec); ok {
			want = f.want
			continue
		}
		out = r.find(text, out)
	}
	kept := out[:0]
	for _, f := range out {
		if f.Score < d.minScore || want != nil && !want[f.Entity] {
			continue
		}
		kept = append(kept, f)
	}
	return resolveOverlaps(kept)
}

// resolveOverlaps sorts findings and drops each one that overlaps a better one.
func resolveOverlaps(fs []Finding) []Finding {
	if len(fs) < 2 {
		return fs
	}
	sort.Slice(fs, func(i, j int) bool {
		a, b := fs[i], fs[j]
		if a.Score != b.Score {
			return a.Score > b.Score
		}
		if a.Len() != b.Len() {
			return a.Len() > b.Len()
		}
		return a.Start < b.Start
	})
	var kept []Finding
	for _, f := range fs {
		clash := false
		for _, k := range kept {
			if f.Start < k.End && k.Start < f.End {
				clash = true
				break
			}
		}
		if !clash {
			kept = append(kept, f)
		}
	}
	sort.Slice(kept, func(i, j int) bool { return kept[i].Start < kept[j].Start })
	return kept
}

// Placeholder is the text a redacted value is replaced with: "<ENTITY_TYPE>", as Presidio's
// anonymizer writes by default.
func Placeholder(e Entity) string { return "<" + string(e) + ">" }

// Redact returns text with every finding replaced by its Placeholder. Findings must be sorted and
// non-overlapping, as Detect returns them.
func Redact(text string, fs []Finding) string {
	if len(fs) == 0 {
		return text
	}
	var b strings.Builder
	b.Grow(len(text))
	last := 0
	for _, f := range fs {
		b.WriteString(text[last:f.Start])
		b.WriteString(Placeholder(f.Entity))
		last = f.End
	}
	b.WriteString(text[last:])
	return b.String()
}
