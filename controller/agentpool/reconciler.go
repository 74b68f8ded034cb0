// Package agentpool reconciles AgentPools: it keeps spec.replicas serving pods and a warm pool of
// started, Ready pods outside the pool's Service, activates warm pods first on scale-up,
// replenishes the warm pool after a delay in batches, and drains pods on scale-down. The policy
// itself lives in the pure warmpool package.
package agentpool

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	nnv1 "github.com/neuronetes/neuronetes/api/v1alpha1"
	"github.com/neuronetes/neuronetes/warmpool"
)

// expectationTTL bounds how long a created pod may stay invisible in the cache before the
// reconciler stops waiting for it.
const expectationTTL = 30 * time.Second

// Reconciler reconciles AgentPool objects.
type Reconciler struct {
	// Client reads from the manager's cache and writes to the apiserver.
	Client client.Client
	// APIReader reads from the apiserver, bypassing the cache; nil means Client.
	APIReader client.Reader
	// Scheme knows the API types (for owner references).
	Scheme *runtime.Scheme
	// Metrics receives the pool metrics; nil disables them.
	Metrics *Metrics
	// Now returns the current time; nil means time.Now.
	Now func() time.Time
	// Checkpoints enables warm-pool restores from AgentCheckpoints (set when that CRD is served).
	Checkpoints bool
	// InterruptionTaints are node taint keys that announce an interruption, besides
	// DefaultInterruptionTaints (the controller's --interruption-taint).
	InterruptionTaints []string
	// RestoreHostImage is the image of the host container of a resume pod that replaces an
	// interrupted pod from its checkpoint (a pause image; interrupt_restore.go). Empty: the
	// replacement of an interrupted pod is never restored.
	RestoreHostImage string
	// Prices quotes the cluster's nodes for optimization.spotMaxPrice (nil: no node is known to be
	// under the cap, so a capped pool prefers no spot node).
	Prices SpotQuoter
	// Sessions is set when the AgentSession controller runs (--agent-sessions): a pool with
	// spec.sessions then reports its sessions, and AgentSessions are watched (sessions.go).
	Sessions bool

	mu sync.Mutex
	// expected holds, per pool, the names of pods this process created that the cache has not
	// shown yet. Invariant: while a pool has unexpired expectations the reconciler creates nothing
	// for it, so a lagging cache cannot cause extra pods.
	expected map[types.NamespacedName]map[string]time.Time
	// activated remembers each pool's last activation time in this process. Invariant: the
	// replenish delay uses the later of this and status.lastActivationTime, so a cache that has not
	// yet shown the status patch cannot make the warm pool refill early.
	activated map[types.NamespacedName]time.Time
}

func (r *Reconciler) lastActivation(key types.NamespacedName, status *metav1.Time) time.Time {
	r.mu.Lock()
	defer r.mu.Unlock()
	t := r.activated[key]
	if status != nil && status.After(t) {
		t = status.Time
	}
	return t
}

func (r *Reconciler) recordActivation(key types.NamespacedName, at time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.activated == nil {
		r.activated = map[types.NamespacedName]time.Time{}
	}
	r.activated[key] = at
}

func (r *Reconciler) now() time.Time {
	if r.Now != nil {
		return r.Now()
	}
	return time.Now()
}

// pendingCreates returns how many of the pool's created pods the cache still misses, dropping
// those now visible or expired.
func (r *Reconciler) pendingCreates(key types.NamespacedName, seen map[string]bool) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	exp := r.expected[key]
	now := r.now()
	for name, at := range exp {
		if seen[name] || now.Sub(at) > expectationTTL {
			delete(exp, name)
		}
	}
	return len(exp)
}

func (r *Reconciler) expect(key types.NamespacedName, name string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.expected == nil {
		r.expected = map[types.NamespacedName]map[string]time.Time{}
	}
	if r.expected[key] == nil {
		r.expected[key] = map[string]time.Time{}
	}
	r.expected[key][name] = r.now()
}

