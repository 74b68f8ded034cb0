package webhook

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// CAKeyFile is the CA's private key in a shared certificate Secret.
const CAKeyFile = "ca.key"

// Lifetimes of the shared pair. A CA is replaced when a third of its life is left, and its
// successor joins the bundle beside it; a serving certificate is replaced when a third of its life
// is left, by the newest CA, so it always chains to a CA that the caBundle already holds.
const (
	sharedCAValidity   = 10 * 365 * 24 * time.Hour
	sharedCertValidity = 365 * 24 * time.Hour
)

// CertSecret keeps the webhook's CA and serving key pair in one Secret that every controller
// replica shares, and writes it into each replica's certificate directory, from which the
// webhook servers reload it. Any replica may create the Secret when it is missing (the create is
// atomic: one wins, the others read its pair); only the leader rotates it (Rotate), with the
// Secret's resourceVersion as a guard. Invariant: the caBundle (ca.crt) always holds the CA of the
// serving certificate, before any replica serves it.
type CertSecret struct {
	// Client reads and writes the Secret directly (not from a cache).
	Client client.Client
	// Key names the Secret.
	Key types.NamespacedName
	// Hosts the serving certificate covers (DNS names or IPs).
	Hosts []string
	// Dir receives tls.crt, tls.key and ca.crt.
	Dir string
	// Now is the clock (default time.Now).
	Now func() time.Time
}

func (c *CertSecret) now() time.Time {
	if c.Now != nil {
		return c.Now()
	}
	return time.Now()
}

// Ensure makes the Secret hold a valid pair, creating it when missing; with rotate it also renews
// what is due (the leader's job). It writes the pair into Dir and returns the CA bundle.
func (c *CertSecret) Ensure(ctx context.Context, rotate bool) ([]byte, error) {
	for attempt := 0; ; attempt++ {
		var sec corev1.Secret
		err := c.Client.Get(ctx, c.Key, &sec)
		switch {
		case apierrors.IsNotFound(err):
			data, err := renew(nil, c.Hosts, c.now())
			if err != nil {
				return nil, err
			}
			sec = corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: c.Key.Name, Namespace: c.Key.Namespace,
				Labels: map[string]string{"app.kubernetes.io/component": "webhook-tls"}}, Type: corev1.SecretTypeOpaque, Data: data}
			if err := c.Client.Create(ctx, &sec); apierrors.IsAlreadyExists(err) && attempt < 3 {
				continue // another replica created it first: use its pair
			} else if err != nil {
				return nil, fmt.Errorf("create secret %s: %w", c.Key, err)
			}
			klog.FromContext(ctx).Info("Webhook CA and serving certificate created", "secret", c.Key)
		case err != nil:
			return nil, fmt.Errorf("get secret %s: %w", c.Key, err)
		case rotate || !usable(sec.Data, c.Hosts, c.now()):
			data, err := renew(sec.Data, c.Hosts, c.now())
			if err != nil {
				return nil, err
			}
			if !equalData(data, sec.Data) {
				sec.Data = data
				if err := c.Client.Update(ctx, &sec); apierrors.IsConflict(err) && attempt < 3 {
					continue // changed meanwhile: look again
				} else if err != nil {
					return nil, fmt.Errorf("update secret %s: %w", c.Key, err)
				}
				klog.FromContext(ctx).Info("Webhook certificates renewed", "secret", c.Key)
			}
		}
		if err := writePair(c.Dir, sec.Data); err != nil {
			return nil, err
		}
		return sec.Data[CAFile], nil
	}
}

// Sync copies the Secret's pair into Dir when it changed (every replica, on an interval).
func (c *CertSecret) Sync(ctx context.Context) ([]byte, error) {
	var sec corev1.Secret
	if err := c.Client.Get(ctx, c.Key, &sec); err != nil {
		return nil, fmt.Errorf("get secret %s: %w", c.Key, err)
	}
	if !usable(sec.Data, c.Hosts, c.now()) {
		return nil, fmt.Errorf("secret %s holds no usable pair for %v", c.Key, c.Hosts)
	}
	return sec.Data[CAFile], writePair(c.Dir, sec.Data)
}

// usable reports whether data holds a serving pair for hosts that chains to its bundle and is
// valid now (not whether it is due for renewal).
func usable(data map[string][]byte, hosts []string, now time.Time) bool {
	leaf, err := servingLeaf(data)
	if err != nil {
		return false
	}
	return verifies(leaf, data[CAFile], hosts, now)
}

func servingLeaf(data map[string][]byte) (*x509.Certificate, error) {
	pair, err := tls.X509KeyPair(data[CertFile], data[KeyFile])
	if err != nil {
		return nil, err
	}
	return x509.ParseCertificate(pair.Certificate[0])
}

func verifies(leaf *x509.Certificate, bundle []byte, hosts []string, at time.Time) bool {
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(bundle) {
		return false
	}
	for _, h := range hosts {
		if _, err := leaf.Verify(x509.VerifyOptions{DNSName: h, Roots: pool, CurrentTime: at}); err != nil {
			return false
		}
	}
	return true
}

// due reports whether a certificate valid over [from, until] has a third of its life left at now.
func due(from, until, now time.Time) bool {
	return until.Sub(now) < until.Sub(from)/3
}

