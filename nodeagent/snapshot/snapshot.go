// Package snapshot is the node agent's handler of AgentCheckpoint requests:
// it checkpoints a container of a pod on this node into the image store, or
// restores a stored checkpoint into a container on this node, and reports
// progress and failures in the AgentCheckpoint's status and as Events.
//
// Every node agent watches all AgentCheckpoints; only the agent on the node
// of the source (Checkpoint) or target (Restore) pod acts on one.
package snapshot

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/record"
	"k8s.io/klog/v2"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/neuronetes/neuronetes/api/v1alpha1"
	"github.com/neuronetes/neuronetes/checkpoint/store"
)

// Container identifies a running container on this node.
type Container struct {
	Namespace, Pod, Name string
	// ID is the containerd container ID (the CRI container ID without "containerd://").
	ID string
	// Workspace, for a Checkpoint with spec.workspaceVolume, is that volume's mount in the
	// container and its size limit (workspaceOf).
	Workspace *Workspace
}

// Engine does the node-level work; checkpoint/container provides the
// containerd implementation.
type Engine interface {
	// Checkpoint dumps c and stores it as k/id.
	Checkpoint(ctx context.Context, c Container, k store.Key, id string, leaveRunning bool, progress store.ProgressFunc) (*store.Manifest, error)
	// Restore replaces c's process tree with the stored checkpoint k/id.
	Restore(ctx context.Context, c Container, k store.Key, id string, progress store.ProgressFunc) error
	// Latest returns the checkpoint of k stored last.
	Latest(ctx context.Context, k store.Key) (*store.Manifest, error)
	// Prune applies a retention policy to k.
	Prune(ctx context.Context, k store.Key, r store.Retention) (store.PruneResult, error)
}

// Reconciler handles AgentCheckpoints for one node.
type Reconciler struct {
	Client client.Client
	// APIReader reads uncached; it confirms a request still looks
	// interrupted before failing it (the cache may lag our own writes).
	// Nil means Client.
	APIReader client.Reader
	Recorder  record.EventRecorder
	Engine    Engine
	NodeName  string
	// WaitRequeue is how long to wait for a container that is not running yet; 0 means 2s.
	WaitRequeue time.Duration

	mu       sync.Mutex
	inflight map[types.UID]bool
	// finished remembers requests this process completed, so a stale cache
	// read never runs or fails them again.
	finished map[types.UID]bool
	// prefetched remembers the Restores whose checkpoint fetch was started early (maybePrefetch).
	prefetched map[types.UID]bool
}

// Options configure Setup.
type Options struct {
	// NodeName is this node.
	NodeName string
	// Engine does the work.
	Engine Engine
	// MaxConcurrent bounds parallel requests on this node; 0 means 2.
	MaxConcurrent int
}

// Setup registers the AgentCheckpoint reconciler with mgr. The manager's
// scheme must include v1alpha1 and core/v1. The node agent's RBAC needs:
// agentcheckpoints get/list/watch, agentcheckpoints/status update/patch,
// pods get/list/watch, events create/patch.
func Setup(mgr ctrl.Manager, opts Options) error {
	if opts.NodeName == "" || opts.Engine == nil {
		return fmt.Errorf("snapshot setup: NodeName %q and Engine are required", opts.NodeName)
	}
	r := &Reconciler{
		Client:    mgr.GetClient(),
		APIReader: mgr.GetAPIReader(),
		Recorder:  mgr.GetEventRecorderFor("neuronetes-nodeagent-snapshot"), //nolint:staticcheck // record API keeps fakes simple
		Engine:    opts.Engine,
		NodeName:  opts.NodeName,
	}
	mc := opts.MaxConcurrent
	if mc <= 0 {
		mc = 2
	}
	if g, ok := opts.Engine.(GCer); ok {
		if err := mgr.Add(gcRunnable{gc: g, every: 30 * time.Second}); err != nil {
			return fmt.Errorf("snapshot setup: %w", err)
		}
	}
	if _, ok := opts.Engine.(CacheEvicter); ok {
		if err := mgr.Add(cacheSweep{r: r, every: 5 * time.Minute, grace: DefaultCacheSweepGrace}); err != nil {
			return fmt.Errorf("snapshot setup: %w", err)
		}
	}
	return ctrl.NewControllerManagedBy(mgr).
		Named("agentcheckpoint-"+opts.NodeName).
		For(&v1alpha1.AgentCheckpoint{}).
		// A target pod bound to this node, or its container starting: the Restores waiting
		// for it (checkpointsOfPod).
		Watches(&corev1.Pod{}, handler.EnqueueRequestsFromMapFunc(r.checkpointsOfPod)).
		WithOptions(controller.Options{MaxConcurrentReconciles: mc}).
		Complete(r)
}

