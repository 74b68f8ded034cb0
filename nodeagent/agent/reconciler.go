package agent

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"sort"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/record"
	"k8s.io/klog/v2"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/neuronetes/neuronetes/api/v1alpha1"
	"github.com/neuronetes/neuronetes/internal/modelsrcapi"
	"github.com/neuronetes/neuronetes/nodeagent/cache"
)

// Reconciler keeps this node's cache in line with the cluster: every Model is prewarmed (models used by
// pods on this node may evict others; the rest only fill free space), entries used by pods are pinned,
// warm models are labelled on the Node, and each Model's status.nodes[] entry for this node is written
// with server-side apply under a per-node field manager, so agents on different nodes never conflict.
//
// All events map to one request (the node), so a reconcile is always a full, idempotent sync.
type Reconciler struct {
	// Client reads Models, AgentClasses and this node's Pods from the manager's cache.
	Client client.Client
	// APIReader reads the Node uncached.
	APIReader client.Reader
	// Credentials asks the controller for a Model's source credentials (modelsrcapi.Client); the
	// agent reads no Secret. Nil: a Model with a spec.source.secretRef fails.
	Credentials CredentialSource
	// Agent does the work.
	Agent *Agent
	// NodeName is this node.
	NodeName string
	// HostCacheDir is the cache directory as the host sees it (what pods' hostPath volumes name);
	// the store's root when empty.
	HostCacheDir string
	// S3Endpoint is used for s3:// models whose Secret has no "endpoint" key.
	S3Endpoint string
	// ActiveResync is the requeue interval while downloads run (progress reporting); 0 means 3s.
	ActiveResync time.Duration
	// IdleResync is the requeue interval otherwise (re-measure residency, keep labels true); 0 means 30s.
	IdleResync time.Duration
	// RetryAfter caps the delay between attempts for a failed model; 0 means
	// 1m. The delay starts at FirstRetry and doubles with each consecutive
	// failure.
	RetryAfter time.Duration
	// FirstRetry is the delay after the first failure; 0 means 2s.
	FirstRetry time.Duration

	// Recorder records the bind-triggered fetch's Events on pods (WeightsFetchStarted,
	// WeightsReady, WeightsFetchFailed); nil records none.
	Recorder record.EventRecorder

	// handled holds the pods on this node whose bind was decided (bindfetch.go).
	handled map[types.UID]bool
	// written remembers the last status written per model, to skip no-op applies.
	written map[types.NamespacedName]v1alpha1.ModelNodeStatus
}

// FieldManager is the server-side apply field manager this node's agent uses for Model status.
func (r *Reconciler) FieldManager() string { return "neuronetes-nodeagent/" + r.NodeName }

// PodFieldSelector restricts the manager's Pod cache to pods on nodeName; use it in
// cache.Options.ByObject.
func PodFieldSelector(nodeName string) fields.Selector {
	return fields.OneTermEqualSelector("spec.nodeName", nodeName)
}

// SetupWithManager registers the reconciler. The manager's cache must restrict Pods to this node (see
// PodFieldSelector).
func (r *Reconciler) SetupWithManager(mgr ctrl.Manager) error {
	node := handler.EnqueueRequestsFromMapFunc(func(context.Context, client.Object) []reconcile.Request {
		return []reconcile.Request{{NamespacedName: types.NamespacedName{Name: r.NodeName}}}
	})
	return ctrl.NewControllerManagedBy(mgr).
		Named("nodeagent").
		Watches(&v1alpha1.Model{}, node).
		Watches(&v1alpha1.AgentClass{}, node).
		Watches(&corev1.Pod{}, node).
		Complete(r)
}

