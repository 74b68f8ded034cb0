package images

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// Scheduler is the image name of neuronetes-scheduler, which is built from its own module
// (hack/tools/scheduler: kube-scheduler from the pinned k8s.io/kubernetes with NeuroNetes' Score
// plugins), not from cmd/.
const Scheduler = "neuronetes-scheduler"

// CommandSpec returns the Spec of the project command cmd/<name> in the
// module at root, or of neuronetes-scheduler for the name Scheduler. Commands
// that link go-nvml (the driver) need cgo.
func CommandSpec(root, name string) Spec {
	if name == Scheduler {
		return Spec{Name: name, MainPkg: ".", Dir: filepath.Join(root, "hack", "tools", "scheduler")}
	}
	return Spec{Name: name, MainPkg: "./cmd/" + name, Dir: root, Cgo: name == "driver"}
}

// Commands returns the Specs of every command under root/cmd that runs as a
// pod: all but the benchmark (-bench) and simulator (-sim) commands.
func Commands(root string) ([]Spec, error) {
	ents, err := os.ReadDir(filepath.Join(root, "cmd"))
	if err != nil {
		return nil, fmt.Errorf("listing commands: %w", err)
	}
	var out []Spec
	for _, e := range ents {
		if e.IsDir() && !strings.HasSuffix(e.Name(), "-bench") && !strings.HasSuffix(e.Name(), "-sim") {
			out = append(out, CommandSpec(root, e.Name()))
		}
	}
	return out, nil
}

// RestrictedSecurityContext is a container securityContext (YAML flow) that meets Pod Security
// "restricted" with the images of this package (their USER is non-root but for root images).
const RestrictedSecurityContext = `{runAsNonRoot: true, allowPrivilegeEscalation: false, readOnlyRootFilesystem: true, capabilities: {drop: ["ALL"]}, seccompProfile: {type: RuntimeDefault}}`

// SmokePod is the manifest of the pod named smoke that runs the smoke image ref
// on node with SMOKE_GREETING set to greeting; the image prints the greeting
// and "neuronetes smoke pod running". It meets Pod Security "restricted".
func SmokePod(node, ref, greeting string) string {
	return fmt.Sprintf(`
apiVersion: v1
kind: Pod
metadata:
  name: smoke
spec:
  nodeName: %s
  terminationGracePeriodSeconds: 1
  containers:
  - name: smoke
    image: %s
    imagePullPolicy: Never
    securityContext: %s
    env:
    - name: SMOKE_GREETING
      value: %s
`, node, ref, RestrictedSecurityContext, greeting)
}
