// Package images builds the project's Go commands into OCI images with
// go-containerregistry and imports them into the local containerd, so pods
// can run them with imagePullPolicy: Never and no registry.
package images

import (
	"archive/tar"
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
)

// Registry is the fake registry host of every locally built image.
const Registry = "neuronetes.local"

// CABundle is where Go's crypto/x509 (and most TLS stacks) look for the system roots on Linux; every
// image carries the build host's bundle there, so HTTPS to S3, OIDC issuers or model URLs works from
// images that have no other file system.
const CABundle = "/etc/ssl/certs/ca-certificates.crt"

// NonRootUser is the image USER of every image but those in rootImages (distroless' nonroot).
const NonRootUser = "65532:65532"

// rootImages run as root: the driver and the node agent own root-owned host directories (kubelet
// plugin dirs, CDI specs, the weights cache), and the nvidia-smi stand-in replaces NVIDIA's sample
// images, which run as root.
var rootImages = map[string]bool{"driver": true, "nodeagent": true, "nvsmi": true}

// User returns the image USER of the component name.
func User(name string) string {
	if rootImages[name] {
		return "0:0"
	}
	return NonRootUser
}

// Ref returns the image reference for a component name.
func Ref(component string) string { return Registry + "/" + component + ":dev" }

// Spec describes one image.
type Spec struct {
	// Name is the component name; the image is Ref(Name).
	Name string
	// MainPkg is the Go main package to build, relative to Dir (e.g. ./cmd/driver).
	MainPkg string
	// Dir is the module directory to build in.
	Dir string
	// Cgo builds a statically linked cgo binary (needed by go-nvml).
	Cgo bool
	// Files maps destination paths in the image to host source paths.
	Files map[string]string
}

// Option adjusts a Spec.
type Option func(*Spec)

// WithCgo builds a statically linked cgo binary.
func WithCgo() Option { return func(s *Spec) { s.Cgo = true } }

// WithDir builds in the module at dir (a nested module such as hack/tools/scheduler).
func WithDir(dir string) Option { return func(s *Spec) { s.Dir = dir } }

// WithFiles adds files to the image: destination path to host path.
func WithFiles(files map[string]string) Option {
	return func(s *Spec) {
		if s.Files == nil {
			s.Files = map[string]string{}
		}
		for k, v := range files {
			s.Files[k] = v
		}
	}
}

// BuildBinary compiles spec.MainPkg for linux/amd64 into outDir and returns
// the binary's path.
func BuildBinary(ctx context.Context, spec Spec, outDir string) (string, error) {
	if err := os.MkdirAll(outDir, 0o755); err != nil {
		return "", err
	}
	out := filepath.Join(outDir, spec.Name)
	args := []string{"build", "-trimpath", "-o", out}
	env := append(os.Environ(), "GOOS=linux", "GOARCH=amd64")
	if spec.Cgo {
		env = append(env, "CGO_ENABLED=1")
		args = append(args, "-tags", "netgo,osusergo", "-ldflags", "-s -w -linkmode external -extldflags -static")
	} else {
		env = append(env, "CGO_ENABLED=0")
		args = append(args, "-ldflags", "-s -w")
	}
	args = append(args, spec.MainPkg)
	cmd := exec.CommandContext(ctx, "go", args...)
	cmd.Dir = spec.Dir
	cmd.Env = env
	if b, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("go build %s: %w\n%s", spec.MainPkg, err, b)
	}
	return out, nil
}

// Image assembles a single-layer image holding the binary at /<name> (its
// entrypoint), the host's CA bundle at CABundle, plus spec.Files; it runs as User(spec.Name).
func Image(spec Spec, binary string) (v1.Image, error) {
	if _, err := os.Stat(CABundle); err != nil {
		return nil, fmt.Errorf("CA bundle for the image: %w (install ca-certificates)", err)
	}
	files := map[string]string{"/" + spec.Name: binary, CABundle: CABundle}
	for k, v := range spec.Files {
		files[k] = v
	}
	layer, err := layerFromFiles(files)
	if err != nil {
		return nil, err
	}
	img, err := mutate.AppendLayers(empty.Image, layer)
	if err != nil {
		return nil, fmt.Errorf("appending layer: %w", err)
	}
	cfg, err := img.ConfigFile()
	if err != nil {
		return nil, err
	}
	cfg = cfg.DeepCopy()
	cfg.OS, cfg.Architecture = "linux", "amd64"
	cfg.Config.Entrypoint = []string{"/" + spec.Name}
	cfg.Config.Env = []string{"PATH=/usr/local/bin:/usr/bin:/bin"}
	cfg.Config.WorkingDir = "/"
	cfg.Config.User = User(spec.Name)
	cfg.Created = v1.Time{Time: time.Unix(0, 0)}
	return mutate.ConfigFile(img, cfg)
}