// Reconcile implements reconcile.Reconciler.
func (r *Reconciler) Reconcile(ctx context.Context, _ reconcile.Request) (reconcile.Result, error) {
	log := klog.FromContext(ctx)
	if r.written == nil {
		r.written = map[types.NamespacedName]v1alpha1.ModelNodeStatus{}
	}
	var models v1alpha1.ModelList
	if err := r.Client.List(ctx, &models); err != nil {
		return reconcile.Result{}, fmt.Errorf("list models: %w", err)
	}
	var classes v1alpha1.AgentClassList
	if err := r.Client.List(ctx, &classes); err != nil {
		return reconcile.Result{}, fmt.Errorf("list agentclasses: %w", err)
	}
	var pods corev1.PodList
	if err := r.Client.List(ctx, &pods); err != nil {
		return reconcile.Result{}, fmt.Errorf("list pods: %w", err)
	}
	modelByKey := map[string]*v1alpha1.Model{}
	for i := range models.Items {
		m := &models.Items[i]
		modelByKey[m.Namespace+"/"+m.Name] = m
	}
	classByKey := map[string]*v1alpha1.AgentClass{}
	for i := range classes.Items {
		c := &classes.Items[i]
		classByKey[c.Namespace+"/"+c.Name] = c
	}
	var onNode []corev1.Pod
	for _, p := range pods.Items { // the cache is node-scoped; this guards a misconfigured one
		if p.Spec.NodeName == r.NodeName {
			onNode = append(onNode, p)
		}
	}
	hostDir := r.HostCacheDir
	if hostDir == "" {
		hostDir = r.Agent.Store().Root()
	}
	pins := Pins(onNode, classByKey, modelByKey, hostDir)
	r.Agent.Store().SetPins(pins)
	r.startBound(ctx, onNode, classByKey, modelByKey)

	var nextRetry time.Duration // soonest backoff expiry of a failed model
	for i := range models.Items {
		m := &models.Items[i]
		h, err := cache.ParseDigest(m.Spec.Digest)
		if err != nil {
			continue // reported in status below
		}
		st := r.Agent.State(h)
		if st.Phase == PhaseReady {
			// Pods mount ready/<hex> and wait for this link (WeightsVolume).
			if err := r.Agent.Store().Expose(h, WeightsFileName(m.Spec.Format)); err != nil {
				log.Error(err, "Exposing ready weights", "model", klog.KObj(m))
			}
		}
		if st.Phase == PhaseReady && st.Warm {
			continue
		}
		// A failed entry waits out its backoff before the next attempt, unless
		// its Model now names another source (the failure was about the old one).
		if st.Phase == PhaseFailed && m.Spec.Source.URI == st.FailedURI {
			if wait := r.retryDelay(st.Failures) - time.Since(st.FailedAt); wait > 0 {
				if nextRetry == 0 || wait < nextRetry {
					nextRetry = wait
				}
				continue
			}
		}
		req, err := r.request(ctx, m, len(pins[h]) == 0)
		if err != nil {
			log.Error(err, "Model source", "model", klog.KObj(m))
			r.Agent.update(h, func(s *State) {
				s.Phase, s.Message, s.FailedAt, s.FailedURI = PhaseFailed, err.Error(), time.Now(), m.Spec.Source.URI
				s.Failures++
			})
			continue
		}
		r.Agent.Start(req)
	}

	states := r.Agent.Refresh()
	byHex := map[string]State{}
	var warmHexes, knownHexes []string
	for i := range models.Items {
		if h, err := cache.ParseDigest(models.Items[i].Spec.Digest); err == nil {
			knownHexes = append(knownHexes, h)
		}
	}
	knownHexes = append(knownHexes, r.Agent.Known()...)
	for _, s := range states {
		byHex[s.Hex] = s
		if s.Phase == PhaseReady && s.Warm {
			warmHexes = append(warmHexes, s.Hex)
		}
	}
	sort.Strings(warmHexes)
	if err := r.syncLabels(ctx, warmHexes, knownHexes); err != nil {
		return reconcile.Result{}, err
	}
	for i := range models.Items {
		m := &models.Items[i]
		if err := r.applyStatus(ctx, m, byHex); err != nil {
			log.Error(err, "Writing model status", "model", klog.KObj(m))
		}
	}
	requeue := orDefault(r.IdleResync, 30*time.Second)
	if r.Agent.Running() {
		requeue = orDefault(r.ActiveResync, 3*time.Second)
	}
	if nextRetry > 0 && nextRetry < requeue {
		requeue = nextRetry
	}
	return reconcile.Result{RequeueAfter: requeue}, nil
}

