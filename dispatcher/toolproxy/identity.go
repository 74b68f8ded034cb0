package toolproxy

import (
	"context"
	"fmt"
	"net"
	"net/http"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1alpha1 "github.com/neuronetes/neuronetes/api/v1alpha1"
)

// Caller is who calls a tool: a pod of an AgentPool.
type Caller struct {
	Namespace, Pool, Pod string
}

// Identity names the caller of a request.
type Identity interface {
	Identify(r *http.Request) (Caller, error)
}

// PodIPIndex is the field index of pods by status.podIP that PodIPIdentity reads.
const PodIPIndex = "status.podIP"

// IndexPodIP is the indexer function to register for PodIPIndex.
func IndexPodIP(o client.Object) []string {
	p, ok := o.(*corev1.Pod)
	if !ok || p.Status.PodIP == "" || p.Spec.HostNetwork {
		return nil
	}
	return []string{p.Status.PodIP}
}

// PodIPIdentity identifies the caller by the request's source address: the running,
// non-host-network pod with that IP and the neuronetes.io/pool label (the network address of a
// pod is assigned by the cluster, not claimed by the caller).
type PodIPIdentity struct {
	// Client reads pods from a cache with PodIPIndex.
	Client client.Client
}

// Identify implements Identity.
func (p PodIPIdentity) Identify(r *http.Request) (Caller, error) {
	ip, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		return Caller{}, fmt.Errorf("caller address %q: %w", r.RemoteAddr, err)
	}
	var l corev1.PodList
	if err := p.Client.List(context.Background(), &l, client.MatchingFields{PodIPIndex: ip}); err != nil {
		return Caller{}, fmt.Errorf("pods by IP: %w", err)
	}
	for _, pod := range l.Items {
		if pod.DeletionTimestamp != nil || pod.Status.Phase != corev1.PodRunning {
			continue
		}
		if pool := pod.Labels[v1alpha1.PoolLabel]; pool != "" {
			return Caller{Namespace: pod.Namespace, Pool: pool, Pod: pod.Name}, nil
		}
	}
	return Caller{}, fmt.Errorf("no running AgentPool pod has the caller's address %s", ip)
}

// StaticIdentity maps source IPs to callers (static mode, tests).
type StaticIdentity map[string]Caller

// Identify implements Identity.
func (s StaticIdentity) Identify(r *http.Request) (Caller, error) {
	ip, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		return Caller{}, fmt.Errorf("caller address %q: %w", r.RemoteAddr, err)
	}
	if c, ok := s[ip]; ok {
		return c, nil
	}
	return Caller{}, fmt.Errorf("no caller is configured for address %s", ip)
}
