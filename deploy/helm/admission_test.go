package helm_test

import (
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/google/cel-go/cel"
	admissionregv1 "k8s.io/api/admissionregistration/v1"
	"k8s.io/apiserver/pkg/cel/environment"
	"sigs.k8s.io/yaml"

	nnv1 "github.com/neuronetes/neuronetes/api/v1alpha1"
)

// loadRestoreSourcePolicy reads the ValidatingAdmissionPolicy of files/admission.
func loadRestoreSourcePolicy(t *testing.T) *admissionregv1.ValidatingAdmissionPolicy {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(chartDir(t), "files", "admission", "checkpoint-restore-source.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	doc := regexp.MustCompile(`(?m)^---[ \t]*$`).Split(string(b), -1)[0]
	var p admissionregv1.ValidatingAdmissionPolicy
	if err := yaml.UnmarshalStrict([]byte(doc), &p); err != nil {
		t.Fatal(err)
	}
	return &p
}

// admits evaluates the policy's variables and validations on object in namespace as the
// apiserver's CEL environment does; it returns the first failing validation's message.
func admits(t *testing.T, p *admissionregv1.ValidatingAdmissionPolicy, namespace string, object map[string]any) (bool, string) {
	t.Helper()
	return admitsRequest(t, p, map[string]any{"namespace": namespace}, object, nil)
}

// admitsRequest is admits with the whole request (operation, resource, namespace) and the old
// object of an UPDATE or DELETE.
func admitsRequest(t *testing.T, p *admissionregv1.ValidatingAdmissionPolicy, request, object, oldObject map[string]any) (bool, string) {
	t.Helper()
	env, err := environment.MustBaseEnvSet(environment.DefaultCompatibilityVersion()).NewExpressionsEnv().Extend(
		cel.Variable("object", cel.DynType), cel.Variable("oldObject", cel.DynType), cel.Variable("request", cel.DynType),
		cel.Variable("variables", cel.MapType(cel.StringType, cel.DynType)))
	if err != nil {
		t.Fatal(err)
	}
	vars := map[string]any{}
	in := map[string]any{"object": object, "oldObject": oldObject, "request": request, "variables": vars}
	eval := func(expr string) any {
		ast, iss := env.Compile(expr)
		if iss.Err() != nil {
			t.Fatalf("compile %q: %v", expr, iss.Err())
		}
		prg, err := env.Program(ast)
		if err != nil {
			t.Fatal(err)
		}
		out, _, err := prg.Eval(in)
		if err != nil {
			t.Fatalf("eval %q: %v", expr, err)
		}
		return out.Value()
	}
	for _, v := range p.Spec.Variables {
		vars[v.Name] = eval(v.Expression)
	}
	for _, v := range p.Spec.Validations {
		if ok, _ := eval(v.Expression).(bool); !ok {
			if v.MessageExpression == "" {
				return false, v.Message
			}
			msg, _ := eval(v.MessageExpression).(string)
			return false, msg
		}
	}
	return true, ""
}

// TestRestoreSourcePolicyMatchesGoRule: the admission policy admits exactly what the Go rule
// (api/v1alpha1 ParseRestoreFrom, ValidateRestoreSource; applied by the controller and the
// node agent) admits, for AgentClass templates and Restore AgentCheckpoints.
func TestRestoreSourcePolicyMatchesGoRule(t *testing.T) {
	p := loadRestoreSourcePolicy(t)
	const ns = "team-a"
	for _, from := range []string{"chat", "chat/team-a.ck-1", "chat/team-b.ck-1", "chat/team-ab.ck-1", "chat/ck-1",
		"team-b/chat/team-b.ck", "/team-a.ck", "../chat", "chat/team-a..x", "chat/team-a.", "chat/"} {
		t.Run("restore-from="+from, func(t *testing.T) {
			class := map[string]any{"kind": "AgentClass", "spec": map[string]any{"template": map[string]any{
				"metadata": map[string]any{"annotations": map[string]any{nnv1.RestoreFromAnnotation: from}}}}}
			_, _, goErr := nnv1.ParseRestoreFrom(ns, from)
			ok, msg := admits(t, p, ns, class)
			if ok != (goErr == nil) {
				t.Errorf("policy admits=%v (%s), Go rule: %v", ok, msg, goErr)
			}
		})
	}
	for _, id := range []string{"", "team-a.ck", "team-b.ck", "team-ab.ck", "ck", "team-a..ck"} {
		t.Run("checkpointID="+id, func(t *testing.T) {
			spec := map[string]any{"operation": "Restore", "agent": "chat"}
			if id != "" {
				spec["checkpointID"] = id
			}
			goErr := nnv1.ValidateRestoreSource("spec.agent", "spec.checkpointID", ns, "chat", id)
			ok, msg := admits(t, p, ns, map[string]any{"kind": "AgentCheckpoint", "spec": spec})
			if ok != (goErr == nil) {
				t.Errorf("policy admits=%v (%s), Go rule: %v", ok, msg, goErr)
			}
			if !ok {
				t.Logf("refused: %s", msg)
			}
		})
	}
	for name, obj := range map[string]map[string]any{
		"class without template":     {"kind": "AgentClass", "spec": map[string]any{}},
		"class without annotations":  {"kind": "AgentClass", "spec": map[string]any{"template": map[string]any{"metadata": map[string]any{}}}},
		"checkpoint of a foreign id": {"kind": "AgentCheckpoint", "spec": map[string]any{"operation": "Checkpoint", "checkpointID": "team-b.x"}},
	} {
		if ok, msg := admits(t, p, ns, obj); !ok {
			t.Errorf("%s refused: %s", name, msg)
		}
	}
}

// TestAgentPoolPodsPolicy: nobody but the controller (the policy's matchCondition leaves it
// out) creates a pod owned by an AgentPool or adds that owner to a pod; pods that already had it
// may be updated (labels, the garbage collector), other pods are untouched.
func TestAgentPoolPodsPolicy(t *testing.T) {
	objs, err := render(t, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	raw, _ := json.Marshal(find(objs, "ValidatingAdmissionPolicy", "nn-neuronetes-agentpool-pods"))
	var p admissionregv1.ValidatingAdmissionPolicy
	if err := json.Unmarshal(raw, &p); err != nil || len(p.Spec.Validations) == 0 {
		t.Fatalf("policy: %v %s", err, raw)
	}
	if c := p.Spec.MatchConditions[0].Expression; !strings.Contains(c, `!= "system:serviceaccount:neuronetes-system:nn-neuronetes-controller"`) {
		t.Fatalf("matchCondition %s does not leave out exactly the controller", c)
	}
	pod := func(owners ...map[string]any) map[string]any {
		md := map[string]any{"name": "p"}
		if len(owners) > 0 {
			l := make([]any, len(owners))
			for i, o := range owners {
				l[i] = o
			}
			md["ownerReferences"] = l
		}
		return map[string]any{"metadata": md}
	}
	pool := map[string]any{"apiVersion": "neuronetes.io/v1alpha1", "kind": "AgentPool", "name": "agents", "uid": "u1", "controller": true}
	rs := map[string]any{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "web", "uid": "u2", "controller": true}
	session := map[string]any{"apiVersion": "neuronetes.io/v1alpha1", "kind": "AgentSession", "name": "s1", "uid": "u3", "controller": true}
	for _, tc := range []struct {
		name        string
		op          string
		obj, oldObj map[string]any
		want        bool
	}{
		{"plain pod", "CREATE", pod(), nil, true},
		{"pod of a ReplicaSet", "CREATE", pod(rs), nil, true},
		{"pod passed off as an AgentPool's", "CREATE", pod(pool), nil, false},
		{"AgentPool owner added by an update", "UPDATE", pod(pool), pod(), false},
		{"update of a pool pod (labels, GC)", "UPDATE", pod(pool), pod(pool), true},
		{"pod passed off as an AgentSession's", "CREATE", pod(session), nil, false},
		{"AgentSession owner added by an update", "UPDATE", pod(session), pod(), false},
		{"update of a session pod", "UPDATE", pod(session), pod(session), true},
		{"owner removed (orphaned)", "UPDATE", pod(), pod(pool), true},
	} {
		ok, msg := admitsRequest(t, &p, map[string]any{"operation": tc.op, "namespace": "team-a"}, tc.obj, tc.oldObj)
		if ok != tc.want {
			t.Errorf("%s: admitted %v (%s), want %v", tc.name, ok, msg, tc.want)
		}
	}
}
