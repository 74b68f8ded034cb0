package cluster

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	criv1 "k8s.io/cri-api/pkg/apis/runtime/v1"
)

func containerdConfig(p Paths) string {
	return fmt.Sprintf(`version = 3
root = %q
state = %q

[grpc]
  address = %q

[ttrpc]
  address = %q

[metrics]
  address = ""

[plugins."io.containerd.cri.v1.images"]
  snapshotter = "overlayfs"
  [plugins."io.containerd.cri.v1.images".pinned_images]
    sandbox = %q

[plugins."io.containerd.cri.v1.runtime"]
  enable_cdi = true
  cdi_spec_dirs = ["/etc/cdi", "/var/run/cdi"]
  restrict_oom_score_adj = true
  netns_mounts_under_state_dir = true
  [plugins."io.containerd.cri.v1.runtime".containerd]
    default_runtime_name = "runc"
    [plugins."io.containerd.cri.v1.runtime".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.cri.v1.runtime".containerd.runtimes.runc.options]
        SystemdCgroup = false
  [plugins."io.containerd.cri.v1.runtime".cni]
    bin_dirs = [%q]
    conf_dir = %q

[plugins."io.containerd.grpc.v1.cri"]
  stream_server_address = "127.0.0.1"
  stream_server_port = "0"
`, filepath.Join(p.Containerd, "root"), filepath.Join(p.Containerd, "state"),
		p.ContainerdSocket(), p.ContainerdSocket()+".ttrpc", PauseImage, cniBinDir, p.CNIConf)
}

func startContainerd(p Paths) error {
	return startContainerdAs(p, "containerd", containerdConfig(p))
}

// startContainerdAs starts a containerd process called name (its pid file
// and log) with the configuration text config, whose root, state and socket
// are those of p, and waits until its CRI API answers.
func startContainerdAs(p Paths, name, config string) error {
	if _, ok := runningPid(p, name); ok {
		return nil
	}
	if err := os.MkdirAll(p.Containerd, 0o755); err != nil {
		return err
	}
	cfg := filepath.Join(p.Containerd, "config.toml")
	if err := os.WriteFile(cfg, []byte(config), 0o644); err != nil {
		return fmt.Errorf("writing containerd config: %w", err)
	}
	// The runc shim must be on PATH for containerd.
	env := []string{"PATH=" + p.Bin + ":" + os.Getenv("PATH")}
	if _, err := startProcess(p, name, env, p.Binary("containerd"), "--config", cfg); err != nil {
		return err
	}
	deadline := time.Now().Add(60 * time.Second)
	for time.Now().Before(deadline) {
		if fileExists(p.ContainerdSocket()) {
			break
		}
		if _, ok := runningPid(p, name); !ok {
			return fmt.Errorf("%s exited; last lines of its log:\n%s", name, logTail(p, name, 20))
		}
		time.Sleep(100 * time.Millisecond)
	}
	// The socket exists before the CRI plugin serves: the kubelet refuses to start against
	// "server is not initialized yet", so wait until the runtime API answers.
	err := waitCRI(p.ContainerdSocket(), deadline)
	if err == nil {
		return nil
	}
	return fmt.Errorf("%s's CRI API at %s did not answer: %w; last lines of its log:\n%s", name, p.ContainerdSocket(), err, logTail(p, name, 20))
}

