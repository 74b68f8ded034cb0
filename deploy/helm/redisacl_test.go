package helm_test

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	admissionregv1 "k8s.io/api/admissionregistration/v1"

	"github.com/neuronetes/neuronetes/controller/redisusers"
	dispacl "github.com/neuronetes/neuronetes/dispatcher/redisacl"
	gwacl "github.com/neuronetes/neuronetes/gateway/redisacl"
	"github.com/neuronetes/neuronetes/internal/redisconn"
	"github.com/neuronetes/neuronetes/sidecar/redistest"
)

// secretData decodes a rendered Secret's data.
func secretData(t *testing.T, o object) map[string]string {
	t.Helper()
	out := map[string]string{}
	m, _ := get(o, "data").(map[string]any)
	for k, v := range m {
		b, err := base64.StdEncoding.DecodeString(v.(string))
		if err != nil {
			t.Fatalf("%s data %s: %v", o.name(), k, err)
		}
		out[k] = string(b)
	}
	return out
}

// TestRedisBundledACL: the bundled Redis' ACL file turns the default user off and gives the
// gateway, the dispatcher and the controller exactly the rules their Go packages define, under
// the prefixes of the values, with the passwords of <fullname>-redis-users; a real redis-server
// loads it, refuses a client without credentials (NOAUTH) and admits each component's user.
func TestRedisBundledACL(t *testing.T) {
	for _, tc := range []struct {
		name, gw, disp string
		set            []string
	}{
		{"default prefixes", "nn:gw:", "nn:dispatch:", nil},
		{"custom prefixes", "g2:", "d2:", []string{`gateway.redis.prefix="g2:"`, `dispatcher.redis.prefix="d2:"`}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			objs, err := render(t, nil, tc.set)
			if err != nil {
				t.Fatal(err)
			}
			sec := find(objs, "Secret", "nn-neuronetes-redis-users")
			if sec == nil {
				t.Fatal("no Secret nn-neuronetes-redis-users")
			}
			d := secretData(t, sec)
			want := []string{
				"user default off resetkeys resetchannels nocommands nopass",
				redisconn.ACLFileLine(gwacl.DefaultUser, d["gateway"], gwacl.ACLRules(tc.gw)),
				redisconn.ACLFileLine(dispacl.DefaultUser, d["dispatcher"], dispacl.ACLRules(tc.disp)),
				redisconn.ACLFileLine(redisusers.DefaultUser, d["controller"], redisusers.ACLRules()),
			}
			got := strings.Split(strings.TrimSpace(d["users.acl"]), "\n")
			if !slices.Equal(got, want) {
				t.Fatalf("users.acl:\n%s\nwant (the Go packages' rules):\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
			}
			for _, c := range []string{"gateway", "dispatcher", "controller"} {
				if len(d[c]) < 32 {
					t.Errorf("password of %s: %d characters, want 32 or more", c, len(d[c]))
				}
			}
			sts := find(objs, "StatefulSet", "nn-neuronetes-redis")
			if a := args(container(sts, "redis")); !slices.Contains(a, "--aclfile") || !slices.Contains(a, "/etc/redis-acl/users.acl") {
				t.Errorf("redis args %v lack --aclfile /etc/redis-acl/users.acl", a)
			}
			if v := toJSON(get(sts, "spec", "template", "spec", "volumes")); !strings.Contains(v, `"secretName":"nn-neuronetes-redis-users"`) {
				t.Errorf("redis volumes %s do not mount the users Secret", v)
			}
			if tc.set == nil {
				serveACLFile(t, d)
			}
		})
	}
}

// serveACLFile runs redis-server with the rendered ACL file.
func serveACLFile(t *testing.T, d map[string]string) {
	t.Helper()
	f := filepath.Join(t.TempDir(), "users.acl")
	if err := os.WriteFile(f, []byte(d["users.acl"]), 0o600); err != nil {
		t.Fatal(err)
	}
	srv := redistest.Start(t, redistest.Options{Args: []string{"--aclfile", f}})
	ping := func(user, pw string) error {
		c := redis.NewClient(&redis.Options{Addr: srv.Addr, Username: user, Password: pw, MaxRetries: -1, DialTimeout: time.Second})
		defer c.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		return c.Ping(ctx).Err()
	}
	if err := ping("", ""); err == nil || !strings.Contains(err.Error(), "NOAUTH") {
		t.Errorf("PING without credentials = %v, want NOAUTH", err)
	}
	for user, key := range map[string]string{gwacl.DefaultUser: "gateway", dispacl.DefaultUser: "dispatcher", redisusers.DefaultUser: "controller"} {
		if err := ping(user, d[key]); err != nil {
			t.Errorf("PING as %s: %v", user, err)
		}
	}
}

