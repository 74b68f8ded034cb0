package agentsession

import (
	"context"
	"fmt"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	nodev1 "k8s.io/api/node/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/record"
	"k8s.io/klog/v2"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	nnv1 "github.com/neuronetes/neuronetes/api/v1alpha1"
)

// ConditionReady is the session condition that reports the last transition or failure.
const ConditionReady = "Ready"

// Reconciler applies Decide to one AgentSession: it reads the session, its class, its current
// pod and AgentCheckpoints, and writes what the decision asks.
type Reconciler struct {
	Client client.Client
	// Pods reads the sessions' pods (default Client). SetupWithManager sets a cache of the pods
	// labelled neuronetes.io/session, since the manager's cache holds only pool pods.
	Pods client.Reader
	// WarmPods reads the unclaimed warm pods (a cache of pods labelled WarmPoolLabel, set by
	// SetupWithManager; default Client).
	WarmPods client.Reader
	// adopted: the sessions whose claimed ServiceAccount this run adopted (ensureServiceAccount).
	adopted sync.Map
	// hostClaims: when a resume last claimed a restore host of each class (shared with the
	// warm pool reconciler, which delays the refill: HostRefillDelay).
	hostClaims *hostClaims
	// APIReader reads RuntimeClasses one at a time without a cache (default Client).
	APIReader client.Reader
	// RestoreHostImage is the image of a resume pod's host container (a pause image; BuildPod).
	RestoreHostImage string
	// NetworkPolicy, when set, is the spec of each session's own NetworkPolicy (NetworkPolicy),
	// created before the session's first pod and before every resume pod.
	NetworkPolicy *networkingv1.NetworkPolicySpec
	Scheme        *runtime.Scheme
	Recorder      record.EventRecorder
	// InterruptionTaints are node taint keys that announce an interruption, besides
	// interruption.DefaultTaints (the controller's --interruption-taint, as for pools): a
	// Running session on a node with one, or on a cordoned node, is suspended and resumed
	// elsewhere.
	InterruptionTaints []string
	// Metrics, when set, counts sessions by phase and times suspends and resumes.
	Metrics *Metrics
	// Now is the clock (time.Now when nil).
	Now func() time.Time
}

func (r *Reconciler) now() time.Time {
	if r.Now != nil {
		return r.Now()
	}
	return time.Now()
}

