// Package rolloutpolicy is the pure decision core of AgentRollouts: the metric gate (canary
// against stable, with one-sided exact or rank tests) and the step machine (advance, promote,
// roll back). It has no client and takes the time as an argument, so the reconciler and the
// tests drive it alike.
package rolloutpolicy

import (
	"fmt"
	"math"
	"strings"
)

// Variant is one side's samples on a step.
type Variant struct {
	// Requests, Errors and SafetyBlocks count requests (a request with several guardrail actions
	// counts once in SafetyBlocks).
	Requests, Errors, SafetyBlocks int64
	// TTFT is the histogram of time to first token in seconds (successful requests).
	TTFT Histogram
	// Quality is the histogram of posted quality scores (0 to 1).
	Quality Histogram
}

// GateConfig is the gate with defaults applied.
type GateConfig struct {
	// MinSamples each variant needs before the gate may pass.
	MinSamples int64
	// Alpha is the one-sided significance level.
	Alpha float64
	// MaxTTFTRatio bounds canary p95 / stable p95.
	MaxTTFTRatio float64
	// MaxErrorRateIncrease and MaxSafetyBlockRateIncrease are absolute bounds of canary - stable.
	MaxErrorRateIncrease, MaxSafetyBlockRateIncrease float64
	// Quality enables the quality check when QualityMinSamples > 0.
	QualityMinSamples  int64
	QualityMaxDecrease float64
}

// Verdicts of a check and of the gate.
const (
	Pass    = "Pass"
	Fail    = "Fail"
	Pending = "Pending"
)

// Check is one metric's comparison.
type Check struct {
	Metric         string
	Stable, Canary float64
	PValue         float64
	Verdict        string
	Message        string
}

// Outcome is the gate's verdict.
type Outcome struct {
	Verdict string
	Message string
	Checks  []Check
}

// earlyAbortDivisor: before MinSamples, a check fails only at alpha / earlyAbortDivisor (and with
// at least a quarter of MinSamples), so repeated looks at a small sample do not inflate false
// rollbacks much while a broken canary is still stopped early.
const earlyAbortDivisor = 10

// Evaluate compares canary with stable.
func Evaluate(c GateConfig, stable, canary Variant) Outcome {
	checks := []Check{
		rateCheck("errorRate", c, stable.Requests, stable.Errors, canary.Requests, canary.Errors, c.MaxErrorRateIncrease),
		rateCheck("safetyBlockRate", c, stable.Requests, stable.SafetyBlocks, canary.Requests, canary.SafetyBlocks, c.MaxSafetyBlockRateIncrease),
		ttftCheck(c, stable.TTFT, canary.TTFT),
	}
	if c.QualityMinSamples > 0 {
		checks = append(checks, qualityCheck(c, stable.Quality, canary.Quality))
	}
	o := Outcome{Verdict: Pass, Checks: checks}
	var failed, pending []string
	for _, ch := range checks {
		switch ch.Verdict {
		case Fail:
			failed = append(failed, ch.Metric+": "+ch.Message)
		case Pending:
			pending = append(pending, ch.Metric)
		}
	}
	switch {
	case len(failed) > 0:
		o.Verdict, o.Message = Fail, strings.Join(failed, "; ")
	case len(pending) > 0:
		o.Verdict, o.Message = Pending, "waiting for samples: "+strings.Join(pending, ", ")
	default:
		o.Message = "canary is not worse than stable on any metric"
	}
	return o
}

// enough reports whether n samples allow a final decision, or (early) only an abort.
func enough(c GateConfig, n int64) (final, early bool) {
	return n >= c.MinSamples, n >= max(10, c.MinSamples/4)
}

