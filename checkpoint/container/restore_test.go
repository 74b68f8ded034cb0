package container

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	specs "github.com/opencontainers/runtime-spec/specs-go"
)

func TestAdaptSpec(t *testing.T) {
	existing := t.TempDir()
	src := func() *specs.Spec {
		return &specs.Spec{
			Linux: &specs.Linux{
				CgroupsPath: "/k8s.io/oldid",
				Namespaces: []specs.LinuxNamespace{
					{Type: specs.PIDNamespace},
					{Type: specs.NetworkNamespace, Path: "/proc/111/ns/net"},
					{Type: specs.IPCNamespace, Path: "/proc/111/ns/ipc"},
					{Type: specs.UTSNamespace, Path: "/proc/111/ns/uts"},
					{Type: specs.MountNamespace},
				},
			},
			Mounts: []specs.Mount{
				{Destination: "/proc", Type: "proc", Source: "proc"},
				{Destination: "/etc/hosts", Type: "bind", Source: "/gone/pod-a/etc-hosts", Options: []string{"rbind"}},
				{Destination: "/data", Type: "bind", Source: existing, Options: []string{"rbind"}},
			},
			// The source pod's CRI annotations: its sandbox names the runc shim group.
			Annotations: map[string]string{"io.kubernetes.cri.sandbox-id": "oldsandbox", "io.containerd.runc.v2.group": "oldsandbox",
				"io.kubernetes.cri.container-name": "agent"},
		}
	}
	host := &specs.Spec{
		Linux: &specs.Linux{
			CgroupsPath: "/k8s.io/hostid",
			Namespaces: []specs.LinuxNamespace{
				{Type: specs.NetworkNamespace, Path: "/proc/222/ns/net"},
				{Type: specs.IPCNamespace, Path: "/proc/222/ns/ipc"},
				{Type: specs.UTSNamespace, Path: "/proc/222/ns/uts"},
			},
		},
		Mounts: []specs.Mount{{Destination: "/etc/hosts", Type: "bind", Source: "/pods/warm/etc-hosts"}},
	}
	tests := []struct {
		name    string
		mutate  func(s, h *specs.Spec)
		wantErr string
	}{
		{name: "joins host namespaces, cgroup parent and mounts, not the source pod's shim"},
		{name: "missing mount on host", mutate: func(s, _ *specs.Spec) {
			s.Mounts = append(s.Mounts, specs.Mount{Destination: "/var/run/secrets", Type: "bind", Source: "/gone/secret"})
		}, wantErr: "/var/run/secrets"},
		{name: "host without netns", mutate: func(_, h *specs.Spec) { h.Linux.Namespaces = nil }, wantErr: ErrNoHost.Error()},
		{name: "the host's mount wins over a source that still exists", mutate: func(s, _ *specs.Spec) {
			s.Mounts[1].Source = existing // the source pod's etc-hosts, not yet removed by its kubelet
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s := src()
			h := *host
			h.Linux = &specs.Linux{CgroupsPath: host.Linux.CgroupsPath, Namespaces: append([]specs.LinuxNamespace(nil), host.Linux.Namespaces...)}
			if tc.mutate != nil {
				tc.mutate(s, &h)
			}
			err := adaptSpec(s, &h, "newid")
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err = %v, want one naming %q", err, tc.wantErr)
				}
				if tc.wantErr == ErrNoHost.Error() && !errors.Is(err, ErrNoHost) {
					t.Errorf("err %v does not wrap ErrNoHost", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			want := map[specs.LinuxNamespaceType]string{
				specs.PIDNamespace: "", specs.NetworkNamespace: "/proc/222/ns/net", specs.IPCNamespace: "/proc/222/ns/ipc",
				specs.UTSNamespace: "/proc/222/ns/uts", specs.MountNamespace: "",
			}
			for _, ns := range s.Linux.Namespaces {
				if ns.Path != want[ns.Type] {
					t.Errorf("namespace %s path %q, want %q", ns.Type, ns.Path, want[ns.Type])
				}
			}
			if s.Linux.CgroupsPath != "/k8s.io/newid" {
				t.Errorf("cgroups path %q", s.Linux.CgroupsPath)
			}
			if s.Mounts[1].Source != "/pods/warm/etc-hosts" || s.Mounts[2].Source != existing || s.Mounts[0].Source != "proc" {
				t.Errorf("mounts %+v", s.Mounts)
			}
			// Not the source pod's shim (it is stopped with that pod): a shim of its own.
			for _, a := range shimGroupAnnotations {
				if v, ok := s.Annotations[a]; ok {
					t.Errorf("annotation %s=%q left: the restored task would join the source pod's shim", a, v)
				}
			}
			if s.Annotations["io.kubernetes.cri.container-name"] != "agent" {
				t.Errorf("annotations %v: only the shim group is dropped", s.Annotations)
			}
		})
	}
}

func TestBindResolver(t *testing.T) {
	r := bindResolver([]specs.Mount{
		{Destination: "/proc", Type: "proc", Source: "proc"},
		{Destination: "/models", Type: "bind", Source: "/var/lib/neuronetes/models", Options: []string{"rbind", "ro"}},
		{Destination: "/models/llama", Type: "none", Source: "/mnt/fast/llama", Options: []string{"bind"}},
		{Destination: "/etc/hosts", Type: "bind", Source: "/var/lib/kubelet/pods/p/etc-hosts"},
		{Destination: "/cache", Type: "bind", Source: "relative/dir"},
		{Destination: "/dev/shm", Type: "tmpfs", Source: "shm"},
	})
	tests := []struct {
		path, want string
		ok         bool
	}{
		{"/models/qwen/model.safetensors", "/var/lib/neuronetes/models/qwen/model.safetensors", true},
		{"/models/llama/w.gguf", "/mnt/fast/llama/w.gguf", true}, // the longest destination wins
		{"/models2/w.gguf", "", false},                           // a prefix of the name, not a parent dir
		{"/etc/hosts", "/var/lib/kubelet/pods/p/etc-hosts", true},
		{"/usr/lib/libc.so.6", "", false}, // the image's rootfs
		{"/dev/shm/x", "", false},         // tmpfs
		{"/cache/x", "", false},           // a relative source cannot be placed
		{"/proc/self/maps", "", false},
	}
	for _, tt := range tests {
		t.Run(tt.path, func(t *testing.T) {
			got, ok := r(tt.path)
			if got != tt.want || ok != tt.ok {
				t.Fatalf("resolve(%q) = %q, %v; want %q, %v", tt.path, got, ok, tt.want, tt.ok)
			}
		})
	}
}

// TestDumpWritten: a dump whose images are not where the node agent looks (no inventory.img)
// is an error, not an empty checkpoint.
func TestDumpWritten(t *testing.T) {
	dir := t.TempDir()
	if err := dumpWritten(dir); err == nil || !strings.Contains(err.Error(), "CRIU wrote no images") {
		t.Fatalf("empty images dir: err %v", err)
	}
	if err := dumpWritten(filepath.Join(dir, "missing")); err == nil {
		t.Fatal("missing images dir: no error")
	}
	if err := os.WriteFile(filepath.Join(dir, "inventory.img"), []byte{0}, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := dumpWritten(dir); err != nil {
		t.Fatalf("with inventory.img: %v", err)
	}
}
