package main

import (
	"fmt"
	"path/filepath"

	"github.com/neuronetes/neuronetes/gateway/guard/pii"
	"github.com/neuronetes/neuronetes/gateway/guard/pii/evalset"
)

// piiTarget is the precision and recall the checksum-validated types must reach on the dev set.
const piiTarget = 0.95

// heldOutTargets are the floors on the held-out set (evalset.TestHeldOutTargets holds the same):
// recall for cards and phones, precision no lower than the detector's before libphonenumber and
// the full IIN table.
var heldOutTargets = map[pii.Entity]struct{ precision, recall float64 }{
	pii.CreditCard: {0.969, 0.98},
	pii.Phone:      {0.983, 0.90},
}

func piiBench(dir string, seed uint64, n int) ([]string, bool, error) {
	a, err := evalset.LoadTemplates(filepath.Join(dir, "presidio_research_templates.txt"), "presidio-research")
	if err != nil {
		return nil, false, err
	}
	b, err := evalset.LoadTemplates(filepath.Join(dir, "neuronetes_decoys.txt"), "neuronetes-decoys")
	if err != nil {
		return nil, false, err
	}
	d := pii.New(pii.Options{MinScore: 0.5})
	ok := true
	var verdicts []string

	res := evalset.Evaluate(d, evalset.Generate(append(a, b...), seed, n))
	fmt.Printf("== PII precision/recall: %d sentences (Presidio-research templates + decoys), seed %d, min score 0.5 ==\n", n, seed)
	printCounts(res)
	for _, e := range []pii.Entity{pii.CreditCard, pii.IBAN} {
		c := counts(res, e)
		pass := c.Precision() >= piiTarget && c.Recall() >= piiTarget && c.Support() > 0
		ok = ok && pass
		verdicts = append(verdicts, fmt.Sprintf("%s PII %s: precision %.3f recall %.3f (target >= %.2f, %d values)", mark(pass), e, c.Precision(), c.Recall(), piiTarget, c.Support()))
	}

	held, err := evalset.LoadLabelled(filepath.Join(dir, "heldout.jsonl"), "heldout")
	if err != nil {
		return nil, false, err
	}
	res = evalset.Evaluate(d, held)
	fmt.Printf("== PII precision/recall: held-out set, %d sentences (testdata/heldout.jsonl, never tuned on), min score 0.5 ==\n", len(held))
	printCounts(res)
	for _, e := range []pii.Entity{pii.CreditCard, pii.Phone} {
		c, t := counts(res, e), heldOutTargets[e]
		pass := c.Precision() >= t.precision && c.Recall() >= t.recall && c.Support() > 0
		ok = ok && pass
		verdicts = append(verdicts, fmt.Sprintf("%s PII held-out %s: precision %.3f recall %.3f (targets >= %.3f / %.2f, %d values)", mark(pass), e, c.Precision(), c.Recall(), t.precision, t.recall, c.Support()))
	}
	return verdicts, ok, nil
}

func counts(res map[pii.Entity]*evalset.Counts, e pii.Entity) evalset.Counts {
	if c := res[e]; c != nil {
		return *c
	}
	return evalset.Counts{}
}

func printCounts(res map[pii.Entity]*evalset.Counts) {
	fmt.Printf("%-14s %8s %6s %6s %6s %9s %7s\n", "entity", "support", "tp", "fp", "fn", "precision", "recall")
	for _, e := range pii.AllEntities {
		if c := res[e]; c != nil {
			fmt.Printf("%-14s %8d %6d %6d %6d %9.3f %7.3f\n", e, c.Support(), c.TP, c.FP, c.FN, c.Precision(), c.Recall())
		}
	}
}

func mark(ok bool) string {
	if ok {
		return "PASS"
	}
	return "FAIL"
}