// Reconcile brings one session one step along its lifecycle.
func (r *Reconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	logger := klog.FromContext(ctx).WithValues("agentSession", req.NamespacedName)
	var s nnv1.AgentSession
	if err := r.Client.Get(ctx, req.NamespacedName, &s); err != nil {
		if apierrors.IsNotFound(err) {
			r.Metrics.transition(req.NamespacedName, "", "", -1)
			r.adopted.Delete(req.NamespacedName)
		}
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	now := r.now()
	obs, pod, err := r.observe(ctx, &s)
	if err != nil {
		return ctrl.Result{}, err
	}
	d := Decide(obs, now)
	if d.Action == CreatePod {
		// A pod creation or a warm pod's claim is not idempotent: decide it on the session as
		// the API server has it, never on a cached copy that has not yet seen the status of
		// the reconcile that claimed or created the last pod.
		if stale, err := r.stale(ctx, &s); err != nil || stale {
			return ctrl.Result{RequeueAfter: staleRequeue}, err
		}
		// A pool's conversation session gets a pod only as its pool dictates.
		if msg, reason, err := r.poolRefusal(ctx, &s, d); err != nil || msg != "" {
			return r.refuse(ctx, &s, reason, msg, err)
		}
	}
	orig := s.DeepCopy()
	if !obs.LastActivity.IsZero() && (s.Status.LastActivity == nil || obs.LastActivity.After(s.Status.LastActivity.Time)) {
		// The annotation's activity, so the Idle column counts from it.
		t := metav1.NewTime(obs.LastActivity)
		s.Status.LastActivity = &t
	}
	detail, err := r.apply(ctx, &s, pod, &d, now)
	if err != nil {
		r.condition(&s, false, "Failed", err.Error())
		r.event(&s, corev1.EventTypeWarning, d.Reason, err.Error())
		if perr := r.Client.Status().Patch(ctx, &s, client.MergeFrom(orig)); perr != nil {
			logger.Error(perr, "Writing the session status")
		}
		return ctrl.Result{}, err
	}
	if s.Status.Phase != orig.Status.Phase {
		logger.Info("Session transition", "from", orig.Status.Phase, "to", s.Status.Phase, "reason", d.Reason)
		evType, msg := corev1.EventTypeNormal, string(s.Status.Phase)
		if detail != "" {
			evType, msg = corev1.EventTypeWarning, msg+": "+detail
		}
		r.event(&s, evType, d.Reason, fmt.Sprintf("%s -> %s", orig.Status.Phase, msg))
		since := -1.0
		if orig.Status.TransitionTime != nil {
			since = now.Sub(orig.Status.TransitionTime.Time).Seconds()
		}
		r.Metrics.transition(req.NamespacedName, orig.Status.Phase, s.Status.Phase, since)
		t := metav1.NewTime(now)
		s.Status.TransitionTime = &t
		r.condition(&s, s.Status.Phase == nnv1.SessionRunning, d.Reason, msg)
	}
	if err := r.Client.Status().Patch(ctx, &s, client.MergeFrom(orig)); err != nil {
		return ctrl.Result{}, fmt.Errorf("patch agentsession status: %w", err)
	}
	return ctrl.Result{RequeueAfter: d.RequeueAfter}, nil
}

// poolRecheck is how soon a refused pool's session is checked again (its pool may be fixed);
// poolFullRecheck how soon one kept waiting by its full pool is (a request may be held for it).
const (
	poolRecheck     = 30 * time.Second
	poolFullRecheck = 2 * time.Second
)

// refuse records a pool's session refused (PoolRefusal, PoolFull): condition Ready=False and a
// Warning event with reason, both naming the field; no pod is created.
func (r *Reconciler) refuse(ctx context.Context, s *nnv1.AgentSession, reason, msg string, err error) (ctrl.Result, error) {
	if err != nil {
		return ctrl.Result{}, err
	}
	orig := s.DeepCopy()
	r.condition(s, false, reason, msg)
	if c := meta.FindStatusCondition(orig.Status.Conditions, ConditionReady); c == nil || c.Message != msg {
		r.event(s, corev1.EventTypeWarning, reason, msg)
	}
	if err := r.Client.Status().Patch(ctx, s, client.MergeFrom(orig)); err != nil {
		return ctrl.Result{}, fmt.Errorf("patch agentsession status: %w", err)
	}
	if reason == PoolFullReason {
		return ctrl.Result{RequeueAfter: poolFullRecheck}, nil
	}
	return ctrl.Result{RequeueAfter: poolRecheck}, nil
}

// observe reads what Decide needs.
func (r *Reconciler) observe(ctx context.Context, s *nnv1.AgentSession) (Observed, *corev1.Pod, error) {
	o := Observed{Phase: s.Status.Phase, Suspend: s.Spec.Suspend, SuspendedByRequest: s.Status.SuspendedByRequest,
		HasCheckpoint: s.Status.LastCheckpoint != "", DrainedNode: s.Status.DrainedNode}
	if s.Spec.IdleTimeout != nil {
		o.IdleTimeout = s.Spec.IdleTimeout.Duration
	}
	o.LastActivity = s.Activity()
	if s.Status.TransitionTime != nil {
		o.PhaseSince = s.Status.TransitionTime.Time
	}
	var pod *corev1.Pod
	if s.Status.PodName != "" {
		p := &corev1.Pod{}
		switch err := r.getPod(ctx, types.NamespacedName{Namespace: s.Namespace, Name: s.Status.PodName}, p); {
		case err == nil && p.DeletionTimestamp.IsZero():
			pod, o.PodExists, o.PodRunning, o.PodReady = p, true, p.Status.Phase == corev1.PodRunning, podReady(p)
		case err == nil && p.Status.Phase == corev1.PodRunning:
			// Being deleted, still running (its preStop hold): an eviction, perhaps a drain's.
			o.PodTerminating = true
		case err != nil && !apierrors.IsNotFound(err):
			return o, nil, fmt.Errorf("get pod %s: %w", s.Status.PodName, err)
		}
		if s.Status.Phase == nnv1.SessionRunning && (o.PodExists || o.PodTerminating) {
			// A terminating pod's node is read from the API server: kubectl drain cordons
			// before it evicts, but the pod's event may reach this controller before the
			// node's, and a stale "not draining" would give the pod up as lost.
			var err error
			if o.NodeDraining, err = r.nodeDraining(ctx, p.Spec.NodeName, o.PodTerminating); err != nil {
				return o, nil, err
			}
		}
	}
	var err error
	if o.Checkpoint, err = r.op(ctx, s.Namespace, CheckpointName(s.Name, s.Status.Pods)); err != nil {
		return o, nil, err
	}
	if o.Restore, err = r.op(ctx, s.Namespace, RestoreName(s.Name, s.Status.Pods)); err != nil {
		return o, nil, err
	}
	return o, pod, nil
}

func (r *Reconciler) op(ctx context.Context, ns, name string) (Op, error) {
	var ck nnv1.AgentCheckpoint
	switch err := r.Client.Get(ctx, types.NamespacedName{Namespace: ns, Name: name}, &ck); {
	case apierrors.IsNotFound(err):
		return OpNone, nil
	case err != nil:
		return OpNone, fmt.Errorf("get agentcheckpoint %s: %w", name, err)
	}
	return OpOf(&ck), nil
}

// apply performs the decision's action and sets the status it implies. The detail, when not
// empty, explains the transition in its event and condition (a failed suspension's cause).
func (r *Reconciler) apply(ctx context.Context, s *nnv1.AgentSession, pod *corev1.Pod, d *Decision, now time.Time) (string, error) {
	detail := ""
	err := r.applyAction(ctx, s, pod, d, now, &detail)
	return detail, err
}

func (r *Reconciler) applyAction(ctx context.Context, s *nnv1.AgentSession, pod *corev1.Pod, d *Decision, now time.Time, detail *string) error {
	t := metav1.NewTime(now)
	if claimed, err := r.warmPoolStep(ctx, s, d, now); err != nil || claimed {
		return err
	}

	switch d.Action {
	case CreatePod:
		create := r.createPod
		if d.Phase == nnv1.SessionResuming {
			create = r.createResumePod
		}
		if err := create(ctx, s, d.Phase == nnv1.SessionResuming); err != nil {
			return err
		}
	case MarkRunning:
		s.Status.LastActivity = &t
		s.Status.NodeName = pod.Spec.NodeName
		s.Status.DrainedNode = ""
	case StartCheckpoint:
		if err := r.create(ctx, s, NewCheckpoint(s, s.Status.PodName, s.Status.Pods)); err != nil {
			return err
		}
		s.Status.SuspendedByRequest = d.ByRequest
		if d.Drain {
			s.Status.DrainedNode = s.Status.NodeName
			if pod != nil {
				s.Status.DrainedNode = pod.Spec.NodeName
			}
		}
	case FinishSuspend:
		var ck nnv1.AgentCheckpoint
		if err := r.Client.Get(ctx, types.NamespacedName{Namespace: s.Namespace, Name: CheckpointName(s.Name, s.Status.Pods)}, &ck); err != nil {
			return fmt.Errorf("get agentcheckpoint: %w", err)
		}
		s.Status.LastCheckpoint = ck.Status.CheckpointID
		s.Status.LastCheckpointTime = &t
		if pod != nil {
			// The state is in the checkpoint: nothing is left to hold the pod (and its GPU or
			// CPU) for, so its preStop hold (holdForCheckpoint) is cut short.
			if err := r.Client.Delete(ctx, pod, client.GracePeriodSeconds(SuspendedPodGracePeriodSeconds)); err != nil && !apierrors.IsNotFound(err) {
				return fmt.Errorf("delete pod %s: %w", pod.Name, err)
			}
		}
		s.Status.PodName, s.Status.NodeName = "", ""
	case AbortSuspend:
		// A failed checkpoint is deleted so that the next suspension of this pod, which has the
		// same name, runs again instead of finding the failure.
		ck := &nnv1.AgentCheckpoint{ObjectMeta: metav1.ObjectMeta{Namespace: s.Namespace, Name: CheckpointName(s.Name, s.Status.Pods)}}
		if err := r.Client.Get(ctx, client.ObjectKeyFromObject(ck), ck); err == nil {
			*detail = SuspendFailure(ck)
		}
		if err := r.Client.Delete(ctx, ck); err != nil && !apierrors.IsNotFound(err) {
			return fmt.Errorf("delete failed agentcheckpoint %s: %w", ck.Name, err)
		}
		s.Status.LastActivity = &t
		s.Status.DrainedNode = ""
	case StartRestore:
		// The Restore is normally created with the resume pod (createResumePod); this is the
		// retry when that failed.
		rs, err := NewRestore(s, s.Status.PodName, s.Status.Pods)
		if err != nil {
			return err
		}
		if err := r.create(ctx, s, rs); err != nil {
			return err
		}
	case AbortResume:
		if pod != nil {
			if err := r.Client.Delete(ctx, pod); err != nil && !apierrors.IsNotFound(err) {
				return fmt.Errorf("delete pod %s: %w", pod.Name, err)
			}
		}
		s.Status.PodName, s.Status.SuspendedByRequest, s.Status.DrainedNode = "", false, ""
	}
	s.Status.Phase = d.Phase
	return nil
}

// createResumePod creates the session's next pod as a resume host and, in the same step, its
// Restore AgentCheckpoint: the node agent of the node the pod is bound to fetches and verifies
// the checkpoint while the pod starts, and restores as soon as the host container runs. A
// status.lastCheckpoint of another namespace is refused before anything is created.
func (r *Reconciler) createResumePod(ctx context.Context, s *nnv1.AgentSession, _ bool) error {
	if _, err := NewRestore(s, PodName(s.Name, s.Status.Pods+1), s.Status.Pods+1); err != nil {
		return err
	}
	if err := r.createPod(ctx, s, true); err != nil {
		return err
	}
	rs, err := NewRestore(s, s.Status.PodName, s.Status.Pods)
	if err == nil {
		err = r.create(ctx, s, rs)
	}
	if err != nil {
		// Decide's StartRestore creates it on a later reconcile.
		klog.FromContext(ctx).Error(err, "Creating the Restore with the resume pod", "pod", s.Status.PodName)
	}
	return nil
}

// createPod creates the session's ServiceAccount, NetworkPolicy and PodDisruptionBudget (once;
// an existing one is kept) and its next pod, all owned by the session; a resume pod gets the host
// container of RestoreHostImage.
func (r *Reconciler) createPod(ctx context.Context, s *nnv1.AgentSession, resume bool) error {
	var class nnv1.AgentClass
	if err := r.Client.Get(ctx, types.NamespacedName{Namespace: s.Namespace, Name: s.Spec.ClassRef.Name}, &class); err != nil {
		return fmt.Errorf("spec.classRef: agentclass %s: %w", s.Spec.ClassRef.Name, err)
	}
	host := ""
	if resume {
		if host = r.RestoreHostImage; host == "" {
			return fmt.Errorf("no restore host image (--session-restore-host-image): cannot resume")
		}
	}
	pod, err := BuildPod(s, &class, s.Status.Pods+1, host)
	if err != nil {
		return err
	}
	if resume {
		AvoidNode(pod, s.Status.DrainedNode)
	}
	if pod.Spec.RuntimeClassName != nil {
		if err := r.runtimeClassExists(ctx, *pod.Spec.RuntimeClassName); err != nil {
			return err
		}
	}
	if sa := s.Status.ServiceAccountName; sa != "" && sa != ServiceAccountName(s.Name) {
		// The ServiceAccount of the warm pod the session claimed is its own (adoptServiceAccount).
		pod.Spec.ServiceAccountName = sa
	} else {
		f := false
		sa := &corev1.ServiceAccount{
			ObjectMeta:                   metav1.ObjectMeta{Name: ServiceAccountName(s.Name), Namespace: s.Namespace, Labels: map[string]string{nnv1.SessionLabel: s.Name}},
			AutomountServiceAccountToken: &f,
		}
		if err := r.create(ctx, s, sa); err != nil {
			return err
		}
		s.Status.ServiceAccountName = sa.Name
	}
	if r.NetworkPolicy != nil {
		// Before the pod, so that it never runs unconfined.
		if err := r.create(ctx, s, NetworkPolicy(s, *r.NetworkPolicy)); err != nil {
			return err
		}
	}
	// Before the pod, so that no eviction takes it past the session's suspension.
	if err := r.create(ctx, s, PodDisruptionBudget(s)); err != nil {
		return err
	}
	if err := r.create(ctx, s, pod); err != nil {
		return err
	}
	s.Status.Pods++
	s.Status.PodName = pod.Name
	return nil
}

// runtimeClassExists refuses a RuntimeClass the cluster lacks, naming the field.
func (r *Reconciler) runtimeClassExists(ctx context.Context, name string) error {
	var rc nodev1.RuntimeClass
	rd := r.APIReader
	if rd == nil {
		rd = r.Client
	}
	if err := rd.Get(ctx, types.NamespacedName{Name: name}, &rc); err != nil {
		if apierrors.IsNotFound(err) {
			return fmt.Errorf("spec.runtimeClassName (or the class template's): RuntimeClass %q does not exist", name)
		}
		return fmt.Errorf("get runtimeclass %s: %w", name, err)
	}
	return nil
}

// create makes obj owned by the session; an existing one (a retried step) is fine.
func (r *Reconciler) create(ctx context.Context, s *nnv1.AgentSession, obj client.Object) error {
	if err := controllerutil.SetControllerReference(s, obj, r.Scheme); err != nil {
		return fmt.Errorf("owner reference: %w", err)
	}
	if err := r.Client.Create(ctx, obj); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("create %T %s: %w", obj, obj.GetName(), err)
	}
	return nil
}

