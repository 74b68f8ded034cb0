package scaleloop

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"reflect"
	"sync"
	"time"

	autoscalingv1 "k8s.io/api/autoscaling/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/retry"
	"k8s.io/klog/v2"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/predicate"

	v1alpha1 "github.com/neuronetes/neuronetes/api/v1alpha1"
	"github.com/neuronetes/neuronetes/controller/cost"
	"github.com/neuronetes/neuronetes/controller/scaleapi"
	"github.com/neuronetes/neuronetes/controller/scalepolicy"
)

// Pod annotations that override where a serving pod's metrics are scraped.
const (
	// MetricsPortAnnotation overrides the port (default: the first container port, else 8000).
	MetricsPortAnnotation = "autoscaling.neuronetes.io/metrics-port"
	// MetricsPathAnnotation overrides the path (default /metrics).
	MetricsPathAnnotation = "autoscaling.neuronetes.io/metrics-path"
)

// DefaultSyncPeriod is how often each pool is evaluated (the HPA's default).
const DefaultSyncPeriod = 15 * time.Second

// EventRecorder is the part of client-go's record.EventRecorder the loop uses.
type EventRecorder interface {
	Eventf(object runtime.Object, eventtype, reason, messageFmt string, args ...any)
}

// ReplicaWriter sets a pool's serving replicas.
type ReplicaWriter interface {
	SetReplicas(ctx context.Context, pool *v1alpha1.AgentPool, replicas int32) error
}

// ScaleSubresource writes spec.replicas through the AgentPool scale
// subresource, as the HPA does.
type ScaleSubresource struct{ Client client.Client }

// ErrReplicasChanged is SetReplicas refusing to write: the pool's replicas are no longer those the
// decision read (someone scaled it meanwhile). The pool is evaluated again with the new count.
var ErrReplicasChanged = errors.New("spec.replicas changed since the pool was read")

// SetReplicas implements ReplicaWriter. It writes only while the scale still holds the replicas
// of pool as read, so a decision made on a stale read never overwrites a scale made since (a
// kubectl scale is then seen and handled as a manual change). The apiserver's scale subresource
// refuses an object whose spec.replicas is unset, so that first write is a merge patch of the
// same field.
func (s ScaleSubresource) SetReplicas(ctx context.Context, pool *v1alpha1.AgentPool, replicas int32) error {
	if pool.Spec.Replicas == nil {
		patch := []byte(fmt.Sprintf(`{"spec":{"replicas":%d}}`, replicas))
		if err := s.Client.Patch(ctx, pool, client.RawPatch(types.MergePatchType, patch)); err != nil {
			return fmt.Errorf("set spec.replicas of %s/%s: %w", pool.Namespace, pool.Name, err)
		}
		return nil
	}
	// The reconciler writes the pool's status concurrently: retry on conflicts.
	return retry.RetryOnConflict(retry.DefaultRetry, func() error {
		scale := &autoscalingv1.Scale{}
		if err := s.Client.SubResource("scale").Get(ctx, pool, scale); err != nil {
			return fmt.Errorf("get scale of %s/%s: %w", pool.Namespace, pool.Name, err)
		}
		if scale.Spec.Replicas != *pool.Spec.Replicas {
			return fmt.Errorf("scale of %s/%s holds %d, read %d: %w", pool.Namespace, pool.Name, scale.Spec.Replicas, *pool.Spec.Replicas, ErrReplicasChanged)
		}
		scale.Spec.Replicas = replicas
		if err := s.Client.SubResource("scale").Update(ctx, pool, client.WithSubResourceBody(scale)); err != nil {
			return fmt.Errorf("update scale of %s/%s: %w", pool.Namespace, pool.Name, err)
		}
		return nil
	})
}

