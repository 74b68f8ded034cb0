package agentsession

// The warm pool of session pods (docs/sessions.md, "Warm pool"): pure decisions. An AgentClass
// with spec.sessions.warmPoolSize > 0 keeps that many unclaimed session pods started, each with
// its own ServiceAccount; a new AgentSession claims a Ready one instead of creating its pod.

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"sort"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	nnv1 "github.com/neuronetes/neuronetes/api/v1alpha1"
)

// WarmPoolSize is the class's spec.sessions.warmPoolSize (0 when unset).
func WarmPoolSize(class *nnv1.AgentClass) int {
	if class.Spec.Sessions == nil || class.Spec.Sessions.WarmPoolSize < 0 {
		return 0
	}
	return int(class.Spec.Sessions.WarmPoolSize)
}

// TemplateHash is the hash of what a warm pod is rendered from (the class's template and sidecar
// settings, which the injection webhook reads); a warm pod labelled with another hash is stale.
func TemplateHash(class *nnv1.AgentClass) string {
	b, _ := json.Marshal(struct {
		T *corev1.PodTemplateSpec `json:"t"`
		S *nnv1.SidecarConfig     `json:"s"`
	}{class.Spec.Template, class.Spec.Sidecar}) // plain structs: Marshal does not fail
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])[:16]
}

// WarmPoolNetworkPolicyName is the class's warm pool's NetworkPolicy, selecting its unclaimed pods.
func WarmPoolNetworkPolicyName(class string) string { return "warmpool-" + class }

// warmPodPrefix starts the name of every warm pod (and of its ServiceAccount) of class.
func warmPodPrefix(class string) string { return "warmpool-" + class + "-" }

// WarmPod is what the pool's decisions read of one warm pod.
type WarmPod struct {
	Name string
	// Hash is its WarmPoolTemplateHashLabel.
	Hash string
	// Ready: Running and Ready. Terminating: being deleted. Done: Succeeded or Failed.
	Ready, Terminating, Done bool
	// Created is its creation time.
	Created time.Time
	// Node is the node it is bound to ("" before scheduling).
	Node string
	// Host: a restore host (WarmRestoreHostLabel); its Ready means its host container runs.
	Host bool
}

// WarmPodOf reads a pod for the pool's decisions.
func WarmPodOf(p *corev1.Pod) WarmPod {
	w := WarmPod{Name: p.Name, Hash: p.Labels[nnv1.WarmPoolTemplateHashLabel], Ready: podReady(p),
		Terminating: !p.DeletionTimestamp.IsZero(),
		Done:        p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed,
		Created:     p.CreationTimestamp.Time, Node: p.Spec.NodeName, Host: IsRestoreHost(p)}
	if w.Host {
		// A host is not Ready before a restore (its readiness probe is the agent's); it is
		// ready to be claimed once its host container runs.
		w.Ready = hostRunning(p)
	}
	return w
}

// PoolPlan is what PlanWarmPool asks: create Create new warm pods, delete Retire.
type PoolPlan struct {
	Create int
	Retire []string
}

// PlanWarmPool sizes a class's warm pool: pods of another template hash and finished pods are
// retired; of the live pods of the current hash, those over size are retired, pods not yet Ready
// first, then the newest; the missing ones are created. pending counts pods created but not yet
// seen in pods (they count as live). Terminating pods are left to finish.
func PlanWarmPool(pods []WarmPod, pending, size int, hash string) PoolPlan {
	var plan PoolPlan
	var live []WarmPod
	for _, p := range pods {
		switch {
		case p.Terminating:
		case p.Hash != hash || p.Done:
			plan.Retire = append(plan.Retire, p.Name)
		default:
			live = append(live, p)
		}
	}
	if extra := len(live) + pending - size; extra > 0 {
		sort.SliceStable(live, func(i, j int) bool {
			if live[i].Ready != live[j].Ready {
				return !live[i].Ready
			}
			if !live[i].Created.Equal(live[j].Created) {
				return live[i].Created.After(live[j].Created)
			}
			return live[i].Name > live[j].Name
		})
		for i := 0; i < extra && i < len(live); i++ {
			plan.Retire = append(plan.Retire, live[i].Name)
		}
	}
	if missing := size - len(live) - pending; missing > 0 {
		plan.Create = missing
	}
	sort.Strings(plan.Retire)
	return plan
}

// ClaimCandidates orders the warm pods a new session may claim: not restore hosts, Ready, not terminating or finished,
// of the current hash; the oldest first (they have been ready longest), then by name.
func ClaimCandidates(pods []WarmPod, hash string) []string {
	var ok []WarmPod
	for _, p := range pods {
		if p.Ready && !p.Host && !p.Terminating && !p.Done && p.Hash == hash {
			ok = append(ok, p)
		}
	}
	return orderedNames(ok, "")
}

