package evalset

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"sort"

	"github.com/neuronetes/neuronetes/gateway/guard/pii"
)

// The held-out set (testdata/heldout.jsonl, testdata/README.md) is scored but not tuned on: it is
// drawn by GenerateHeldOut from its own templates (testdata/heldout_templates.txt) and its own
// value generators (heldout_values.go), independent of the dev set's (fill.go), and committed, so
// the same labelled sentences judge every change.

// HeldOutSeed is the seed testdata/heldout.jsonl was drawn with.
const HeldOutSeed = 0x5eed2028

// HeldOutSize is the number of sentences in testdata/heldout.jsonl.
const HeldOutSize = 4000

// GenerateHeldOut draws n sentences from the held-out templates, values from seed.
func GenerateHeldOut(templates []Template, seed uint64, n int) []Sample {
	r := rand.New(rand.NewPCG(seed, seed^0x2545f4914f6cdd1d))
	g := newHeldOutGen(r)
	out := make([]Sample, 0, n)
	for i := 0; i < n; i++ {
		out = append(out, expand(templates[r.IntN(len(templates))], g.value))
	}
	return out
}

// labelled is one line of a labelled-set file.
type labelled struct {
	Text string `json:"text"`
	Gold []Gold `json:"gold"`
}

// WriteLabelled writes samples as JSON lines ({"text": ..., "gold": [...]}).
func WriteLabelled(w io.Writer, samples []Sample) error {
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(false)
	for _, s := range samples {
		if err := enc.Encode(labelled{Text: s.Text, Gold: s.Gold}); err != nil {
			return err
		}
	}
	return nil
}

// LoadLabelled reads a file written by WriteLabelled; Source is set to source.
func LoadLabelled(path, source string) ([]Sample, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var out []Sample
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
	for line := 1; sc.Scan(); line++ {
		var l labelled
		if err := json.Unmarshal(sc.Bytes(), &l); err != nil {
			return nil, fmt.Errorf("%s:%d: %w", path, line, err)
		}
		for _, g := range l.Gold {
			if g.Start < 0 || g.End > len(l.Text) || g.Start >= g.End {
				return nil, fmt.Errorf("%s:%d: gold span [%d, %d) outside the text", path, line, g.Start, g.End)
			}
			if _, ok := pii.ParseEntity(string(g.Entity)); !ok {
				return nil, fmt.Errorf("%s:%d: unknown entity %q", path, line, g.Entity)
			}
		}
		out = append(out, Sample{Text: l.Text, Gold: l.Gold, Source: source})
	}
	return out, sc.Err()
}

// KindRecall is the recall of the labels of one entity and kind.
type KindRecall struct {
	Entity pii.Entity
	Kind   string
	Counts
}

// RecallByKind returns, per entity and label kind, how many labels d found (TP) and missed (FN),
// matched as Evaluate matches them; sorted by entity, then kind.
func RecallByKind(d *pii.Detector, samples []Sample) []KindRecall {
	idx := map[[2]string]*KindRecall{}
	var keys [][2]string
	for _, s := range samples {
		found := d.Detect(s.Text)
		used := make([]bool, len(found))
		for _, g := range s.Gold {
			k := [2]string{string(g.Entity), g.Kind}
			kr := idx[k]
			if kr == nil {
				kr = &KindRecall{Entity: g.Entity, Kind: g.Kind}
				idx[k] = kr
				keys = append(keys, k)
			}
			hit := false
			for i, f := range found {
				if !used[i] && f.Entity == g.Entity && iou(f.Start, f.End, g.Start, g.End) >= 0.5 {
					used[i], hit = true, true
					break
				}
			}
			if hit {
				kr.TP++
			} else {
				kr.FN++
			}
		}
	}
	out := make([]KindRecall, 0, len(keys))
	for _, k := range keys {
		out = append(out, *idx[k])
	}
	sortKindRecalls(out)
	return out
}

func sortKindRecalls(ks []KindRecall) {
	sort.Slice(ks, func(i, j int) bool {
		if ks[i].Entity != ks[j].Entity {
			return ks[i].Entity < ks[j].Entity
		}
		return ks[i].Kind < ks[j].Kind
	})
}
