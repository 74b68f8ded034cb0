package agentpool

import (
	"context"
	"fmt"
	"strconv"
	"time"

	corev1 "k8s.io/api/core/v1"
	schedv1beta1 "k8s.io/api/scheduling/v1beta1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/klog/v2"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	nnv1 "github.com/neuronetes/neuronetes/api/v1alpha1"
	"github.com/neuronetes/neuronetes/warmpool"
)

// GangLabel names the PodGroup (the replica) a gang pod belongs to.
const GangLabel = "neuronetes.io/gang"

// HostnameTopologyKey is the node label a gang's topology constraint names: the driver's NVLink
// domains lie within one node, so both Node and NVLinkDomain constrain a replica to one node.
const HostnameTopologyKey = "kubernetes.io/hostname"

// GangTemplateName is the name of the one PodGroupTemplate of a gang pool's Workload.
const GangTemplateName = "replica"

// buildWorkload renders a gang pool's Workload (named as the pool): one PodGroupTemplate that
// every replica's PodGroup copies and names in spec.workloadRef, as the Job controller does.
func buildWorkload(pool *nnv1.AgentPool, class *nnv1.AgentClass) *schedv1beta1.Workload {
	pg := buildPodGroup(pool, "", class)
	return &schedv1beta1.Workload{
		ObjectMeta: metav1.ObjectMeta{Name: pool.Name, Namespace: pool.Namespace,
			Labels: map[string]string{nnv1.PoolLabel: pool.Name}},
		Spec: schedv1beta1.WorkloadSpec{
			ControllerRef: &schedv1beta1.TypedLocalObjectReference{APIGroup: nnv1.GroupVersion.Group, Kind: "AgentPool", Name: pool.Name},
			PodGroupTemplates: []schedv1beta1.PodGroupTemplate{{Name: GangTemplateName,
				SchedulingPolicy: pg.Spec.SchedulingPolicy, SchedulingConstraints: pg.Spec.SchedulingConstraints,
				DisruptionMode: pg.Spec.DisruptionMode, PriorityClassName: pg.Spec.PriorityClassName}},
		},
	}
}

// gangName is the PodGroup name of replica i of a pool.
func gangName(pool string, i int) string { return pool + "-g" + strconv.Itoa(i) }

// gangPodName is the name of pod j of the replica whose PodGroup is group.
func gangPodName(group string, j int) string { return group + "-" + strconv.Itoa(j) }

// gangPriorityClass is the PriorityClass of a class's gang pods: the pod template's
// priorityClassName, which every pod keeps and the PodGroup copies ("" when unset).
func gangPriorityClass(class *nnv1.AgentClass) string {
	if class.Spec.Template == nil {
		return ""
	}
	return class.Spec.Template.Spec.PriorityClassName
}

// buildPodGroup renders the PodGroup of one replica: a gang policy of minCount size (all pods or
// none are bound), disruption mode All (the scheduler preempts the replica whole, never one
// pod), the pods' PriorityClass (the scheduler ranks preemptors and victims by the PodGroup's
// priority) and, when the class asks for a topology, a one-node constraint.
func buildPodGroup(pool *nnv1.AgentPool, name string, class *nnv1.AgentClass) *schedv1beta1.PodGroup {
	g := class.Spec.Gang
	pg := &schedv1beta1.PodGroup{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: pool.Namespace,
			Labels: map[string]string{nnv1.PoolLabel: pool.Name}},
		Spec: schedv1beta1.PodGroupSpec{
			WorkloadRef: &schedv1beta1.WorkloadReference{WorkloadName: pool.Name, TemplateName: GangTemplateName},
			SchedulingPolicy: schedv1beta1.PodGroupSchedulingPolicy{
				Gang: &schedv1beta1.GangSchedulingPolicy{MinCount: g.Size}},
			DisruptionMode:    &schedv1beta1.DisruptionMode{All: &schedv1beta1.AllDisruptionMode{}},
			PriorityClassName: gangPriorityClass(class),
		},
	}
	if g.Topology != "" {
		pg.Spec.SchedulingConstraints = &schedv1beta1.PodGroupSchedulingConstraints{
			Topology: []schedv1beta1.TopologyConstraint{{Key: HostnameTopologyKey}}}
	}
	return pg
}

// buildGangPod renders pod j of a replica: the class's serving pod joined to the PodGroup.
func buildGangPod(pool *nnv1.AgentPool, group string, j int, b podBuild) (*corev1.Pod, error) {
	pod, err := buildPod(pool, gangPodName(group, j), warmpool.Serving, b)
	if err != nil {
		return nil, err
	}
	g := group
	pod.Spec.SchedulingGroup = &corev1.PodSchedulingGroup{PodGroupName: &g}
	pod.Labels[GangLabel] = group
	return pod, nil
}

