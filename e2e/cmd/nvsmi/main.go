// Command nvsmi is the e2e test image's nvidia-smi: from the devices a container received through
// the driver's CDI spec (one description variable per device, driver/cdi.DescriptionEnv) it
// answers `nvidia-smi -L` as nvidia-smi does: one line per GPU, indented lines for its MIG
// devices. Installed as /bin/bash too, it runs busybox's shell, so that NVIDIA's specs
// (`bash -c "nvidia-smi -L; trap 'exit 0' TERM; sleep 9999 & wait"`) run unchanged.
package main

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"syscall"

	"github.com/neuronetes/neuronetes/driver/cdi"
)

func main() {
	switch filepath.Base(os.Args[0]) {
	case "bash", "sh":
		// busybox's ash, with its applets (sleep, ls, cat) built in.
		err := syscall.Exec("/bin/busybox", append([]string{"sh"}, os.Args[1:]...), os.Environ())
		fmt.Fprintln(os.Stderr, "bash:", err)
		os.Exit(127)
	}
	os.Exit(run(os.Args[1:], os.Environ(), os.Stdout))
}

// gpu is one GPU a container sees, with the MIG devices of it that it received.
type gpu struct {
	index       int
	productName string
	uuid        string
	whole       bool
	migs        []cdi.Description
}

// run implements `nvidia-smi -L`; other arguments are refused (exit 2), no device is "No devices
// found." (exit 6), as nvidia-smi answers.
func run(args, env []string, out io.Writer) int {
	if len(args) != 1 || args[0] != "-L" && args[0] != "--list-gpus" {
		fmt.Fprintf(out, "nvsmi: only -L is implemented (got %q)\n", strings.Join(args, " "))
		return 2
	}
	gpus := devices(env)
	if len(gpus) == 0 {
		fmt.Fprintln(out, "No devices found.")
		return 6
	}
	for i, g := range gpus {
		fmt.Fprintf(out, "GPU %d: %s (UUID: %s)\n", i, g.productName, g.uuid)
		for j, m := range g.migs {
			fmt.Fprintf(out, "  MIG %-11s Device %2d: (UUID: %s)\n", m.Profile, j, m.MIGUUID)
		}
	}
	return 0
}

// devices groups the described devices by GPU, in GPU index order.
func devices(env []string) []*gpu {
	byUUID := map[string]*gpu{}
	for _, kv := range env {
		k, v, _ := strings.Cut(kv, "=")
		if !strings.HasPrefix(k, cdi.DescriptionPrefix) || !strings.HasSuffix(k, "_DESC") {
			continue
		}
		var d cdi.Description
		if err := json.Unmarshal([]byte(v), &d); err != nil {
			continue
		}
		g := byUUID[d.UUID]
		if g == nil {
			g = &gpu{index: d.Index, productName: d.ProductName, uuid: d.UUID}
			byUUID[d.UUID] = g
		}
		if d.MIGUUID == "" {
			g.whole = true
		} else {
			g.migs = append(g.migs, d)
		}
	}
	out := make([]*gpu, 0, len(byUUID))
	for _, g := range byUUID {
		sort.Slice(g.migs, func(i, j int) bool { return g.migs[i].MIGUUID < g.migs[j].MIGUUID })
		out = append(out, g)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].index < out[j].index })
	return out
}