func (r *Reconciler) unexpect(key types.NamespacedName, name string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	delete(r.expected[key], name)
}

// Reconcile drives one AgentPool toward its desired serving and warm pods.
func (r *Reconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	logger := klog.FromContext(ctx).WithValues("agentpool", req.NamespacedName)
	ctx = klog.NewContext(ctx, logger)

	var pool nnv1.AgentPool
	if err := r.Client.Get(ctx, req.NamespacedName, &pool); err != nil {
		if apierrors.IsNotFound(err) {
			if r.Metrics != nil {
				r.Metrics.forget(req.Name, req.Namespace)
			}
			return ctrl.Result{}, nil
		}
		return ctrl.Result{}, fmt.Errorf("get agentpool: %w", err)
	}
	if !pool.DeletionTimestamp.IsZero() {
		return ctrl.Result{}, nil
	}
	orig := pool.DeepCopy()
	size := resolveSizing(&pool.Spec)

	class, err := r.classFor(ctx, &pool)
	if err != nil {
		r.setCondition(&pool, nnv1.AgentPoolReady, false, "AgentClassNotFound", err.Error())
		return ctrl.Result{RequeueAfter: 30 * time.Second}, r.patchStatus(ctx, orig, &pool, size, nil, nil)
	}
	build := podBuild{class: class, drainGrace: defaultDrainGraceSeconds}
	if t := class.Spec.Template; t != nil && t.Spec.TerminationGracePeriodSeconds != nil {
		build.drainGrace = *t.Spec.TerminationGracePeriodSeconds
	}
	if pool.Spec.DrainGracePeriodSeconds != nil {
		build.drainGrace = *pool.Spec.DrainGracePeriodSeconds
	}
	if class.Spec.GPU != nil {
		name, exists, err := ensureClaimTemplate(ctx, r.Client, r.Scheme, class)
		if err != nil {
			return ctrl.Result{}, err
		}
		build.claimTemplate = name
		if !exists {
			logger.Info("DeviceClass missing; pods wait for the DRA driver", "deviceClass", deviceClassFor(class.Spec.GPU))
		}
	}
	if build.warmNodeLabel, err = r.warmLabelFor(ctx, class); err != nil {
		return ctrl.Result{}, err
	}
	if err := r.ensureService(ctx, &pool, class); err != nil {
		return ctrl.Result{}, err
	}

	var podList corev1.PodList
	if err := r.Client.List(ctx, &podList, client.InNamespace(pool.Namespace), client.MatchingLabels{nnv1.PoolLabel: pool.Name}); err != nil {
		return ctrl.Result{}, fmt.Errorf("list pods: %w", err)
	}
	byName := map[string]*corev1.Pod{}
	used := map[string]bool{}
	var in []warmpool.Pod
	for i := range podList.Items {
		p := &podList.Items[i]
		if !metav1.IsControlledBy(p, &pool) {
			continue
		}
		byName[p.Name] = p
		used[p.Name] = true
	}
	if pool.Spec.Sessions != nil {
		return r.reconcileSessions(ctx, orig, &pool, byName, build.drainGrace)
	}
	if class.Spec.Gang != nil {
		return r.reconcileGang(ctx, orig, &pool, size, build, byName)
	}
	if r.Checkpoints {
		if err := r.dropFailedInterruptRestores(ctx, byName); err != nil {
			return ctrl.Result{}, err
		}
	}
	warmReady, err := r.ensureRestores(ctx, &pool, byName)
	if err != nil {
		return ctrl.Result{}, err
	}
	// Pods on nodes with an interruption notice count as gone for the planner, which replaces
	// them (warm pods first); they leave once the replacement serves (interrupt.go).
	intr := resolveInterruption(&pool.Spec)
	var interrupted []interruptedPod
	gone := map[string]bool{}
	if intr.migrate {
		if interrupted, err = r.interruptions(ctx, byName, r.now()); err != nil {
			return ctrl.Result{}, err
		}
		for _, ip := range interrupted {
			gone[ip.name] = true
		}
	}
	build.onDemandOnly = len(interrupted) > 0
	if build.restores, err = r.interruptRestoreSources(ctx, pool.Namespace, interrupted, byName); err != nil {
		return ctrl.Result{}, err
	}
	build.restoreHostImage = r.RestoreHostImage
	for i := range podList.Items {
		p := &podList.Items[i]
		if byName[p.Name] != p {
			continue
		}
		in = append(in, warmpool.Pod{
			Name: p.Name, State: podState(p), Ready: warmReady[p.Name],
			Terminating: !p.DeletionTimestamp.IsZero() || p.Status.Phase == corev1.PodFailed || p.Status.Phase == corev1.PodSucceeded || gone[p.Name],
			Created:     p.CreationTimestamp.Time,
		})
	}
	if n := r.pendingCreates(req.NamespacedName, used); n > 0 {
		logger.V(4).Info("waiting for the cache to show created pods", "pending", n)
		return ctrl.Result{RequeueAfter: 200 * time.Millisecond}, nil
	}

	lastAct := r.lastActivation(req.NamespacedName, pool.Status.LastActivationTime)
	now := r.now()
	plan := warmpool.Decide(warmpool.Input{
		Desired: size.desired, WarmTarget: size.warmTarget, UseWarmPool: size.useWarmPool,
		Delay: size.delay, BatchSize: size.batch, LastActivation: lastAct, Now: now, Pods: in,
	})
	build.spot = resolveSpot(&pool, size.desired+size.warmTarget, r.spotPrices(ctx, &pool))
	spotDrain(&plan, byName, in, build.spot)
	if plan.Changed() {
		logger.Info("applying plan", "desired", size.desired, "warmTarget", size.warmTarget,
			"activate", plan.Activate, "createServing", plan.CreateServing, "createWarm", plan.CreateWarm,
			"drain", plan.Drain, "trim", plan.Trim)
	}
	applyErr := r.apply(ctx, &pool, plan, byName, used, build)
	var intrRequeue time.Duration
	if applyErr == nil && len(interrupted) > 0 {
		intrRequeue, applyErr = r.migrate(ctx, interrupted, byName, gone, size.desired, intr, build.drainGrace, now)
	}
	if len(plan.Activate) > 0 {
		r.recordActivation(req.NamespacedName, now)
		pool.Status.LastActivationTime = &metav1.Time{Time: now}
	}
	if plan.CreateServing > 0 || len(plan.Activate) > 0 || len(plan.Drain) > 0 {
		pool.Status.LastScaleTime = &metav1.Time{Time: now}
		if r.Metrics != nil {
			r.Metrics.ScaleOperations.WithLabelValues(pool.Name, pool.Namespace).Inc()
			if len(plan.Drain) > 0 {
				r.Metrics.ScaleDown.WithLabelValues(pool.Name, pool.Namespace).Inc()
			} else {
				r.Metrics.ScaleUp.WithLabelValues(pool.Name, pool.Namespace).Inc()
			}
		}
	}
	if err := r.patchStatus(ctx, orig, &pool, size, byName, warmReady); err != nil {
		return ctrl.Result{}, err
	}
	if applyErr != nil {
		return ctrl.Result{}, applyErr
	}
	res := ctrl.Result{RequeueAfter: plan.RequeueAfter}
	if intrRequeue > 0 && (res.RequeueAfter == 0 || intrRequeue < res.RequeueAfter) {
		res.RequeueAfter = intrRequeue
	}
	if plan.Changed() && res.RequeueAfter == 0 {
		res.RequeueAfter = 2 * time.Second
	}
	return res, nil
}