// CheckpointID is the store id of the checkpoint an AgentCheckpoint writes.
func CheckpointID(ac *v1alpha1.AgentCheckpoint) string {
	return v1alpha1.CheckpointIDFor(ac.Namespace, ac.Name)
}

// Reconcile implements reconcile.Reconciler.
func (r *Reconciler) Reconcile(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	logger := klog.FromContext(ctx).WithValues("agentcheckpoint", req.NamespacedName)
	ctx = klog.NewContext(ctx, logger)
	var ac v1alpha1.AgentCheckpoint
	if err := r.Client.Get(ctx, req.NamespacedName, &ac); err != nil {
		if apierrors.IsNotFound(err) {
			r.evictDeleted(ctx, req.NamespacedName)
		}
		return reconcile.Result{}, client.IgnoreNotFound(err)
	}
	switch ac.Status.Phase {
	case v1alpha1.AgentCheckpointSucceeded, v1alpha1.AgentCheckpointFailed:
		return reconcile.Result{}, nil
	}
	ref, err := containerRef(&ac)
	if err != nil {
		return reconcile.Result{}, r.fail(ctx, &ac, "InvalidSpec", err)
	}
	var pod corev1.Pod
	if err := r.Client.Get(ctx, types.NamespacedName{Namespace: ac.Namespace, Name: ref.Pod}, &pod); err != nil {
		if apierrors.IsNotFound(err) {
			// The pod may be on another node outside this agent's pod cache.
			return reconcile.Result{}, nil
		}
		return reconcile.Result{}, fmt.Errorf("get pod %s: %w", ref.Pod, err)
	}
	if pod.Spec.NodeName != r.NodeName {
		return reconcile.Result{}, nil
	}
	if r.isInflight(ac.UID) || r.isFinished(ac.UID) {
		return reconcile.Result{}, nil
	}
	if ac.Spec.Operation == v1alpha1.RestoreOperation {
		// Admission refuses these too; the node agent does not rely on it.
		if err := v1alpha1.ValidateRestoreSource("spec.agent", "spec.checkpointID", ac.Namespace, ac.Spec.Agent, ac.Spec.CheckpointID); err != nil {
			return reconcile.Result{}, r.fail(ctx, &ac, "RestoreSourceRefused", err)
		}
	}
	if ac.Status.Phase == v1alpha1.AgentCheckpointRunning {
		var live v1alpha1.AgentCheckpoint
		reader := r.APIReader
		if reader == nil {
			reader = r.Client
		}
		if err := reader.Get(ctx, req.NamespacedName, &live); err != nil {
			return reconcile.Result{}, client.IgnoreNotFound(err)
		}
		if live.Status.Phase != v1alpha1.AgentCheckpointRunning {
			return reconcile.Result{}, nil
		}
		return reconcile.Result{}, r.fail(ctx, &live, "Interrupted", fmt.Errorf("the node agent restarted while the %s ran", ac.Spec.Operation))
	}
	c, ready, err := findContainer(&pod, ref.Container)
	if err != nil {
		return reconcile.Result{}, r.fail(ctx, &ac, "ContainerNotFound", err)
	}
	if !ready {
		r.maybePrefetch(ctx, &ac, c, agentKey(&ac, &pod))
		wait := r.WaitRequeue
		if wait == 0 {
			wait = 2 * time.Second
		}
		msg := fmt.Sprintf("waiting for container %s of pod %s to run", c.Name, pod.Name)
		if ac.Status.Phase != v1alpha1.AgentCheckpointPending || ac.Status.Message != msg {
			ac.Status.Phase, ac.Status.Message = v1alpha1.AgentCheckpointPending, msg
			if err := r.Client.Status().Update(ctx, &ac); err != nil {
				return reconcile.Result{}, err
			}
		}
		return reconcile.Result{RequeueAfter: wait}, nil
	}
	r.setInflight(ac.UID, true)
	defer r.setInflight(ac.UID, false)
	defer r.setFinished(ac.UID)
	now := metav1.Now()
	ac.Status.Phase, ac.Status.NodeName, ac.Status.StartTime, ac.Status.Message = v1alpha1.AgentCheckpointRunning, r.NodeName, &now, ""
	if err := r.Client.Status().Update(ctx, &ac); err != nil {
		return reconcile.Result{}, err
	}
	if ac.Spec.Operation == v1alpha1.CheckpointOperation && ac.Spec.WorkspaceVolume != "" {
		if c.Workspace, err = workspaceOf(&pod, c.Name, ac.Spec.WorkspaceVolume); err != nil {
			return reconcile.Result{}, r.fail(ctx, &ac, "InvalidSpec", err)
		}
	}
	r.Recorder.Eventf(&ac, corev1.EventTypeNormal, "Started", "%s of %s/%s on %s", ac.Spec.Operation, pod.Name, c.Name, r.NodeName)
	agent := agentKey(&ac, &pod)
	switch ac.Spec.Operation {
	case v1alpha1.CheckpointOperation:
		return reconcile.Result{}, r.checkpoint(ctx, &ac, c, agent)
	default:
		return reconcile.Result{}, r.restore(ctx, &ac, c, agent)
	}
}

