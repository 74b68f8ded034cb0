package agent

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"

	"github.com/neuronetes/neuronetes/api/v1alpha1"
)

// startBound starts, at once and ahead of prewarm, the fetch of every Model whose pods were bound to
// this node while its weights are not warm here (BindTriggers), records WeightsFetchStarted on those
// pods, and WeightsReady (with the time taken) or WeightsFetchFailed when the fetch ends. The pods'
// pins are already set, so the fetch takes an urgent slot, may evict unpinned entries, and the entry
// is never evicted while it is fetched. A failed Model's retry backoff does not hold a bind back.
func (r *Reconciler) startBound(ctx context.Context, onNode []corev1.Pod, classes map[string]*v1alpha1.AgentClass, models map[string]*v1alpha1.Model) {
	if r.handled == nil {
		r.handled = map[types.UID]bool{}
	}
	present := make(map[types.UID]bool, len(onNode))
	for i := range onNode {
		present[onNode[i].UID] = true
	}
	for u := range r.handled {
		if !present[u] {
			delete(r.handled, u)
		}
	}
	modelOf := func(p *corev1.Pod) *v1alpha1.Model { return PodModel(p, classes, models) }
	triggers, decided := BindTriggers(onNode, r.handled, modelOf, r.Agent.State)
	for _, u := range decided {
		r.handled[u] = true
	}
	log := klog.FromContext(ctx)
	for _, t := range triggers {
		req, err := r.request(ctx, t.Model, false)
		if err != nil {
			r.podEvents(t.Pods, corev1.EventTypeWarning, ReasonWeightsFetchFailed, "weights of Model %s: %v", t.Model.Name, err)
			continue
		}
		req.Urgent = true
		start := time.Now()
		done := r.Agent.Start(req)
		log.Info("Pod bound with cold weights: fetching now", "model", klog.KObj(t.Model), "digest", t.Hex, "pods", len(t.Pods), "pod", klog.KObj(t.Pods[0]))
		r.podEvents(t.Pods, corev1.EventTypeNormal, ReasonWeightsFetchStarted,
			"bound to node %s where the weights of Model %s (sha256:%.12s) are not warm: fetching now", r.NodeName, t.Model.Name, t.Hex)
		go r.awaitBound(t, WeightsFileName(t.Model.Spec.Format), done, start)
	}
}

// awaitBound waits for a bind-triggered fetch, exposes the entry's ready link (what the pods' init
// containers wait for) and records the outcome on the pods.
func (r *Reconciler) awaitBound(t BindTrigger, name string, done <-chan struct{}, start time.Time) {
	<-done
	st := r.Agent.State(t.Hex)
	if st.Phase != PhaseReady {
		r.podEvents(t.Pods, corev1.EventTypeWarning, ReasonWeightsFetchFailed, "weights of Model %s: %s", t.Model.Name, st.Message)
		return
	}
	if err := r.Agent.Store().Expose(t.Hex, name); err != nil {
		r.podEvents(t.Pods, corev1.EventTypeWarning, ReasonWeightsFetchFailed, "weights of Model %s: %v", t.Model.Name, err)
		return
	}
	r.podEvents(t.Pods, corev1.EventTypeNormal, ReasonWeightsReady,
		"weights of Model %s (%d bytes) cached, verified and warm %s after the bind", t.Model.Name, st.SizeBytes, time.Since(start).Round(time.Millisecond))
}

func (r *Reconciler) podEvents(pods []*corev1.Pod, eventType, reason, format string, args ...any) {
	if r.Recorder == nil {
		return
	}
	msg := fmt.Sprintf(format, args...)
	for _, p := range pods {
		r.Recorder.Event(p, eventType, reason, msg)
	}
}