// apply executes a plan. byName is updated to the post-plan view used by the status.
func (r *Reconciler) apply(ctx context.Context, pool *nnv1.AgentPool, plan warmpool.Plan, byName map[string]*corev1.Pod, used map[string]bool, b podBuild) error {
	logger := klog.FromContext(ctx)
	key := client.ObjectKeyFromObject(pool)
	// Activation first: it is the fast path of scale-up.
	for _, name := range plan.Activate {
		if err := r.setState(ctx, byName[name], warmpool.Serving); err != nil {
			return fmt.Errorf("activate pod %s: %w", name, err)
		}
		pool.Status.WarmActivations++
		if r.Metrics != nil {
			r.Metrics.Activations.WithLabelValues(pool.Name, pool.Namespace).Inc()
		}
		logger.Info("activated warm pod", "pod", name)
	}
	for _, name := range append(append([]string{}, plan.Drain...), plan.Trim...) {
		p := byName[name]
		if err := r.setState(ctx, p, warmpool.Draining); err != nil && !apierrors.IsNotFound(err) {
			return fmt.Errorf("drain pod %s: %w", name, err)
		}
		grace := b.drainGrace
		if err := r.Client.Delete(ctx, p, &client.DeleteOptions{GracePeriodSeconds: &grace}); client.IgnoreNotFound(err) != nil {
			return fmt.Errorf("delete pod %s: %w", name, err)
		}
		delete(byName, name)
	}
	spotNow := spotCount(byName, nil) // after the drains above
	typeCounts := spotTypeCounts(byName)
	restores := b.restores // interrupted pods' checkpoints, one per replacement
	create := func(n int32, state warmpool.State) error {
		for _, name := range freeSlots(pool.Name, used, int(n)) {
			used[name] = true
			pod, err := buildPod(pool, name, state, b)
			if err != nil {
				return err
			}
			if b.onDemandOnly {
				requireOnDemand(pod) // a replacement of an interrupted spot pod
				if state == warmpool.Serving && len(restores) > 0 {
					makeResumePod(pod, restores[0], b.restoreHostImage)
					restores = restores[1:]
				}
			} else if b.spot.enabled {
				spot := spotNow < b.spot.limit
				picked := ""
				if spot {
					picked = pickInstanceType(b.spot.instanceTypes, typeCounts)
					typeCounts[picked]++
					spotNow++
				}
				applySpot(pod, spot, b.spot, picked)
			}
			if err := controllerutil.SetControllerReference(pool, pod, r.Scheme); err != nil {
				return fmt.Errorf("owner reference: %w", err)
			}
			r.expect(key, name)
			if err := r.Client.Create(ctx, pod); err != nil {
				r.unexpect(key, name)
				if apierrors.IsAlreadyExists(err) {
					// A pod of this slot exists that the cache has not shown: count it, create nothing.
					continue
				}
				return fmt.Errorf("create pod %s: %w", name, err)
			}
			byName[name] = pod
		}
		return nil
	}
	if err := create(plan.CreateServing, warmpool.Serving); err != nil {
		return err
	}
	return create(plan.CreateWarm, warmpool.Warm)
}

