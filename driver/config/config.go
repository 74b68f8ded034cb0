// Package config is the driver's opaque device configuration: a versioned type carried in
// ResourceClaim and DeviceClass opaque parameters, decoded strictly and validated so that a bad
// config fails the claim with a message naming the field.
package config

import (
	"errors"
	"fmt"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kjson "sigs.k8s.io/json"
)

// APIVersion and Kind identify the config type.
const (
	APIVersion = "gpu.neuronetes.io/v1alpha1"
	Kind       = "GpuConfig"
)

// Sharing strategies.
const (
	StrategyTimeSlicing = "TimeSlicing"
	StrategyMPS         = "MPS"
)

// GpuConfig configures how the devices of a request are shared.
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
	MPS *MPS `json:"mps,omitempty"`
}

// TimeSlicing configures the time slice of the GPU scheduler.
type TimeSlicing struct {
	// Interval is a duration between 1ms and 1s, e.g. "10ms".
	Interval string `json:"interval"`
}

// MPS configures the CUDA Multi-Process Service limits given to every client.
type MPS struct {
	// DefaultActiveThreadPercentage limits the SMs a client may use (1-100).
	DefaultActiveThreadPercentage *int `json:"defaultActiveThreadPercentage,omitempty"`
	// DefaultPinnedDeviceMemoryLimit limits the device memory of a client (e.g. "10Gi").
	DefaultPinnedDeviceMemoryLimit *resource.Quantity `json:"defaultPinnedDeviceMemoryLimit,omitempty"`
}

// Decode parses raw strictly (unknown or duplicate fields are errors) and validates the result.
func Decode(raw []byte) (*GpuConfig, error) {
	var c GpuConfig
	strict, err := kjson.UnmarshalStrict(raw, &c)
	if err != nil {
		return nil, fmt.Errorf("decode %s: %w", Kind, err)
	}
	if len(strict) > 0 {
		return nil, fmt.Errorf("decode %s: %w", Kind, errors.Join(strict...))
	}
	if err := c.Validate(); err != nil {
		return nil, err
	}
	return &c, nil
}

// Validate checks every field and names the first bad one by its JSON path.
func (c *GpuConfig) Validate() error {
	if c.APIVersion != APIVersion {
		return fmt.Errorf("apiVersion: %q is not supported, want %q", c.APIVersion, APIVersion)
	}
	if c.Kind != Kind {
		return fmt.Errorf("kind: %q is not supported, want %q", c.Kind, Kind)
	}
	s := c.Sharing
	if s == nil {
		return nil
	}
	switch s.Strategy {
	case StrategyTimeSlicing:
		if s.MPS != nil {
			return fmt.Errorf("sharing.mps: must not be set with strategy %s", s.Strategy)
		}
		if s.TimeSlicing != nil {
			d, err := time.ParseDuration(s.TimeSlicing.Interval)
			if err != nil {
				return fmt.Errorf("sharing.timeSlicing.interval: %w", err)
			}
			if d < time.Millisecond || d > time.Second {
				return fmt.Errorf("sharing.timeSlicing.interval: %s is outside [1ms, 1s]", d)
			}
		}
	case StrategyMPS:
		if s.TimeSlicing != nil {
			return fmt.Errorf("sharing.timeSlicing: must not be set with strategy %s", s.Strategy)
		}
		if m := s.MPS; m != nil {
			if p := m.DefaultActiveThreadPercentage; p != nil && (*p < 1 || *p > 100) {
				return fmt.Errorf("sharing.mps.defaultActiveThreadPercentage: %d is outside [1, 100]", *p)
			}
			if q := m.DefaultPinnedDeviceMemoryLimit; q != nil && q.Sign() <= 0 {
				return fmt.Errorf("sharing.mps.defaultPinnedDeviceMemoryLimit: %s must be positive", q.String())
			}
		}
	default:
		return fmt.Errorf("sharing.strategy: %q is not one of %s", s.Strategy, strings.Join([]string{StrategyTimeSlicing, StrategyMPS}, ", "))
	}
	return nil
}

// Env returns the container environment that applies the config (read by the CUDA runtime and by
// NeuroNetes' own tooling).
func (c *GpuConfig) Env() []string {
	if c == nil || c.Sharing == nil {
		return nil
	}
	env := []string{"NEURONETES_GPU_SHARING=" + c.Sharing.Strategy}
	if t := c.Sharing.TimeSlicing; t != nil {
		env = append(env, "NEURONETES_GPU_TIMESLICE="+t.Interval)
	}
	if m := c.Sharing.MPS; m != nil {
		if m.DefaultActiveThreadPercentage != nil {
			env = append(env, fmt.Sprintf("CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=%d", *m.DefaultActiveThreadPercentage))
		}
		if m.DefaultPinnedDeviceMemoryLimit != nil {
			env = append(env, fmt.Sprintf("CUDA_MPS_PINNED_DEVICE_MEM_LIMIT=%dM", m.DefaultPinnedDeviceMemoryLimit.Value()>>20))
		}
	}
	return env
}
