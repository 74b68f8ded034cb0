package agentsession

// Warm restore hosts (docs/sessions.md, "Warm restore hosts"): pure decisions. An AgentClass with
// spec.sessions.warmRestoreHosts > 0 keeps that many unclaimed pods rendered as a resume's host
// pod, running; a resume claims one (preferring the node that holds its checkpoint in the node
// agent's local cache) instead of creating its host pod and waiting for it to start.

import (
	"crypto/sha256"
	"encoding/hex"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	nnv1 "github.com/neuronetes/neuronetes/api/v1alpha1"
)

// ClaimHostReason is the reason of the event of a resume that claimed a warm restore host.
const ClaimHostReason = "ClaimedRestoreHost"

// WarmRestoreHosts is the class's spec.sessions.warmRestoreHosts (0 when unset).
func WarmRestoreHosts(class *nnv1.AgentClass) int {
	if class.Spec.Sessions == nil || class.Spec.Sessions.WarmRestoreHosts < 0 {
		return 0
	}
	return int(class.Spec.Sessions.WarmRestoreHosts)
}

// RestoreHostHash is the hash of what a warm restore host is rendered from: the class's
// template and sidecar settings (TemplateHash) and the restore host image. A host of another
// hash is retired and never claimed.
func RestoreHostHash(class *nnv1.AgentClass, image string) string {
	sum := sha256.Sum256([]byte(TemplateHash(class) + "\x00" + image))
	return hex.EncodeToString(sum[:])[:16]
}

// IsRestoreHost reports whether a warm pod is a restore host.
func IsRestoreHost(p *corev1.Pod) bool { return p.Labels[nnv1.WarmRestoreHostLabel] == "true" }

// hostRunning: the pod runs and its first (host) container has started.
func hostRunning(p *corev1.Pod) bool {
	if p.Status.Phase != corev1.PodRunning || len(p.Spec.Containers) == 0 {
		return false
	}
	for _, cs := range p.Status.ContainerStatuses {
		if cs.Name == p.Spec.Containers[0].Name {
			return cs.State.Running != nil
		}
	}
	return false
}

// BuildWarmRestoreHost renders an unclaimed restore host of class named name: BuildPod as a
// resume's host pod (image in place of the first container's, its command, arguments, liveness
// and startup probes dropped) with the class's defaults, labelled as a warm pod (WarmPoolLabel,
// the hash) and WarmRestoreHostLabel, running as its own ServiceAccount name.
func BuildWarmRestoreHost(class *nnv1.AgentClass, name, hash, image string) (*corev1.Pod, error) {
	pod, err := buildWarm(class, name, hash, image)
	if err != nil {
		return nil, err
	}
	pod.Labels[nnv1.WarmRestoreHostLabel] = "true"
	return pod, nil
}

// CanClaimRestoreHost reports whether a resuming session may claim a warm restore host of its
// class, and if not, why: the class keeps hosts, and the session's pod would be rendered as
// they are (CanClaim's rules: the template's RuntimeClass, the default workspace limit; a
// session moving off a drained node creates its host pod, which avoids that node).
func CanClaimRestoreHost(s *nnv1.AgentSession, class *nnv1.AgentClass) (bool, string) {
	if WarmRestoreHosts(class) == 0 {
		return false, "no warm restore hosts"
	}
	return fitsWarmPods(s, class)
}

// RestoreHostCandidates orders the restore hosts a resume may claim: hosts whose host container
// runs, not terminating or finished, of the current hash; those on preferNode (the node whose
// local cache holds the session's checkpoint; "" for none) first, then the oldest, then by name.
func RestoreHostCandidates(pods []WarmPod, hash, preferNode string) []string {
	var ok []WarmPod
	for _, p := range pods {
		if p.Host && p.Ready && !p.Terminating && !p.Done && p.Hash == hash {
			ok = append(ok, p)
		}
	}
	return orderedNames(ok, preferNode)
}

// HostRefillDelay is how long after a resume claimed one of a class's restore hosts the class's
// replacement host waits to be created: the restore (CRIU, the agent's first page faults) runs
// on the claimed host's node, where the scheduler would usually start the replacement too, and
// the replacement is not needed until the next resume.
const HostRefillDelay = 2 * time.Second

// RefillWait is how long a class whose last restore host claim was at last still waits, at now,
// before creating replacement hosts (0: create them now).
func RefillWait(last, now time.Time, delay time.Duration) time.Duration {
	if last.IsZero() {
		return 0
	}
	if w := last.Add(delay).Sub(now); w > 0 {
		return w
	}
	return 0
}

// hostClaims records, per class, when a resume last claimed one of its restore hosts; the
// session reconciler writes it, the warm pool reconciler reads it (RefillWait).
type hostClaims struct {
	mu   sync.Mutex
	last map[types.NamespacedName]time.Time
}

func (h *hostClaims) record(class types.NamespacedName, at time.Time) {
	if h == nil {
		return
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.last == nil {
		h.last = map[types.NamespacedName]time.Time{}
	}
	h.last[class] = at
}

func (h *hostClaims) at(class types.NamespacedName) time.Time {
	if h == nil {
		return time.Time{}
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.last[class]
}
