package agentsession

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"
	"sigs.k8s.io/controller-runtime/pkg/client"

	nnv1 "github.com/neuronetes/neuronetes/api/v1alpha1"
)

// ClaimReason is the reason of the event and condition of a session that claimed a warm pod.
const ClaimReason = "Claimed"

// warmPoolStep is the warm pool's part of a reconcile, before the decision's action: it adopts
// a claimed ServiceAccount (ensureServiceAccount); for a fresh start (CreatePod into Pending) it
// claims a Ready warm pod when there is one: then the session is Running at once, d says so
// (reason Claimed), and the action is done; for a resume (CreatePod into Resuming) it claims a
// running warm restore host when there is one, with its Restore, and the action is done.
func (r *Reconciler) warmPoolStep(ctx context.Context, s *nnv1.AgentSession, d *Decision, now time.Time) (bool, error) {
	if err := r.ensureServiceAccount(ctx, s); err != nil {
		return false, err
	}
	// After the adoption: the ServiceAccount the session runs as now is its own before an
	// earlier one goes.
	if err := r.retireServiceAccounts(ctx, s); err != nil {
		return false, err
	}
	if d.Action == CreatePod && d.Phase == nnv1.SessionResuming {
		// A resume into a running warm restore host; the phase stays Resuming until the
		// restored process serves.
		claimed, err := r.claimRestoreHost(ctx, s)
		if claimed {
			s.Status.Phase = d.Phase
		}
		return claimed, err
	}
	if d.Action != CreatePod || d.Phase != nnv1.SessionPending {
		return false, nil
	}
	claimed, err := r.claim(ctx, s, now)
	if err != nil || !claimed {
		return false, err
	}
	d.Phase, d.Reason = nnv1.SessionRunning, ClaimReason
	s.Status.Phase = d.Phase
	return true, nil
}

// claim gives a new session (or one whose pod was lost without a checkpoint) a Ready warm pod
// of its class when there is one and the session may take it (CanClaim), and reports whether it
// did. The session's NetworkPolicy and PodDisruptionBudget are created first; the claim itself
// is one update of the pod at the version read (labels and owner), so of two sessions racing for
// a pod one gets a conflict and tries the next. The pod's ServiceAccount then becomes the session's.
func (r *Reconciler) claim(ctx context.Context, s *nnv1.AgentSession, now time.Time) (bool, error) {
	logger := klog.FromContext(ctx)
	var class nnv1.AgentClass
	if err := r.Client.Get(ctx, types.NamespacedName{Namespace: s.Namespace, Name: s.Spec.ClassRef.Name}, &class); err != nil {
		return false, nil // createPod reports it, naming spec.classRef
	}
	if ok, why := CanClaim(s, &class); !ok {
		logger.V(4).Info("No warm pod claimed", "why", why)
		return false, nil
	}
	pods, byName, err := r.listWarm(ctx, &class, false)
	if err != nil {
		return false, err
	}
	cands := ClaimCandidates(pods, TemplateHash(&class))
	p, err := r.takeWarmPod(ctx, s, cands, byName)
	if err != nil || p == nil {
		return false, err
	}
	{
		t := metav1.NewTime(now)
		// A session whose pod was lost without a checkpoint retires the ServiceAccount it ran as.
		useServiceAccount(s, p.Spec.ServiceAccountName)
		s.Status.Pods++
		s.Status.PodName, s.Status.NodeName = p.Name, p.Spec.NodeName
		s.Status.LastActivity, s.Status.DrainedNode = &t, ""
		logger.Info("Claimed a warm pod", "pod", p.Name, "serviceAccount", p.Spec.ServiceAccountName)
		// The ServiceAccount stays the class's until the next reconcile adopts it
		// (ensureServiceAccount), off the path to Running.
		return true, nil
	}
}

