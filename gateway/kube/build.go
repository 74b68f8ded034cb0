// Package kube fills the gateway's routing table and tenant directory from the cluster: pure
// builders turn lists of objects into a route.Snapshot and an access.Directory, and a watch
// (informers, never polling) rebuilds them on every change.
//
// The mapping from a request's model to pods: an AgentPool serves the model of its AgentClass
// (spec.agentClassRef, else the class of the pool's own name); the model id is the class's
// spec.modelRef.name, or the class's name when it has no modelRef. Callers see the models of the
// namespace their Tenant lives in. A pool's endpoints are its pods labelled neuronetes.io/pool=
// <pool> and neuronetes.io/state=serving that are Ready, have an IP and are not terminating:
// warm and draining pods get no new requests, and streams already open to a draining pod run on.
package kube

import (
	"fmt"
	"net"
	"sort"
	"strconv"

	corev1 "k8s.io/api/core/v1"

	"github.com/neuronetes/neuronetes/api/v1alpha1"
	"github.com/neuronetes/neuronetes/gateway/route"
	"github.com/neuronetes/neuronetes/internal/egress"
)

// Pod annotations read for the model server's metrics (the same ones the autoscaler reads).
const (
	metricsPortAnnotation = "autoscaling.neuronetes.io/metrics-port"
	metricsPathAnnotation = "autoscaling.neuronetes.io/metrics-path"
	// PortAnnotation overrides the API port of a pod (default: the first container's port named
	// "http", else its first port, else 8000).
	PortAnnotation = "gateway.neuronetes.io/port"
	// KVEventsPortAnnotation names the port on the pod's IP where its model server publishes
	// KV-cache events over ZeroMQ (vLLM's --kv-events-config endpoint; the demo agent's
	// --kv-events-endpoint). Without it, or with a value that is not a port, the pod is not
	// subscribed and the gateway's approximate prefix index serves it.
	KVEventsPortAnnotation = "gateway.neuronetes.io/kv-events-port"
)

// Objects are the inputs of the routing table.
type Objects struct {
	Classes  []v1alpha1.AgentClass
	Pools    []v1alpha1.AgentPool
	Pods     []corev1.Pod
	Policies []v1alpha1.RoutingPolicy
}

// BuildTable builds the routing table. Problems (an invalid policy field) are returned and the
// defaults used for that field.
func BuildTable(o Objects, def route.Policy) (*route.Snapshot, []error) {
	classes := map[route.PoolRef]*v1alpha1.AgentClass{}
	for i := range o.Classes {
		c := &o.Classes[i]
		classes[route.PoolRef{Namespace: c.Namespace, Name: c.Name}] = c
	}
	eps := endpointsByPool(o.Pods)
	policies := indexPolicies(o.Policies)
	var errs []error
	var pools []*route.Pool
	for i := range o.Pools {
		p := &o.Pools[i]
		if !p.DeletionTimestamp.IsZero() {
			continue
		}
		className := p.Name
		if p.Spec.AgentClassRef != nil {
			className = p.Spec.AgentClassRef.Name
		}
		model := className
		if c := classes[route.PoolRef{Namespace: p.Namespace, Name: className}]; c != nil && c.Spec.ModelRef != nil {
			model = c.Spec.ModelRef.Name
		}
		ref := route.PoolRef{Namespace: p.Namespace, Name: p.Name}
		pol, perrs := policyFor(def, policies[target{p.Namespace, "AgentClass", className}], policies[target{p.Namespace, "AgentPool", p.Name}])
		errs = append(errs, perrs...)
		pools = append(pools, &route.Pool{Ref: ref, AgentClass: className, Model: model, Endpoints: eps[ref], Policy: pol,
			Fallback: fallbackOf(p), Sessions: sessionsOf(p)})
	}
	return route.NewSnapshot(pools), errs
}

