package agentsession

import (
	"context"
	"errors"
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
	utilrand "k8s.io/apimachinery/pkg/util/rand"
	"k8s.io/client-go/tools/record"
	"k8s.io/klog/v2"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	nnv1 "github.com/neuronetes/neuronetes/api/v1alpha1"
)

// ConditionSessionWarmPool is the AgentClass condition that reports its session warm pool.
const ConditionSessionWarmPool = "SessionWarmPool"

// pendingTTL is how long a created warm pod counts as live while the pod cache has not shown it.
const pendingTTL = 30 * time.Second

// WarmPoolReconciler keeps each AgentClass's session warm pool (spec.sessions.warmPoolSize): that
// many unclaimed session pods of the class's current template, each with its own ServiceAccount,
// behind the class's warm-pool NetworkPolicy.
type WarmPoolReconciler struct {
	Client client.Client
	// Pods reads the warm pods (a cache of pods labelled WarmPoolLabel; default Client).
	Pods client.Reader
	// APIReader reads RuntimeClasses (default Client).
	APIReader client.Reader
	// NetworkPolicy, when set, is the session policy spec; the warm pool's own policy
	// (WarmPoolNetworkPolicyName) applies it to the unclaimed pods, created before them.
	NetworkPolicy *networkingv1.NetworkPolicySpec
	Scheme        *runtime.Scheme
	Recorder      record.EventRecorder
	// RestoreHostImage is the image of a restore host's host container (the session
	// reconciler's); without it the class's warm restore hosts are not kept.
	RestoreHostImage string
	// hostClaims: when a resume last claimed a restore host of each class (the session
	// reconciler's); replacements wait HostRefillDelay after it.
	hostClaims *hostClaims
	// Now is the clock (time.Now when nil).
	Now func() time.Time

	mu sync.Mutex
	// pending: per class, warm pods created and not yet seen in Pods, with their creation time.
	pending map[types.NamespacedName]map[string]time.Time
}

func (r *WarmPoolReconciler) now() time.Time {
	if r.Now != nil {
		return r.Now()
	}
	return time.Now()
}

