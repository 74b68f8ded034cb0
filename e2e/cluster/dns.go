package cluster

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"time"

	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// coreDNSUser is the user name in CoreDNS's client certificate; the
// ClusterRole of the same name grants what the kubernetes plugin reads.
const coreDNSUser = "system:coredns"

// coreDNSRole is the kubernetes plugin's access, as in CoreDNS's own
// deployment manifests: Services, EndpointSlices and Namespaces (list and
// watch); pods are answered from their names ("pods insecure"), not watched.
func coreDNSRole() *rbacv1.ClusterRole {
	return &rbacv1.ClusterRole{
		ObjectMeta: metav1.ObjectMeta{Name: coreDNSUser},
		Rules: []rbacv1.PolicyRule{
			{APIGroups: []string{""}, Resources: []string{"services", "namespaces"}, Verbs: []string{"list", "watch"}},
			{APIGroups: []string{"discovery.k8s.io"}, Resources: []string{"endpointslices"}, Verbs: []string{"list", "watch"}},
		},
	}
}

// ensureCoreDNSRBAC creates (or updates) the ClusterRole and its binding.
func ensureCoreDNSRBAC(ctx context.Context, cs kubernetes.Interface) error {
	role := coreDNSRole()
	rbac := cs.RbacV1()
	if _, err := rbac.ClusterRoles().Create(ctx, role, metav1.CreateOptions{}); apierrors.IsAlreadyExists(err) {
		_, err = rbac.ClusterRoles().Update(ctx, role, metav1.UpdateOptions{})
		if err != nil {
			return fmt.Errorf("updating ClusterRole %s: %w", role.Name, err)
		}
	} else if err != nil {
		return fmt.Errorf("creating ClusterRole %s: %w", role.Name, err)
	}
	binding := &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: coreDNSUser},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: role.Name},
		Subjects:   []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: rbacv1.UserKind, Name: coreDNSUser}},
	}
	if _, err := rbac.ClusterRoleBindings().Create(ctx, binding, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("creating ClusterRoleBinding %s: %w", binding.Name, err)
	}
	return nil
}

// corefile serves cluster.local (and reverse lookups of pod and Service
// addresses) from the apiserver and forwards every other name to the host's
// resolvers. It listens only on the bridge address; readiness (the
// kubernetes plugin has synced) is on loopback.
func corefile(kubeconfig string) string {
	return fmt.Sprintf(`.:%d {
    bind %s
    errors
    ready 127.0.0.1:%d
    kubernetes %s in-addr.arpa ip6.arpa {
        kubeconfig %s local
        pods insecure
        fallthrough in-addr.arpa ip6.arpa
        ttl 5
    }
    cache 5
    loop
    forward . /etc/resolv.conf
}
`, DNSPort, NodeIP, CoreDNSReadyPort, ClusterDomain, kubeconfig)
}

// startCoreDNS starts CoreDNS on the bridge address and waits until it is
// ready and answers for the kubernetes Service.
func startCoreDNS(ctx context.Context, p Paths, pk *pki, cs kubernetes.Interface) error {
	if _, ok := runningPid(p, "coredns"); ok {
		return nil
	}
	if err := ensureCoreDNSRBAC(ctx, cs); err != nil {
		return err
	}
	kc := filepath.Join(p.Local, "kubeconfigs", "coredns.kubeconfig")
	if err := writeKubeconfig(kc, pk, "coredns", apiServerURL()); err != nil {
		return err
	}
	dir := filepath.Join(p.Local, "coredns")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	cf := filepath.Join(dir, "Corefile")
	if err := os.WriteFile(cf, []byte(corefile(kc)), 0o644); err != nil {
		return fmt.Errorf("writing Corefile: %w", err)
	}
	if _, err := startProcess(p, "coredns", nil, p.Binary("coredns"), "-conf", cf); err != nil {
		return err
	}
	if err := waitHTTP(p, "coredns", "http://127.0.0.1:"+strconv.Itoa(CoreDNSReadyPort)+"/ready", nil, 60*time.Second); err != nil {
		return err
	}
	return waitResolves(ctx, p, "kubernetes.default.svc."+ClusterDomain, KubernetesServiceIP, 30*time.Second)
}

// waitResolves asks CoreDNS on the bridge address for name until it answers
// want.
func waitResolves(ctx context.Context, p Paths, name, want string, timeout time.Duration) error {
	r := &net.Resolver{PreferGo: true, Dial: func(ctx context.Context, network, _ string) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, network, net.JoinHostPort(NodeIP, strconv.Itoa(DNSPort)))
	}}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	var last string
	for {
		addrs, err := r.LookupHost(ctx, name)
		if err == nil {
			for _, a := range addrs {
				if a == want {
					return nil
				}
			}
			last = fmt.Sprintf("answered %v", addrs)
		} else {
			last = err.Error()
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("CoreDNS on %s:%d does not resolve %s to %s after %s (%s); last lines of its log:\n%s",
				NodeIP, DNSPort, name, want, timeout, last, logTail(p, "coredns", 20))
		case <-time.After(250 * time.Millisecond):
		}
	}
}
