package nvml

import (
	"crypto/sha256"
	"encoding/hex"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"

	gonvml "github.com/NVIDIA/go-nvml/pkg/nvml"
	"k8s.io/dynamic-resource-allocation/deviceattribute"

	"github.com/neuronetes/neuronetes/driver/model"
)

// pciePlacement returns the PCIe root and NUMA node of a GPU: from the mock's synthetic topology, or
// from NVML and sysfs for real GPUs. Unknown values are "" and -1.
func (b *Backend) pciePlacement(d gonvml.Device, busID string) (string, int) {
	if b.mock != nil {
		return b.mock.pcieRoot(busID), b.mock.numaNode(busID)
	}
	root, numa := "", -1
	if busID == "" {
		return root, numa
	}
	if attr, err := deviceattribute.GetPCIeRootAttributeByPCIBusID(busID); err == nil && attr.Value.StringValue != nil {
		root = *attr.Value.StringValue
	}
	if n, ret := d.GetNumaNodeId(); ret == gonvml.SUCCESS && n >= 0 {
		numa = n
	} else if raw, err := os.ReadFile(filepath.Join("/sys/bus/pci/devices", busID, "numa_node")); err == nil {
		if n, err := strconv.Atoi(strings.TrimSpace(string(raw))); err == nil && n >= 0 {
			numa = n
		}
	}
	return root, numa
}

// links describes the active NVLinks of one GPU: the bus ids of directly linked GPUs and of the
// NVSwitches it is linked to.
type links struct {
	gpus     map[string]bool
	switches map[string]bool
}

func readLinks(d gonvml.Device) links {
	l := links{gpus: map[string]bool{}, switches: map[string]bool{}}
	for i := 0; i < gonvml.NVLINK_MAX_LINKS; i++ {
		state, ret := d.GetNvLinkState(i)
		if ret == gonvml.ERROR_INVALID_ARGUMENT {
			break
		}
		if ret != gonvml.SUCCESS || state != gonvml.FEATURE_ENABLED {
			continue
		}
		remote, ret := d.GetNvLinkRemotePciInfo(i)
		if ret != gonvml.SUCCESS {
			continue
		}
		bus := normalizeBusID(int8String(remote.BusId[:]))
		kind, ret := d.GetNvLinkRemoteDeviceType(i)
		if ret != gonvml.SUCCESS {
			continue
		}
		switch kind {
		case gonvml.NVLINK_DEVICE_TYPE_SWITCH:
			l.switches[bus] = true
		case gonvml.NVLINK_DEVICE_TYPE_GPU:
			l.gpus[bus] = true
		}
	}
	return l
}

// assignNVLinkDomains sets NVLinkDomain on every GPU that belongs to a group of at least two GPUs
// that are all NVLinked to each other (directly or through a common NVSwitch). Invariant: two GPUs
// share a domain value only if every pair in the domain is linked; the value is a pure function of
// the members' UUIDs, so it is stable across restarts.
func assignNVLinkDomains(gpus []model.GPUInfo, devs []gonvml.Device) {
	n := len(gpus)
	ls := make([]links, n)
	for i := range devs {
		ls[i] = readLinks(devs[i])
	}
	linked := func(i, j int) bool {
		if ls[i].gpus[gpus[j].PCIBusID] || ls[j].gpus[gpus[i].PCIBusID] {
			return true
		}
		for s := range ls[i].switches {
			if ls[j].switches[s] {
				return true
			}
		}
		return false
	}
	// Union-find over the link graph.
	parent := make([]int, n)
	for i := range parent {
		parent[i] = i
	}
	var find func(int) int
	find = func(i int) int {
		if parent[i] != i {
			parent[i] = find(parent[i])
		}
		return parent[i]
	}
	for i := 0; i < n; i++ {
		for j := i + 1; j < n; j++ {
			if linked(i, j) {
				parent[find(i)] = find(j)
			}
		}
	}
	groups := map[int][]int{}
	for i := 0; i < n; i++ {
		groups[find(i)] = append(groups[find(i)], i)
	}
	for _, members := range groups {
		if len(members) < 2 {
			continue
		}
		clique := true
		for a := 0; a < len(members) && clique; a++ {
			for c := a + 1; c < len(members); c++ {
				if !linked(members[a], members[c]) {
					clique = false
					break
				}
			}
		}
		if !clique {
			continue
		}
		uuids := make([]string, 0, len(members))
		for _, m := range members {
			uuids = append(uuids, gpus[m].UUID)
		}
		sort.Strings(uuids)
		sum := sha256.Sum256([]byte(strings.Join(uuids, ",")))
		domain := "nvl-" + hex.EncodeToString(sum[:6])
		for _, m := range members {
			gpus[m].NVLinkDomain = domain
		}
	}
}
