package webhook

import (
	"bytes"
	"context"
	"crypto/x509"
	"encoding/pem"
	"os"
	"path/filepath"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
)

func secretClient(t *testing.T) client.Client {
	s := runtime.NewScheme()
	if err := corev1.AddToScheme(s); err != nil {
		t.Fatal(err)
	}
	return fake.NewClientBuilder().WithScheme(s).Build()
}

func certsIn(t *testing.T, b []byte) []*x509.Certificate {
	t.Helper()
	var out []*x509.Certificate
	for {
		var block *pem.Block
		block, b = pem.Decode(b)
		if block == nil {
			return out
		}
		c, err := x509.ParseCertificate(block.Bytes)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, c)
	}
}

// TestCertSecretTwoReplicas: two replicas starting against one Secret end up with one CA and one
// serving pair, the second replica changing nothing; both certificate directories verify against
// the one caBundle.
func TestCertSecretTwoReplicas(t *testing.T) {
	c := secretClient(t)
	key := types.NamespacedName{Namespace: "nn", Name: "webhook-tls"}
	hosts := []string{"svc.nn.svc", "svc.nn.svc.cluster.local"}
	a := &CertSecret{Client: c, Key: key, Hosts: hosts, Dir: t.TempDir()}
	b := &CertSecret{Client: c, Key: key, Hosts: hosts, Dir: t.TempDir()}
	caA, err := a.Ensure(context.Background(), false)
	if err != nil {
		t.Fatal(err)
	}
	var before corev1.Secret
	_ = c.Get(context.Background(), key, &before)
	caB, err := b.Ensure(context.Background(), false)
	if err != nil {
		t.Fatal(err)
	}
	var after corev1.Secret
	_ = c.Get(context.Background(), key, &after)
	if !bytes.Equal(caA, caB) || before.ResourceVersion != after.ResourceVersion {
		t.Fatalf("the second replica changed the CA or the Secret (rv %s -> %s)", before.ResourceVersion, after.ResourceVersion)
	}
	for _, dir := range []string{a.Dir, b.Dir} {
		crt, err := os.ReadFile(filepath.Join(dir, CertFile))
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(crt, after.Data[CertFile]) {
			t.Fatalf("%s holds another serving certificate than the Secret", dir)
		}
		if _, err := os.Stat(filepath.Join(dir, CAKeyFile)); err == nil {
			t.Fatal("the CA key was written to the certificate directory")
		}
		leaf := certsIn(t, crt)[0]
		if !verifies(leaf, caA, hosts, time.Now()) {
			t.Fatalf("%s's certificate does not verify against the caBundle", dir)
		}
	}
	// The leader's rotation with nothing due changes nothing.
	if _, err := a.Ensure(context.Background(), true); err != nil {
		t.Fatal(err)
	}
	var again corev1.Secret
	_ = c.Get(context.Background(), key, &again)
	if again.ResourceVersion != after.ResourceVersion {
		t.Fatal("a rotation with nothing due rewrote the Secret")
	}
}

// TestCertSecretRotation walks the pair's life: the serving certificate is renewed by the same CA
// when a third of its life is left; the CA's successor joins the bundle beside it while the old
// serving certificate still verifies; the expired CA leaves the bundle; a changed host set gets a
// new serving certificate at once. At every step the served certificate verifies against the
// bundle the webhook configuration would carry.
func TestCertSecretRotation(t *testing.T) {
	c := secretClient(t)
	key := types.NamespacedName{Namespace: "nn", Name: "webhook-tls"}
	hosts := []string{"svc.nn.svc"}
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	cs := &CertSecret{Client: c, Key: key, Hosts: hosts, Dir: t.TempDir(), Now: func() time.Time { return now }}
	get := func() map[string][]byte {
		var s corev1.Secret
		if err := c.Get(context.Background(), key, &s); err != nil {
			t.Fatal(err)
		}
		return s.Data
	}
	step := func(name string, wantNewCA, wantNewCert bool, wantBundle int) {
		t.Helper()
		before := get()
		if _, err := cs.Ensure(context.Background(), true); err != nil {
			t.Fatal(err)
		}
		after := get()
		newCA := !bytes.Equal(certsIn(t, before[CAFile])[0].Raw, certsIn(t, after[CAFile])[0].Raw)
		newCert := !bytes.Equal(before[CertFile], after[CertFile])
		if newCA != wantNewCA || newCert != wantNewCert || len(certsIn(t, after[CAFile])) != wantBundle {
			t.Fatalf("%s: new CA %v (want %v), new serving certificate %v (want %v), bundle of %d (want %d)",
				name, newCA, wantNewCA, newCert, wantNewCert, len(certsIn(t, after[CAFile])), wantBundle)
		}
		if !usable(after, cs.Hosts, now) {
			t.Fatalf("%s: the served certificate does not verify against the bundle", name)
		}
	}
	if _, err := cs.Ensure(context.Background(), true); err != nil {
		t.Fatal(err)
	}
	now = now.Add(200 * 24 * time.Hour)
	step("serving certificate at 55% of its life", false, false, 1)
	now = now.Add(50 * 24 * time.Hour)
	step("serving certificate with under a third left", false, true, 1)
	now = now.Add(7 * 365 * 24 * time.Hour)
	step("CA with under a third left", true, true, 2) // the old serving certificate had expired too
	now = now.Add(200 * 24 * time.Hour)
	step("old CA still valid", false, false, 2)
	now = now.Add(4 * 365 * 24 * time.Hour)
	step("old CA expired", false, true, 1)
	cs.Hosts = []string{"svc.nn.svc", "svc.nn.svc.cluster.local"}
	step("a new host", false, true, 1)
}
