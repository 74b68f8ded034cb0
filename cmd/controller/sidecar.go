package main

import (
	"flag"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"

	nnwebhook "github.com/neuronetes/neuronetes/controller/webhook"
)

// sidecarResourceFlags are the injected sidecar's requests and limits as quantities; an empty
// value leaves that request or limit unset.
type sidecarResourceFlags struct {
	cpuRequest, memoryRequest, cpuLimit, memoryLimit string
}

func (f *sidecarResourceFlags) addFlags(fs *flag.FlagSet) {
	def := nnwebhook.DefaultSidecarResources()
	str := func(l corev1.ResourceList, n corev1.ResourceName) string {
		if q, ok := l[n]; ok {
			return q.String()
		}
		return ""
	}
	fs.StringVar(&f.cpuRequest, "sidecar-cpu-request", str(def.Requests, corev1.ResourceCPU), "CPU request of injected sidecars (empty: none)")
	fs.StringVar(&f.memoryRequest, "sidecar-memory-request", str(def.Requests, corev1.ResourceMemory), "memory request of injected sidecars (empty: none)")
	fs.StringVar(&f.cpuLimit, "sidecar-cpu-limit", str(def.Limits, corev1.ResourceCPU), "CPU limit of injected sidecars (empty: none, so no throttling)")
	fs.StringVar(&f.memoryLimit, "sidecar-memory-limit", str(def.Limits, corev1.ResourceMemory), "memory limit of injected sidecars (empty: none)")
}

// requirements parses the flags; an error names the flag and its value.
func (f *sidecarResourceFlags) requirements() (corev1.ResourceRequirements, error) {
	out := corev1.ResourceRequirements{Requests: corev1.ResourceList{}, Limits: corev1.ResourceList{}}
	for _, v := range []struct {
		flag, value string
		list        corev1.ResourceList
		name        corev1.ResourceName
	}{
		{"--sidecar-cpu-request", f.cpuRequest, out.Requests, corev1.ResourceCPU},
		{"--sidecar-memory-request", f.memoryRequest, out.Requests, corev1.ResourceMemory},
		{"--sidecar-cpu-limit", f.cpuLimit, out.Limits, corev1.ResourceCPU},
		{"--sidecar-memory-limit", f.memoryLimit, out.Limits, corev1.ResourceMemory},
	} {
		if v.value == "" {
			continue
		}
		q, err := resource.ParseQuantity(v.value)
		if err != nil {
			return out, fmt.Errorf("%s: %q is not a quantity: %w", v.flag, v.value, err)
		}
		if q.Sign() < 0 {
			return out, fmt.Errorf("%s: %q is negative", v.flag, v.value)
		}
		v.list[v.name] = q
	}
	for _, n := range []corev1.ResourceName{corev1.ResourceCPU, corev1.ResourceMemory} {
		r, hasR := out.Requests[n]
		l, hasL := out.Limits[n]
		if hasR && hasL && r.Cmp(l) > 0 {
			return out, fmt.Errorf("--sidecar-%s-request %s exceeds --sidecar-%s-limit %s", n, r.String(), n, l.String())
		}
	}
	return out, nil
}