// Loop is the autoscaling controller: every SyncPeriod it collects a pool's
// metrics, runs the decision package and writes the result. Pools without
// spec.autoscaling are left alone.
type Loop struct {
	// Client reads pools, classes, bindings and pods.
	Client client.Client
	// Writer applies decisions (default ScaleSubresource).
	Writer ReplicaWriter
	// Recorder receives an Event per scaling decision.
	Recorder EventRecorder
	// Metrics records every decision (optional).
	Metrics *Metrics
	// SyncPeriod is the evaluation period (default DefaultSyncPeriod).
	SyncPeriod time.Duration
	// Scraper scrapes pods.
	Scraper Scraper
	// Prom evaluates externalMetrics queries (optional: without it they are missing).
	Prom *PromSource
	// Lag reads NATS JetStream lag.
	Lag *LagSource
	// Queues reads Kafka and Redis Streams lag (queue_sources.go).
	Queues *QueueLag
	// Gateway, when set, supplies tokens-in-queue, concurrent sessions and TTFT as the gateway
	// measures them (gateway_source.go).
	Gateway *GatewaySource
	// DefaultNATSURL is used for ToolBindings without queueConfig.url.
	DefaultNATSURL string
	// Now is the clock (default time.Now).
	Now func() time.Time
	// Name is the controller name (default "autoscaling"); names are unique per process.
	Name string
	// Prices prices the nodes of the pool's pods (nil: every pod costs the AgentClass
	// costPerReplicaHour).
	Prices PriceSource
	// State persists each pool's history and spend (nil: kept in memory only).
	State StateStore
	// PersistInterval is the longest a pool's state goes unsaved while it is evaluated (default
	// DefaultPersistInterval); a scaling decision is saved at once.
	PersistInterval time.Duration

	mu    sync.Mutex
	pools map[types.NamespacedName]*poolState
}

type poolState struct {
	mu       sync.Mutex
	policy   scalepolicy.Policy
	lastEval time.Time
	// seen is the pool as the last evaluation left it (see trigger.go).
	seen seen
	// loaded is set once the persisted state was read; restored holds its autoscaler history
	// until the Autoscaler exists; saved is when the state was last written.
	loaded     bool
	restored   *scalepolicy.State
	saved      time.Time
	a          *scalepolicy.Autoscaler
	coll       Collector
	offered    OfferedRate // the gateway's offered demand (with --gateway-pods)
	meter      scalepolicy.CostMeter
	rate       cost.Rate // the pool's spend rate at the last evaluation
	lastReason scalepolicy.Reason
}

// SetupWithManager registers the loop with mgr under the name "autoscaling".
func (l *Loop) SetupWithManager(mgr ctrl.Manager) error {
	if l.Client == nil {
		l.Client = mgr.GetClient()
	}
	if l.Recorder == nil {
		l.Recorder = mgr.GetEventRecorderFor("neuronetes-autoscaler") //nolint:staticcheck // core/v1 Events, as kubectl describe shows them
	}
	name := l.Name
	if name == "" {
		name = "autoscaling"
	}
	return ctrl.NewControllerManagedBy(mgr).
		For(&v1alpha1.AgentPool{}, builder.WithPredicates(predicate.Or[client.Object](predicate.GenerationChangedPredicate{}, overrideChanged))).
		Named(name).
		Complete(l)
}

func (l *Loop) now() time.Time {
	if l.Now != nil {
		return l.Now()
	}
	return time.Now()
}

func (l *Loop) period() time.Duration {
	if l.SyncPeriod > 0 {
		return l.SyncPeriod
	}
	return DefaultSyncPeriod
}

func (l *Loop) state(key types.NamespacedName) *poolState {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.pools == nil {
		l.pools = map[types.NamespacedName]*poolState{}
	}
	s := l.pools[key]
	if s == nil {
		s = &poolState{}
		l.pools[key] = s
	}
	return s
}

func (l *Loop) forget(key types.NamespacedName) {
	l.mu.Lock()
	defer l.mu.Unlock()
	delete(l.pools, key)
}