// orderedNames returns the names of pods: those on preferNode first ("" prefers none), then the
// oldest, then by name.
func orderedNames(pods []WarmPod, preferNode string) []string {
	sort.SliceStable(pods, func(i, j int) bool {
		ai, aj := preferNode != "" && pods[i].Node == preferNode, preferNode != "" && pods[j].Node == preferNode
		if ai != aj {
			return ai
		}
		if !pods[i].Created.Equal(pods[j].Created) {
			return pods[i].Created.Before(pods[j].Created)
		}
		return pods[i].Name < pods[j].Name
	})
	names := make([]string, len(pods))
	for i, p := range pods {
		names[i] = p.Name
	}
	return names
}

// CanClaim reports whether a session may claim a warm pod of its class, and if not, why: a
// warm pod is rendered with the template's RuntimeClass and the default workspace limit, so a
// session overriding either, or one moving off a drained node, gets a pod of its own.
func CanClaim(s *nnv1.AgentSession, class *nnv1.AgentClass) (bool, string) {
	if WarmPoolSize(class) == 0 {
		return false, "no warm pool"
	}
	return fitsWarmPods(s, class)
}

// fitsWarmPods reports whether a session's pod would be rendered as the class's warm pods are
// (the template's RuntimeClass, the default workspace limit, no node to avoid), and if not, why.
func fitsWarmPods(s *nnv1.AgentSession, class *nnv1.AgentClass) (bool, string) {
	if s.Spec.RuntimeClassName != nil {
		rc, err := RuntimeClassFor(s, class)
		var tmpl *string
		if class.Spec.Template != nil {
			tmpl = class.Spec.Template.Spec.RuntimeClassName
		}
		if err != nil || tmpl == nil || *rc != *tmpl {
			return false, "spec.runtimeClassName differs from the template's"
		}
	}
	if w := s.Spec.WorkspaceSizeLimit; w != nil && w.Cmp(DefaultWorkspaceSizeLimit) != 0 {
		return false, "spec.workspaceSizeLimit differs from the default " + DefaultWorkspaceSizeLimit.String()
	}
	if s.Status.DrainedNode != "" {
		return false, "moving off a drained node"
	}
	return true, ""
}

// BuildWarmPod renders an unclaimed session pod of class named name, by BuildPod as a session's
// first pod with the class's defaults: labelled WarmPoolLabel=<class> and the template hash
// instead of SessionLabel, running as its own ServiceAccount name.
func BuildWarmPod(class *nnv1.AgentClass, name, hash string) (*corev1.Pod, error) {
	return buildWarm(class, name, hash, "")
}

// buildWarm renders an unclaimed warm pod of class named name by BuildPod (image "" for a
// session's first pod, else a resume's host pod running image): labelled WarmPoolLabel=<class>
// and the template hash instead of SessionLabel, running as its own ServiceAccount name.
func buildWarm(class *nnv1.AgentClass, name, hash, image string) (*corev1.Pod, error) {
	s := &nnv1.AgentSession{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: class.Namespace}}
	pod, err := BuildPod(s, class, 0, image)
	if err != nil {
		return nil, err
	}
	pod.Name = name
	delete(pod.Labels, nnv1.SessionLabel)
	pod.Labels[nnv1.WarmPoolLabel] = class.Name
	pod.Labels[nnv1.WarmPoolTemplateHashLabel] = hash
	pod.Spec.ServiceAccountName = name
	return pod, nil
}

// warmServiceAccount is a warm pod's own ServiceAccount (no token mounted); the claim moves it
// to the session.
func warmServiceAccount(class *nnv1.AgentClass, name string) *corev1.ServiceAccount {
	f := false
	return &corev1.ServiceAccount{
		ObjectMeta:                   metav1.ObjectMeta{Name: name, Namespace: class.Namespace, Labels: map[string]string{nnv1.WarmPoolLabel: class.Name}},
		AutomountServiceAccountToken: &f,
	}
}

// claimedPod is pod as claimed by session s: SessionLabel set, the warm pool's labels removed,
// and s its only (controller) owner.
func claimedPod(pod *corev1.Pod, s *nnv1.AgentSession) *corev1.Pod {
	p := pod.DeepCopy()
	delete(p.Labels, nnv1.WarmPoolLabel)
	delete(p.Labels, nnv1.WarmPoolTemplateHashLabel)
	delete(p.Labels, nnv1.WarmRestoreHostLabel)
	p.Labels[nnv1.SessionLabel] = s.Name
	p.OwnerReferences = []metav1.OwnerReference{sessionOwner(s)}
	return p
}

// sessionOwner is the controller reference to s.
func sessionOwner(s *nnv1.AgentSession) metav1.OwnerReference {
	t := true
	return metav1.OwnerReference{APIVersion: nnv1.GroupVersion.String(), Kind: "AgentSession", Name: s.Name, UID: s.UID,
		Controller: &t, BlockOwnerDeletion: &t}
}

// warmPoolError names the field of a class whose warm pool cannot be built.
func warmPoolError(err error) error {
	return fmt.Errorf("spec.sessions.warmPoolSize: cannot keep warm pods: %w", err)
}
