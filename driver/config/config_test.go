package config

import (
	"strings"
	"testing"
)

func TestDecodeNeuroNetes(t *testing.T) {
	head := `{"apiVersion":"gpu.neuronetes.io/v1alpha1","kind":"GpuConfig"`
	tests := []struct {
		name      string
		raw       string
		errHas    string
		env       []string
		timeSlice string
	}{
		{"empty", head + `}`, "", nil, ""},
		{"time slicing", head + `,"sharing":{"strategy":"TimeSlicing","timeSlicing":{"interval":"Medium"}}}`, "", []string{"NEURONETES_GPU_SHARING=TimeSlicing", "NEURONETES_GPU_TIMESLICE=Medium"}, "Medium"},
		{"time slicing without interval", head + `,"sharing":{"strategy":"TimeSlicing"}}`, "", []string{"NEURONETES_GPU_SHARING=TimeSlicing"}, ""},
		{"mps", head + `,"sharing":{"strategy":"MPS","mps":{"defaultActiveThreadPercentage":50,"defaultPinnedDeviceMemoryLimit":"10Gi"}}}`, "",
			[]string{"NEURONETES_GPU_SHARING=MPS", "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=50", "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT=10240M"}, ""},
		{"unknown field", head + `,"sharing":{"strategy":"MPS","mps":{"threads":5}}}`, "sharing.mps.threads", nil, ""},
		{"duplicate field", head + `,"sharing":{"strategy":"MPS","strategy":"MPS"}}`, "strategy", nil, ""},
		{"bad strategy", head + `,"sharing":{"strategy":"Magic"}}`, "sharing.strategy", nil, ""},
		{"bad percentage", head + `,"sharing":{"strategy":"MPS","mps":{"defaultActiveThreadPercentage":0}}}`, "sharing.mps.defaultActiveThreadPercentage", nil, ""},
		{"negative memory", head + `,"sharing":{"strategy":"MPS","mps":{"defaultPinnedDeviceMemoryLimit":"-1"}}}`, "sharing.mps.defaultPinnedDeviceMemoryLimit", nil, ""},
		{"duration interval", head + `,"sharing":{"strategy":"TimeSlicing","timeSlicing":{"interval":"10ms"}}}`, "sharing.timeSlicing.interval: \"10ms\" is not one of Default, Short, Medium, Long", nil, ""},
		{"mixed settings", head + `,"sharing":{"strategy":"TimeSlicing","mps":{}}}`, "sharing.mps", nil, ""},
		{"wrong kind", `{"apiVersion":"gpu.neuronetes.io/v1alpha1","kind":"Other"}`, "kind", nil, ""},
		{"wrong version", `{"apiVersion":"gpu.neuronetes.io/v9","kind":"GpuConfig"}`, "apiVersion", nil, ""},
		{"not json", `{`, "decode", nil, ""},
	}
	for _, tc := range tests {
		s, err := Decode([]byte(tc.raw))
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
		if got := strings.Join(s.Env, " "); got != strings.Join(tc.env, " ") {
			t.Errorf("%s: env %q, want %q", tc.name, got, tc.env)
		}
		if got := timeSlice(s); got != tc.timeSlice {
			t.Errorf("%s: time slice %q, want %q", tc.name, got, tc.timeSlice)
		}
		if !s.AppliesTo(DeviceGPU) || !s.AppliesTo(DeviceMIG) {
			t.Errorf("%s: a NeuroNetes GpuConfig applies to %v, want gpu and mig", tc.name, s.Types)
		}
	}
}

func timeSlice(s *Settings) string {
	if s.TimeSlice == nil {
		return ""
	}
	return s.TimeSlice.String()
}

