package main

import (
	"flag"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"

	nnwebhook "github.com/neuronetes/neuronetes/controller/webhook"
)

func TestSidecarResourceFlags(t *testing.T) {
	tests := []struct {
		name    string
		f       sidecarResourceFlags
		wantErr string
		check   func(corev1.ResourceRequirements) bool
	}{
		{"defaults", sidecarResourceFlags{"100m", "128Mi", "", "1Gi"}, "", func(r corev1.ResourceRequirements) bool {
			_, cpuLimit := r.Limits[corev1.ResourceCPU]
			return r.Requests.Cpu().MilliValue() == 100 && r.Requests.Memory().Value() == 128<<20 && !cpuLimit && r.Limits.Memory().Value() == 1<<30
		}},
		{"all empty", sidecarResourceFlags{}, "", func(r corev1.ResourceRequirements) bool { return len(r.Requests) == 0 && len(r.Limits) == 0 }},
		{"bad quantity", sidecarResourceFlags{"lots", "", "", ""}, `--sidecar-cpu-request: "lots" is not a quantity`, nil},
		{"negative", sidecarResourceFlags{"", "", "", "-1Gi"}, `--sidecar-memory-limit: "-1Gi" is negative`, nil},
		{"request over limit", sidecarResourceFlags{"2", "", "1", ""}, "--sidecar-cpu-request 2 exceeds --sidecar-cpu-limit 1", nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r, err := tt.f.requirements()
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("err %v, want %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !tt.check(r) {
				t.Fatalf("requirements %+v", r)
			}
		})
	}
}

func TestSidecarResourceFlagDefaults(t *testing.T) {
	fs := flag.NewFlagSet("x", flag.ContinueOnError)
	var f sidecarResourceFlags
	f.addFlags(fs)
	if err := fs.Parse(nil); err != nil {
		t.Fatal(err)
	}
	got, err := f.requirements()
	if err != nil {
		t.Fatal(err)
	}
	want := nnwebhook.DefaultSidecarResources()
	if !equality.Semantic.DeepEqual(got.Requests, want.Requests) || !equality.Semantic.DeepEqual(got.Limits, want.Limits) {
		t.Fatalf("flag defaults give %+v, want DefaultSidecarResources %+v", got, want)
	}
}