// Reconcile sizes one class's warm pool.
func (r *WarmPoolReconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	logger := klog.FromContext(ctx).WithValues("agentClass", req.NamespacedName)
	var class nnv1.AgentClass
	if err := r.Client.Get(ctx, req.NamespacedName, &class); err != nil {
		if apierrors.IsNotFound(err) {
			r.forget(req.NamespacedName)
		}
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	var list corev1.PodList
	if err := r.reader().List(ctx, &list, client.InNamespace(class.Namespace), client.MatchingLabels{nnv1.WarmPoolLabel: class.Name}); err != nil {
		return ctrl.Result{}, fmt.Errorf("list warm pods: %w", err)
	}
	var agents, hosts []*corev1.Pod
	for i := range list.Items {
		p := &list.Items[i]
		if ref := metav1.GetControllerOf(p); ref == nil || ref.UID != class.UID {
			continue // claimed (or not ours)
		}
		if IsRestoreHost(p) {
			hosts = append(hosts, p)
		} else {
			agents = append(agents, p)
		}
	}
	size, hash := WarmPoolSize(&class), TemplateHash(&class)
	_, err := r.keep(ctx, &class, agents, size, hash, false)
	nHosts := WarmRestoreHosts(&class)
	if nHosts > 0 && r.RestoreHostImage == "" {
		logger.Info("No restore host image (--session-restore-host-image): keeping no warm restore hosts")
		nHosts = 0
	}
	wait, herr := r.keep(ctx, &class, hosts, nHosts, RestoreHostHash(&class, r.RestoreHostImage), true)
	if err == nil {
		err = herr
	}
	size += nHosts
	if cerr := r.setCondition(ctx, &class, size, err); cerr != nil {
		logger.Error(cerr, "Writing the class's warm pool condition")
	}
	var bad *badInputError
	if errors.As(err, &bad) {
		return ctrl.Result{}, nil // the class must change; its update requeues it
	}
	if err == nil && wait > 0 {
		return ctrl.Result{RequeueAfter: wait}, nil
	}
	if err == nil && (len(r.pendingNames(req.NamespacedName)) > 0 || len(r.pendingNames(hostsKey(req.NamespacedName))) > 0) {
		return ctrl.Result{RequeueAfter: pendingTTL}, nil
	}
	return ctrl.Result{}, err
}

// hostsKey is the key of a class's restore hosts in pending (its agent pods use the class's).
func hostsKey(class types.NamespacedName) types.NamespacedName {
	return types.NamespacedName{Namespace: class.Namespace, Name: class.Name + "/restore-hosts"}
}

// keep sizes one kind of a class's warm pods, those of pods: agent pods, or restore hosts (of
// RestoreHostImage), size of them of hash. Retirements carry the read version, so a pod claimed
// since is not deleted. Missing restore hosts are created only HostRefillDelay after the class's
// last host claim; until then keep returns how long is left.
func (r *WarmPoolReconciler) keep(ctx context.Context, class *nnv1.AgentClass, pods []*corev1.Pod, size int, hash string, hosts bool) (time.Duration, error) {
	key := types.NamespacedName{Namespace: class.Namespace, Name: class.Name}
	if hosts {
		key = hostsKey(key)
	}
	var warm []WarmPod
	byName := map[string]*corev1.Pod{}
	for _, p := range pods {
		warm = append(warm, WarmPodOf(p))
		byName[p.Name] = p
	}
	plan := PlanWarmPool(warm, r.pendingCount(key, byName), size, hash)
	for _, name := range plan.Retire {
		p := byName[name]
		switch err := r.Client.Delete(ctx, p, client.Preconditions{UID: &p.UID, ResourceVersion: &p.ResourceVersion}); {
		case apierrors.IsConflict(err):
			continue // changed since read, perhaps claimed: its ServiceAccount stays too
		case err != nil && !apierrors.IsNotFound(err):
			return 0, fmt.Errorf("retire warm pod %s: %w", name, err)
		}
		// Its own ServiceAccount (same name, the class's until a claim) goes with it.
		sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: p.Namespace, Name: p.Spec.ServiceAccountName}}
		if err := r.Client.Delete(ctx, sa); err != nil && !apierrors.IsNotFound(err) {
			return 0, fmt.Errorf("retire serviceaccount %s: %w", sa.Name, err)
		}
		klog.FromContext(ctx).V(2).Info("Retired warm session pod", "pod", name)
	}
	if plan.Create == 0 {
		return 0, nil
	}
	if hosts {
		if wait := RefillWait(r.hostClaims.at(types.NamespacedName{Namespace: class.Namespace, Name: class.Name}), r.now(), HostRefillDelay); wait > 0 {
			return wait, nil
		}
	}
	return 0, r.fill(ctx, class, key, hash, hosts, plan.Create)
}

// badInputError is an error of the class's spec, not of the cluster: retrying does not help.
type badInputError struct{ err error }

func (e *badInputError) Error() string { return e.err.Error() }
func (e *badInputError) Unwrap() error { return e.err }

// fill creates n warm pods (after the pool's NetworkPolicy), each after its own ServiceAccount
// of the same name; both are the class's until a claim moves the ServiceAccount to the session,
// and a retirement deletes both.
func (r *WarmPoolReconciler) fill(ctx context.Context, class *nnv1.AgentClass, key types.NamespacedName, hash string, hosts bool, n int) error {
	build := func(name string) (*corev1.Pod, error) {
		if hosts {
			return BuildWarmRestoreHost(class, name, hash, r.RestoreHostImage)
		}
		return BuildWarmPod(class, name, hash)
	}
	probe, err := build(warmPodPrefix(class.Name) + "x")
	if err != nil {
		return &badInputError{warmPoolError(err)}
	}
	if rc := probe.Spec.RuntimeClassName; rc != nil {
		var obj nodev1.RuntimeClass
		switch err := r.apiReader().Get(ctx, types.NamespacedName{Name: *rc}, &obj); {
		case apierrors.IsNotFound(err):
			return &badInputError{fmt.Errorf("spec.template.spec.runtimeClassName: RuntimeClass %q does not exist", *rc)}
		case err != nil:
			return fmt.Errorf("get runtimeclass %s: %w", *rc, err)
		}
	}
	if r.NetworkPolicy != nil {
		np := NetworkPolicy(&nnv1.AgentSession{ObjectMeta: metav1.ObjectMeta{Namespace: class.Namespace}}, *r.NetworkPolicy)
		np.Name = WarmPoolNetworkPolicyName(class.Name)
		delete(np.Labels, nnv1.SessionLabel)
		np.Labels[nnv1.WarmPoolLabel] = class.Name
		np.Spec.PodSelector = metav1.LabelSelector{MatchLabels: map[string]string{nnv1.WarmPoolLabel: class.Name}}
		if err := r.create(ctx, class, np); err != nil {
			return err
		}
	}
	for range n {
		name := warmPodPrefix(class.Name) + utilrand.String(5)
		pod, err := build(name)
		if err != nil {
			return &badInputError{warmPoolError(err)}
		}
		sa := warmServiceAccount(class, name)
		if err := r.create(ctx, class, sa); err != nil {
			return err
		}
		if err := r.create(ctx, class, pod); err != nil {
			return err
		}
		r.expect(key, name)
	}
	return nil
}

