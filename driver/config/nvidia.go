package config

import (
	"fmt"
	"strings"

	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// NVIDIAAPIVersion is the API group and version of the opaque configs of NVIDIA's DRA driver
// (kubernetes-sigs/dra-driver-nvidia-gpu), accepted so that its claims run unchanged.
const NVIDIAAPIVersion = "resource.nvidia.com/v1beta1"

// Kinds of NVIDIAAPIVersion.
const (
	NVIDIAGpuConfigKind        = "GpuConfig"
	NVIDIAMigDeviceConfigKind  = "MigDeviceConfig"
	NVIDIAVfioDeviceConfigKind = "VfioDeviceConfig"
)

// NVIDIAGpuConfig is NVIDIA's configuration of whole GPUs.
type NVIDIAGpuConfig struct {
	metav1.TypeMeta `json:",inline"`
	// Sharing selects how the GPUs are shared.
	Sharing *NVIDIAGpuSharing `json:"sharing,omitempty"`
}

// NVIDIAGpuSharing is the sharing strategy of whole GPUs and its settings.
type NVIDIAGpuSharing struct {
	// Strategy is TimeSlicing or MPS.
	Strategy string `json:"strategy"`
	// TimeSlicingConfig sets the time slice; only with TimeSlicing.
	TimeSlicingConfig *NVIDIATimeSlicingConfig `json:"timeSlicingConfig,omitempty"`
	// MpsConfig configures the MPS control daemon; only with MPS.
	MpsConfig *NVIDIAMpsConfig `json:"mpsConfig,omitempty"`
}

// NVIDIAMigDeviceConfig is NVIDIA's configuration of MIG devices.
type NVIDIAMigDeviceConfig struct {
	metav1.TypeMeta `json:",inline"`
	// Sharing selects how the MIG devices are shared.
	Sharing *NVIDIAMigDeviceSharing `json:"sharing,omitempty"`
}

// NVIDIAMigDeviceSharing is the sharing strategy of MIG devices: TimeSlicing (the MIG device's
// default, nothing to set) or MPS.
type NVIDIAMigDeviceSharing struct {
	// Strategy is TimeSlicing or MPS.
	Strategy string `json:"strategy"`
	// MpsConfig configures the MPS control daemon; only with MPS.
	MpsConfig *NVIDIAMpsConfig `json:"mpsConfig,omitempty"`
}

// NVIDIATimeSlicingConfig sets the GPU's compute time slice.
type NVIDIATimeSlicingConfig struct {
	// Interval is Default, Short, Medium or Long; unset means Default.
	Interval *string `json:"interval,omitempty"`
}

// NVIDIAMpsConfig configures one MPS control daemon.
type NVIDIAMpsConfig struct {
	// DefaultActiveThreadPercentage is the clients' default active thread percentage (0-100).
	DefaultActiveThreadPercentage *int `json:"defaultActiveThreadPercentage,omitempty"`
	// DefaultPinnedDeviceMemoryLimit is the default pinned device memory limit of every device.
	DefaultPinnedDeviceMemoryLimit *resource.Quantity `json:"defaultPinnedDeviceMemoryLimit,omitempty"`
	// DefaultPerDevicePinnedMemoryLimit overrides it per device, keyed by UUID or device index.
	DefaultPerDevicePinnedMemoryLimit map[string]resource.Quantity `json:"defaultPerDevicePinnedMemoryLimit,omitempty"`
	// MultiUser starts the daemon in multi-user mode.
	MultiUser *bool `json:"multiUser,omitempty"`
}

func decodeNVIDIA(kind string, raw []byte) (*Settings, error) {
	switch kind {
	case NVIDIAGpuConfigKind:
		var c NVIDIAGpuConfig
		if err := strict(raw, &c, kind); err != nil {
			return nil, err
		}
		return c.settings()
	case NVIDIAMigDeviceConfigKind:
		var c NVIDIAMigDeviceConfig
		if err := strict(raw, &c, kind); err != nil {
			return nil, err
		}
		return c.settings()
	case NVIDIAVfioDeviceConfigKind:
		return nil, fmt.Errorf("kind: %s (%s) is not supported: NeuroNetes does not pass GPUs through to virtual machines (VFIO)", kind, NVIDIAAPIVersion)
	}
	return nil, fmt.Errorf("kind: %q is not supported in %s, want %s or %s", kind, NVIDIAAPIVersion, NVIDIAGpuConfigKind, NVIDIAMigDeviceConfigKind)
}

func (c *NVIDIAGpuConfig) settings() (*Settings, error) {
	out := &Settings{APIVersion: NVIDIAAPIVersion, Kind: NVIDIAGpuConfigKind, Types: []DeviceType{DeviceGPU}}
	s := c.Sharing
	if s == nil {
		return out, nil
	}
	out.Strategy = s.Strategy
	switch s.Strategy {
	case StrategyTimeSlicing:
		if s.MpsConfig != nil {
			return nil, fmt.Errorf("sharing.mpsConfig: must not be set with strategy %s", s.Strategy)
		}
		ts := TimeSliceDefault
		const field = "sharing.timeSlicingConfig.interval"
		if t := s.TimeSlicingConfig; t != nil && t.Interval != nil {
			var err error
			if ts, err = ParseTimeSlice(field, *t.Interval); err != nil {
				return nil, err
			}
		}
		out.TimeSlice, out.TimeSliceField = &ts, field
	case StrategyMPS:
		if s.TimeSlicingConfig != nil {
			return nil, fmt.Errorf("sharing.timeSlicingConfig: must not be set with strategy %s", s.Strategy)
		}
		m, err := s.MpsConfig.settings("sharing.mpsConfig")
		if err != nil {
			return nil, err
		}
		out.MPS = m
	default:
		return nil, unknownStrategy(s.Strategy)
	}
	return out, nil
}

func (c *NVIDIAMigDeviceConfig) settings() (*Settings, error) {
	out := &Settings{APIVersion: NVIDIAAPIVersion, Kind: NVIDIAMigDeviceConfigKind, Types: []DeviceType{DeviceMIG}}
	s := c.Sharing
	if s == nil {
		return out, nil
	}
	out.Strategy = s.Strategy
	switch s.Strategy {
	case StrategyTimeSlicing:
		if s.MpsConfig != nil {
			return nil, fmt.Errorf("sharing.mpsConfig: must not be set with strategy %s", s.Strategy)
		}
		// MIG devices are time-sliced among their processes by default: nothing to set.
	case StrategyMPS:
		m, err := s.MpsConfig.settings("sharing.mpsConfig")
		if err != nil {
			return nil, err
		}
		out.MPS = m
	default:
		return nil, unknownStrategy(s.Strategy)
	}
	return out, nil
}

func unknownStrategy(s string) error {
	return fmt.Errorf("sharing.strategy: %q is not one of %s", s, strings.Join([]string{StrategyTimeSlicing, StrategyMPS}, ", "))
}

// settings validates an MPS config (nil is the daemon's defaults) as NVIDIA does: percentage in
// [0, 100], limits of at least 1 MiB.
func (m *NVIDIAMpsConfig) settings(field string) (*MPS, error) {
	out := &MPS{}
	if m == nil {
		return out, nil
	}
	if p := m.DefaultActiveThreadPercentage; p != nil && (*p < 0 || *p > 100) {
		return nil, fmt.Errorf("%s.defaultActiveThreadPercentage: %d is outside [0, 100]", field, *p)
	}
	if q := m.DefaultPinnedDeviceMemoryLimit; q != nil && q.Value()>>20 <= 0 {
		return nil, fmt.Errorf("%s.defaultPinnedDeviceMemoryLimit: %s must be at least 1Mi", field, q.String())
	}
	for k, q := range m.DefaultPerDevicePinnedMemoryLimit {
		if q.Value()>>20 <= 0 {
			return nil, fmt.Errorf("%s.defaultPerDevicePinnedMemoryLimit[%s]: %s must be at least 1Mi", field, k, q.String())
		}
	}
	out.ActiveThreadPercentage = m.DefaultActiveThreadPercentage
	out.PinnedMemoryLimit = m.DefaultPinnedDeviceMemoryLimit
	out.PerDevicePinnedMemoryLimit = m.DefaultPerDevicePinnedMemoryLimit
	out.MultiUser = m.MultiUser != nil && *m.MultiUser
	return out, nil
}