func containerRef(ac *v1alpha1.AgentCheckpoint) (*v1alpha1.ContainerRef, error) {
	switch ac.Spec.Operation {
	case v1alpha1.CheckpointOperation:
		if ac.Spec.Source == nil || ac.Spec.Source.Pod == "" {
			return nil, fmt.Errorf("spec.source.pod is required for operation Checkpoint")
		}
		return ac.Spec.Source, nil
	case v1alpha1.RestoreOperation:
		if ac.Spec.Target == nil || ac.Spec.Target.Pod == "" {
			return nil, fmt.Errorf("spec.target.pod is required for operation Restore")
		}
		if ac.Spec.Agent == "" && ac.Spec.CheckpointID == "" {
			return nil, fmt.Errorf("spec.agent or spec.checkpointID is required for operation Restore")
		}
		return ac.Spec.Target, nil
	}
	return nil, fmt.Errorf("spec.operation %q: want Checkpoint or Restore", ac.Spec.Operation)
}

// findContainer returns the named (or first) container and whether it runs.
func findContainer(pod *corev1.Pod, name string) (Container, bool, error) {
	if name == "" && len(pod.Spec.Containers) > 0 {
		name = pod.Spec.Containers[0].Name
	}
	c := Container{Namespace: pod.Namespace, Pod: pod.Name, Name: name}
	for _, cs := range pod.Status.ContainerStatuses {
		if cs.Name != name {
			continue
		}
		scheme, id, ok := strings.Cut(cs.ContainerID, "://")
		if cs.State.Running == nil || !ok {
			return c, false, nil
		}
		if scheme != "containerd" {
			return c, false, fmt.Errorf("container %s of pod %s runs on %q, only containerd is supported", name, pod.Name, scheme)
		}
		c.ID = id
		return c, true, nil
	}
	for _, sc := range pod.Spec.Containers {
		if sc.Name == name {
			return c, false, nil
		}
	}
	return c, false, fmt.Errorf("pod %s has no container %q", pod.Name, name)
}

// agentKey is the store key of a request: always the AgentCheckpoint's own namespace, and
// spec.agent, else the pod's AgentClass label, else the pod name.
func agentKey(ac *v1alpha1.AgentCheckpoint, pod *corev1.Pod) store.Key {
	k := store.Key{Namespace: ac.Namespace, Agent: pod.Name}
	if ac.Spec.Agent != "" {
		k.Agent = ac.Spec.Agent
	} else if v := pod.Labels[v1alpha1.AgentClassLabel]; v != "" {
		k.Agent = v
	}
	return k
}

func (r *Reconciler) isInflight(uid types.UID) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.inflight[uid]
}

func (r *Reconciler) isFinished(uid types.UID) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.finished[uid]
}

func (r *Reconciler) setFinished(uid types.UID) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.finished == nil {
		r.finished = map[types.UID]bool{}
	}
	r.finished[uid] = true
}

func (r *Reconciler) setInflight(uid types.UID, on bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.inflight == nil {
		r.inflight = map[types.UID]bool{}
	}
	if on {
		r.inflight[uid] = true
	} else {
		delete(r.inflight, uid)
	}
}

// GCer is implemented by engines that leave containers behind the kubelet's back.
type GCer interface {
	GC(ctx context.Context) ([]string, error)
}

// gcRunnable runs engine GC periodically while the manager runs.
type gcRunnable struct {
	gc    GCer
	every time.Duration
}

// Start implements manager.Runnable.
func (g gcRunnable) Start(ctx context.Context) error {
	logger := klog.FromContext(ctx).WithName("checkpoint-gc")
	t := time.NewTicker(g.every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
			removed, err := g.gc.GC(ctx)
			if err != nil {
				logger.Error(err, "Removing orphaned restored containers")
			}
			if len(removed) > 0 {
				logger.Info("Removed restored containers of deleted warm pods", "containers", removed)
			}
		}
	}
}
