package images

import (
	"archive/tar"
	"io"
	"os"
	"path/filepath"
	"testing"
)

// TestImageCarriesCABundleAndUser: every image holds the CA bundle at the path Go reads, and runs
// non-root unless it must own root-owned host directories.
func TestImageCarriesCABundleAndUser(t *testing.T) {
	bin := filepath.Join(t.TempDir(), "bin")
	if err := os.WriteFile(bin, []byte("#!/bin/true\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ name, user string }{
		{"gateway", NonRootUser}, {"sidecar", NonRootUser}, {"demo-agent", NonRootUser}, {Scheduler, NonRootUser},
		{"driver", "0:0"}, {"nodeagent", "0:0"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			img, err := Image(Spec{Name: tc.name}, bin)
			if err != nil {
				t.Fatal(err)
			}
			cfg, err := img.ConfigFile()
			if err != nil {
				t.Fatal(err)
			}
			if cfg.Config.User != tc.user {
				t.Errorf("USER = %q, want %q", cfg.Config.User, tc.user)
			}
			layers, err := img.Layers()
			if err != nil || len(layers) != 1 {
				t.Fatalf("layers %d, %v", len(layers), err)
			}
			rc, err := layers[0].Uncompressed()
			if err != nil {
				t.Fatal(err)
			}
			defer rc.Close()
			want, _ := os.ReadFile(CABundle)
			tr := tar.NewReader(rc)
			for {
				h, err := tr.Next()
				if err == io.EOF {
					t.Fatalf("no %s in the image", CABundle)
				}
				if err != nil {
					t.Fatal(err)
				}
				if "/"+h.Name == CABundle {
					got, _ := io.ReadAll(tr)
					if len(got) == 0 || string(got) != string(want) {
						t.Errorf("%s holds %d bytes, want the host's %d", CABundle, len(got), len(want))
					}
					return
				}
			}
		})
	}
}

// TestCommandSpec: cmd/<name> builds in the main module (the driver with cgo); neuronetes-scheduler
// builds its own module, hack/tools/scheduler, whose main package must be there.
func TestCommandSpec(t *testing.T) {
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name, dir, pkg string
		cgo            bool
	}{
		{"gateway", root, "./cmd/gateway", false},
		{"driver", root, "./cmd/driver", true},
		{Scheduler, filepath.Join(root, "hack", "tools", "scheduler"), ".", false},
	} {
		s := CommandSpec(root, tc.name)
		if s.Name != tc.name || s.Dir != tc.dir || s.MainPkg != tc.pkg || s.Cgo != tc.cgo {
			t.Errorf("CommandSpec(%s) = %+v, want dir %s, package %s, cgo %v", tc.name, s, tc.dir, tc.pkg, tc.cgo)
		}
		if _, err := os.Stat(filepath.Join(s.Dir, s.MainPkg, "main.go")); err != nil {
			t.Errorf("%s: %v", tc.name, err)
		}
	}
}
