package cluster

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"time"
)

// apiServerURL is where every client, on the host or in a pod, reaches the
// apiserver; pods also reach it as the kubernetes Service.
func apiServerURL() string {
	return "https://" + net.JoinHostPort(NodeIP, strconv.Itoa(APIServerPort))
}

// componentCerts lists every certificate the cluster needs.
func componentCerts() []certSpec {
	local := []net.IP{net.ParseIP("127.0.0.1")}
	return []certSpec{
		{name: "apiserver", cn: "kube-apiserver", server: true,
			dns: []string{"localhost", "kubernetes", "kubernetes.default", "kubernetes.default.svc", "kubernetes.default.svc.cluster.local"},
			ips: []net.IP{net.ParseIP("127.0.0.1"), net.ParseIP(KubernetesServiceIP), net.ParseIP(NodeIP)}},
		{name: "apiserver-kubelet-client", cn: "kube-apiserver-kubelet-client", orgs: []string{"system:masters"}, client: true},
		{name: "etcd-server", cn: "etcd", server: true, client: true, dns: []string{"localhost"}, ips: local},
		{name: "admin", cn: "neuronetes-admin", orgs: []string{"system:masters"}, client: true},
		{name: "scheduler", cn: "system:kube-scheduler", client: true},
		{name: "controller-manager", cn: "system:kube-controller-manager", client: true},
		{name: "kubelet-client", cn: "system:node:" + NodeName, orgs: []string{"system:nodes"}, client: true},
		{name: "kubelet-server", cn: NodeName, server: true, dns: []string{NodeName, "localhost"}, ips: []net.IP{net.ParseIP(NodeIP), net.ParseIP("127.0.0.1")}},
		{name: "kwok", cn: "kwok-controller", orgs: []string{"system:masters"}, client: true},
		{name: "front-proxy-client", cn: "front-proxy-client", client: true},
		// kube-proxy's user has the built-in system:node-proxier binding.
		{name: "kube-proxy", cn: "system:kube-proxy", client: true},
		{name: "coredns", cn: coreDNSUser, client: true},
	}
}

func startEtcd(p Paths) error {
	if _, ok := runningPid(p, "etcd"); ok {
		return nil
	}
	url := "http://127.0.0.1:" + strconv.Itoa(EtcdPort)
	_, err := startProcess(p, "etcd", nil, p.Binary("etcd"),
		"--name=neuronetes", "--data-dir="+p.Etcd,
		"--listen-client-urls="+url, "--advertise-client-urls="+url,
		"--listen-peer-urls=http://127.0.0.1:"+strconv.Itoa(EtcdPeerPort),
		"--initial-advertise-peer-urls=http://127.0.0.1:"+strconv.Itoa(EtcdPeerPort),
		"--initial-cluster=neuronetes=http://127.0.0.1:"+strconv.Itoa(EtcdPeerPort),
		"--listen-metrics-urls=", "--unsafe-no-fsync=true", "--quota-backend-bytes=8589934592",
		"--log-level=warn")
	if err != nil {
		return err
	}
	return waitHTTP(p, "etcd", url+"/health", nil, 30*time.Second)
}

// FeatureGates are the gates the apiserver, controller-manager and scheduler run with: the
// Workload API and gang scheduling (GenericWorkload, beta and off by default in 1.37) and
// PodGroup topology constraints (TopologyAwareWorkloadScheduling, alpha), which AgentClass
// spec.gang needs (docs/placement.md).
const FeatureGates = "GenericWorkload=true,TopologyAwareWorkloadScheduling=true"

// RuntimeConfig serves scheduling.k8s.io/v1beta1 (Workload, PodGroup), a beta API version that
// is off by default.
const RuntimeConfig = "scheduling.k8s.io/v1beta1=true"

func startAPIServer(p Paths, pk *pki) error {
	if _, ok := runningPid(p, "kube-apiserver"); ok {
		return nil
	}
	// The apiserver binds the bridge address and advertises it: the lease
	// endpoint reconciler keeps it as the kubernetes Service's endpoint, so
	// pods reach 10.96.0.1:443 through kube-proxy. Webhooks behind a Service
	// are called at its ClusterIP, which kube-proxy also serves on the host.
	_, err := startProcess(p, "kube-apiserver", nil, p.Binary("kube-apiserver"),
		"--etcd-servers=http://127.0.0.1:"+strconv.Itoa(EtcdPort),
		"--bind-address="+NodeIP, "--advertise-address="+NodeIP,
		"--secure-port="+strconv.Itoa(APIServerPort),
		"--tls-cert-file="+pk.path("apiserver.crt"), "--tls-private-key-file="+pk.path("apiserver.key"),
		"--client-ca-file="+pk.path("ca.crt"),
		"--kubelet-client-certificate="+pk.path("apiserver-kubelet-client.crt"),
		"--kubelet-client-key="+pk.path("apiserver-kubelet-client.key"),
		"--kubelet-preferred-address-types=InternalIP,Hostname",
		"--service-account-issuer=https://kubernetes.default.svc.cluster.local",
		"--service-account-key-file="+pk.path("sa.pub"),
		"--service-account-signing-key-file="+pk.path("sa.key"),
		"--service-cluster-ip-range="+ServiceCIDR,
		"--authorization-mode=Node,RBAC",
		"--allow-privileged=true",
		"--requestheader-client-ca-file="+pk.path("ca.crt"),
		"--requestheader-allowed-names=front-proxy-client",
		"--requestheader-username-headers=X-Remote-User",
		"--requestheader-group-headers=X-Remote-Group",
		"--requestheader-extra-headers-prefix=X-Remote-Extra-",
		"--proxy-client-cert-file="+pk.path("front-proxy-client.crt"),
		"--proxy-client-key-file="+pk.path("front-proxy-client.key"),
		"--max-requests-inflight=2000", "--max-mutating-requests-inflight=1000",
		"--profiling=true", "--v=1", "--feature-gates="+FeatureGates, "--runtime-config="+RuntimeConfig)
	if err != nil {
		return err
	}
	return waitHTTP(p, "kube-apiserver", apiServerURL()+"/readyz", pk, 90*time.Second)
}

