package kube

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	toolscache "k8s.io/client-go/tools/cache"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/neuronetes/neuronetes/api/v1alpha1"
	"github.com/neuronetes/neuronetes/gateway/sessionroute"
)

// NotifySessionChanges makes the session cache's informers (NewSessionCache) wake the requests
// held for a session on every add, update and delete of the AgentSession or of a pod labelled
// with it (its status, its pod's readiness), instead of their polling the cache. The informers
// call their handlers after their store holds the change, so a woken request reads it. Call it
// before the cache starts.
func NotifySessionChanges(ctx context.Context, c cache.Cache, ch *sessionroute.Changes) error {
	for _, obj := range []client.Object{&v1alpha1.AgentSession{}, &corev1.Pod{}} {
		inf, err := c.GetInformer(ctx, obj)
		if err != nil {
			return fmt.Errorf("session informer %T: %w", obj, err)
		}
		h := toolscache.ResourceEventHandlerFuncs{
			AddFunc:    func(o any) { notifySession(ch, o) },
			UpdateFunc: func(_, o any) { notifySession(ch, o) },
			DeleteFunc: func(o any) { notifySession(ch, o) },
		}
		if _, err := inf.AddEventHandler(h); err != nil {
			return fmt.Errorf("session informer %T: %w", obj, err)
		}
	}
	return nil
}

// notifySession wakes the session an informer event is about: an AgentSession's own name, a
// pod's neuronetes.io/session label (none: nothing).
func notifySession(ch *sessionroute.Changes, o any) {
	if d, ok := o.(toolscache.DeletedFinalStateUnknown); ok {
		o = d.Obj
	}
	switch x := o.(type) {
	case *v1alpha1.AgentSession:
		ch.Notify(x.Namespace, x.Name)
	case *corev1.Pod:
		ch.Notify(x.Namespace, x.Labels[v1alpha1.SessionLabel])
	}
}