// gangPlan is what one reconcile of a gang pool does.
type gangPlan struct {
	// create maps each PodGroup to ensure to the indexes of its missing pods.
	create map[string][]int
	// remove lists the PodGroups to delete with all their pods: beyond desired, or broken (a pod
	// failed or is being deleted: the replica is replaced whole, never in part).
	remove []string
	// replicas counts groups with a live pod; ready those whose size pods are all Ready.
	replicas, ready int32
}

// planGang decides a gang pool's round from its pods (any pool pod; those outside a desired
// group, or without one, are removed with their group).
func planGang(pool string, desired, size int32, pods map[string]*corev1.Pod) gangPlan {
	want := map[string]bool{}
	for i := 0; i < int(desired); i++ {
		want[gangName(pool, i)] = true
	}
	groups := map[string][]*corev1.Pod{}
	for _, p := range pods {
		groups[p.Labels[GangLabel]] = append(groups[p.Labels[GangLabel]], p)
	}
	plan := gangPlan{create: map[string][]int{}}
	for g, ps := range groups {
		broken := false
		for _, p := range ps {
			if !p.DeletionTimestamp.IsZero() || p.Status.Phase == corev1.PodFailed || p.Status.Phase == corev1.PodSucceeded {
				broken = true
			}
		}
		if !want[g] || broken {
			plan.remove = append(plan.remove, g)
			continue
		}
		plan.replicas++
		if readyCount(ps) == int(size) {
			plan.ready++
		}
	}
	for i := 0; i < int(desired); i++ {
		g := gangName(pool, i)
		if containsString(plan.remove, g) {
			continue // recreated once its old pods are gone
		}
		have := map[string]bool{}
		for _, p := range groups[g] {
			have[p.Name] = true
		}
		for j := 0; j < int(size); j++ {
			if !have[gangPodName(g, j)] {
				plan.create[g] = append(plan.create[g], j)
			}
		}
	}
	return plan
}

func readyCount(ps []*corev1.Pod) int {
	n := 0
	for _, p := range ps {
		if podReady(p) {
			n++
		}
	}
	return n
}

func containsString(s []string, v string) bool {
	for _, x := range s {
		if x == v {
			return true
		}
	}
	return false
}

// reconcileGang keeps spec.replicas gangs of class.spec.gang.size pods, each with its PodGroup.
// Gang pools have no warm pool, spot placement or interruption migration.
func (r *Reconciler) reconcileGang(ctx context.Context, orig, pool *nnv1.AgentPool, size sizing, b podBuild, byName map[string]*corev1.Pod) (ctrl.Result, error) {
	logger := klog.FromContext(ctx)
	key := client.ObjectKeyFromObject(pool)
	seen := map[string]bool{}
	for n := range byName {
		seen[n] = true
	}
	if n := r.pendingCreates(key, seen); n > 0 {
		return ctrl.Result{RequeueAfter: 200 * time.Millisecond}, nil
	}
	g := b.class.Spec.Gang
	plan := planGang(pool.Name, size.desired, g.Size, byName)
	var applyErr error
	for _, name := range plan.remove {
		if err := r.removeGang(ctx, pool, name, byName, b.drainGrace); err != nil {
			applyErr = err
			break
		}
	}
	tooLarge := ""
	if len(plan.create) > 0 && applyErr == nil {
		// A replica no domain can hold would wait forever: say so, naming the field, instead.
		if tooLarge, applyErr = r.checkGangFits(ctx, b.class); tooLarge != "" {
			plan.create = nil
		}
	}
	if len(plan.create) > 0 && applyErr == nil {
		applyErr = r.ensureWorkload(ctx, pool, b.class)
	}
	for group, idx := range plan.create {
		if applyErr != nil {
			break
		}
		applyErr = r.createGang(ctx, pool, group, idx, b)
	}
	if len(plan.create) > 0 || len(plan.remove) > 0 {
		logger.Info("applying gang plan", "desired", size.desired, "size", g.Size, "create", plan.create, "remove", plan.remove)
	}
	st := &pool.Status
	st.Replicas, st.ReadyReplicas, st.WarmReplicas = plan.replicas, plan.ready, 0
	size.warmTarget = 0
	r.setCondition(pool, nnv1.AgentPoolReady, plan.ready >= size.desired, "Gangs",
		fmt.Sprintf("%d/%d gangs of %d pods ready", plan.ready, size.desired, g.Size))
	r.setCondition(pool, nnv1.AgentPoolScaling, plan.replicas != size.desired, "Gangs",
		fmt.Sprintf("%d gangs, %d desired", plan.replicas, size.desired))
	if applyErr != nil {
		// A cluster without the Workload API (gates, runtime-config) fails here: say so on the pool.
		r.setCondition(pool, nnv1.AgentPoolReady, false, "GangError", applyErr.Error())
	}
	if tooLarge != "" {
		r.setCondition(pool, nnv1.AgentPoolReady, false, gangTooLargeWhy, tooLarge)
	}
	if err := r.patchStatus(ctx, orig, pool, size, nil, nil); err != nil {
		return ctrl.Result{}, err
	}
	if applyErr != nil {
		return ctrl.Result{}, applyErr
	}
	if len(plan.create) > 0 || len(plan.remove) > 0 {
		return ctrl.Result{RequeueAfter: 2 * time.Second}, nil
	}
	if tooLarge != "" {
		return ctrl.Result{RequeueAfter: time.Minute}, nil // slices are not watched: look again
	}
	return ctrl.Result{}, nil
}

