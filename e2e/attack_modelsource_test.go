package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"

	"github.com/neuronetes/neuronetes/api/v1alpha1"
	"github.com/neuronetes/neuronetes/e2e/cluster"
	"github.com/neuronetes/neuronetes/internal/testreq"
)

// minioBucketWith starts MinIO on host (reachable from pods at the bridge address) and stores
// each object under the bucket "weights"; it returns the endpoint.
func minioBucketWith(t *testing.T, e *Env, host string, objects map[string][]byte) string {
	t.Helper()
	bin := filepath.Join(e.Root, ".local", "bin", "minio")
	if _, err := os.Stat(bin); err != nil {
		testreq.Tool(t, "minio", "not built (%v): run hack/test-deps.d/10-minio.sh", err)
	}
	endpoint := startMinioE2E(t, bin, host)
	mc, err := minio.New(endpoint, &minio.Options{Creds: credentials.NewStaticV4("nn-e2e", "nn-e2e-secret-key", "")})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if err := mc.MakeBucket(ctx, "weights", minio.MakeBucketOptions{}); err != nil {
		t.Fatal(err)
	}
	for key, data := range objects {
		if _, err := mc.PutObject(ctx, "weights", key, bytes.NewReader(data), int64(len(data)), minio.PutObjectOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	return endpoint
}

// modelCondition returns the status, reason and message of a Model's condition typ.
func modelCondition(u *unstructured.Unstructured, typ string) (status, reason, msg string) {
	conds, _, _ := unstructured.NestedSlice(u.Object, "status", "conditions")
	for _, x := range conds {
		c, _ := x.(map[string]any)
		if c["type"] == typ {
			status, _ = c["status"].(string)
			reason, _ = c["reason"].(string)
			msg, _ = c["message"].(string)
		}
	}
	return status, reason, msg
}

// deployAttackModelSourceSecrets: the node agent (on the nodes where tenant code runs) reads no
// Secret, and Model source credentials reach it only from the controller's endpoint, made from the
// Model's own namespace and answered only for Models used on its node. A tenant of namespace A
// names a Secret that exists only in namespace B: no copy is made, the Model's condition says the
// Secret is missing in A, the node never caches the weights, and B's Secret is unchanged. A's
// Model naming A's own Secret, used by a pod on the node, is cached from S3 with those
// credentials, and its copy goes with the Model. A Model used only on a kwok node is refused to
// the real node's agent (NotUsedOnNode, in its status and to its own token), as is a pod of
// another ServiceAccount on the node (NotNodeAgent).
func deployAttackModelSourceSecrets(t *testing.T, e *Env, r *deployRelease) {
	ctx := context.Background()
	accounts := releaseAccounts(t, e, r)
	own, ownDigest := randomWeights(t, 3<<20+17)
	foreign, foreignDigest := randomWeights(t, 2<<20+5)
	// Registered before the release's pods are gone would be too early: the node agent keeps the
	// warm labels of the entries it holds.
	r.afterUninstall = append(r.afterUninstall, func() {
		deadline := time.Now().Add(time.Minute)
		for time.Now().Before(deadline) {
			l, err := e.Kube.CoreV1().Pods(r.namespace).List(ctx, metav1.ListOptions{LabelSelector: "neuronetes.io/node-pod=nodeagent"})
			if err != nil || len(l.Items) == 0 {
				break
			}
			time.Sleep(time.Second)
		}
		removeWarmLabels(t, e, ownDigest, foreignDigest)
	})
	endpoint := minioBucketWith(t, e, "10.88.0.1", map[string][]byte{"own/model.gguf": own, "foreign/model.gguf": foreign})
	creds := func(name string) string {
		return fmt.Sprintf(`apiVersion: v1
kind: Secret
metadata: {name: %s}
stringData: {accessKeyID: nn-e2e, secretAccessKey: nn-e2e-secret-key, endpoint: "http://%s"}
`, name, endpoint)
	}
	victimNS := e.Namespace(t, "nn-model-b")
	e.Apply(t, victimNS, creds("b-creds"))
	victimBefore, err := e.Kube.CoreV1().Secrets(victimNS).Get(ctx, "b-creds", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	e.Apply(t, r.exampleNS, creds("a-creds"))

	t.Run("NodeAgentReadsTenantSecret", func(t *testing.T) {
		agent := impersonate(t, e, accounts["nodeagent"], map[string][]string{nodeNameExtra: {e.NodeName}})
		for _, key := range []types.NamespacedName{{Namespace: r.exampleNS, Name: "a-creds"}, {Namespace: victimNS, Name: "b-creds"}, {Namespace: "kube-system", Name: "nn-e2e-any"}} {
			_, err := agent.CoreV1().Secrets(key.Namespace).Get(ctx, key.Name, metav1.GetOptions{})
			if !apierrors.IsForbidden(err) {
				t.Errorf("node agent get Secret %s: %v; want Forbidden", key, err)
			}
		}
		_, err := agent.CoreV1().Secrets(r.namespace).List(ctx, metav1.ListOptions{})
		if !apierrors.IsForbidden(err) {
			t.Errorf("node agent list Secrets of the release namespace: %v; want Forbidden", err)
		}
	})

	model := func(name, key, secret, digest string) string {
		return fmt.Sprintf(`apiVersion: neuronetes.io/v1alpha1
kind: Model
metadata: {name: %s}
spec:
  source: {uri: "s3://weights/%s", secretRef: {name: %s}}
  digest: "%s"
  format: gguf
`, name, key, secret, digest)
	}
	remote, remoteDigest := randomWeights(t, 1<<20+3)
	_ = remote // never stored: the node must not get so far as to fetch it
	e.Apply(t, r.exampleNS, model("steal", "foreign/model.gguf", "b-creds", foreignDigest)+"---\n"+model("own", "own/model.gguf", "a-creds", ownDigest)+
		"---\n"+model("remote", "remote/model.gguf", "a-creds", remoteDigest)+
		// The controller answers a node agent only for Models a pod on its node uses: own on the
		// real node, remote on a kwok node only. poser runs as the namespace's default account.
		"---\n"+usingPod("own-user", e.NodeName, "own")+"---\n"+usingPod("remote-user", cluster.KwokNodeName(0), "remote")+
		"---\n"+usingPod("poser", e.NodeName, "own"))
	models := e.Dynamic.Resource(modelGVR).Namespace(r.exampleNS)
	copies := e.Kube.CoreV1().Secrets(r.namespace)

	t.Run("OwnSecretCachesTheWeights", func(t *testing.T) {
		Eventually(t, 2*time.Minute, "Model own Ready on the node from its copied credentials", func() (bool, error) {
			u, err := models.Get(ctx, "own", metav1.GetOptions{})
			if err != nil {
				return false, err
			}
			st, reason, msg := modelCondition(u, v1alpha1.ModelConditionSourceCredentials)
			phase, nmsg := nodeEntry(u, e.NodeName)
			return st == "True" && phase == "Ready", fmt.Errorf("condition %s/%s %q, node phase %q %q", st, reason, msg, phase, nmsg)
		})
		u, err := models.Get(ctx, "own", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		cp, err := copies.Get(ctx, v1alpha1.ModelSourceSecretName(r.exampleNS, "own"), metav1.GetOptions{})
		if err != nil {
			t.Fatalf("the copy of own's credentials: %v", err)
		}
		if cp.Annotations[v1alpha1.ModelSourceUIDAnnotation] != string(u.GetUID()) || string(cp.Data["accessKeyID"]) != "nn-e2e" {
			t.Errorf("copy annotations %v, keys %d", cp.Annotations, len(cp.Data))
		}
	})

	t.Run("ForeignNamespaceSecretIsNotCopied", func(t *testing.T) {
		Eventually(t, time.Minute, "Model steal reports its Secret missing in its own namespace", func() (bool, error) {
			u, err := models.Get(ctx, "steal", metav1.GetOptions{})
			if err != nil {
				return false, err
			}
			st, reason, msg := modelCondition(u, v1alpha1.ModelConditionSourceCredentials)
			phase, nmsg := nodeEntry(u, e.NodeName)
			return st == "False" && reason == "SecretNotFound" && strings.Contains(msg, r.exampleNS+"/b-creds") && phase == "Failed",
				fmt.Errorf("condition %s/%s %q, node phase %q %q", st, reason, msg, phase, nmsg)
		})
		if _, err := copies.Get(ctx, v1alpha1.ModelSourceSecretName(r.exampleNS, "steal"), metav1.GetOptions{}); !apierrors.IsNotFound(err) {
			t.Errorf("a copy was made for steal: %v", err)
		}
		n, err := e.Kube.CoreV1().Nodes().Get(ctx, e.NodeName, metav1.GetOptions{})
		if err != nil || n.Labels[v1alpha1.WarmNodeLabel(foreignDigest)] != "" {
			t.Errorf("the node holds the weights fetched with another namespace's credentials: %v %v", n.Labels, err)
		}
		after, err := e.Kube.CoreV1().Secrets(victimNS).Get(ctx, "b-creds", metav1.GetOptions{})
		if err != nil || after.ResourceVersion != victimBefore.ResourceVersion {
			t.Errorf("victim Secret changed: %v (resourceVersion %s -> %s)", err, victimBefore.ResourceVersion, after.ResourceVersion)
		}
	})

	t.Run("NodeAgentFetchesAnotherNodesModel", func(t *testing.T) {
		deployAttackFetchAnotherNodesModel(t, e, r, remoteDigest)
	})

	t.Run("CopyGoesWithTheModel", func(t *testing.T) {
		if err := models.Delete(ctx, "own", metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		Eventually(t, time.Minute, "copy of own deleted", func() (bool, error) {
			_, err := copies.Get(ctx, v1alpha1.ModelSourceSecretName(r.exampleNS, "own"), metav1.GetOptions{})
			return apierrors.IsNotFound(err), fmt.Errorf("copy: %v", err)
		})
	})
	_ = models.Delete(ctx, "steal", metav1.DeleteOptions{})
	_ = models.Delete(ctx, "remote", metav1.DeleteOptions{})
	for _, p := range []string{"own-user", "remote-user", "poser"} {
		_ = e.Kube.CoreV1().Pods(r.exampleNS).Delete(ctx, p, metav1.DeleteOptions{})
	}
}

// usingPod is a pod bound to node (no scheduler) that uses the Model model by annotation; its
// image is never pulled (it stays Pending on the real node, Running on a kwok node). It meets
// Pod Security restricted.
func usingPod(name, node, model string) string {
	return fmt.Sprintf(`apiVersion: v1
kind: Pod
metadata:
  name: %s
  annotations: {neuronetes.io/model: %s}
spec:
  nodeName: %s
  terminationGracePeriodSeconds: 1
  tolerations: [{operator: Exists}]
  securityContext: {runAsNonRoot: true, runAsUser: 65532, seccompProfile: {type: RuntimeDefault}}
  containers:
    - name: c
      image: neuronetes.local/never-pulled:dev
      imagePullPolicy: Never
      securityContext: {allowPrivilegeEscalation: false, capabilities: {drop: [ALL]}}
`, name, model, node)
}

// removeWarmLabels removes the node's warm labels of digests.
func removeWarmLabels(t *testing.T, e *Env, digests ...string) {
	labels := map[string]any{}
	for _, d := range digests {
		labels[v1alpha1.WarmNodeLabel(d)] = nil
	}
	body, _ := json.Marshal(map[string]any{"metadata": map[string]any{"labels": labels}})
	if _, err := e.Kube.CoreV1().Nodes().Patch(context.Background(), e.NodeName, types.MergePatchType, body, metav1.PatchOptions{}); err != nil {
		t.Logf("cleanup: removing warm labels: %v", err)
	}
}

// deployAttackNodeAgentReadsReleaseSecret is TestDeployLocal's subtest
// AttackNodeAgentReadsReleaseSecret: a compromised node reads the chart's own Secrets of the
// release namespace (webhook TLS, Redis users, checkpoint signing key) by their chart-given names,
// the controller's copy of a tenant Model's credentials, or a Secret named like a copy that the
// controller did not make. The node agent has no Secret right at all (it asks the controller's
// endpoint): every get is Forbidden, and the Secrets tried are unchanged.
func deployAttackNodeAgentReadsReleaseSecret(t *testing.T, e *Env, r *deployRelease) {
	ctx := context.Background()
	accounts := releaseAccounts(t, e, r)
	lookalike := v1alpha1.ModelSourceSecretName(r.exampleNS, "not-a-model")
	e.Apply(t, r.namespace, fmt.Sprintf("apiVersion: v1\nkind: Secret\nmetadata: {name: %s}\nstringData: {token: planted}\n", lookalike))
	// The controller copies the credentials whether or not the fetch can work.
	e.Apply(t, r.exampleNS, `apiVersion: v1
kind: Secret
metadata: {name: rs-creds}
stringData: {accessKeyID: nn-e2e, secretAccessKey: nn-e2e-secret-key, endpoint: "https://s3.invalid"}
---
apiVersion: neuronetes.io/v1alpha1
kind: Model
metadata: {name: rs-model}
spec:
  source: {uri: "s3://weights/rs/model.gguf", secretRef: {name: rs-creds}}
  digest: "sha256:`+strings.Repeat("0", 64)+`"
  format: gguf
`)
	own := v1alpha1.ModelSourceSecretName(r.exampleNS, "rs-model")
	Eventually(t, time.Minute, "the controller's copy "+own, func() (bool, error) {
		_, err := e.Kube.CoreV1().Secrets(r.namespace).Get(ctx, own, metav1.GetOptions{})
		return err == nil, err
	})
	agent := impersonate(t, e, accounts["nodeagent"], map[string][]string{nodeNameExtra: {e.NodeName}})
	all, err := e.Kube.CoreV1().Secrets(r.namespace).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var tried []string
	for _, s := range all.Items {
		tried = append(tried, s.Name)
		if _, err := agent.CoreV1().Secrets(r.namespace).Get(ctx, s.Name, metav1.GetOptions{}); !apierrors.IsForbidden(err) {
			t.Errorf("node agent get Secret %s/%s: %v; want Forbidden", r.namespace, s.Name, err)
		}
		after, err := e.Kube.CoreV1().Secrets(r.namespace).Get(ctx, s.Name, metav1.GetOptions{})
		if err != nil || after.ResourceVersion != s.ResourceVersion {
			t.Errorf("Secret %s changed: %v", s.Name, err)
		}
	}
	t.Logf("[e2e] node agent tried on the Secrets of %s: %v", r.namespace, tried)
	if !slices.Contains(tried, lookalike) || !slices.Contains(tried, own) || len(tried) < 3 {
		t.Errorf("tried %v; want the chart's Secrets, the copy %s and %s", tried, own, lookalike)
	}
	if _, err := agent.CoreV1().Secrets(r.namespace).List(ctx, metav1.ListOptions{}); !apierrors.IsForbidden(err) {
		t.Errorf("node agent list Secrets of %s: %v; want Forbidden", r.namespace, err)
	}
	_ = e.Dynamic.Resource(modelGVR).Namespace(r.exampleNS).Delete(ctx, "rs-model", metav1.DeleteOptions{})
}
