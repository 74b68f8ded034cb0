package main

import (
	"fmt"
	"path/filepath"

	"github.com/neuronetes/neuronetes/gateway/guard/pii"
	"github.com/neuronetes/neuronetes/gateway/guard/pii/evalset"
)

// piiTarget is the precision and recall the checksum-validated types must reach.
const piiTarget = 0.95

func piiBench(dir string, seed uint64, n int) ([]string, bool, error) {
	a, err := evalset.LoadTemplates(filepath.Join(dir, "presidio_research_templates.txt"), "presidio-research")
	if err != nil {
		return nil, false, err
	}
	b, err := evalset.LoadTemplates(filepath.Join(dir, "neuronetes_decoys.txt"), "neuronetes-decoys")
	if err != nil {
		return nil, false, err
	}
	samples := evalset.Generate(append(a, b...), seed, n)
	d := pii.New(pii.Options{MinScore: 0.5})
	res := evalset.Evaluate(d, samples)
	fmt.Printf("== PII precision/recall: %d sentences (Presidio-research templates + decoys), seed %d, min score 0.5 ==\n", n, seed)
	fmt.Printf("%-14s %8s %6s %6s %6s %9s %7s\n", "entity", "support", "tp", "fp", "fn", "precision", "recall")
	ok := true
	var verdicts []string
	for _, e := range pii.AllEntities {
		c := res[e]
		if c == nil {
			continue
		}
		fmt.Printf("%-14s %8d %6d %6d %6d %9.3f %7.3f\n", e, c.Support(), c.TP, c.FP, c.FN, c.Precision(), c.Recall())
		if e != pii.CreditCard && e != pii.IBAN {
			continue
		}
		pass := c.Precision() >= piiTarget && c.Recall() >= piiTarget && c.Support() > 0
		ok = ok && pass
		verdicts = append(verdicts, fmt.Sprintf("%s PII %s: precision %.3f recall %.3f (target >= %.2f, %d values)", mark(pass), e, c.Precision(), c.Recall(), piiTarget, c.Support()))
	}
	return verdicts, ok, nil
}

func mark(ok bool) string {
	if ok {
		return "PASS"
	}
	return "FAIL"
}