func (r *WarmPoolReconciler) create(ctx context.Context, class *nnv1.AgentClass, obj client.Object) error {
	if err := controllerutil.SetControllerReference(class, obj, r.Scheme); err != nil {
		return fmt.Errorf("owner reference: %w", err)
	}
	if err := r.Client.Create(ctx, obj); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("create %T %s: %w", obj, obj.GetName(), err)
	}
	return nil
}

// setCondition records the pool's state on the class when it changed: True while the pool is
// kept, False naming the field when the spec cannot make pods (InvalidSpec), False with the
// cluster's error when creating them failed (CreateFailed), removed when the class has no pool.
func (r *WarmPoolReconciler) setCondition(ctx context.Context, class *nnv1.AgentClass, size int, err error) error {
	orig := class.DeepCopy()
	var changed bool
	var bad *badInputError
	switch {
	case size == 0:
		changed = meta.RemoveStatusCondition(&class.Status.Conditions, ConditionSessionWarmPool)
	case errors.As(err, &bad):
		changed = meta.SetStatusCondition(&class.Status.Conditions, metav1.Condition{Type: ConditionSessionWarmPool, Status: metav1.ConditionFalse,
			Reason: "InvalidSpec", Message: err.Error(), ObservedGeneration: class.Generation})
		if changed && r.Recorder != nil {
			r.Recorder.Event(class, corev1.EventTypeWarning, "InvalidSpec", err.Error())
		}
	case err == nil:
		changed = meta.SetStatusCondition(&class.Status.Conditions, metav1.Condition{Type: ConditionSessionWarmPool, Status: metav1.ConditionTrue,
			Reason: "Kept", Message: fmt.Sprintf("keeping %d warm session pods and %d warm restore hosts", WarmPoolSize(class), size-WarmPoolSize(class)), ObservedGeneration: class.Generation})
	default:
		// The cluster refused (admission, quota): retried with backoff, and shown meanwhile.
		changed = meta.SetStatusCondition(&class.Status.Conditions, metav1.Condition{Type: ConditionSessionWarmPool, Status: metav1.ConditionFalse,
			Reason: "CreateFailed", Message: err.Error(), ObservedGeneration: class.Generation})
	}
	if !changed {
		return nil
	}
	if err := r.Client.Status().Patch(ctx, class, client.MergeFromWithOptions(orig, client.MergeFromWithOptimisticLock{})); err != nil {
		return fmt.Errorf("patch agentclass status: %w", err)
	}
	return nil
}

// expect records a created warm pod until the cache shows it.
func (r *WarmPoolReconciler) expect(class types.NamespacedName, pod string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.pending == nil {
		r.pending = map[types.NamespacedName]map[string]time.Time{}
	}
	if r.pending[class] == nil {
		r.pending[class] = map[string]time.Time{}
	}
	r.pending[class][pod] = r.now()
}

// pendingCount drops the pending pods seen (or older than pendingTTL) and counts the rest.
func (r *WarmPoolReconciler) pendingCount(class types.NamespacedName, seen map[string]*corev1.Pod) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	now := r.now()
	for name, t := range r.pending[class] {
		if _, ok := seen[name]; ok || now.Sub(t) > pendingTTL {
			delete(r.pending[class], name)
		}
	}
	return len(r.pending[class])
}

func (r *WarmPoolReconciler) pendingNames(class types.NamespacedName) map[string]time.Time {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.pending[class]
}

func (r *WarmPoolReconciler) forget(class types.NamespacedName) {
	r.mu.Lock()
	defer r.mu.Unlock()
	delete(r.pending, class)
	delete(r.pending, hostsKey(class))
}

func (r *WarmPoolReconciler) reader() client.Reader {
	if r.Pods != nil {
		return r.Pods
	}
	return r.Client
}

func (r *WarmPoolReconciler) apiReader() client.Reader {
	if r.APIReader != nil {
		return r.APIReader
	}
	return r.Client
}