// waitCRI calls the CRI runtime service's Version on socket until it answers or deadline.
func waitCRI(socket string, deadline time.Time) error {
	conn, err := grpc.NewClient("unix://"+socket, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return err
	}
	defer conn.Close()
	rs := criv1.NewRuntimeServiceClient(conn)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		_, err = rs.Version(ctx, &criv1.VersionRequest{})
		cancel()
		if err == nil || time.Now().After(deadline) {
			return err
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// kubeletConfig is the node's KubeletConfiguration. Pods' nameserver is
// CoreDNS on the node address. makeIPTablesUtilChains is off: kube-proxy runs
// in nftables mode, nothing here reads the iptables hint chains, and the host
// keeps no iptables rules after cluster-down.
func kubeletConfig(p Paths, pk *pki) string {
	return kubeletConfigFor(firstNode(p), pk)
}

// kubeletNode is what differs between the cluster's real nodes: name,
// address, ports, serving certificate, runtime and directories.
type kubeletNode struct {
	name        string // Node name and the process name suffix
	proc        string // kubelet process name (pid file, log)
	ip          string // InternalIP; the kubelet serves there
	port        int    // kubelet API port on ip
	healthzPort int    // kubelet healthz port on 127.0.0.1
	serverCert  string // file stem of the serving certificate
	clientCert  string // file stem of the client certificate (CN system:node:<name>)
	socket      string // containerd socket
	configDir   string // config and pod logs
	rootDir     string // --root-dir
	labels      string // --node-labels
	taint       string // key of a NoSchedule taint the node registers with; empty: none
}

// firstNode is the kubelet every cluster runs.
func firstNode(p Paths) kubeletNode {
	return kubeletNode{name: NodeName, proc: "kubelet", ip: NodeIP, port: KubeletPort, healthzPort: KubeletHealthzPort,
		serverCert: "kubelet-server", clientCert: "kubelet-client", socket: p.ContainerdSocket(), configDir: p.Kubelet,
		rootDir: KubeletRootDir, labels: "neuronetes.io/gpu-node=true"}
}

// kubeletConfigFor renders n's KubeletConfiguration.
func kubeletConfigFor(n kubeletNode, pk *pki) string {
	return fmt.Sprintf(`apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
address: %s
port: %d
healthzBindAddress: 127.0.0.1
healthzPort: %d
readOnlyPort: 0
authentication:
  anonymous:
    enabled: false
  webhook:
    enabled: true
  x509:
    clientCAFile: %s
authorization:
  mode: Webhook
tlsCertFile: %s
tlsPrivateKeyFile: %s
containerRuntimeEndpoint: unix://%s
cgroupDriver: cgroupfs
cgroupsPerQOS: false
enforceNodeAllocatable: []
failSwapOn: false
failCgroupV1: false
podLogsDir: %s
clusterDomain: %s
clusterDNS: [%s]
resolvConf: /etc/resolv.conf
makeIPTablesUtilChains: false
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
evictionHard:
  memory.available: "1Mi"
  nodefs.available: "1%%"
  imagefs.available: "1%%"
localStorageCapacityIsolation: false
serializeImagePulls: false
maxPods: 110
nodeStatusUpdateFrequency: 5s
syncFrequency: 10s
fileCheckFrequency: 10s
shutdownGracePeriod: 0s
`, n.ip, n.port, n.healthzPort, pk.path("ca.crt"), pk.path(n.serverCert+".crt"), pk.path(n.serverCert+".key"),
		n.socket, filepath.Join(n.configDir, "pod-logs"), ClusterDomain, NodeIP) + registerTaint(n.taint)
}

// registerTaint is the KubeletConfiguration's registerWithTaints for a NoSchedule taint key.
func registerTaint(key string) string {
	if key == "" {
		return ""
	}
	return fmt.Sprintf("registerWithTaints:\n- {key: %q, value: \"true\", effect: NoSchedule}\n", key)
}

func startKubelet(p Paths, pk *pki) error {
	return startKubeletFor(p, pk, firstNode(p))
}

// startKubeletFor starts n's kubelet and waits until its healthz answers.
func startKubeletFor(p Paths, pk *pki, n kubeletNode) error {
	if _, ok := runningPid(p, n.proc); ok {
		return nil
	}
	if err := os.MkdirAll(filepath.Join(n.configDir, "pod-logs"), 0o755); err != nil {
		return err
	}
	cfg := filepath.Join(n.configDir, "config.yaml")
	if err := os.WriteFile(cfg, []byte(kubeletConfigFor(n, pk)), 0o644); err != nil {
		return fmt.Errorf("writing kubelet config: %w", err)
	}
	kc := filepath.Join(p.Local, "kubeconfigs", n.proc+".kubeconfig")
	if err := writeKubeconfig(kc, pk, n.clientCert, apiServerURL()); err != nil {
		return err
	}
	for _, d := range []string{filepath.Join(n.rootDir, "plugins_registry"), filepath.Join(n.rootDir, "plugins"), "/var/run/cdi"} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return fmt.Errorf("creating %s: %w", d, err)
		}
	}
	env := []string{"PATH=" + p.Bin + ":" + os.Getenv("PATH")}
	if _, err := startProcess(p, n.proc, env, p.Binary("kubelet"),
		"--config="+cfg, "--kubeconfig="+kc, "--root-dir="+n.rootDir,
		"--hostname-override="+n.name, "--node-ip="+n.ip,
		"--node-labels="+n.labels, "--v=1"); err != nil {
		return err
	}
	return waitHTTP(p, n.proc, "http://127.0.0.1:"+strconv.Itoa(n.healthzPort)+"/healthz", nil, 60*time.Second)
}
