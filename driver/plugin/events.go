package plugin

import (
	"context"
	"sync"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/record"
	"k8s.io/klog/v2"
)

// NodeEvents returns an event function that records events on the Node object. The Node's UID is
// read from the API on first use (and again while that read fails), so events are linked to the
// Node object (kubectl describe node shows them) rather than carrying a made-up UID.
func NodeEvents(ctx context.Context, kube kubernetes.Interface, recorder record.EventRecorder, node string) func(eventType, reason, message string) {
	var mu sync.Mutex
	ref := &corev1.ObjectReference{APIVersion: "v1", Kind: "Node", Name: node}
	return func(eventType, reason, message string) {
		mu.Lock()
		if ref.UID == "" {
			n, err := kube.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
			if err != nil {
				klog.FromContext(ctx).Error(err, "Reading the Node for its UID failed; the event has none", "node", node)
			} else {
				ref.UID = n.UID
			}
		}
		r := *ref
		mu.Unlock()
		recorder.Event(&r, eventType, reason, message)
	}
}
