package config

import (
	"strings"
	"testing"
)

func TestDecode(t *testing.T) {
	head := `{"apiVersion":"gpu.neuronetes.io/v1alpha1","kind":"GpuConfig"`
	tests := []struct {
		name   string
		raw    string
		errHas string
		env    []string
	}{
		{"empty", head + `}`, "", nil},
		{"time slicing", head + `,"sharing":{"strategy":"TimeSlicing","timeSlicing":{"interval":"10ms"}}}`, "", []string{"NEURONETES_GPU_SHARING=TimeSlicing", "NEURONETES_GPU_TIMESLICE=10ms"}},
		{"mps", head + `,"sharing":{"strategy":"MPS","mps":{"defaultActiveThreadPercentage":50,"defaultPinnedDeviceMemoryLimit":"10Gi"}}}`, "",
			[]string{"NEURONETES_GPU_SHARING=MPS", "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=50", "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT=10240M"}},
		{"unknown field", head + `,"sharing":{"strategy":"MPS","mps":{"threads":5}}}`, "sharing.mps.threads", nil},
		{"duplicate field", head + `,"sharing":{"strategy":"MPS","strategy":"MPS"}}`, "strategy", nil},
		{"bad strategy", head + `,"sharing":{"strategy":"Magic"}}`, "sharing.strategy", nil},
		{"bad percentage", head + `,"sharing":{"strategy":"MPS","mps":{"defaultActiveThreadPercentage":0}}}`, "sharing.mps.defaultActiveThreadPercentage", nil},
		{"negative memory", head + `,"sharing":{"strategy":"MPS","mps":{"defaultPinnedDeviceMemoryLimit":"-1"}}}`, "sharing.mps.defaultPinnedDeviceMemoryLimit", nil},
		{"bad interval", head + `,"sharing":{"strategy":"TimeSlicing","timeSlicing":{"interval":"5s"}}}`, "sharing.timeSlicing.interval", nil},
		{"unparsable interval", head + `,"sharing":{"strategy":"TimeSlicing","timeSlicing":{"interval":"soon"}}}`, "sharing.timeSlicing.interval", nil},
		{"mixed settings", head + `,"sharing":{"strategy":"TimeSlicing","mps":{}}}`, "sharing.mps", nil},
		{"wrong kind", `{"apiVersion":"gpu.neuronetes.io/v1alpha1","kind":"Other"}`, "kind", nil},
		{"wrong version", `{"apiVersion":"gpu.neuronetes.io/v9","kind":"GpuConfig"}`, "apiVersion", nil},
		{"not json", `{`, "decode", nil},
	}
	for _, tc := range tests {
		c, err := Decode([]byte(tc.raw))
		if tc.errHas != "" {
			if err == nil || !strings.Contains(err.Error(), tc.errHas) {
				t.Errorf("%s: err %v, want one naming %q", tc.name, err, tc.errHas)
			}
			continue
		}
		if err != nil {
			t.Errorf("%s: %v", tc.name, err)
			continue
		}
		if got := strings.Join(c.Env(), " "); got != strings.Join(tc.env, " ") {
			t.Errorf("%s: env %q, want %q", tc.name, got, tc.env)
		}
	}
}
