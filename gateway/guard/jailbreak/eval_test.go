package jailbreak

import (
	"bufio"
	"encoding/json"
	"os"
	"testing"
)

type sample struct {
	Text   string `json:"text"`
	Label  int    `json:"label"`
	Source string `json:"source"`
	Split  string `json:"split"`
}

func loadEval(t testing.TB) []sample {
	t.Helper()
	f, err := os.Open("testdata/eval.jsonl")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out []sample
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<24)
	for sc.Scan() {
		var s sample
		if err := json.Unmarshal(sc.Bytes(), &s); err != nil {
			t.Fatal(err)
		}
		out = append(out, s)
	}
	return out
}

// Counts are a confusion matrix.
type Counts struct{ TP, FP, FN, TN int }

// Precision is TP/(TP+FP).
func (c Counts) Precision() float64 { return ratio(c.TP, c.TP+c.FP) }

// Recall is TP/(TP+FN).
func (c Counts) Recall() float64 { return ratio(c.TP, c.TP+c.FN) }

func ratio(a, b int) float64 {
	if b == 0 {
		return 0
	}
	return float64(a) / float64(b)
}

func evaluate(samples []sample, scores []float64, split string, threshold float64) Counts {
	var c Counts
	for i, s := range samples {
		if s.Split != split {
			continue
		}
		hit := scores[i] >= threshold
		switch {
		case hit && s.Label == 1:
			c.TP++
		case hit:
			c.FP++
		case s.Label == 1:
			c.FN++
		default:
			c.TN++
		}
	}
	return c
}

// TestEvalSet reports precision and recall on the labelled set (testdata/README.md) at the
// default threshold, for the dev half (seen while writing rules) and the held-out test half.
// The floors are what the heuristics must keep: a change that loses them is a regression.
func TestEvalSet(t *testing.T) {
	samples := loadEval(t)
	scores := make([]float64, len(samples))
	for i, s := range samples {
		scores[i] = Score(s.Text).Score
	}
	for _, split := range []string{"dev", "test"} {
		c := evaluate(samples, scores, split, DefaultThreshold)
		t.Logf("%s: threshold %.2f precision %.3f recall %.3f (tp %d fp %d fn %d tn %d)",
			split, DefaultThreshold, c.Precision(), c.Recall(), c.TP, c.FP, c.FN, c.TN)
		if c.Precision() < 0.95 || c.Recall() < 0.55 {
			t.Errorf("%s: precision %.3f (floor 0.95), recall %.3f (floor 0.55)", split, c.Precision(), c.Recall())
		}
		for _, th := range []float64{0.3, 0.35, 0.4, 0.6, 0.7} {
			c := evaluate(samples, scores, split, th)
			t.Logf("%s: threshold %.2f precision %.3f recall %.3f", split, th, c.Precision(), c.Recall())
		}
	}
}