// Reconcile evaluates one pool and requeues it after SyncPeriod.
func (l *Loop) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	logger := klog.FromContext(ctx).WithValues("pool", req.NamespacedName)
	ctx = klog.NewContext(ctx, logger)
	var pool v1alpha1.AgentPool
	if err := l.Client.Get(ctx, req.NamespacedName, &pool); err != nil {
		if apierrors.IsNotFound(err) {
			l.forget(req.NamespacedName)
			l.Metrics.forget(req.Name, req.Namespace)
			return ctrl.Result{}, nil
		}
		return ctrl.Result{}, fmt.Errorf("get pool: %w", err)
	}
	// A pool through sessions (spec.sessions, which the CRD lets no autoscaled pool have) is
	// sized by its sessions, never by the autoscaler.
	if pool.Spec.Autoscaling == nil || pool.Spec.Sessions != nil || !pool.DeletionTimestamp.IsZero() {
		l.forget(req.NamespacedName)
		return ctrl.Result{}, nil
	}
	st := l.state(req.NamespacedName)
	st.mu.Lock()
	defer st.mu.Unlock()
	// Our own spec.replicas write bumps the generation and comes back at once: unless something
	// else changed (spec.replicas written by someone else, the policy, a scale override),
	// evaluations keep at least half a period apart.
	if !st.loaded {
		l.load(ctx, &pool, st)
	}
	tr := st.seen.compare(&pool)
	if since := l.now().Sub(st.lastEval); tr.reason == "" && !st.lastEval.IsZero() && since < l.period()/2 {
		return ctrl.Result{RequeueAfter: l.period() - since}, nil
	}
	if tr.reason != "" {
		logger.V(2).Info("Evaluating at once", "why", tr.reason)
	}
	st.lastEval = l.now()
	d, err := l.evaluate(ctx, &pool, st)
	if err != nil {
		l.Recorder.Eventf(&pool, corev1.EventTypeWarning, "AutoscalingFailed", "%v", err)
		logger.Error(err, "Autoscaling evaluation failed")
		return ctrl.Result{RequeueAfter: l.period()}, nil
	}
	l.Metrics.observe(&pool, d)
	if tr.external {
		l.manualScale(ctx, &pool, d)
	}
	if d.Changed() {
		w := l.Writer
		if w == nil {
			w = ScaleSubresource{Client: l.Client}
		}
		if err := w.SetReplicas(ctx, &pool, d.Desired); err != nil {
			st.a.Unapply(d)
			st.lastReason = ""
			if errors.Is(err, ErrReplicasChanged) {
				logger.V(2).Info("Replicas changed under the decision; evaluating again", "err", err)
				st.lastEval = time.Time{}
				return ctrl.Result{RequeueAfter: 100 * time.Millisecond}, nil
			}
			return ctrl.Result{}, err
		}
		reason := "ScaledUp"
		if d.Desired < d.Current {
			reason = "ScaledDown"
		}
		l.Recorder.Eventf(&pool, corev1.EventTypeNormal, reason, "%s (%s; from warm %d, cold %d)", d.Message, d.Reason, d.FromWarm, d.Cold)
		logger.Info("Scaled pool", "from", d.Current, "to", d.Desired, "reason", d.Reason, "fromWarm", d.FromWarm, "cold", d.Cold)
	}
	st.seen = seen{known: true, replicas: d.Desired, spec: specDigest(&pool), override: pool.Annotations[scaleapi.OverrideAnnotation]}
	l.persist(ctx, &pool, st, d.Changed())
	if !d.Changed() && d.Reason != st.lastReason {
		// Held decisions are recorded when their reason changes (every one is counted in the metrics).
		l.Recorder.Eventf(&pool, corev1.EventTypeNormal, "ScaleHeld", "%s (%s)", d.Message, d.Reason)
	}
	if pool.Spec.Autoscaling.CostConstraints != nil || pool.Status.Cost != nil {
		if err := l.publishCost(ctx, &pool, st); err != nil {
			logger.Error(err, "Publishing the cost status failed")
		}
	}
	st.lastReason = d.Reason
	return ctrl.Result{RequeueAfter: l.period()}, nil
}

