package scalesim

import (
	"fmt"
	"math"
	"math/rand/v2"
	"strconv"
	"strings"
	"time"
)

// SyntheticKinds are the load shapes Synthetic generates, each one a way a
// reactive autoscaler is known to fail.
var SyntheticKinds = []string{"dip", "ramp", "burst", "diurnal"}

// SyntheticRate is the mean request rate (requests/s) of the synthetic traces
// at their base level.
const SyntheticRate = 3.0

// Synthetic generates a deterministic trace of the given kind and length from
// seed: Poisson arrivals whose rate follows the kind's shape, prompts and
// outputs drawn from log-normal distributions (median 1,000 and 100 tokens).
// The shapes, at a base rate of SyntheticRate:
//
//   - dip: the base rate, a drop to 15% for the middle fifth, then a step
//     straight back (a pool that scaled down with the dip meets the full load
//     with too few replicas);
//   - ramp: a linear rise to 4x over the second quarter, a plateau, and a
//     linear fall back over the last quarter;
//   - burst: the base rate at 40%, with bursts of 5-10 s at 12x every 20-240 s
//     (uniformly random gaps), so no period predicts them;
//   - diurnal: one compressed day, a sinusoid between 25% and 175% of the base
//     rate with a period of the whole trace, plus slow noise.
func Synthetic(kind string, seed uint64, d time.Duration) (Trace, error) {
	if d <= 0 {
		return Trace{}, fmt.Errorf("synthetic trace: duration must be > 0, got %s", d)
	}
	rng := rand.New(rand.NewPCG(seed, 0x6e6e))
	total := d.Seconds()
	var rate func(t float64) float64
	peak := SyntheticRate
	switch kind {
	case "dip":
		rate = func(t float64) float64 {
			if t >= 0.4*total && t < 0.6*total {
				return 0.15 * SyntheticRate
			}
			return SyntheticRate
		}
	case "ramp":
		peak = 4 * SyntheticRate
		rate = func(t float64) float64 {
			f := t / total
			switch {
			case f < 0.25:
				return SyntheticRate
			case f < 0.5:
				return SyntheticRate * (1 + 3*(f-0.25)/0.25)
			case f < 0.75:
				return 4 * SyntheticRate
			default:
				return SyntheticRate * (4 - 3*(f-0.75)/0.25)
			}
		}
	case "burst":
		peak = 12 * SyntheticRate
		bursts := burstWindows(rng, total)
		rate = func(t float64) float64 {
			for _, b := range bursts {
				if t >= b[0] && t < b[1] {
					return 12 * SyntheticRate
				}
			}
			return 0.4 * SyntheticRate
		}
	case "diurnal":
		peak = 2.1 * SyntheticRate
		noise := slowNoise(rng, total, 120)
		rate = func(t float64) float64 {
			s := 1 - 0.75*math.Cos(2*math.Pi*t/total)
			return SyntheticRate * s * (1 + 0.2*noise(t))
		}
	default:
		return Trace{}, fmt.Errorf("synthetic trace: unknown kind %q (want one of %s)", kind, strings.Join(SyntheticKinds, ", "))
	}
	var reqs []Request
	// Thinning: candidate arrivals at the peak rate, each kept with rate(t)/peak.
	for t := rng.ExpFloat64() / peak; t < total; t += rng.ExpFloat64() / peak {
		if rng.Float64()*peak >= rate(t) {
			continue
		}
		reqs = append(reqs, Request{Arrival: t, In: logNormal(rng, 1000, 0.7, 16000), Out: logNormal(rng, 100, 0.8, 2000)})
	}
	if len(reqs) == 0 {
		return Trace{}, fmt.Errorf("synthetic trace %s: no requests in %s", kind, d)
	}
	t0 := reqs[0].Arrival
	for i := range reqs {
		reqs[i].Arrival -= t0
	}
	return Trace{Name: "synthetic-" + kind + "-" + strconv.FormatUint(seed, 10), Requests: reqs}, nil
}

// burstWindows draws [start, end) windows of 5-10 s separated by 20-240 s.
func burstWindows(rng *rand.Rand, total float64) [][2]float64 {
	var out [][2]float64
	for t := 20 + 220*rng.Float64(); t < total; {
		n := 5 + 5*rng.Float64()
		out = append(out, [2]float64{t, t + n})
		t += n + 20 + 220*rng.Float64()
	}
	return out
}

// slowNoise returns a function of time in [-1, 1] that moves linearly between
// random knots every step seconds.
func slowNoise(rng *rand.Rand, total, step float64) func(float64) float64 {
	knots := make([]float64, int(total/step)+2)
	for i := range knots {
		knots[i] = 2*rng.Float64() - 1
	}
	return func(t float64) float64 {
		i := int(t / step)
		f := t/step - float64(i)
		return knots[i]*(1-f) + knots[i+1]*f
	}
}

// logNormal draws a log-normal integer with the given median and sigma,
// clamped to [1, hi].
func logNormal(rng *rand.Rand, median, sigma float64, hi int) int {
	v := int(math.Round(median * math.Exp(sigma*rng.NormFloat64())))
	return min(max(v, 1), hi)
}