// setState moves a pod's state label from the value the cache shows to s. The JSON patch first
// tests the pod's UID and that label value, so a stale cache fails (the apiserver rejects the
// test) instead of overwriting a newer state or a recreated pod; the kubelet's status updates
// touch neither field, so unlike a resourceVersion lock they never make the patch conflict.
func (r *Reconciler) setState(ctx context.Context, p *corev1.Pod, s warmpool.State) error {
	from := podState(p)
	if from == s {
		return nil
	}
	if _, err := warmpool.Transition(from, s); err != nil {
		return err
	}
	data, err := json.Marshal(statePatch(p, s))
	if err != nil {
		return fmt.Errorf("state patch: %w", err)
	}
	err = r.Client.Patch(ctx, p, client.RawPatch(types.JSONPatchType, data))
	if err == nil {
		return nil
	}
	// A write can commit although its response reports a failure: an apiserver or etcd timeout
	// answered with Retry-After is retried by client-go, and the retry then fails the guard.
	// Reading the pod back tells that from a real race.
	reader := r.APIReader
	if reader == nil {
		reader = r.Client
	}
	var cur corev1.Pod
	if gerr := reader.Get(ctx, client.ObjectKeyFromObject(p), &cur); gerr == nil &&
		(p.UID == "" || cur.UID == p.UID) && cur.Labels[nnv1.StateLabel] == string(s) {
		klog.FromContext(ctx).V(2).Info("state change committed despite the patch error", "pod", p.Name, "state", s, "err", err)
		cur.DeepCopyInto(p)
		return nil
	}
	return err
}

