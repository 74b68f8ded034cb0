package rollout

import (
	"github.com/prometheus/client_golang/prometheus"

	nnv1 "github.com/neuronetes/neuronetes/api/v1alpha1"
)

// Modes of a sample.
const (
	ModeLive   = "live"
	ModeShadow = "shadow"
)

// TTFTBuckets are the TTFT histogram's bounds: 5 ms to about 60 s in steps of 25%, fine enough
// for the gate's p95 and its tail test.
var TTFTBuckets = prometheus.ExponentialBuckets(0.005, 1.25, 43)

// QualityBuckets are the quality score histogram's bounds (scores are 0 to 1).
var QualityBuckets = prometheus.LinearBuckets(0.05, 0.05, 20)

// Recorder exports the per-variant samples the controller's gate reads.
type Recorder struct {
	Requests *prometheus.CounterVec
	TTFT     *prometheus.HistogramVec
	Safety   *prometheus.CounterVec
	Quality  *prometheus.HistogramVec
	// ShadowToolCalls counts tool calls in shadow responses, which are discarded (suppressed).
	ShadowToolCalls *prometheus.CounterVec
}

// NewRecorder registers the metrics with reg (nil: not registered).
func NewRecorder(reg prometheus.Registerer) *Recorder {
	r := &Recorder{
		Requests: prometheus.NewCounterVec(prometheus.CounterOpts{Name: nnv1.RolloutRequestsMetric,
			Help: "Requests of an AgentRollout step by variant, mode (live or shadow) and outcome (ok or error)."},
			[]string{"namespace", "rollout", "step", "variant", "mode", "outcome"}),
		TTFT: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: nnv1.RolloutTTFTMetric,
			Help: "Time to first token of an AgentRollout step's successful requests by variant and mode.", Buckets: TTFTBuckets},
			[]string{"namespace", "rollout", "step", "variant", "mode"}),
		Safety: prometheus.NewCounterVec(prometheus.CounterOpts{Name: nnv1.RolloutSafetyMetric,
			Help: "Requests of an AgentRollout step that a guardrail blocked, redacted or flagged, by variant and mode."},
			[]string{"namespace", "rollout", "step", "variant", "mode"}),
		Quality: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: nnv1.RolloutQualityMetric,
			Help: "Quality scores (0-1) posted for conversations of an AgentRollout step, by variant.", Buckets: QualityBuckets},
			[]string{"namespace", "rollout", "step", "variant"}),
		ShadowToolCalls: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "neuronetes_rollout_shadow_tool_calls_suppressed_total",
			Help: "Tool calls the canary made in shadow responses; the responses are discarded, so no tool runs."},
			[]string{"namespace", "rollout"}),
	}
	if reg != nil {
		reg.MustRegister(r.Requests, r.TTFT, r.Safety, r.Quality, r.ShadowToolCalls)
	}
	return r
}

// Sample is one request's outcome for a rollout.
type Sample struct {
	Variant Variant
	Mode    string
	Error   bool
	// TTFT in seconds (0: none, not observed).
	TTFT float64
	// Safety is true when a guardrail acted on the request or its response.
	Safety bool
}

// Observe records a sample under the view's step.
func (r *Recorder) Observe(v *View, step string, s Sample) {
	if r == nil || step == "" {
		return
	}
	outcome := "ok"
	if s.Error {
		outcome = "error"
	}
	r.Requests.WithLabelValues(v.Namespace, v.Name, step, string(s.Variant), s.Mode, outcome).Inc()
	if !s.Error && s.TTFT > 0 {
		r.TTFT.WithLabelValues(v.Namespace, v.Name, step, string(s.Variant), s.Mode).Observe(s.TTFT)
	}
	if s.Safety {
		r.Safety.WithLabelValues(v.Namespace, v.Name, step, string(s.Variant), s.Mode).Inc()
	}
}

// ObserveQuality records a posted score.
func (r *Recorder) ObserveQuality(v *View, step string, x Variant, score float64) {
	if r == nil || step == "" {
		return
	}
	r.Quality.WithLabelValues(v.Namespace, v.Name, step, string(x)).Observe(score)
}

// Forget drops a finished step's series.
func (r *Recorder) Forget(v *View, step string) {
	if r == nil {
		return
	}
	l := prometheus.Labels{"namespace": v.Namespace, "rollout": v.Name, "step": step}
	r.Requests.DeletePartialMatch(l)
	r.TTFT.DeletePartialMatch(l)
	r.Safety.DeletePartialMatch(l)
	r.Quality.DeletePartialMatch(l)
}