// TestChartSidecarRedisUsers: the controller manages the namespaces' sidecar users with the
// bundled Redis (its generated user) or with a controller user on your Redis (with the shared TLS
// settings), and then may get,
// update and delete only Secrets named neuronetes-sidecar-redis and create Secrets only through
// the controller-writes policy; without a controller user, with manageSidecarUsers=false or without
// the admission policies it manages nothing and gets no Secret right.
func TestChartSidecarRedisUsers(t *testing.T) {
	external := `redis={"bundled":{"enabled":false},"address":"redis.internal:6379"}`
	for _, tc := range []struct {
		name     string
		set      []string
		user, pw string // "": not managed
	}{
		{"bundled", nil, "neuronetes-controller", `{"key":"controller","name":"nn-neuronetes-redis-users"}`},
		{"external without a controller user", []string{external}, "", ""},
		{"external with a controller user and TLS", []string{external, `controller.redis={"username":"ctl","passwordSecret":{"name":"ctl-redis","key":"pw"}}`,
			`redis.tls={"enabled":true,"caSecret":{"name":"redis-ca","key":"ca.crt"}}`}, "ctl", `{"key":"pw","name":"ctl-redis"}`},
		{"turned off", []string{`controller.redis.manageSidecarUsers=false`}, "", ""},
		{"no admission policies", []string{`rbac.admissionPolicies=false`}, "", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			objs, err := render(t, nil, tc.set)
			if err != nil {
				t.Fatal(err)
			}
			dep := find(objs, "Deployment", "nn-neuronetes-controller")
			c := container(dep, "controller")
			a, env := args(c), toJSON(get(c, "env"))
			role := toJSON(get(find(objs, "ClusterRole", "nn-neuronetes-controller"), "rules"))
			// The Model sources' get (TestChartModelSourceCopies) is no sidecar user right.
			secretRules := strings.Count(strings.Replace(role, `{"apiGroups":[""],"resources":["secrets"],"verbs":["get"]}`, "", 1), `"secrets"`)
			managed := slices.Contains(a, "--sidecar-redis-users")
			if managed != (tc.user != "") {
				t.Fatalf("--sidecar-redis-users in %v: %v, want %v", a, managed, tc.user != "")
			}
			if tc.user == "" {
				if secretRules != 0 || strings.Contains(env, "NEURONETES_REDIS_PASSWORD") {
					t.Errorf("unmanaged: ClusterRole %s / env %s", role, env)
				}
				return
			}
			for _, want := range []string{"--sidecar-redis-secret=neuronetes-sidecar-redis", "--redis-username=" + tc.user} {
				if !slices.Contains(a, want) {
					t.Errorf("args %v lack %s", a, want)
				}
			}
			tls := strings.Contains(toJSON(tc.set), "redis.tls")
			if slices.Contains(a, "--redis-tls") != tls || slices.Contains(a, "--redis-ca-file=/etc/neuronetes/redis-ca/ca.crt") != tls ||
				strings.Contains(toJSON(get(dep, "spec", "template", "spec", "volumes")), `"secretName":"redis-ca"`) != tls {
				t.Errorf("TLS %v: args %v, volumes %s", tls, a, toJSON(get(dep, "spec", "template", "spec", "volumes")))
			}
			if !strings.Contains(env, `"name":"NEURONETES_REDIS_PASSWORD","valueFrom":{"secretKeyRef":`+tc.pw) {
				t.Errorf("env %s lacks the password %s", env, tc.pw)
			}
			if secretRules != 2 || !strings.Contains(role, `{"apiGroups":[""],"resourceNames":["neuronetes-sidecar-redis"],"resources":["secrets"],"verbs":["get","update","delete"]}`) ||
				!strings.Contains(role, `{"apiGroups":[""],"resources":["secrets"],"verbs":["create"]}`) {
				t.Errorf("ClusterRole Secret rules: %s", role)
			}
			pol := toJSON(get(find(objs, "ValidatingAdmissionPolicy", "nn-neuronetes-controller-writes"), "spec", "matchConstraints"))
			if !strings.Contains(pol, `"secrets"`) {
				t.Errorf("controller-writes policy does not match Secrets: %s", pol)
			}
		})
	}
}