// evaluate collects the inputs of one pool and decides.
func (l *Loop) evaluate(ctx context.Context, pool *v1alpha1.AgentPool, st *poolState) (scalepolicy.Decision, error) {
	now := l.now()
	var class *v1alpha1.AgentClass
	if ref := pool.Spec.AgentClassRef; ref != nil {
		c := &v1alpha1.AgentClass{}
		if err := l.Client.Get(ctx, types.NamespacedName{Namespace: pool.Namespace, Name: ref.Name}, c); err != nil {
			if !apierrors.IsNotFound(err) {
				return scalepolicy.Decision{}, fmt.Errorf("get agentclass %s: %w", ref.Name, err)
			}
		} else {
			class = c
		}
	}
	var tbs v1alpha1.ToolBindingList
	if err := l.Client.List(ctx, &tbs, client.InNamespace(pool.Namespace)); err != nil {
		return scalepolicy.Decision{}, fmt.Errorf("list toolbindings: %w", err)
	}
	bindings := make([]*v1alpha1.ToolBinding, 0, len(tbs.Items))
	for i := range tbs.Items {
		bindings = append(bindings, &tbs.Items[i])
	}
	policy, err := PolicyFromAgentPool(pool, class, bindings)
	if err != nil {
		return scalepolicy.Decision{}, err
	}
	// The history survives our own spec.replicas writes: only a policy change
	// starts a fresh Autoscaler.
	if st.a == nil || !reflect.DeepEqual(st.policy, policy) {
		a, err := scalepolicy.New(policy)
		if err != nil {
			return scalepolicy.Decision{}, fmt.Errorf("spec.autoscaling: %w", err)
		}
		if st.restored != nil {
			a.Restore(*st.restored)
			st.restored = nil
		}
		st.a, st.policy = a, policy
	}
	st.meter.CostPerReplicaHour = policy.Cost.CostPerReplicaHour
	rate, err := l.poolRate(ctx, pool, policy.Cost.CostPerReplicaHour)
	if err != nil {
		return scalepolicy.Decision{}, err
	}
	st.rate = rate

	samples, err := l.scrapePool(ctx, pool)
	if err != nil {
		return scalepolicy.Decision{}, err
	}
	var offered scalepolicy.OfferedDemand
	if l.Gateway != nil {
		offered = st.offered.Observe(now, l.Gateway.Overlay(ctx, pool, samples))
	}
	obs := st.coll.Observe(now, samples, policy.Metrics)
	for t, v := range obs.Metrics {
		if v.Valid {
			l.Metrics.metricValue(pool, t, v.Value)
		}
	}
	l.external(ctx, pool, obs, now)
	lag := l.queueLag(ctx, pool, bindings)

	in := scalepolicy.Input{
		Now: now, CurrentReplicas: currentReplicas(pool), ReadyReplicas: int32(obs.Reporting), WarmReplicas: pool.Status.WarmReplicas,
		Metrics: obs.Metrics, QueueLag: lag,
		SpentToday: st.meter.ObserveRate(now, rate.PerHour), PricePerReplicaHour: rate.PerPod(),
		TTFT: WaitCounts(obs.FirstTokens, obs.Prefills, policy.SLO.TTFT), Offered: offered,
		Capacity: obs.Capacity,
	}
	in.Override = l.override(ctx, pool, now)
	return st.a.Decide(in), nil
}

