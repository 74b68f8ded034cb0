package scoring

import (
	"fmt"
	"io"
	"math"

	corev1 "k8s.io/api/core/v1"

	nnv1 "github.com/neuronetes/neuronetes/api/v1alpha1"
	"github.com/neuronetes/neuronetes/gateway/poolview"
)

// PoolLoad is the gateway's view of a pool's serving pods, by pod name: the sessions pinned to
// each (active in the last 5 minutes), combined over gateway replicas as gateway/poolview
// combines them. Read it with MergePoolLoad, one call per gateway replica.
type PoolLoad struct{ sessions poolview.SessionCount }

// Sessions returns the sessions pinned to pod (0 for a nil load).
func (l *PoolLoad) Sessions(pod string) float64 {
	if l == nil || pod == "" {
		return 0
	}
	return l.sessions.Pod(pod)
}

// Add folds one gateway replica's parsed per-pool view into l.
func (l *PoolLoad) Add(fams poolview.Families) { l.sessions.Add(fams) }

// MergePoolLoad parses one gateway replica's per-pool view (Prometheus text) into l.
func MergePoolLoad(l *PoolLoad, r io.Reader) error {
	fams, err := poolview.Parse(r)
	if err != nil {
		return fmt.Errorf("gateway pool view: %w", err)
	}
	l.Add(fams)
	return nil
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
