package e2e

// Time stamps of the session resume benchmark: what the watches of pods, AgentSessions and
// AgentCheckpoints saw, and the node agent engine's stages, so that a resume's time splits into
// controller reaction, pod start, store fetch, CRIU restore and readiness.

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/watch"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/neuronetes/neuronetes/api/v1alpha1"
	"github.com/neuronetes/neuronetes/checkpoint/container"
	"github.com/neuronetes/neuronetes/checkpoint/store"
	"github.com/neuronetes/neuronetes/nodeagent/snapshot"
)

// stamp is one observed event.
type stamp struct {
	at   time.Time
	what string
}

// stamps records events in the order they were seen; each label once.
type stamps struct {
	mu   sync.Mutex
	list []stamp
	seen map[string]bool
}

func newStamps() *stamps { return &stamps{seen: map[string]bool{}} }

// add records what at now, unless it was recorded before.
func (s *stamps) add(what string) { s.addAt(time.Now(), what) }

// addAt records what at at, unless it was recorded before; the list stays in time order.
func (s *stamps) addAt(at time.Time, what string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.seen[what] {
		return
	}
	s.seen[what] = true
	i := len(s.list)
	for i > 0 && s.list[i-1].at.After(at) {
		i--
	}
	s.list = slices.Insert(s.list, i, stamp{at, what})
}

// report logs the events from from to to (and up to 50 ms after it) as offsets from from.
func (s *stamps) report(t *testing.T, title string, from, to time.Time) {
	t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	var b strings.Builder
	fmt.Fprintf(&b, "%s: %v\n", title, to.Sub(from).Round(time.Millisecond))
	for _, e := range s.list {
		if !e.at.Before(from) && e.at.Before(to.Add(50*time.Millisecond)) {
			fmt.Fprintf(&b, "  +%7.3fs  %s\n", e.at.Sub(from).Seconds(), e.what)
		}
	}
	fmt.Fprintf(&b, "  +%7.3fs  first token at the client\n", to.Sub(from).Seconds())
	fmt.Print(b.String())
}

// timedEngine records the node agent engine's stages: for a restore its start, the end of the
// store's fetch (the last download progress) and the end of the CRIU restore; for a checkpoint
// the first upload progress (the CRIU dump is done) and its end.
type timedEngine struct {
	snapshot.Engine
	s *stamps
}

// Restore implements snapshot.Engine.
func (e *timedEngine) Restore(ctx context.Context, c snapshot.Container, k store.Key, id string, p store.ProgressFunc) error {
	e.s.add("node agent: restore into " + c.Pod + " starts (host container runs; fetch, or wait for the prefetch)")
	ctx = container.WithRestoreSteps(ctx, func(st container.RestoreStep) { e.s.add(restoreStepStamp(st, c.Pod)) })
	err := e.Engine.Restore(ctx, c, k, id, func(pr store.Progress) {
		if pr.Done == pr.Total {
			e.s.add(fmt.Sprintf("node agent: store fetch of %d MiB done into %s; CRIU restore starts", pr.Total>>20, c.Pod))
		}
		if p != nil {
			p(pr)
		}
	})
	e.s.add(fmt.Sprintf("node agent: CRIU restore into %s done (err %v)", c.Pod, err))
	return err
}

// restoreStepStamp is the stamp of the container engine's restore step st into pod.
func restoreStepStamp(st container.RestoreStep, pod string) string {
	return fmt.Sprintf("node agent: restore step %s into %s", st, pod)
}

// Prefetch implements snapshot.Prefetcher: the fetch of a resume's checkpoint while its host pod
// starts, stamped at its start and end (the engine's own Prefetch, with a progress callback).
func (e *timedEngine) Prefetch(ctx context.Context, c snapshot.Container, k store.Key, id string) {
	ce, ok := e.Engine.(*snapshot.ContainerdEngine)
	if !ok || k.Namespace != c.Namespace {
		return
	}
	start := time.Now()
	if ce.C.Prefetch(ctx, k, id, func(pr store.Progress) {
		if pr.Done == pr.Total {
			e.s.add(fmt.Sprintf("node agent: store fetch of %d MiB done into %s (prefetch)", pr.Total>>20, c.Pod))
		}
	}) {
		e.s.addAt(start, "node agent: prefetch into "+c.Pod+" starts (store fetch while the pod starts)")
	} else {
		e.s.add("node agent: no prefetch into " + c.Pod + " (local cache entry, read in place)")
	}
}

// Checkpoint implements snapshot.Engine.
func (e *timedEngine) Checkpoint(ctx context.Context, c snapshot.Container, k store.Key, id string, leave bool, p store.ProgressFunc) (*store.Manifest, error) {
	e.s.add("node agent: checkpoint of " + c.Pod + " starts (CRIU dump)")
	m, err := e.Engine.Checkpoint(ctx, c, k, id, leave, func(pr store.Progress) {
		e.s.add("node agent: CRIU dump of " + c.Pod + " done; store upload starts")
		if p != nil {
			p(pr)
		}
	})
	size := int64(0)
	if m != nil {
		size = m.TotalBytes
	}
	e.s.add(fmt.Sprintf("node agent: checkpoint of %s stored, %d MiB (err %v)", c.Pod, size>>20, err))
	return m, err
}

// watchStamps records, until ctx ends, the changes of pods, AgentSessions and AgentCheckpoints
// of ns that a resume goes through.
func watchStamps(ctx context.Context, t *testing.T, c client.WithWatch, ns string, s *stamps) {
	t.Helper()
	lists := []client.ObjectList{&corev1.PodList{}, &v1alpha1.AgentSessionList{}, &v1alpha1.AgentCheckpointList{}}
	for _, l := range lists {
		w, err := c.Watch(ctx, l, client.InNamespace(ns))
		if err != nil {
			t.Fatalf("watch %T: %v", l, err)
		}
		go func() {
			defer w.Stop()
			for ev := range w.ResultChan() {
				if ev.Type == watch.Error {
					return
				}
				stampObject(ev.Type, ev.Object, s)
			}
		}()
	}
}

// stampObject records what one watch event says.
func stampObject(typ watch.EventType, obj any, s *stamps) {
	switch o := obj.(type) {
	case *corev1.Pod:
		if typ == watch.Deleted {
			s.add("pod " + o.Name + " deleted")
			return
		}
		s.add("pod " + o.Name + " created")
		for _, c := range o.Status.Conditions {
			if c.Status == corev1.ConditionTrue && slices.Contains([]corev1.PodConditionType{corev1.PodScheduled, "PodReadyToStartContainers", corev1.PodReady}, c.Type) {
				s.add(fmt.Sprintf("pod %s %s", o.Name, c.Type))
			}
		}
		for _, cs := range o.Status.ContainerStatuses {
			if cs.State.Running != nil {
				s.add(fmt.Sprintf("pod %s container %s running", o.Name, cs.Name))
			}
		}
	case *v1alpha1.AgentSession:
		if a := o.Annotations[v1alpha1.SessionLastActivityAnnotation]; a != "" {
			s.add(fmt.Sprintf("session %s activity %s written", o.Name, a))
		}
		if o.Status.Phase != "" {
			s.add(fmt.Sprintf("session %s %s (pod %s)", o.Name, o.Status.Phase, o.Status.PodName))
		}
	case *v1alpha1.AgentCheckpoint:
		s.add(fmt.Sprintf("AgentCheckpoint %s (%s) created", o.Name, o.Spec.Operation))
		if o.Status.Phase != "" {
			s.add(fmt.Sprintf("AgentCheckpoint %s %s", o.Name, o.Status.Phase))
		}
	}
}