// retryDelay is the backoff after failures consecutive failed attempts:
// FirstRetry doubled per failure after the first, capped at RetryAfter.
func (r *Reconciler) retryDelay(failures int) time.Duration {
	first, limit := orDefault(r.FirstRetry, 2*time.Second), orDefault(r.RetryAfter, time.Minute)
	d := first
	for i := 1; i < failures && d < limit; i++ {
		d *= 2
	}
	return min(d, limit)
}

func orDefault(d, def time.Duration) time.Duration {
	if d > 0 {
		return d
	}
	return def
}

// request builds the agent request for a Model, with the credentials of its secretRef from the
// controller (sourceOptions).
func (r *Reconciler) request(ctx context.Context, m *v1alpha1.Model, noEvict bool) (Request, error) {
	opts, err := r.sourceOptions(ctx, m)
	if err != nil {
		return Request{}, err
	}
	return Request{Digest: m.Spec.Digest, URI: m.Spec.Source.URI, SizeBytes: m.Spec.SizeBytes, Source: opts, NoEvict: noEvict}, nil
}

// CredentialSource gives a Model's source credentials (modelsrcapi.Client).
type CredentialSource interface {
	Credentials(ctx context.Context, req modelsrcapi.Request) (modelsrcapi.Credentials, error)
}

// sourceOptions resolves a Model's spec.source.secretRef. The agent reads no Secret: it asks the
// controller (Credentials), which answers only when this node uses the Model, for the Model's
// current UID. Keys: accessKeyID, secretAccessKey, endpoint and region for s3; token for http(s)
// (sent as a Bearer token). A refusal's error names its reason, never a credential.
func (r *Reconciler) sourceOptions(ctx context.Context, m *v1alpha1.Model) (cache.SourceOptions, error) {
	opts := cache.SourceOptions{S3Endpoint: r.S3Endpoint}
	ref := m.Spec.Source.SecretRef
	if ref == nil {
		return opts, nil
	}
	if r.Credentials == nil {
		return opts, fmt.Errorf("spec.source.secretRef %q: this node agent has no --model-source-url, so it gets no source credentials", ref.Name)
	}
	c, err := r.Credentials.Credentials(ctx, modelsrcapi.Request{Namespace: m.Namespace, Name: m.Name, UID: string(m.UID)})
	if err != nil {
		return opts, fmt.Errorf("spec.source.secretRef %q: %w (see the Model's %s condition)", ref.Name, err, v1alpha1.ModelConditionSourceCredentials)
	}
	opts.S3AccessKey, opts.S3SecretKey, opts.S3Region = c.AccessKeyID, c.SecretAccessKey, c.Region
	if c.Endpoint != "" {
		opts.S3Endpoint = c.Endpoint
	}
	if c.Token != "" {
		opts.HTTPHeader = http.Header{"Authorization": {"Bearer " + c.Token}}
	}
	return opts, nil
}

// syncLabels makes the node's warm labels match warmHexes with one merge patch.
func (r *Reconciler) syncLabels(ctx context.Context, warmHexes, knownHexes []string) error {
	var node corev1.Node
	if err := r.APIReader.Get(ctx, types.NamespacedName{Name: r.NodeName}, &node); err != nil {
		return fmt.Errorf("get node %s: %w", r.NodeName, err)
	}
	patch := LabelPatch(node.Labels, warmHexes, knownHexes)
	if patch == nil {
		return nil
	}
	body, err := json.Marshal(map[string]any{"metadata": map[string]any{"labels": patch}})
	if err != nil {
		return err
	}
	if err := r.Client.Patch(ctx, &node, client.RawPatch(types.MergePatchType, body)); err != nil {
		return fmt.Errorf("label node %s: %w", r.NodeName, err)
	}
	klog.FromContext(ctx).Info("Updated warm-model node labels", "node", r.NodeName, "changes", len(patch), "warm", len(warmHexes))
	return nil
}

