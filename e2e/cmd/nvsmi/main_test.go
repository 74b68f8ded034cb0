package main

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"

	"github.com/neuronetes/neuronetes/driver/cdi"
)

func desc(name string, d cdi.Description) string {
	raw, _ := json.Marshal(d)
	return cdi.DescriptionEnv(name) + "=" + string(raw)
}

func TestList(t *testing.T) {
	tests := []struct {
		name string
		env  []string
		want string
		code int
	}{
		{"none", []string{"PATH=/bin"}, "No devices found.\n", 6},
		{"two gpus", []string{
			desc("gpu-3", cdi.Description{Index: 3, ProductName: "NVIDIA A100", UUID: "GPU-b"}),
			desc("gpu-1", cdi.Description{Index: 1, ProductName: "NVIDIA A100", UUID: "GPU-a"}),
		}, "GPU 0: NVIDIA A100 (UUID: GPU-a)\nGPU 1: NVIDIA A100 (UUID: GPU-b)\n", 0},
		{"mig devices of one parent", []string{
			desc("gpu-7-mig-2g-10gb-p0", cdi.Description{Index: 7, ProductName: "NVIDIA A100", UUID: "GPU-p", MIGUUID: "MIG-2", Profile: "2g.10gb"}),
			desc("gpu-7-mig-1g-5gb-p2", cdi.Description{Index: 7, ProductName: "NVIDIA A100", UUID: "GPU-p", MIGUUID: "MIG-1", Profile: "1g.5gb"}),
		}, "GPU 0: NVIDIA A100 (UUID: GPU-p)\n  MIG 1g.5gb      Device  0: (UUID: MIG-1)\n  MIG 2g.10gb     Device  1: (UUID: MIG-2)\n", 0},
	}
	for _, tc := range tests {
		var out bytes.Buffer
		if code := run([]string{"-L"}, tc.env, &out); code != tc.code || out.String() != tc.want {
			t.Errorf("%s: exit %d output\n%s\nwant exit %d\n%s", tc.name, code, out.String(), tc.code, tc.want)
		}
	}
	var out bytes.Buffer
	if code := run([]string{"-q"}, nil, &out); code != 2 || !strings.Contains(out.String(), "only -L") {
		t.Errorf("unknown flag: %d %s", code, out.String())
	}
}