// jsonPatchOp is one RFC 6902 operation.
type jsonPatchOp struct {
	Op    string `json:"op"`
	Path  string `json:"path"`
	Value string `json:"value"`
}

// statePatch returns the guarded JSON patch that sets p's state label to s.
func statePatch(p *corev1.Pod, s warmpool.State) []jsonPatchOp {
	path := "/metadata/labels/" + strings.NewReplacer("~", "~0", "/", "~1").Replace(nnv1.StateLabel)
	var ops []jsonPatchOp
	if p.UID != "" {
		ops = append(ops, jsonPatchOp{Op: "test", Path: "/metadata/uid", Value: string(p.UID)})
	}
	if raw, ok := p.Labels[nnv1.StateLabel]; ok {
		return append(ops, jsonPatchOp{Op: "test", Path: path, Value: raw}, jsonPatchOp{Op: "replace", Path: path, Value: string(s)})
	}
	return append(ops, jsonPatchOp{Op: "add", Path: path, Value: string(s)})
}

// setCondition sets one status condition.
func (r *Reconciler) setCondition(pool *nnv1.AgentPool, t string, ok bool, reason, msg string) {
	st := metav1.ConditionFalse
	if ok {
		st = metav1.ConditionTrue
	}
	meta.SetStatusCondition(&pool.Status.Conditions, metav1.Condition{
		Type: t, Status: st, Reason: reason, Message: msg, ObservedGeneration: pool.Generation,
	})
}

// patchStatus recomputes the counts from byName (nil: keep counts) and patches the status.
func (r *Reconciler) patchStatus(ctx context.Context, orig, pool *nnv1.AgentPool, size sizing, byName map[string]*corev1.Pod, warmReady map[string]bool) error {
	st := &pool.Status
	st.ObservedGeneration = pool.Generation
	st.Selector = selectorString(pool.Name)
	st.WarmTarget = size.warmTarget
	if byName != nil {
		var serving, ready, warm int32
		for _, p := range byName {
			if !p.DeletionTimestamp.IsZero() {
				continue
			}
			switch podState(p) {
			case warmpool.Serving:
				serving++
				if podReady(p) {
					ready++
				}
			case warmpool.Warm:
				// Created this round (absent from warmReady) means not ready yet.
				if warmReady[p.Name] {
					warm++
				}
			}
		}
		st.Replicas, st.ReadyReplicas, st.WarmReplicas = serving, ready, warm
		r.setCondition(pool, nnv1.AgentPoolReady, ready >= size.desired, "ServingPods",
			fmt.Sprintf("%d/%d serving pods ready", ready, size.desired))
		r.setCondition(pool, nnv1.AgentPoolScaling, serving != size.desired, "ServingPods",
			fmt.Sprintf("%d serving, %d desired", serving, size.desired))
		r.setCondition(pool, nnv1.AgentPoolWarmPoolReady, warm >= size.warmTarget, "WarmPods",
			fmt.Sprintf("%d/%d warm pods ready", warm, size.warmTarget))
	}
	st.DesiredReplicas = size.desired
	if r.Metrics != nil {
		r.Metrics.Replicas.WithLabelValues(pool.Name, pool.Namespace).Set(float64(st.Replicas))
		r.Metrics.DesiredReplicas.WithLabelValues(pool.Name, pool.Namespace).Set(float64(size.desired))
		r.Metrics.WarmReplicas.WithLabelValues(pool.Name, pool.Namespace).Set(float64(st.WarmReplicas))
	}
	if err := r.Client.Status().Patch(ctx, pool, client.MergeFrom(orig)); client.IgnoreNotFound(err) != nil {
		return fmt.Errorf("patch agentpool status: %w", err)
	}
	return nil
}