// renew returns data with what is missing, invalid or due replaced: the CA (its successor is
// added to the bundle, expired CAs leave it) and the serving pair (issued by the newest CA).
func renew(data map[string][]byte, hosts []string, now time.Time) (map[string][]byte, error) {
	caCert, caKey, err := parseCA(data)
	bundle := liveCerts(data[CAFile], now)
	if err != nil || due(caCert.NotBefore, caCert.NotAfter, now) {
		if caCert, caKey, err = newCA(now); err != nil {
			return nil, err
		}
		bundle = append([]*x509.Certificate{caCert}, bundle...)
	}
	out := map[string][]byte{CAFile: encodeCerts(bundle), CertFile: data[CertFile], KeyFile: data[KeyFile]}
	keyDER, err := x509.MarshalECPrivateKey(caKey)
	if err != nil {
		return nil, fmt.Errorf("marshal CA key: %w", err)
	}
	out[CAKeyFile] = pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER})
	leaf, lerr := servingLeaf(out)
	if lerr != nil || !verifies(leaf, out[CAFile], hosts, now) || due(leaf.NotBefore, leaf.NotAfter, now) {
		if out[CertFile], out[KeyFile], err = newServing(caCert, caKey, hosts, now); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// parseCA reads the newest CA (the first certificate of ca.crt) and its key.
func parseCA(data map[string][]byte) (*x509.Certificate, *ecdsa.PrivateKey, error) {
	block, _ := pem.Decode(data[CAFile])
	if block == nil {
		return nil, nil, fmt.Errorf("%s: no certificate", CAFile)
	}
	cert, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		return nil, nil, err
	}
	kb, _ := pem.Decode(data[CAKeyFile])
	if kb == nil {
		return nil, nil, fmt.Errorf("%s: no key", CAKeyFile)
	}
	key, err := x509.ParseECPrivateKey(kb.Bytes)
	if err != nil {
		return nil, nil, err
	}
	if pub, ok := cert.PublicKey.(*ecdsa.PublicKey); !ok || !pub.Equal(&key.PublicKey) {
		return nil, nil, fmt.Errorf("%s does not match %s", CAKeyFile, CAFile)
	}
	return cert, key, nil
}

// liveCerts returns the CA certificates of a PEM bundle that are still valid at now.
func liveCerts(bundle []byte, now time.Time) []*x509.Certificate {
	var out []*x509.Certificate
	for rest := bundle; ; {
		var block *pem.Block
		block, rest = pem.Decode(rest)
		if block == nil {
			return out
		}
		if c, err := x509.ParseCertificate(block.Bytes); err == nil && now.Before(c.NotAfter) && c.IsCA {
			out = append(out, c)
		}
	}
}

func encodeCerts(certs []*x509.Certificate) []byte {
	var b bytes.Buffer
	for _, c := range certs {
		_ = pem.Encode(&b, &pem.Block{Type: "CERTIFICATE", Bytes: c.Raw})
	}
	return b.Bytes()
}

func newCA(now time.Time) (*x509.Certificate, *ecdsa.PrivateKey, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, fmt.Errorf("generate CA key: %w", err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: serial(), Subject: pkix.Name{CommonName: "neuronetes-webhook-ca"},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(sharedCAValidity),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, nil, fmt.Errorf("create CA certificate: %w", err)
	}
	cert, err := x509.ParseCertificate(der)
	return cert, key, err
}

func newServing(ca *x509.Certificate, caKey *ecdsa.PrivateKey, hosts []string, now time.Time) (certPEM, keyPEM []byte, err error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, fmt.Errorf("generate serving key: %w", err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: serial(), Subject: pkix.Name{CommonName: hosts[0]},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(sharedCertValidity),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	for _, h := range hosts {
		if ip := net.ParseIP(h); ip != nil {
			tmpl.IPAddresses = append(tmpl.IPAddresses, ip)
		} else {
			tmpl.DNSNames = append(tmpl.DNSNames, h)
		}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
	if err != nil {
		return nil, nil, fmt.Errorf("create serving certificate: %w", err)
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return nil, nil, err
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER}), nil
}

func equalData(a, b map[string][]byte) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if !bytes.Equal(v, b[k]) {
			return false
		}
	}
	return true
}

// writePair writes the serving pair and the bundle into dir, each file replaced atomically (a
// temporary file renamed over it), and only when its content changed; the CA key stays in the
// Secret.
func writePair(dir string, data map[string][]byte) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("cert dir %s: %w", dir, err)
	}
	// The key before the certificate: a watcher that reloads on the certificate's change finds
	// the matching key in place (controller-runtime's certwatcher reloads both on either event).
	for _, name := range []string{KeyFile, CertFile, CAFile} {
		p := filepath.Join(dir, name)
		if old, err := os.ReadFile(p); err == nil && bytes.Equal(old, data[name]) {
			continue
		}
		tmp, err := os.CreateTemp(dir, "."+name+"-*")
		if err != nil {
			return err
		}
		if _, err := tmp.Write(data[name]); err != nil {
			tmp.Close()
			os.Remove(tmp.Name())
			return err
		}
		if err := tmp.Close(); err != nil {
			os.Remove(tmp.Name())
			return err
		}
		if err := os.Rename(tmp.Name(), p); err != nil {
			os.Remove(tmp.Name())
			return fmt.Errorf("write %s: %w", p, err)
		}
	}
	return nil
}
