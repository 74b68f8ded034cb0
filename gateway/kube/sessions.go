package kube

import (
	"context"
	"fmt"
	"net"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/selection"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	"k8s.io/klog/v2"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/neuronetes/neuronetes/api/v1alpha1"
	"github.com/neuronetes/neuronetes/gateway/route"
	"github.com/neuronetes/neuronetes/gateway/sessionroute"
	"github.com/neuronetes/neuronetes/internal/egress"
)

// NewSessionCache returns an informer cache over namespaces (all when empty) holding the
// AgentSessions and only the pods labelled neuronetes.io/session (the routing cache holds only
// pool pods; one cache may select a kind by one label only).
func NewSessionCache(cfg *rest.Config, s *runtime.Scheme, namespaces []string) (cache.Cache, error) {
	req, err := labels.NewRequirement(v1alpha1.SessionLabel, selection.Exists, nil)
	if err != nil {
		return nil, fmt.Errorf("session pod selector: %w", err)
	}
	o := cache.Options{Scheme: s, DefaultTransform: cache.TransformStripManagedFields(),
		ByObject: map[client.Object]cache.ByObject{&corev1.Pod{}: {Label: labels.NewSelector().Add(*req)}}}
	if len(namespaces) > 0 {
		o.DefaultNamespaces = map[string]cache.Config{}
		for _, ns := range namespaces {
			o.DefaultNamespaces[ns] = cache.Config{}
		}
	}
	c, err := cache.New(cfg, o)
	if err != nil {
		return nil, fmt.Errorf("session cache: %w", err)
	}
	return c, nil
}

// SessionLookup reads AgentSessions and their current pods from a cache (NewSessionCache).
type SessionLookup struct {
	Reader client.Reader
	// Log receives read errors other than not-found.
	Log klog.Logger
}

// Session returns what the gateway knows of namespace/name. The endpoint is set only for the
// pod status.podName names when that pod is labelled with the session, controlled by this
// AgentSession (its UID), Ready, with an IP and not terminating.
func (l *SessionLookup) Session(namespace, name string) sessionroute.View {
	ctx := context.Background()
	var s v1alpha1.AgentSession
	if err := l.Reader.Get(ctx, types.NamespacedName{Namespace: namespace, Name: name}, &s); err != nil {
		if !apierrors.IsNotFound(err) {
			l.Log.Error(err, "Reading AgentSession failed", "session", namespace+"/"+name)
		}
		return sessionroute.View{}
	}
	return l.view(ctx, &s)
}

// PoolActive names the AgentSessions of pool in namespace (label v1alpha1.PoolSessionLabel,
// controlled by an AgentPool) whose phase is not Suspended: those holding or about to hold a
// pod.
func (l *SessionLookup) PoolActive(namespace, pool string) ([]string, error) {
	var list v1alpha1.AgentSessionList
	err := l.Reader.List(context.Background(), &list, client.InNamespace(namespace),
		client.MatchingLabels{v1alpha1.PoolSessionLabel: pool})
	if err != nil {
		return nil, fmt.Errorf("listing the sessions of pool %s/%s: %w", namespace, pool, err)
	}
	var names []string
	for i := range list.Items {
		s := &list.Items[i]
		if name, _, ok := v1alpha1.PoolOwner(s); !ok || name != pool {
			continue
		}
		if s.Status.Phase != v1alpha1.SessionSuspended {
			names = append(names, s.Name)
		}
	}
	return names, nil
}

func (l *SessionLookup) view(ctx context.Context, s *v1alpha1.AgentSession) sessionroute.View {
	v := sessionroute.View{Found: true, Phase: s.Status.Phase, Pool: s.Labels[v1alpha1.PoolSessionLabel]}
	if _, uid, ok := v1alpha1.PoolOwner(s); ok {
		v.PoolUID = string(uid)
	}
	if s.Status.TransitionTime != nil {
		v.PhaseSince = s.Status.TransitionTime.Time
	}
	v.Activity = s.Activity()
	if s.Status.PodName == "" {
		return v
	}
	var p corev1.Pod
	if err := l.Reader.Get(ctx, types.NamespacedName{Namespace: s.Namespace, Name: s.Status.PodName}, &p); err != nil {
		if !apierrors.IsNotFound(err) {
			l.Log.Error(err, "Reading session pod failed", "pod", s.Namespace+"/"+s.Status.PodName)
		}
		return v
	}
	if ep, ok := sessionEndpoint(s, &p); ok {
		v.Endpoint = ep
	}
	return v
}

// sessionEndpoint is the pod's API endpoint when the pod is the session's own and routable.
func sessionEndpoint(s *v1alpha1.AgentSession, p *corev1.Pod) (route.Endpoint, bool) {
	owner := sessionOwnerUID(p)
	if p.Labels[v1alpha1.SessionLabel] != s.Name || owner != s.UID || !routable(p) {
		return route.Endpoint{}, false
	}
	port := apiPort(p)
	if egress.ValidPort("annotation "+PortAnnotation, port) != nil {
		return route.Endpoint{}, false
	}
	return route.Endpoint{Pod: p.Name, Addr: net.JoinHostPort(p.Status.PodIP, port)}, true
}

// sessionOwnerUID is the UID of the pod's controlling AgentSession owner ("" for none).
func sessionOwnerUID(p *corev1.Pod) types.UID {
	for _, r := range p.OwnerReferences {
		if r.Controller != nil && *r.Controller && r.Kind == "AgentSession" {
			return r.UID
		}
	}
	return ""
}

// SessionActivity writes the activity annotation of AgentSessions: a JSON merge patch of that
// one annotation, nothing else (the chart's admission policy
// <release>-gateway-session-activity admits nothing else from the gateway).
type SessionActivity struct {
	Client client.Client
}

// RecordActivity sets session.neuronetes.io/last-activity of namespace/name to at (RFC 3339
// with nanoseconds, UTC).
func (a *SessionActivity) RecordActivity(ctx context.Context, namespace, name string, at time.Time) error {
	s := &v1alpha1.AgentSession{}
	s.Namespace, s.Name = namespace, name
	patch := fmt.Appendf(nil, `{"metadata":{"annotations":{%q:%q}}}`, v1alpha1.SessionLastActivityAnnotation, at.UTC().Format(time.RFC3339Nano))
	if err := a.Client.Patch(ctx, s, client.RawPatch(types.MergePatchType, patch)); err != nil {
		return fmt.Errorf("patch activity of AgentSession %s/%s: %w", namespace, name, err)
	}
	return nil
}

// SessionCreator creates the AgentSessions of pools' conversations (sessionroute.PoolSession;
// the chart's admission policy <release>-gateway-session-activity admits no other create from
// the gateway).
type SessionCreator struct {
	Client client.Client
}

// CreateSession creates s; an existing one is not an error.
func (c *SessionCreator) CreateSession(ctx context.Context, s *v1alpha1.AgentSession) error {
	if err := c.Client.Create(ctx, s); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("create AgentSession %s/%s: %w", s.Namespace, s.Name, err)
	}
	return nil
}
