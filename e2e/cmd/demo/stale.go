package main

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"time"

	"github.com/google/go-containerregistry/pkg/v1/tarball"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// dropStalePool deletes the demo AgentPool left by an earlier run when any of its pods runs
// another demo-agent image than the one this run imported: the controller does not replace
// pods when the image behind a tag changes, so they would serve the old code.
func (d *demo) dropStalePool(ctx context.Context) error {
	img, err := tarball.ImageFromPath(filepath.Join(d.c.Paths.Local, "images", "demo-agent.tar"), nil)
	if err != nil {
		return fmt.Errorf("reading the demo-agent image: %w", err)
	}
	id, err := img.ConfigName()
	if err != nil {
		return fmt.Errorf("the demo-agent image's id: %w", err)
	}
	list, err := d.kube.CoreV1().Pods(demoNamespace).List(ctx, metav1.ListOptions{LabelSelector: "neuronetes.io/pool=demo"})
	if err != nil {
		return err
	}
	stale := staleImagePods(list.Items, "agent", id.String())
	if len(stale) == 0 {
		return nil
	}
	logf("   pods %s run an older demo-agent image: recreating AgentPool demo", strings.Join(stale, ","))
	err = d.dyn.Resource(agentPoolGVR).Namespace(demoNamespace).Delete(ctx, "demo", metav1.DeleteOptions{})
	if err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("deleting AgentPool demo: %w", err)
	}
	return waitFor(ctx, 120*time.Second, "the old demo pool's pods gone", func() (bool, error) {
		l, err := d.kube.CoreV1().Pods(demoNamespace).List(ctx, metav1.ListOptions{LabelSelector: "neuronetes.io/pool=demo"})
		if err != nil {
			return false, err
		}
		return len(l.Items) == 0, fmt.Errorf("%d pods left", len(l.Items))
	})
}

// staleImagePods names the pods whose container runs an image other than id (a started
// container's status.imageID; containers not started yet are not judged).
func staleImagePods(pods []corev1.Pod, container, id string) []string {
	var out []string
	for _, p := range pods {
		for _, cs := range p.Status.ContainerStatuses {
			if cs.Name == container && cs.ImageID != "" && cs.ImageID != id {
				out = append(out, p.Name)
			}
		}
	}
	return out
}