func (r *Reconciler) condition(s *nnv1.AgentSession, ok bool, reason, msg string) {
	st := metav1.ConditionFalse
	if ok {
		st = metav1.ConditionTrue
	}
	meta.SetStatusCondition(&s.Status.Conditions, metav1.Condition{Type: ConditionReady, Status: st, Reason: reason, Message: msg, ObservedGeneration: s.Generation})
}

func (r *Reconciler) event(s *nnv1.AgentSession, typ, reason, msg string) {
	if r.Recorder != nil && reason != "" {
		r.Recorder.Event(s, typ, reason, msg)
	}
}

func (r *Reconciler) pods() client.Reader {
	if r.Pods != nil {
		return r.Pods
	}
	return r.Client
}

func podReady(p *corev1.Pod) bool {
	if p.Status.Phase != corev1.PodRunning {
		return false
	}
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// staleRequeue is how soon a reconcile that found its cached session stale runs again (the
// session's watch event usually comes first).
const staleRequeue = 200 * time.Millisecond

// stale reports whether the API server has a newer version of s than the one read (from the
// cache). Without an APIReader (tests with one client) nothing is stale.
func (r *Reconciler) stale(ctx context.Context, s *nnv1.AgentSession) (bool, error) {
	if r.APIReader == nil {
		return false, nil
	}
	var cur nnv1.AgentSession
	switch err := r.APIReader.Get(ctx, client.ObjectKeyFromObject(s), &cur); {
	case apierrors.IsNotFound(err):
		return true, nil
	case err != nil:
		return false, fmt.Errorf("get agentsession %s: %w", s.Name, err)
	}
	if cur.ResourceVersion != s.ResourceVersion {
		klog.FromContext(ctx).V(2).Info("Cached session is stale; waiting for it", "cached", s.ResourceVersion, "current", cur.ResourceVersion)
		return true, nil
	}
	return false, nil
}