// NodeStatus renders this node's status entry for a model from the agent's state.
func NodeStatus(node string, m *v1alpha1.Model, byHex map[string]State) v1alpha1.ModelNodeStatus {
	ns := v1alpha1.ModelNodeStatus{NodeName: node, Phase: v1alpha1.ModelCachePending}
	h, err := cache.ParseDigest(m.Spec.Digest)
	if err != nil {
		ns.Phase, ns.Message = v1alpha1.ModelCacheFailed, fmt.Sprintf("spec.digest: %v", err)
		return ns
	}
	s, ok := byHex[h]
	if !ok {
		return ns
	}
	ns.Phase = v1alpha1.ModelCachePhase(s.Phase)
	ns.BytesCached = s.BytesCached
	ns.Message = s.Message
	switch {
	case s.Phase == PhaseDownloading:
		ns.Message = progressMessage(s)
	case s.Phase == PhaseReady && s.SizeBytes > 0:
		ns.Message = fmt.Sprintf("resident %d%% (%d of %d bytes)", s.ResidentBytes*100/s.SizeBytes, s.ResidentBytes, s.SizeBytes)
		if s.Warm {
			ns.Message = "warm: " + ns.Message
		} else if s.Message != "" {
			ns.Message = s.Message + "; " + ns.Message
		}
	}
	return ns
}

func progressMessage(s State) string {
	msg := fmt.Sprintf("downloading %d", s.BytesCached)
	if s.SizeBytes > 0 {
		msg += fmt.Sprintf(" of %d bytes (%d%%)", s.SizeBytes, s.BytesCached*100/s.SizeBytes)
	} else {
		msg += " bytes"
	}
	if s.BytesPerSecond > 0 {
		msg += fmt.Sprintf(" at %.1f MiB/s", s.BytesPerSecond/(1<<20))
	}
	if s.ETA > 0 {
		msg += fmt.Sprintf(", ETA %s", s.ETA.Round(time.Second))
	}
	return msg
}

// applyStatus writes this node's entry of m.status.nodes with server-side apply, when it changed.
func (r *Reconciler) applyStatus(ctx context.Context, m *v1alpha1.Model, byHex map[string]State) error {
	want := NodeStatus(r.NodeName, m, byHex)
	key := client.ObjectKeyFromObject(m)
	for _, cur := range m.Status.Nodes { // after a restart, compare with what the API holds
		if cur.NodeName == r.NodeName {
			if _, seen := r.written[key]; !seen {
				cur.LastUpdateTime = nil
				r.written[key] = cur
			}
		}
	}
	if prev, ok := r.written[key]; ok && prev == want {
		return nil
	}
	now := metav1.Now()
	entry := want
	entry.LastUpdateTime = &now
	obj := map[string]any{
		"apiVersion": v1alpha1.GroupVersion.String(),
		"kind":       "Model",
		"metadata":   map[string]any{"name": m.Name, "namespace": m.Namespace},
		"status":     map[string]any{"nodes": []any{entry}},
	}
	u, err := toUnstructured(obj)
	if err != nil {
		return err
	}
	if err := r.Client.Status().Apply(ctx, client.ApplyConfigurationFromUnstructured(u), client.FieldOwner(r.FieldManager()), client.ForceOwnership); err != nil {
		return fmt.Errorf("apply status of model %s: %w", key, err)
	}
	r.written[key] = want
	return nil
}

// ResolveModel reads a Model and returns the request that caches it (for the node API). Models asked
// for explicitly may evict other unpinned entries.
func (r *Reconciler) ResolveModel(ctx context.Context, namespace, name string) (Request, error) {
	var m v1alpha1.Model
	if err := r.APIReader.Get(ctx, types.NamespacedName{Namespace: namespace, Name: name}, &m); err != nil {
		return Request{}, fmt.Errorf("model %s/%s: %w", namespace, name, err)
	}
	return r.request(ctx, &m, false)
}