// TestDecodeNVIDIA translates NVIDIA's resource.nvidia.com/v1beta1 configs: every interval to the
// value nvidia-smi compute-policy takes, the MPS fields, the device type each kind fits, and the
// configs NVIDIA's driver refuses.
func TestDecodeNVIDIA(t *testing.T) {
	gpu := `{"apiVersion":"resource.nvidia.com/v1beta1","kind":"GpuConfig"`
	mig := `{"apiVersion":"resource.nvidia.com/v1beta1","kind":"MigDeviceConfig"`
	tests := []struct {
		name      string
		raw       string
		errHas    string
		types     []DeviceType
		timeSlice int // -1: none
		mps       bool
	}{
		{"gpu default", gpu + `}`, "", []DeviceType{DeviceGPU}, -1, false},
		{"interval Default", gpu + `,"sharing":{"strategy":"TimeSlicing","timeSlicingConfig":{"interval":"Default"}}}`, "", []DeviceType{DeviceGPU}, 0, false},
		{"interval Short", gpu + `,"sharing":{"strategy":"TimeSlicing","timeSlicingConfig":{"interval":"Short"}}}`, "", []DeviceType{DeviceGPU}, 1, false},
		{"interval Medium", gpu + `,"sharing":{"strategy":"TimeSlicing","timeSlicingConfig":{"interval":"Medium"}}}`, "", []DeviceType{DeviceGPU}, 2, false},
		{"interval Long", gpu + `,"sharing":{"strategy":"TimeSlicing","timeSlicingConfig":{"interval":"Long"}}}`, "", []DeviceType{DeviceGPU}, 3, false},
		{"time slicing without config", gpu + `,"sharing":{"strategy":"TimeSlicing"}}`, "", []DeviceType{DeviceGPU}, 0, false},
		{"bad interval", gpu + `,"sharing":{"strategy":"TimeSlicing","timeSlicingConfig":{"interval":"VeryLong"}}}`, "sharing.timeSlicingConfig.interval", nil, -1, false},
		{"gpu mps", gpu + `,"sharing":{"strategy":"MPS","mpsConfig":{"defaultActiveThreadPercentage":50,"defaultPinnedDeviceMemoryLimit":"10Gi","multiUser":true}}}`, "", []DeviceType{DeviceGPU}, -1, true},
		{"gpu mps without config", gpu + `,"sharing":{"strategy":"MPS"}}`, "", []DeviceType{DeviceGPU}, -1, true},
		{"mps percentage", gpu + `,"sharing":{"strategy":"MPS","mpsConfig":{"defaultActiveThreadPercentage":101}}}`, "sharing.mpsConfig.defaultActiveThreadPercentage", nil, -1, false},
		{"mps small limit", gpu + `,"sharing":{"strategy":"MPS","mpsConfig":{"defaultPinnedDeviceMemoryLimit":"10Ki"}}}`, "sharing.mpsConfig.defaultPinnedDeviceMemoryLimit", nil, -1, false},
		{"mps per device limit", gpu + `,"sharing":{"strategy":"MPS","mpsConfig":{"defaultPerDevicePinnedMemoryLimit":{"0":"1Ki"}}}}`, "defaultPerDevicePinnedMemoryLimit[0]", nil, -1, false},
		{"mixed", gpu + `,"sharing":{"strategy":"TimeSlicing","mpsConfig":{}}}`, "sharing.mpsConfig", nil, -1, false},
		{"unknown strategy", gpu + `,"sharing":{"strategy":"Spatial"}}`, "sharing.strategy", nil, -1, false},
		{"unknown field", gpu + `,"sharing":{"strategy":"MPS","mpsConfig":{"threads":1}}}`, "sharing.mpsConfig.threads", nil, -1, false},
		{"mig time slicing", mig + `,"sharing":{"strategy":"TimeSlicing"}}`, "", []DeviceType{DeviceMIG}, -1, false},
		{"mig time slicing config refused", mig + `,"sharing":{"strategy":"TimeSlicing","timeSlicingConfig":{"interval":"Long"}}}`, "sharing.timeSlicingConfig", nil, -1, false},
		{"mig mps", mig + `,"sharing":{"strategy":"MPS","mpsConfig":{"defaultActiveThreadPercentage":25}}}`, "", []DeviceType{DeviceMIG}, -1, true},
		{"vfio", `{"apiVersion":"resource.nvidia.com/v1beta1","kind":"VfioDeviceConfig"}`, "VfioDeviceConfig (resource.nvidia.com/v1beta1) is not supported", nil, -1, false},
		{"compute domain", `{"apiVersion":"resource.nvidia.com/v1beta1","kind":"ComputeDomainChannelConfig"}`, `kind: "ComputeDomainChannelConfig" is not supported`, nil, -1, false},
		{"other group", `{"apiVersion":"resource.example.com/v1","kind":"GpuConfig"}`, "apiVersion", nil, -1, false},
	}
	for _, tc := range tests {
		s, err := Decode([]byte(tc.raw))
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
		for _, dt := range []DeviceType{DeviceGPU, DeviceMIG} {
			want := false
			for _, w := range tc.types {
				want = want || w == dt
			}
			if s.AppliesTo(dt) != want {
				t.Errorf("%s: applies to %s = %v, want %v", tc.name, dt, !want, want)
			}
		}
		got := -1
		if s.TimeSlice != nil {
			got = int(*s.TimeSlice)
		}
		if got != tc.timeSlice {
			t.Errorf("%s: time slice %d, want %d", tc.name, got, tc.timeSlice)
		}
		if (s.MPS != nil) != tc.mps {
			t.Errorf("%s: mps %+v, want set=%v", tc.name, s.MPS, tc.mps)
		}
		if len(s.Env) != 0 {
			t.Errorf("%s: NVIDIA configs set no environment of their own, got %v", tc.name, s.Env)
		}
	}
}

func TestPinnedLimits(t *testing.T) {
	raw := `{"apiVersion":"resource.nvidia.com/v1beta1","kind":"GpuConfig","sharing":{"strategy":"MPS","mpsConfig":{` +
		`"defaultPinnedDeviceMemoryLimit":"10Gi","defaultPerDevicePinnedMemoryLimit":{"1":"2Gi","GPU-c":"512Mi"}}}}`
	s, err := Decode([]byte(raw))
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		uuids  []string
		want   map[string]string
		errHas string
	}{
		{[]string{"GPU-a", "GPU-b", "GPU-c"}, map[string]string{"GPU-a": "10240M", "GPU-b": "2048M", "GPU-c": "512M"}, ""},
		{[]string{"GPU-a"}, nil, "defaultPerDevicePinnedMemoryLimit[1]: names no device"},
	}
	for _, tc := range tests {
		got, err := s.MPS.PinnedLimits(tc.uuids)
		if tc.errHas != "" {
			if err == nil || !strings.Contains(err.Error(), tc.errHas) {
				t.Errorf("%v: err %v, want %q", tc.uuids, err, tc.errHas)
			}
			continue
		}
		if err != nil || len(got) != len(tc.want) {
			t.Fatalf("%v: %v %v, want %v", tc.uuids, got, err, tc.want)
		}
		for k, v := range tc.want {
			if got[k] != v {
				t.Errorf("%v: %s = %q, want %q", tc.uuids, k, got[k], v)
			}
		}
	}
}
