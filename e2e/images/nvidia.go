package images

import (
	"context"
	"fmt"
	"os/exec"
	"path/filepath"
	"strings"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
)

// NVIDIAImageNames are the images NVIDIA's GPU quickstart specs run; ImportNVSMI imports the
// nvidia-smi stand-in under each, so those specs run unchanged in the local cluster.
var NVIDIAImageNames = []string{"docker.io/library/ubuntu:22.04", "docker.io/library/ubuntu:24.04", "nvcr.io/nvidia/cuda:12.2.0-base-ubuntu22.04"}

// Busybox is the static busybox the stand-in's /bin/sh is (package busybox-static).
const Busybox = "/bin/busybox"

// CheckBusybox returns an error unless Busybox is a statically linked binary.
func CheckBusybox() error {
	out, err := exec.Command("file", "-L", Busybox).CombinedOutput()
	if err != nil || !strings.Contains(string(out), "statically linked") {
		return fmt.Errorf("%s is not a static busybox (%s %v): apt-get install busybox-static (hack/test-deps.d/20-driver.sh)", Busybox, strings.TrimSpace(string(out)), err)
	}
	return nil
}

// ImportNVSMI builds e2e/cmd/nvsmi of the module at root (nvidia-smi -L from the CDI device
// descriptions, /bin/bash running busybox's shell), writes it under workDir as one tarball tagged
// with every NVIDIAImageNames entry and imports that into containerd. Needs CheckBusybox.
func ImportNVSMI(ctx context.Context, root, workDir, ctr, socket string) error {
	if err := CheckBusybox(); err != nil {
		return err
	}
	spec := Spec{Name: "nvsmi", MainPkg: "./e2e/cmd/nvsmi", Dir: root}
	bin, err := BuildBinary(ctx, spec, filepath.Join(workDir, "bin"))
	if err != nil {
		return err
	}
	spec.Files = map[string]string{"/usr/bin/nvidia-smi": bin, "/bin/bash": bin, "/bin/sh": Busybox, "/bin/busybox": Busybox}
	img, err := Image(spec, bin)
	if err != nil {
		return err
	}
	refs := map[name.Reference]v1.Image{}
	for _, n := range NVIDIAImageNames {
		tag, err := name.NewTag(n)
		if err != nil {
			return fmt.Errorf("image name %s: %w", n, err)
		}
		refs[tag] = img
	}
	tarPath := filepath.Join(workDir, "nvsmi.tar")
	if err := tarball.MultiRefWriteToFile(tarPath, refs); err != nil {
		return fmt.Errorf("writing %s: %w", tarPath, err)
	}
	return Import(ctx, ctr, socket, tarPath)
}
