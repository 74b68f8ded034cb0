package scoring

import (
	"fmt"
	"io"
	"math"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	corev1 "k8s.io/api/core/v1"

	nnv1 "github.com/neuronetes/neuronetes/api/v1alpha1"
)

// The per-pod series of the gateway's per-pool view (/pools/<namespace>/<name>/metrics on its
// admin port; gateway/metrics PoolSessions) that headroom reads.
const gatewaySessions = "neuronetes_concurrent_sessions"

// PoolLoad is the gateway's view of a pool's serving pods, by pod name: the sessions pinned to
// each (active in the last 5 minutes). Read it with MergePoolLoad, one call per gateway replica.
type PoolLoad struct {
	shared  map[string]float64 // scope="shared": the same on every replica, so the largest
	replica map[string]float64 // scope="replica": each replica's own, so summed
}

// Sessions returns the sessions pinned to pod: the shared count where a replica reported one,
// plus the replica-local counts.
func (l *PoolLoad) Sessions(pod string) float64 {
	if l == nil {
		return 0
	}
	return l.shared[pod] + l.replica[pod]
}

// MergePoolLoad parses one gateway replica's per-pool view (Prometheus text) into l.
func MergePoolLoad(l *PoolLoad, r io.Reader) error {
	tp := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := tp.TextToMetricFamilies(r)
	if err != nil {
		return fmt.Errorf("gateway pool view: %w", err)
	}
	if l.shared == nil {
		l.shared, l.replica = map[string]float64{}, map[string]float64{}
	}
	for _, m := range fams[gatewaySessions].GetMetric() {
		pod, v := label(m, "pod"), m.GetGauge().GetValue()
		if pod == "" || math.IsNaN(v) || v < 0 {
			continue
		}
		if label(m, "scope") == "shared" {
			l.shared[pod] = max(l.shared[pod], v)
		} else {
			l.replica[pod] += v
		}
	}
	return nil
}

func label(m *dto.Metric, name string) string {
	for _, lp := range m.GetLabel() {
		if lp.GetName() == name {
			return lp.GetValue()
		}
	}
	return ""
}

// HeadroomRaw is a node's raw headroom score for a pod of pool (lower better): over the pool's
// pods on the node (same namespace, not being deleted), each counts 1 plus the sessions the
// gateway has pinned to it (load, nil: none known), rounded. Without load it is SamePool.
func HeadroomRaw(namespace, pool string, pods []*corev1.Pod, load *PoolLoad) int64 {
	if pool == "" {
		return 0
	}
	var n float64
	for _, p := range pods {
		if p.Namespace == namespace && p.Labels[nnv1.PoolLabel] == pool && p.DeletionTimestamp == nil {
			n += 1 + load.Sessions(p.Name)
		}
	}
	return int64(math.Round(n))
}
