package config

import (
	"fmt"
	"strings"

	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// APIVersion and Kind identify NeuroNetes' own config type.
const (
	APIVersion = "gpu.neuronetes.io/v1alpha1"
	Kind       = "GpuConfig"
)

// GpuConfig configures how the devices of a request are shared. It applies to whole GPUs and MIG
// devices alike.
type GpuConfig struct {
	metav1.TypeMeta `json:",inline"`
	// Sharing, when set, lets several containers use the same devices.
	Sharing *Sharing `json:"sharing,omitempty"`
}

// Sharing selects a sharing strategy and its settings.
type Sharing struct {
	// Strategy is TimeSlicing or MPS.
	Strategy string `json:"strategy"`
	// TimeSlicing settings; only with Strategy TimeSlicing.
	TimeSlicing *TimeSlicing `json:"timeSlicing,omitempty"`
	// MPS settings; only with Strategy MPS.
	MPS *MPSConfig `json:"mps,omitempty"`
}

// TimeSlicing configures the GPU's compute time slice.
type TimeSlicing struct {
	// Interval is Default, Short, Medium or Long: the four time slices of a GPU's compute policy.
	Interval string `json:"interval"`
}

// MPSConfig configures the CUDA Multi-Process Service control daemon of the request's devices.
type MPSConfig struct {
	// DefaultActiveThreadPercentage limits the SMs a client may use (1-100).
	DefaultActiveThreadPercentage *int `json:"defaultActiveThreadPercentage,omitempty"`
	// DefaultPinnedDeviceMemoryLimit limits the pinned device memory of a client (e.g. "10Gi").
	DefaultPinnedDeviceMemoryLimit *resource.Quantity `json:"defaultPinnedDeviceMemoryLimit,omitempty"`
}

// Validate checks every field and names the first bad one by its JSON path.
func (c *GpuConfig) Validate() error {
	_, err := c.settings()
	return err
}

// settings validates c and returns what it asks for.
func (c *GpuConfig) settings() (*Settings, error) {
	out := &Settings{APIVersion: APIVersion, Kind: Kind, Types: []DeviceType{DeviceGPU, DeviceMIG}}
	if c.APIVersion != APIVersion {
		return nil, fmt.Errorf("apiVersion: %q is not supported, want %q", c.APIVersion, APIVersion)
	}
	if c.Kind != Kind {
		return nil, fmt.Errorf("kind: %q is not supported, want %q", c.Kind, Kind)
	}
	s := c.Sharing
	if s == nil {
		return out, nil
	}
	out.Strategy = s.Strategy
	out.Env = []string{"NEURONETES_GPU_SHARING=" + s.Strategy}
	switch s.Strategy {
	case StrategyTimeSlicing:
		if s.MPS != nil {
			return nil, fmt.Errorf("sharing.mps: must not be set with strategy %s", s.Strategy)
		}
		if s.TimeSlicing != nil {
			const field = "sharing.timeSlicing.interval"
			ts, err := ParseTimeSlice(field, s.TimeSlicing.Interval)
			if err != nil {
				return nil, err
			}
			out.TimeSlice, out.TimeSliceField = &ts, field
			out.Env = append(out.Env, "NEURONETES_GPU_TIMESLICE="+ts.String())
		}
	case StrategyMPS:
		if s.TimeSlicing != nil {
			return nil, fmt.Errorf("sharing.timeSlicing: must not be set with strategy %s", s.Strategy)
		}
		out.MPS = &MPS{}
		if m := s.MPS; m != nil {
			if p := m.DefaultActiveThreadPercentage; p != nil {
				if *p < 1 || *p > 100 {
					return nil, fmt.Errorf("sharing.mps.defaultActiveThreadPercentage: %d is outside [1, 100]", *p)
				}
				out.Env = append(out.Env, fmt.Sprintf("CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=%d", *p))
			}
			if q := m.DefaultPinnedDeviceMemoryLimit; q != nil {
				if q.Value()>>20 <= 0 {
					return nil, fmt.Errorf("sharing.mps.defaultPinnedDeviceMemoryLimit: %s must be at least 1Mi", q.String())
				}
				out.Env = append(out.Env, fmt.Sprintf("CUDA_MPS_PINNED_DEVICE_MEM_LIMIT=%dM", q.Value()>>20))
			}
			out.MPS.ActiveThreadPercentage, out.MPS.PinnedMemoryLimit = m.DefaultActiveThreadPercentage, m.DefaultPinnedDeviceMemoryLimit
		}
	default:
		return nil, fmt.Errorf("sharing.strategy: %q is not one of %s", s.Strategy, strings.Join([]string{StrategyTimeSlicing, StrategyMPS}, ", "))
	}
	return out, nil
}
