// Package evalset generates a labelled PII evaluation set from sentence templates and scores a
// detector on it (precision and recall per entity type, spans matched by type and overlap).
package evalset

import (
	"bufio"
	"fmt"
	"math/rand/v2"
	"os"
	"regexp"
	"strings"

	"github.com/neuronetes/neuronetes/gateway/guard/pii"
)

// Gold is one labelled value.
type Gold struct {
	Entity pii.Entity `json:"entity"`
	Start  int        `json:"start"`
	End    int        `json:"end"`
	// Kind refines the label for reports (a card network, a phone format); Evaluate ignores it.
	Kind string `json:"kind,omitempty"`
}

// Sample is one generated sentence with its labels.
type Sample struct {
	Text string
	Gold []Gold
	// Source names the template file.
	Source string
}

// Template is one sentence template.
type Template struct {
	Text, Source string
}

// LoadTemplates reads templates, one per line, skipping blank lines.
func LoadTemplates(path, source string) ([]Template, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var out []Template
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		// Templates write line breaks as a literal backslash-n.
		if l := strings.ReplaceAll(strings.TrimSpace(sc.Text()), `\n`, "\n"); l != "" {
			out = append(out, Template{Text: l, Source: source})
		}
	}
	return out, sc.Err()
}

var placeholder = regexp.MustCompile(`\{\{([a-z_]+)\}\}`)

// Generate draws n samples: templates chosen uniformly, placeholders filled from seed.
func Generate(templates []Template, seed uint64, n int) []Sample {
	r := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	out := make([]Sample, 0, n)
	for i := 0; i < n; i++ {
		out = append(out, expand(templates[r.IntN(len(templates))], func(name string) heldValue {
			text, ent := fill(r, name)
			return heldValue{text: text, entity: ent}
		}))
	}
	return out
}

// expand writes template t with each placeholder replaced by value(name), in order, and labels
// every value that names an entity.
func expand(t Template, value func(name string) heldValue) Sample {
	var b strings.Builder
	var gold []Gold
	last := 0
	for _, m := range placeholder.FindAllStringSubmatchIndex(t.Text, -1) {
		b.WriteString(t.Text[last:m[0]])
		v := value(t.Text[m[2]:m[3]])
		b.WriteString(v.prefix)
		if v.entity != "" {
			gold = append(gold, Gold{Entity: v.entity, Start: b.Len(), End: b.Len() + len(v.text), Kind: v.kind})
		}
		b.WriteString(v.text)
		last = m[1]
	}
	b.WriteString(t.Text[last:])
	return Sample{Text: b.String(), Gold: gold, Source: t.Source}
}

// Counts is a confusion count of one entity type.
type Counts struct{ TP, FP, FN int }

// Precision is TP/(TP+FP) (1 when nothing was predicted).
func (c Counts) Precision() float64 {
	if c.TP+c.FP == 0 {
		return 1
	}
	return float64(c.TP) / float64(c.TP+c.FP)
}

// Recall is TP/(TP+FN) (1 when nothing was labelled).
func (c Counts) Recall() float64 {
	if c.TP+c.FN == 0 {
		return 1
	}
	return float64(c.TP) / float64(c.TP+c.FN)
}

// Support is the number of labelled values.
func (c Counts) Support() int { return c.TP + c.FN }

// Evaluate scores d on samples: a finding matches a label of the same type whose span it
// overlaps by at least half of the union (IoU >= 0.5); each label matches at most once.
func Evaluate(d *pii.Detector, samples []Sample) map[pii.Entity]*Counts {
	out := map[pii.Entity]*Counts{}
	get := func(e pii.Entity) *Counts {
		if out[e] == nil {
			out[e] = &Counts{}
		}
		return out[e]
	}
	for _, s := range samples {
		found := d.Detect(s.Text)
		used := make([]bool, len(found))
		for _, g := range s.Gold {
			hit := false
			for i, f := range found {
				if !used[i] && f.Entity == g.Entity && iou(f.Start, f.End, g.Start, g.End) >= 0.5 {
					used[i], hit = true, true
					break
				}
			}
			if hit {
				get(g.Entity).TP++
			} else {
				get(g.Entity).FN++
			}
		}
		for i, f := range found {
			if !used[i] {
				get(f.Entity).FP++
			}
		}
	}
	return out
}

func iou(a0, a1, b0, b1 int) float64 {
	inter := min(a1, b1) - max(a0, b0)
	if inter <= 0 {
		return 0
	}
	return float64(inter) / float64(max(a1, b1)-min(a0, b0))
}

// Misses returns up to n texts with a false positive or negative of entity e (for reports).
func Misses(d *pii.Detector, samples []Sample, e pii.Entity, n int) []string {
	var out []string
	for _, s := range samples {
		one := Evaluate(d, []Sample{s})[e]
		if one != nil && (one.FP > 0 || one.FN > 0) {
			out = append(out, fmt.Sprintf("fp=%d fn=%d %q", one.FP, one.FN, s.Text))
			if len(out) == n {
				break
			}
		}
	}
	return out
}