// scrapePool scrapes the pool's serving, ready pods concurrently; failed pods are left out.
func (l *Loop) scrapePool(ctx context.Context, pool *v1alpha1.AgentPool) (map[string]PodSample, error) {
	var pods corev1.PodList
	if err := l.Client.List(ctx, &pods, client.InNamespace(pool.Namespace),
		client.MatchingLabels{v1alpha1.PoolLabel: pool.Name, v1alpha1.StateLabel: v1alpha1.PodStateServing}); err != nil {
		return nil, fmt.Errorf("list serving pods: %w", err)
	}
	logger := klog.FromContext(ctx)
	var mu sync.Mutex
	var wg sync.WaitGroup
	out := map[string]PodSample{}
	for i := range pods.Items {
		p := &pods.Items[i]
		if p.Status.PodIP == "" || !podReady(p) || !p.DeletionTimestamp.IsZero() {
			continue
		}
		url, err := metricsURL(p)
		if err != nil {
			logger.Info("Not scraping pod: invalid metrics annotation", "pod", p.Name, "err", err)
			continue
		}
		wg.Go(func() {
			s, err := l.Scraper.Scrape(ctx, url)
			if err != nil {
				logger.V(2).Info("Scrape failed", "pod", p.Name, "err", err)
				return
			}
			mu.Lock()
			out[p.Name] = s
			mu.Unlock()
		})
	}
	wg.Wait()
	return out, nil
}

func podReady(p *corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// external evaluates externalMetrics through Prometheus, per reporting replica.
func (l *Loop) external(ctx context.Context, pool *v1alpha1.AgentPool, obs Observation, now time.Time) {
	for _, e := range pool.Spec.Autoscaling.ExternalMetrics {
		key := scalepolicy.MetricType(scalepolicy.ExternalPrefix + e.Name)
		if l.Prom == nil || e.Query == "" {
			obs.Metrics[key] = scalepolicy.MetricValue{}
			continue
		}
		v, err := l.Prom.Query(ctx, e.Query, now)
		if err != nil {
			klog.FromContext(ctx).V(2).Info("External metric missing", "metric", e.Name, "err", err)
			obs.Metrics[key] = scalepolicy.MetricValue{}
			continue
		}
		obs.Metrics[key] = scalepolicy.MetricValue{Value: v / float64(max(obs.Reporting, 1)), Valid: true}
	}
}

// queueLag sums the lag of the pool's autoscaleOnLag ToolBindings; -1 if any is unknown.
func (l *Loop) queueLag(ctx context.Context, pool *v1alpha1.AgentPool, bindings []*v1alpha1.ToolBinding) int64 {
	lb := LagBindings(pool.Name, bindings)
	if len(lb) == 0 {
		return -1
	}
	if l.Lag == nil {
		return -1
	}
	var sum int64
	for _, b := range lb {
		q := b.Spec.QueueConfig
		if q.Provider != "" && !ServedProviders[q.Provider] {
			// The binding's ProviderServed condition says so (BindingReconciler).
			klog.FromContext(ctx).Info("Queue provider not served: lag unknown", "toolbinding", b.Name, "provider", q.Provider)
			return -1
		}
		url := q.URL
		if url == "" {
			url = l.DefaultNATSURL
		}
		n, err := l.providerLag(ctx, b, url)
		if err != nil {
			klog.FromContext(ctx).Info("Queue lag unavailable", "toolbinding", b.Name, "err", err)
			return -1
		}
		if b.Status.Lag != n {
			orig := b.DeepCopy()
			b.Status.Lag = n
			if err := l.Client.Status().Patch(ctx, b, client.MergeFrom(orig)); err != nil {
				klog.FromContext(ctx).V(2).Info("ToolBinding status.lag not updated", "toolbinding", b.Name, "err", err)
			}
		}
		sum += n
	}
	return sum
}

// httpClient is the default scrape client: it follows no redirect, so a scrape connects only
// to the pod's own IP (metricsURL).
var httpClient = &http.Client{Timeout: 3 * time.Second, CheckRedirect: noRedirect}

// NewLoop returns a Loop with default scraping and NATS lag.
func NewLoop(natsURL string, prom *PromSource, m *Metrics) *Loop {
	return &Loop{Scraper: Scraper{Client: httpClient}, Lag: &LagSource{}, DefaultNATSURL: natsURL, Prom: prom, Metrics: m}
}
