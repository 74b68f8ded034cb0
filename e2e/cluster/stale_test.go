package cluster

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
)

func TestClearStaleTables(t *testing.T) {
	listing := "table inet filter\ntable ip kube-proxy\ntable ip6 kube-proxy\ntable ip kube-network-policies-xt\ntable inet kube-network-policies\n"
	tests := []struct {
		name    string
		running map[string]bool
		nftErr  error
		want    []string
		wantErr string
	}{
		{name: "killed run: every cluster table goes", running: map[string]bool{"bash": true},
			want: []string{"ip kube-proxy", "ip6 kube-proxy", "ip kube-network-policies-xt", "inet kube-network-policies"}},
		{name: "a live kube-proxy keeps its tables", running: map[string]bool{"kube-proxy": true},
			want: []string{"ip kube-network-policies-xt", "inet kube-network-policies"}},
		{name: "a live enforcer keeps its tables", running: map[string]bool{"kube-network-policies": true},
			want: []string{"ip kube-proxy", "ip6 kube-proxy"}},
		{name: "both live: nothing goes", running: map[string]bool{"kube-proxy": true, "kube-network-policies": true}},
		{name: "a failed delete names the table", running: map[string]bool{}, nftErr: errors.New("exit status 1"),
			wantErr: "ip kube-proxy that a killed run left"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var deleted []string
			h := hostProbe{nft: func(args ...string) (string, error) {
				if args[0] == "list" {
					return listing, nil
				}
				if tt.nftErr != nil {
					return "busy", tt.nftErr
				}
				deleted = append(deleted, args[2]+" "+args[3])
				return "", nil
			}}
			err := clearStaleTables(h, tt.running, func(string, ...any) {})
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("err = %v, want it to contain %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(deleted, tt.want) {
				t.Errorf("deleted %q, want %q", deleted, tt.want)
			}
		})
	}
}

func TestRunningBinariesSeesThisProcess(t *testing.T) {
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	if name := filepath.Base(exe); !runningBinaries()[name] {
		t.Errorf("runningBinaries() misses this test's own binary %s", name)
	}
}

// TestClusterProcsLeavesDevTools: cluster-down stops and reports a
// component of the tools directory, never a helm another checkout runs.
func TestClusterProcsLeavesDevTools(t *testing.T) {
	sleep, err := exec.LookPath("sleep")
	if err != nil {
		t.Fatal(err)
	}
	root := t.TempDir()
	p := NewPaths(root)
	pids := map[string]int{}
	for _, name := range []string{"helm", "etcd"} {
		dir := filepath.Join(p.Local, "tools", "v1")
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		b, err := os.ReadFile(sleep)
		if err != nil {
			t.Fatal(err)
		}
		bin := filepath.Join(dir, name)
		if err := os.WriteFile(bin, b, 0o755); err != nil {
			t.Fatal(err)
		}
		cmd := exec.Command(bin, "30")
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
		pids[name] = cmd.Process.Pid
	}
	got := clusterProcs(p)
	if !slices.Contains(got, pids["etcd"]) || slices.Contains(got, pids["helm"]) {
		t.Errorf("clusterProcs = %v; want etcd's pid %d and not helm's %d", got, pids["etcd"], pids["helm"])
	}
}