func startControllerManager(p Paths, pk *pki) error {
	if _, ok := runningPid(p, "kube-controller-manager"); ok {
		return nil
	}
	kc := filepath.Join(p.Local, "kubeconfigs", "controller-manager.kubeconfig")
	if err := writeKubeconfig(kc, pk, "controller-manager", apiServerURL()); err != nil {
		return err
	}
	_, err := startProcess(p, "kube-controller-manager", nil, p.Binary("kube-controller-manager"),
		"--kubeconfig="+kc, "--authentication-kubeconfig="+kc, "--authorization-kubeconfig="+kc,
		"--bind-address=127.0.0.1", "--secure-port="+strconv.Itoa(ControllerManagerPort),
		"--service-account-private-key-file="+pk.path("sa.key"),
		"--root-ca-file="+pk.path("ca.crt"),
		"--cluster-signing-cert-file="+pk.path("ca.crt"), "--cluster-signing-key-file="+pk.path("ca.key"),
		"--use-service-account-credentials=true",
		"--service-cluster-ip-range="+ServiceCIDR,
		"--leader-elect=false", "--kube-api-qps=200", "--kube-api-burst=400",
		"--v=1", "--feature-gates="+FeatureGates)
	if err != nil {
		return err
	}
	return waitHTTP(p, "kube-controller-manager", "https://127.0.0.1:"+strconv.Itoa(ControllerManagerPort)+"/healthz", pk, 60*time.Second)
}

func startScheduler(p Paths, pk *pki, qps int) error {
	if _, ok := runningPid(p, "kube-scheduler"); ok {
		return nil
	}
	kc := filepath.Join(p.Local, "kubeconfigs", "scheduler.kubeconfig")
	if err := writeKubeconfig(kc, pk, "scheduler", apiServerURL()); err != nil {
		return err
	}
	args := []string{"--kubeconfig=" + kc, "--authentication-kubeconfig=" + kc, "--authorization-kubeconfig=" + kc,
		"--bind-address=127.0.0.1", "--secure-port=" + strconv.Itoa(SchedulerPort),
		"--leader-elect=false", "--v=1", "--feature-gates=" + FeatureGates}
	// The stock client limits (50/100) make binding wait in the scheduler's
	// own rate limiter at about 13 pods/s; scale runs need far more.
	if qps <= 0 {
		qps = 5000
	}
	args = append(args, "--kube-api-qps="+strconv.Itoa(qps), "--kube-api-burst="+strconv.Itoa(2*qps))
	if _, err := startProcess(p, "kube-scheduler", nil, p.Binary("kube-scheduler"), args...); err != nil {
		return err
	}
	return waitHTTP(p, "kube-scheduler", "https://127.0.0.1:"+strconv.Itoa(SchedulerPort)+"/healthz", pk, 60*time.Second)
}

// adminTLS returns a TLS config that trusts the cluster CA and presents the
// admin client certificate.
func adminTLS(pk *pki) (*tls.Config, error) {
	cert, err := tls.LoadX509KeyPair(pk.path("admin.crt"), pk.path("admin.key"))
	if err != nil {
		return nil, fmt.Errorf("loading admin certificate: %w", err)
	}
	pool := x509.NewCertPool()
	pool.AddCert(pk.caCert)
	// Scheduler and controller-manager serve self-signed certificates.
	return &tls.Config{Certificates: []tls.Certificate{cert}, RootCAs: pool, InsecureSkipVerify: true}, nil //nolint:gosec // loopback health probes only
}

// waitHTTP polls url until it answers 200, the process dies, or the timeout
// passes; errors carry the tail of the component's log.
func waitHTTP(p Paths, name, url string, pk *pki, timeout time.Duration) error {
	client := &http.Client{Timeout: 2 * time.Second}
	if pk != nil {
		tc, err := adminTLS(pk)
		if err != nil {
			return err
		}
		client.Transport = &http.Transport{TLSClientConfig: tc}
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	var last string
	for {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		resp, err := client.Do(req)
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
			last = resp.Status
		} else {
			last = err.Error()
		}
		if _, ok := runningPid(p, name); !ok {
			return fmt.Errorf("%s exited during start-up; last lines of %s:\n%s", name,
				filepath.Join(p.Logs, name+".log"), logTail(p, name, 20))
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%s not ready at %s after %s (last: %s); last lines of its log:\n%s",
				name, url, timeout, last, logTail(p, name, 20))
		case <-time.After(250 * time.Millisecond):
		}
	}
}

func removeFile(path string) { _ = os.Remove(path) }