// ensureWorkload creates the pool's Workload when absent; an existing one is kept (its
// templates are immutable, so a changed spec.gang applies to new PodGroups only).
func (r *Reconciler) ensureWorkload(ctx context.Context, pool *nnv1.AgentPool, class *nnv1.AgentClass) error {
	wl := buildWorkload(pool, class)
	if err := controllerutil.SetControllerReference(pool, wl, r.Scheme); err != nil {
		return fmt.Errorf("owner reference: %w", err)
	}
	if err := r.Client.Create(ctx, wl); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("create workload %s (the cluster needs the GenericWorkload gate and scheduling.k8s.io/v1beta1): %w", wl.Name, err)
	}
	return nil
}

// createGang creates the PodGroup of a replica (if absent) and then its missing pods.
func (r *Reconciler) createGang(ctx context.Context, pool *nnv1.AgentPool, group string, idx []int, b podBuild) error {
	pg := buildPodGroup(pool, group, b.class)
	if err := controllerutil.SetControllerReference(pool, pg, r.Scheme); err != nil {
		return fmt.Errorf("owner reference: %w", err)
	}
	err := r.Client.Create(ctx, pg)
	if apierrors.IsAlreadyExists(err) {
		// The PodGroup of a replica removed whole (preempted, broken) keeps the apiserver's
		// protection finalizer until its last pod is gone; pods created now would join the old
		// group and hold it forever. Wait until it is gone (the round requeues).
		if old, gerr := r.terminatingPodGroup(ctx, pool.Namespace, group); gerr != nil || old {
			klog.FromContext(ctx).V(1).Info("previous PodGroup still terminating; waiting", "podGroup", group, "err", gerr)
			return gerr
		}
	} else if err != nil {
		return fmt.Errorf("create podgroup %s (the cluster needs the GenericWorkload gate and scheduling.k8s.io/v1beta1): %w", group, err)
	}
	key := client.ObjectKeyFromObject(pool)
	for _, j := range idx {
		pod, err := buildGangPod(pool, group, j, b)
		if err != nil {
			return err
		}
		if err := controllerutil.SetControllerReference(pool, pod, r.Scheme); err != nil {
			return fmt.Errorf("owner reference: %w", err)
		}
		r.expect(key, pod.Name)
		if err := r.Client.Create(ctx, pod); err != nil {
			r.unexpect(key, pod.Name)
			if apierrors.IsAlreadyExists(err) {
				continue
			}
			return fmt.Errorf("create pod %s: %w", pod.Name, err)
		}
	}
	return nil
}

// removeGang deletes a replica's pods and its PodGroup.
func (r *Reconciler) removeGang(ctx context.Context, pool *nnv1.AgentPool, group string, byName map[string]*corev1.Pod, grace int64) error {
	for name, p := range byName {
		if p.Labels[GangLabel] != group || !p.DeletionTimestamp.IsZero() {
			continue
		}
		if err := r.Client.Delete(ctx, p, &client.DeleteOptions{GracePeriodSeconds: &grace}); client.IgnoreNotFound(err) != nil {
			return fmt.Errorf("delete pod %s: %w", name, err)
		}
	}
	if group == "" {
		return nil // pods of the pool from before it was a gang pool
	}
	pg := &schedv1beta1.PodGroup{ObjectMeta: metav1.ObjectMeta{Name: group, Namespace: pool.Namespace}}
	if err := r.Client.Delete(ctx, pg); client.IgnoreNotFound(err) != nil {
		return fmt.Errorf("delete podgroup %s: %w", group, err)
	}
	return nil
}

// terminatingPodGroup reports whether the PodGroup ns/name is being deleted, read from the
// apiserver (the controller keeps no PodGroup cache).
func (r *Reconciler) terminatingPodGroup(ctx context.Context, ns, name string) (bool, error) {
	reader := r.APIReader
	if reader == nil {
		reader = r.Client
	}
	pg := &schedv1beta1.PodGroup{}
	if err := reader.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, pg); err != nil {
		if apierrors.IsNotFound(err) {
			return true, nil // deleted since the create: the next round creates it anew
		}
		return false, fmt.Errorf("get podgroup %s: %w", name, err)
	}
	return !pg.DeletionTimestamp.IsZero(), nil
}
