package agent

import (
	"path/filepath"
	"sort"
	"strings"

	corev1 "k8s.io/api/core/v1"

	"github.com/neuronetes/neuronetes/api/v1alpha1"
	"github.com/neuronetes/neuronetes/nodeagent/cache"
)

// PodModelAnnotation may name, on a pod, the Model (same namespace) whose weights it uses. It is an
// alternative to the AgentClass label for pods that are not created from an AgentClass.
const PodModelAnnotation = "neuronetes.io/model"

// Pins computes which cache entries the running pods on this node use: hex -> pod keys
// ("namespace/name"). A pod uses an entry when
//   - it mounts a hostPath at or below <cacheDir>/sha256/<hex> or <cacheDir>/ready/<hex>, or
//   - its AgentClass (label neuronetes.io/agentclass) has a modelRef to a Model, or
//   - it carries the annotation neuronetes.io/model naming a Model.
//
// Pods that have finished (Succeeded/Failed) pin nothing. models and classes are keyed by
// "namespace/name".
func Pins(pods []corev1.Pod, classes map[string]*v1alpha1.AgentClass, models map[string]*v1alpha1.Model, cacheDir string) map[string][]string {
	out := map[string][]string{}
	add := func(hex, holder string) {
		for _, h := range out[hex] {
			if h == holder {
				return
			}
		}
		out[hex] = append(out[hex], holder)
	}
	entryDirs := []string{filepath.Clean(filepath.Join(cacheDir, "sha256")) + "/", filepath.Clean(filepath.Join(cacheDir, "ready")) + "/"}
	for i := range pods {
		p := &pods[i]
		if p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed {
			continue
		}
		key := p.Namespace + "/" + p.Name
		for _, v := range p.Spec.Volumes {
			if v.HostPath == nil {
				continue
			}
			for _, dir := range entryDirs {
				rest, ok := strings.CutPrefix(filepath.Clean(v.HostPath.Path)+"/", dir)
				if !ok {
					continue
				}
				hex, _, _ := strings.Cut(rest, "/")
				if _, err := cache.ParseDigest(cache.DigestPrefix + hex); err == nil {
					add(hex, key)
				}
			}
		}
		var modelName string
		if n := p.Annotations[PodModelAnnotation]; n != "" {
			modelName = n
		} else if c := classes[p.Namespace+"/"+p.Labels[v1alpha1.AgentClassLabel]]; c != nil && c.Spec.ModelRef != nil {
			modelName = c.Spec.ModelRef.Name
		}
		if m := models[p.Namespace+"/"+modelName]; modelName != "" && m != nil {
			if hex, err := cache.ParseDigest(m.Spec.Digest); err == nil {
				add(hex, key)
			}
		}
	}
	for _, hs := range out {
		sort.Strings(hs)
	}
	return out
}

// LabelPatch returns the node label changes (value nil = remove) that set WarmNodeLabel(digest) =
// "true" for every warm digest and remove the warm label of every known digest (a Model this agent
// watches, or an entry it holds) that is not warm. Labels of digests the agent knows nothing about,
// and labels outside the warm prefix, are left alone. It returns nil when nothing changes.
func LabelPatch(current map[string]string, warmHexes, knownHexes []string) map[string]*string {
	known := map[string]bool{}
	for _, h := range knownHexes {
		known[v1alpha1.WarmNodeLabel(cache.DigestPrefix+h)] = true
	}
	want := map[string]bool{}
	for _, h := range warmHexes {
		want[v1alpha1.WarmNodeLabel(cache.DigestPrefix+h)] = true
	}
	patch := map[string]*string{}
	for k := range current {
		if strings.HasPrefix(k, v1alpha1.WarmLabelPrefix+"sha256-") && known[k] && !want[k] {
			patch[k] = nil
		}
	}
	t := "true"
	for k := range want {
		if current[k] != "true" {
			patch[k] = &t
		}
	}
	if len(patch) == 0 {
		return nil
	}
	return patch
}