// TestControllerWritesPolicySecrets evaluates the controller-writes policy on Secret writes: it
// admits only Opaque Secrets named neuronetes-sidecar-redis labelled as the controller's, Model
// source copies (model-src-*, labelled, Opaque) in the release namespace only, and the webhook's
// Secret in the release namespace; it never takes over or deletes another Secret of those names,
// and still refuses unlabelled pods.
func TestControllerWritesPolicySecrets(t *testing.T) {
	objs, err := render(t, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	raw, _ := json.Marshal(find(objs, "ValidatingAdmissionPolicy", "nn-neuronetes-controller-writes"))
	var p admissionregv1.ValidatingAdmissionPolicy
	if err := json.Unmarshal(raw, &p); err != nil {
		t.Fatal(err)
	}
	managed := map[string]any{"neuronetes.io/managed-by": "neuronetes-controller"}
	secret := func(name, typ string, labels map[string]any) map[string]any {
		md := map[string]any{"name": name}
		if labels != nil {
			md["labels"] = labels
		}
		return map[string]any{"metadata": md, "type": typ}
	}
	req := func(op, res, ns string) map[string]any {
		return map[string]any{"operation": op, "namespace": ns, "resource": map[string]any{"resource": res}}
	}
	ours := secret("neuronetes-sidecar-redis", "Opaque", managed)
	foreign := secret("neuronetes-sidecar-redis", "Opaque", nil)
	copyOurs := secret("model-src-team-a-llama-0123456789abcdef", "Opaque", managed)
	copyForeign := secret("model-src-team-a-llama-0123456789abcdef", "Opaque", nil)
	for _, tc := range []struct {
		name           string
		request        map[string]any
		object, oldObj map[string]any
		want           bool
	}{
		{"create the sidecar Secret", req("CREATE", "secrets", "team-a"), ours, nil, true},
		{"update the sidecar Secret", req("UPDATE", "secrets", "team-a"), ours, ours, true},
		{"delete the sidecar Secret", req("DELETE", "secrets", "team-a"), nil, ours, true},
		{"create it unlabelled", req("CREATE", "secrets", "team-a"), foreign, nil, false},
		{"create a token Secret of that name", req("CREATE", "secrets", "team-a"), secret("neuronetes-sidecar-redis", "kubernetes.io/service-account-token", managed), nil, false},
		{"create another Secret", req("CREATE", "secrets", "team-a"), secret("db-password", "Opaque", managed), nil, false},
		{"take over the admin's Secret", req("UPDATE", "secrets", "team-a"), ours, foreign, false},
		{"delete the admin's Secret", req("DELETE", "secrets", "team-a"), nil, foreign, false},
		{"create it in kube-system", req("CREATE", "secrets", "kube-system"), ours, nil, false},
		{"the webhook's Secret", req("UPDATE", "secrets", "neuronetes-system"), secret("nn-neuronetes-webhook-tls", "kubernetes.io/tls", nil), secret("nn-neuronetes-webhook-tls", "kubernetes.io/tls", nil), true},
		{"create a Model source copy", req("CREATE", "secrets", "neuronetes-system"), copyOurs, nil, true},
		{"update a Model source copy", req("UPDATE", "secrets", "neuronetes-system"), copyOurs, copyOurs, true},
		{"delete a Model source copy", req("DELETE", "secrets", "neuronetes-system"), nil, copyOurs, true},
		{"create a copy in a tenant namespace", req("CREATE", "secrets", "team-a"), copyOurs, nil, false},
		{"create a copy unlabelled", req("CREATE", "secrets", "neuronetes-system"), copyForeign, nil, false},
		{"create a token Secret named as a copy", req("CREATE", "secrets", "neuronetes-system"), secret("model-src-a-b-0123456789abcdef", "kubernetes.io/service-account-token", managed), nil, false},
		{"take over an admin's model-src- Secret", req("UPDATE", "secrets", "neuronetes-system"), copyOurs, copyForeign, false},
		{"delete an admin's model-src- Secret", req("DELETE", "secrets", "neuronetes-system"), nil, copyForeign, false},
		{"create another Secret of the release namespace", req("CREATE", "secrets", "neuronetes-system"), secret("nn-neuronetes-redis-users", "Opaque", managed), nil, false},
		{"an unlabelled pod", req("CREATE", "pods", "team-a"), map[string]any{"metadata": map[string]any{"name": "p"}}, nil, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if ok, msg := admitsRequest(t, &p, tc.request, tc.object, tc.oldObj); ok != tc.want {
				t.Errorf("admitted = %v (%s), want %v", ok, msg, tc.want)
			}
		})
	}
}