// endpointsByPool collects the routable pods of every pool.
func endpointsByPool(pods []corev1.Pod) map[route.PoolRef][]route.Endpoint {
	out := map[route.PoolRef][]route.Endpoint{}
	for i := range pods {
		p := &pods[i]
		pool := p.Labels[v1alpha1.PoolLabel]
		if pool == "" || p.Labels[v1alpha1.StateLabel] != v1alpha1.PodStateServing || !routable(p) {
			continue
		}
		port := apiPort(p)
		if egress.ValidPort("annotation "+PortAnnotation, port) != nil {
			continue // the pod's owner set a port that is not a number: the pod is not routed
		}
		addr := net.JoinHostPort(p.Status.PodIP, port)
		mport, mpath := port, "/metrics"
		if v := p.Annotations[metricsPortAnnotation]; v != "" {
			mport = v
		}
		if v := p.Annotations[metricsPathAnnotation]; v != "" {
			mpath = v
		}
		// The metrics URL is built from parts on the pod's IP: annotations cannot name another
		// host; an invalid one leaves the endpoint unscraped.
		murl, _ := egress.PodURL("annotation "+metricsPathAnnotation, p.Status.PodIP, mport, mpath)
		var kv string
		if v := p.Annotations[KVEventsPortAnnotation]; v != "" && egress.ValidPort("annotation "+KVEventsPortAnnotation, v) == nil {
			kv = "tcp://" + net.JoinHostPort(p.Status.PodIP, v)
		}
		ref := route.PoolRef{Namespace: p.Namespace, Name: pool}
		out[ref] = append(out[ref], route.Endpoint{Pod: p.Name, Addr: addr, MetricsURL: murl, KVEvents: kv})
	}
	for _, e := range out {
		sort.Slice(e, func(i, j int) bool { return e[i].Pod < e[j].Pod })
	}
	return out
}

// routable: Ready, with an IP, not terminating.
func routable(p *corev1.Pod) bool {
	if p.Status.PodIP == "" || !p.DeletionTimestamp.IsZero() || p.Status.Phase != corev1.PodRunning {
		return false
	}
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

func apiPort(p *corev1.Pod) string {
	if v := p.Annotations[PortAnnotation]; v != "" {
		return v
	}
	if len(p.Spec.Containers) == 0 || len(p.Spec.Containers[0].Ports) == 0 {
		return "8000"
	}
	ports := p.Spec.Containers[0].Ports
	for _, cp := range ports {
		if cp.Name == "http" {
			return strconv.Itoa(int(cp.ContainerPort))
		}
	}
	return strconv.Itoa(int(ports[0].ContainerPort))
}

type target struct{ namespace, kind, name string }

// indexPolicies keeps, per target, the oldest policy (then the first by name): a later policy
// for the same target is ignored, as Gateway API policy attachment resolves conflicts.
func indexPolicies(ps []v1alpha1.RoutingPolicy) map[target]*v1alpha1.RoutingPolicy {
	out := map[target]*v1alpha1.RoutingPolicy{}
	for i := range ps {
		p := &ps[i]
		t := target{p.Namespace, p.Spec.TargetRef.Kind, p.Spec.TargetRef.Name}
		cur := out[t]
		if cur == nil || older(p, cur) {
			out[t] = p
		}
	}
	return out
}

func older(a, b *v1alpha1.RoutingPolicy) bool {
	if !a.CreationTimestamp.Equal(&b.CreationTimestamp) {
		return a.CreationTimestamp.Before(&b.CreationTimestamp)
	}
	return a.Name < b.Name
}

// policyFor merges the class's and then the pool's policy over the defaults.
func policyFor(def route.Policy, class, pool *v1alpha1.RoutingPolicy) (route.Policy, []error) {
	p := def
	var errs []error
	for _, rp := range []*v1alpha1.RoutingPolicy{class, pool} {
		if rp == nil {
			continue
		}
		for _, err := range apply(&p, &rp.Spec) {
			errs = append(errs, fmt.Errorf("RoutingPolicy %s/%s: %w", rp.Namespace, rp.Name, err))
		}
	}
	return p, errs
}

// fallbackOf is the pool's cost fallback as the controller published it (status.cost.fallback).
func fallbackOf(p *v1alpha1.AgentPool) *route.Fallback {
	c := p.Status.Cost
	if c == nil || c.Fallback == nil || c.Fallback.PoolRef.Name == "" || c.Fallback.PoolRef.Name == p.Name {
		return nil
	}
	return &route.Fallback{Pool: route.PoolRef{Namespace: p.Namespace, Name: c.Fallback.PoolRef.Name},
		AllSessions: c.Fallback.Scope == v1alpha1.FallbackAllSessions, Reason: c.Fallback.Reason}
}

// sessionsOf is the pool's spec.sessions as the gateway creates sessions (nil without).
func sessionsOf(p *v1alpha1.AgentPool) *route.PoolSessions {
	ss := p.Spec.Sessions
	if ss == nil {
		return nil
	}
	_, hi := p.Spec.ReplicaBounds()
	out := &route.PoolSessions{UID: string(p.UID), IdleTimeout: ss.IdleTimeout.Duration, MaxActive: int(hi)}
	if ss.WorkspaceSizeLimit != nil {
		out.WorkspaceSizeLimit = ss.WorkspaceSizeLimit.String()
	}
	return out
}