// layerFromFiles writes a deterministic tar of the files (mode 0755 for the
// entrypoint, 0644 otherwise) with /tmp as a writable directory.
func layerFromFiles(files map[string]string) (v1.Layer, error) {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	dirs := map[string]bool{}
	addDir := func(d string) error {
		if d == "/" || d == "." || dirs[d] {
			return nil
		}
		dirs[d] = true
		mode := int64(0o755)
		if d == "/tmp" {
			mode = 0o1777
		}
		return tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: strings.TrimPrefix(d, "/") + "/", Mode: mode, ModTime: time.Unix(0, 0)})
	}
	if err := addDir("/tmp"); err != nil {
		return nil, err
	}
	dsts := make([]string, 0, len(files))
	for d := range files {
		dsts = append(dsts, d)
	}
	sort.Strings(dsts)
	for _, dst := range dsts {
		src := files[dst]
		var parents []string
		for d := filepath.Dir(dst); d != "/" && d != "."; d = filepath.Dir(d) {
			parents = append([]string{d}, parents...)
		}
		for _, d := range parents {
			if err := addDir(d); err != nil {
				return nil, err
			}
		}
		b, err := os.ReadFile(src)
		if err != nil {
			return nil, fmt.Errorf("reading %s for image path %s: %w", src, dst, err)
		}
		st, err := os.Stat(src)
		if err != nil {
			return nil, err
		}
		mode := int64(0o644)
		if st.Mode()&0o111 != 0 {
			mode = 0o755
		}
		hdr := &tar.Header{Typeflag: tar.TypeReg, Name: strings.TrimPrefix(dst, "/"), Mode: mode, Size: int64(len(b)), ModTime: time.Unix(0, 0)}
		if err := tw.WriteHeader(hdr); err != nil {
			return nil, err
		}
		if _, err := tw.Write(b); err != nil {
			return nil, err
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	data := buf.Bytes()
	return tarball.LayerFromOpener(func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(data)), nil })
}

// WriteTarball writes img as a docker-style tarball tagged Ref(name).
func WriteTarball(img v1.Image, component, path string) error {
	tag, err := name.NewTag(Ref(component))
	if err != nil {
		return fmt.Errorf("image tag for %s: %w", component, err)
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	if err := tarball.WriteToFile(path, tag, img); err != nil {
		return fmt.Errorf("writing image tarball %s: %w", path, err)
	}
	return nil
}

// Import loads an image tarball into containerd's k8s.io namespace through
// the ctr binary.
func Import(ctx context.Context, ctr, socket, tarPath string) error {
	cmd := exec.CommandContext(ctx, ctr, "--address", socket, "--namespace", "k8s.io", "images", "import", "--no-unpack=false", tarPath)
	if b, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("importing %s into containerd: %w\n%s", tarPath, err, b)
	}
	return nil
}

// BuildAndImport builds spec, writes its tarball under workDir and imports
// it into containerd. It returns the image reference.
func BuildAndImport(ctx context.Context, spec Spec, workDir, ctr, socket string) (string, error) {
	bin, err := BuildBinary(ctx, spec, filepath.Join(workDir, "bin"))
	if err != nil {
		return "", err
	}
	img, err := Image(spec, bin)
	if err != nil {
		return "", err
	}
	tarPath := filepath.Join(workDir, spec.Name+".tar")
	if err := WriteTarball(img, spec.Name, tarPath); err != nil {
		return "", err
	}
	if err := Import(ctx, ctr, socket, tarPath); err != nil {
		return "", err
	}
	return Ref(spec.Name), nil
}