func rateCheck(metric string, c GateConfig, sN, sBad, cN, cBad int64, maxInc float64) Check {
	ch := Check{Metric: metric, Stable: ratio(sBad, sN), Canary: ratio(cBad, cN), PValue: 1}
	sFinal, sEarly := enough(c, sN)
	cFinal, cEarly := enough(c, cN)
	if !sEarly || !cEarly {
		ch.Verdict, ch.Message = Pending, fmt.Sprintf("stable %d, canary %d of %d samples", sN, cN, c.MinSamples)
		return ch
	}
	ch.PValue = FisherGreater(cBad, cN, sBad, sN)
	diff := ch.Canary - ch.Stable
	alpha := c.Alpha
	if !sFinal || !cFinal {
		alpha /= earlyAbortDivisor
	}
	switch {
	case ch.PValue < alpha && diff > maxInc:
		ch.Verdict = Fail
		ch.Message = fmt.Sprintf("canary %.4f vs stable %.4f (+%.4f > %.4f), Fisher p=%.2g < %.2g", ch.Canary, ch.Stable, diff, maxInc, ch.PValue, alpha)
	case !sFinal || !cFinal:
		ch.Verdict, ch.Message = Pending, fmt.Sprintf("stable %d, canary %d of %d samples", sN, cN, c.MinSamples)
	default:
		ch.Verdict = Pass
		ch.Message = fmt.Sprintf("canary %.4f vs stable %.4f, Fisher p=%.2g", ch.Canary, ch.Stable, ch.PValue)
	}
	return ch
}

func ttftCheck(c GateConfig, s, k Histogram) Check {
	ch := Check{Metric: "ttftP95", PValue: 1}
	sN, cN := int64(s.Total()), int64(k.Total())
	sFinal, sEarly := enough(c, sN)
	cFinal, cEarly := enough(c, cN)
	if !sEarly || !cEarly || len(s.Bounds) == 0 || len(k.Bounds) == 0 {
		ch.Verdict, ch.Message = Pending, fmt.Sprintf("stable %d, canary %d of %d TTFT samples", sN, cN, c.MinSamples)
		return ch
	}
	ch.Stable, ch.Canary = s.Quantile(0.95), k.Quantile(0.95)
	// The test: is the canary's share of requests slower than maxRatio x the stable's p95 larger
	// than the stable's own share beyond that point?
	th := c.MaxTTFTRatio * ch.Stable
	ch.PValue = FisherGreater(int64(k.Above(th)), cN, int64(s.Above(th)), sN)
	alpha := c.Alpha
	if !sFinal || !cFinal {
		alpha /= earlyAbortDivisor
	}
	ratioNow := math.Inf(1)
	if ch.Stable > 0 {
		ratioNow = ch.Canary / ch.Stable
	}
	switch {
	case ch.PValue < alpha && ratioNow > c.MaxTTFTRatio:
		ch.Verdict = Fail
		ch.Message = fmt.Sprintf("canary p95 %.3fs vs stable %.3fs (x%.2f > x%.2f), Fisher p=%.2g < %.2g", ch.Canary, ch.Stable, ratioNow, c.MaxTTFTRatio, ch.PValue, alpha)
	case !sFinal || !cFinal:
		ch.Verdict, ch.Message = Pending, fmt.Sprintf("stable %d, canary %d of %d TTFT samples", sN, cN, c.MinSamples)
	default:
		ch.Verdict = Pass
		ch.Message = fmt.Sprintf("canary p95 %.3fs vs stable %.3fs, Fisher p=%.2g", ch.Canary, ch.Stable, ch.PValue)
	}
	return ch
}

func qualityCheck(c GateConfig, s, k Histogram) Check {
	ch := Check{Metric: "quality", Stable: s.Mean(), Canary: k.Mean(), PValue: 1}
	sN, cN := int64(s.Total()), int64(k.Total())
	if sN < c.QualityMinSamples || cN < c.QualityMinSamples {
		ch.Verdict, ch.Message = Pending, fmt.Sprintf("stable %d, canary %d of %d scores", sN, cN, c.QualityMinSamples)
		return ch
	}
	ch.PValue = MannWhitneyLess(k, s)
	diff := ch.Stable - ch.Canary
	if ch.PValue < c.Alpha && diff > c.QualityMaxDecrease {
		ch.Verdict = Fail
		ch.Message = fmt.Sprintf("canary mean %.3f vs stable %.3f (-%.3f > %.3f), Mann-Whitney p=%.2g < %.2g", ch.Canary, ch.Stable, diff, c.QualityMaxDecrease, ch.PValue, c.Alpha)
		return ch
	}
	ch.Verdict = Pass
	ch.Message = fmt.Sprintf("canary mean %.3f vs stable %.3f, Mann-Whitney p=%.2g", ch.Canary, ch.Stable, ch.PValue)
	return ch
}

func ratio(a, b int64) float64 {
	if b == 0 {
		return 0
	}
	return float64(a) / float64(b)
}
