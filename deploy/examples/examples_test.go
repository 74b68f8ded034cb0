// Package examples_test checks the manifests of deploy/examples, which users copy: every pod they
// run meets Pod Security "restricted".
package examples_test

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	psapi "k8s.io/pod-security-admission/api"
	"k8s.io/pod-security-admission/policy"
	"sigs.k8s.io/yaml"

	nnv1 "github.com/neuronetes/neuronetes/api/v1alpha1"
	"github.com/neuronetes/neuronetes/e2e/images"
)

// podSpecOf is one pod the examples run: a Pod, or the pod template of an AgentClass.
type podSpecOf struct {
	where string // file: Kind/name
	meta  metav1.ObjectMeta
	spec  corev1.PodSpec
}

// examplePods returns the pod specs of every YAML document under dir. A kind that is neither Pod
// nor AgentClass but has containers is an error, so a new kind cannot slip past the checks.
func examplePods(dir string) ([]podSpecOf, error) {
	var pods []podSpecOf
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || !strings.HasSuffix(path, ".yaml") {
			return err
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		dec := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(b)))
		for {
			doc, err := dec.Read()
			if errors.Is(err, io.EOF) {
				return nil
			}
			if err != nil {
				return fmt.Errorf("%s: %w", path, err)
			}
			p, err := podOf(doc)
			if err != nil {
				return fmt.Errorf("%s: %w", path, err)
			}
			if p != nil {
				p.where = path + ": " + p.where
				pods = append(pods, *p)
			}
		}
	})
	return pods, err
}

// podOf decodes one document; nil when it runs no pod.
func podOf(doc []byte) (*podSpecOf, error) {
	var tm metav1.TypeMeta
	if err := yaml.Unmarshal(doc, &tm); err != nil {
		return nil, err
	}
	switch tm.Kind {
	case "Pod":
		var p corev1.Pod
		if err := yaml.UnmarshalStrict(doc, &p); err != nil {
			return nil, fmt.Errorf("Pod: %w", err)
		}
		return &podSpecOf{where: "Pod/" + p.Name, meta: p.ObjectMeta, spec: p.Spec}, nil
	case "AgentClass":
		var c nnv1.AgentClass
		if err := yaml.UnmarshalStrict(doc, &c); err != nil {
			return nil, fmt.Errorf("AgentClass: %w", err)
		}
		if c.Spec.Template == nil {
			return nil, fmt.Errorf("AgentClass %s: no spec.template", c.Name)
		}
		return &podSpecOf{where: "AgentClass/" + c.Name, meta: c.Spec.Template.ObjectMeta, spec: c.Spec.Template.Spec}, nil
	}
	if bytes.Contains(doc, []byte("containers:")) {
		return nil, fmt.Errorf("%s has containers: teach examplePods where its pod template is", tm.Kind)
	}
	return nil, nil
}

// restrictedViolations returns why Pod Security "restricted" (latest) refuses the pod; empty when
// it admits it.
func restrictedViolations(t *testing.T, p podSpecOf) string {
	t.Helper()
	eval, err := policy.NewEvaluator(policy.DefaultChecks(), nil)
	if err != nil {
		t.Fatal(err)
	}
	lv := psapi.LevelVersion{Level: psapi.LevelRestricted, Version: psapi.LatestVersion()}
	res := policy.AggregateCheckResults(eval.EvaluatePod(lv, &p.meta, &p.spec))
	if res.Allowed {
		return ""
	}
	return res.ForbiddenDetail()
}

// TestExamplesMeetRestricted: every Pod and AgentClass pod template of deploy/examples passes
// Pod Security "restricted", and each locally built image they run has a numeric non-root USER
// (runAsNonRoot needs one to be verifiable by the kubelet).
func TestExamplesMeetRestricted(t *testing.T) {
	pods, err := examplePods(".")
	if err != nil {
		t.Fatal(err)
	}
	if len(pods) < 10 {
		t.Fatalf("found %d pod specs under deploy/examples, want the 10 or more the examples have", len(pods))
	}
	for _, p := range pods {
		if why := restrictedViolations(t, p); why != "" {
			t.Errorf("%s violates Pod Security restricted: %s", p.where, why)
		}
		for _, c := range append(p.spec.InitContainers, p.spec.Containers...) {
			name, ok := strings.CutPrefix(c.Image, images.Registry+"/")
			if !ok {
				continue
			}
			name, _, _ = strings.Cut(name, ":")
			if u := images.User(name); u == "" || strings.HasPrefix(u, "0:") {
				t.Errorf("%s container %s: image %s runs as %q, want a numeric non-root USER", p.where, c.Name, c.Image, u)
			}
		}
	}
}

// TestRestrictedCheckRefuses: the check above refuses a demo-agent pod without the securityContext
// the examples add, so it cannot pass vacuously.
func TestRestrictedCheckRefuses(t *testing.T) {
	for _, tc := range []struct {
		name string
		doc  string
	}{
		{"no securityContext", `
apiVersion: v1
kind: Pod
metadata: {name: bare}
spec:
  containers: [{name: agent, image: neuronetes.local/demo-agent:dev}]`},
		{"AgentClass without capabilities drop", `
apiVersion: neuronetes.io/v1alpha1
kind: AgentClass
metadata: {name: c}
spec:
  template:
    spec:
      securityContext: {runAsNonRoot: true, seccompProfile: {type: RuntimeDefault}}
      containers:
        - name: agent
          image: neuronetes.local/demo-agent:dev
          securityContext: {allowPrivilegeEscalation: false}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p, err := podOf([]byte(tc.doc))
			if err != nil || p == nil {
				t.Fatalf("podOf = %v, %v", p, err)
			}
			if restrictedViolations(t, *p) == "" {
				t.Error("restricted admits it")
			}
		})
	}
	if _, err := podOf([]byte("apiVersion: apps/v1\nkind: Deployment\nspec: {template: {spec: {containers: []}}}")); err == nil {
		t.Error("a Deployment's pod template went unchecked")
	}
}
