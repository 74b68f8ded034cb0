// Package config is the driver's opaque device configuration: the versioned types carried in
// ResourceClaim and DeviceClass opaque parameters, decoded strictly and validated so that a bad
// config fails the claim with a message naming the field. Two API groups are understood:
// NeuroNetes' own gpu.neuronetes.io/v1alpha1 GpuConfig and NVIDIA's resource.nvidia.com/v1beta1
// GpuConfig and MigDeviceConfig (so that claims written for NVIDIA's DRA driver run unchanged).
// Both decode into Settings, the one form the rest of the driver reads.
package config

import (
	"errors"
	"fmt"
	"sort"
	"strings"

	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kjson "sigs.k8s.io/json"
)

// Sharing strategies (the same names in both API groups).
const (
	StrategyTimeSlicing = "TimeSlicing"
	StrategyMPS         = "MPS"
)

// DeviceType is the kind of device a config may apply to.
type DeviceType string

// Device types, as published in the "type" attribute.
const (
	DeviceGPU DeviceType = "gpu"
	DeviceMIG DeviceType = "mig"
)

// TimeSlice is a GPU compute time slice as nvidia-smi compute-policy --set-timeslice takes it.
type TimeSlice int

// The four time slices a GPU's compute policy offers.
const (
	TimeSliceDefault TimeSlice = 0
	TimeSliceShort   TimeSlice = 1
	TimeSliceMedium  TimeSlice = 2
	TimeSliceLong    TimeSlice = 3
)

// timeSliceNames are the interval names both API groups accept, in TimeSlice order.
var timeSliceNames = []string{"Default", "Short", "Medium", "Long"}

// String returns the interval name of t.
func (t TimeSlice) String() string {
	if t >= 0 && int(t) < len(timeSliceNames) {
		return timeSliceNames[t]
	}
	return fmt.Sprintf("TimeSlice(%d)", int(t))
}

// ParseTimeSlice maps an interval name (Default, Short, Medium, Long) to its time slice; field
// names the field in the error.
func ParseTimeSlice(field, name string) (TimeSlice, error) {
	for i, n := range timeSliceNames {
		if n == name {
			return TimeSlice(i), nil
		}
	}
	return 0, fmt.Errorf("%s: %q is not one of %s (a GPU's compute policy has only these time slices)", field, name, strings.Join(timeSliceNames, ", "))
}

// MPS is the normalized setting of one MPS control daemon.
type MPS struct {
	// ActiveThreadPercentage is the default active thread percentage of the daemon's clients.
	ActiveThreadPercentage *int
	// PinnedMemoryLimit is the default pinned device memory limit of every device.
	PinnedMemoryLimit *resource.Quantity
	// PerDevicePinnedMemoryLimit overrides PinnedMemoryLimit per device, keyed by device UUID or
	// by the index of the device among the devices the config applies to.
	PerDevicePinnedMemoryLimit map[string]resource.Quantity
	// MultiUser starts the daemon in multi-user mode (-M).
	MultiUser bool
}

// PinnedLimits resolves the pinned memory limits for the given device UUIDs (in the order the
// config applies to them) into the daemon's form: UUID to "<MiB>M". It fails for a per-device key
// that names no device and for a limit below 1 MiB.
func (m *MPS) PinnedLimits(uuids []string) (map[string]string, error) {
	out := map[string]string{}
	if m == nil {
		return out, nil
	}
	mib := func(field string, q resource.Quantity) (string, error) {
		v := q.Value() >> 20
		if v <= 0 {
			return "", fmt.Errorf("%s: %s is below 1Mi", field, q.String())
		}
		return fmt.Sprintf("%dM", v), nil
	}
	if m.PinnedMemoryLimit != nil {
		v, err := mib("defaultPinnedDeviceMemoryLimit", *m.PinnedMemoryLimit)
		if err != nil {
			return nil, err
		}
		for _, u := range uuids {
			out[u] = v
		}
	}
	keys := make([]string, 0, len(m.PerDevicePinnedMemoryLimit))
	for k := range m.PerDevicePinnedMemoryLimit {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, key := range keys {
		q := m.PerDevicePinnedMemoryLimit[key]
		field := "defaultPerDevicePinnedMemoryLimit[" + key + "]"
		uuid := ""
		for i, u := range uuids {
			if key == u || key == fmt.Sprint(i) {
				uuid = u
			}
		}
		if uuid == "" {
			return nil, fmt.Errorf("%s: names no device of the config (have %d: %s)", field, len(uuids), strings.Join(uuids, ","))
		}
		v, err := mib(field, q)
		if err != nil {
			return nil, err
		}
		out[uuid] = v
	}
	return out, nil
}

// Settings is a decoded and validated config: what the driver does for the devices it applies to.
type Settings struct {
	// APIVersion and Kind name the config's type (for messages).
	APIVersion, Kind string
	// Types are the device types the config may apply to.
	Types []DeviceType
	// Strategy is "", StrategyTimeSlicing or StrategyMPS.
	Strategy string
	// TimeSlice, when set, is applied to the GPU's compute policy (whole GPUs only).
	TimeSlice *TimeSlice
	// TimeSliceField names the field TimeSlice came from (for errors).
	TimeSliceField string
	// MPS, when set, starts one MPS control daemon for the devices of the config.
	MPS *MPS
	// Env is extra container environment.
	Env []string
}

// AppliesTo reports whether the config may apply to devices of type t.
func (s *Settings) AppliesTo(t DeviceType) bool {
	for _, a := range s.Types {
		if a == t {
			return true
		}
	}
	return false
}

// Decode parses raw strictly (unknown or duplicate fields are errors) as one of the supported
// kinds and validates it.
func Decode(raw []byte) (*Settings, error) {
	var tm metav1.TypeMeta
	if err := kjson.UnmarshalCaseSensitivePreserveInts(raw, &tm); err != nil {
		return nil, fmt.Errorf("decode opaque config: %w", err)
	}
	switch tm.APIVersion {
	case APIVersion:
		if tm.Kind != Kind {
			return nil, fmt.Errorf("kind: %q is not supported in %s, want %q", tm.Kind, APIVersion, Kind)
		}
		var c GpuConfig
		if err := strict(raw, &c, Kind); err != nil {
			return nil, err
		}
		return c.settings()
	case NVIDIAAPIVersion:
		return decodeNVIDIA(tm.Kind, raw)
	}
	return nil, fmt.Errorf("apiVersion: %q is not supported, want %q or %q", tm.APIVersion, APIVersion, NVIDIAAPIVersion)
}

// strict decodes raw into v, refusing unknown and duplicate fields.
func strict(raw []byte, v any, kind string) error {
	errs, err := kjson.UnmarshalStrict(raw, v)
	if err != nil {
		return fmt.Errorf("decode %s: %w", kind, err)
	}
	if len(errs) > 0 {
		return fmt.Errorf("decode %s: %w", kind, errors.Join(errs...))
	}
	return nil
}