// takeWarmPod moves the first of cands (names in byName, read from the warm pod cache) that it
// can take into session s and returns it (nil when none could be taken). The session's
// NetworkPolicy and PodDisruptionBudget are created first; the claim itself is one update of
// the pod at the version read (labels and owner), so of two sessions racing for a pod one gets a
// conflict and tries the next. Fresh sessions (claim) and resumes (claimRestoreHost) share it.
func (r *Reconciler) takeWarmPod(ctx context.Context, s *nnv1.AgentSession, cands []string, byName map[string]*corev1.Pod) (*corev1.Pod, error) {
	if len(cands) == 0 {
		return nil, nil
	}
	if r.NetworkPolicy != nil {
		// Before the pod leaves the warm pool's policy for the session's.
		if err := r.create(ctx, s, NetworkPolicy(s, *r.NetworkPolicy)); err != nil {
			return nil, err
		}
	}
	// Before the pod becomes the session's: no eviction takes it past a suspension.
	if err := r.create(ctx, s, PodDisruptionBudget(s)); err != nil {
		return nil, err
	}
	for _, name := range cands {
		p := byName[name]
		switch err := r.Client.Update(ctx, claimedPod(p, s)); {
		case apierrors.IsConflict(err) || apierrors.IsNotFound(err):
			klog.FromContext(ctx).V(2).Info("Warm pod taken or gone; trying the next", "pod", name)
			continue
		case err != nil:
			return nil, fmt.Errorf("claim warm pod %s: %w", name, err)
		}
		return p, nil
	}
	return nil, nil
}

// listWarm lists the warm pods of class (kept by it: its controller reference) from the warm
// pod cache, with those of them that are restore hosts (hosts) or not; byName indexes them.
func (r *Reconciler) listWarm(ctx context.Context, class *nnv1.AgentClass, hosts bool) ([]WarmPod, map[string]*corev1.Pod, error) {
	var list corev1.PodList
	if err := r.warmPods().List(ctx, &list, client.InNamespace(class.Namespace), client.MatchingLabels{nnv1.WarmPoolLabel: class.Name}); err != nil {
		return nil, nil, fmt.Errorf("list warm pods: %w", err)
	}
	var pods []WarmPod
	byName := map[string]*corev1.Pod{}
	for i := range list.Items {
		p := &list.Items[i]
		if ref := metav1.GetControllerOf(p); ref != nil && ref.UID == class.UID && p.Namespace == class.Namespace && IsRestoreHost(p) == hosts {
			pods = append(pods, WarmPodOf(p))
			byName[p.Name] = p
		}
	}
	return pods, byName, nil
}

// ensureServiceAccount adopts the session's claimed ServiceAccount once per session and
// controller run: every reconcile after the claim calls it, the first one patches.
func (r *Reconciler) ensureServiceAccount(ctx context.Context, s *nnv1.AgentSession) error {
	if s.Status.ServiceAccountName == "" || s.Status.ServiceAccountName == ServiceAccountName(s.Name) {
		return nil // none yet, or session-<s>, created owned by the session
	}
	key := types.NamespacedName{Namespace: s.Namespace, Name: s.Name}
	want := string(s.UID) + "/" + s.Status.ServiceAccountName
	if v, ok := r.adopted.Load(key); ok && v == want {
		return nil
	}
	if err := r.adoptServiceAccount(ctx, s); err != nil {
		return err
	}
	r.adopted.Store(key, want)
	return nil
}

// adoptServiceAccount makes the ServiceAccount the session claimed with its warm pod
// (status.serviceAccountName) the session's: labelled with it and owned by it alone, so it
// outlives the pod (a resume pod runs as it) and goes with the session, not the class. One merge
// patch, no read; repeating it changes nothing. Nothing to do for a session that claimed none.
func (r *Reconciler) adoptServiceAccount(ctx context.Context, s *nnv1.AgentSession) error {
	name := s.Status.ServiceAccountName
	if name == "" || name == ServiceAccountName(s.Name) {
		return nil
	}
	patch, err := json.Marshal(map[string]any{"metadata": map[string]any{
		"labels":          map[string]any{nnv1.WarmPoolLabel: nil, nnv1.SessionLabel: s.Name},
		"ownerReferences": []metav1.OwnerReference{sessionOwner(s)},
	}})
	if err != nil {
		return fmt.Errorf("adopt serviceaccount %s: %w", name, err)
	}
	sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: s.Namespace, Name: name}}
	if err := r.Client.Patch(ctx, sa, client.RawPatch(types.MergePatchType, patch)); err != nil {
		return fmt.Errorf("adopt serviceaccount %s: %w", name, err)
	}
	return nil
}

func (r *Reconciler) warmPods() client.Reader {
	if r.WarmPods != nil {
		return r.WarmPods
	}
	return r.Client
}

// getPod reads a session's pod from the session pod cache and, when the cache does not have it,
// from the API server: a pod just claimed (or created) may reach the cache after the session's
// own status update, and must not be taken for lost.
func (r *Reconciler) getPod(ctx context.Context, key types.NamespacedName, p *corev1.Pod) error {
	err := r.pods().Get(ctx, key, p)
	if !apierrors.IsNotFound(err) || r.APIReader == nil || r.Pods == nil {
		return err
	}
	return r.APIReader.Get(ctx, key, p)
}
