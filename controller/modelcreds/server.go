package modelcreds

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	authnv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apiserver/pkg/authentication/serviceaccount"
	authnv1client "k8s.io/client-go/kubernetes/typed/authentication/v1"
	"k8s.io/klog/v2"
	"sigs.k8s.io/controller-runtime/pkg/client"

	nnv1 "github.com/neuronetes/neuronetes/api/v1alpha1"
	"github.com/neuronetes/neuronetes/internal/modelsrcapi"
)

// NodeNameExtra is the TokenReview user extra that names the node of the pod a token is bound to.
const NodeNameExtra = "authentication.kubernetes.io/node-name"

// ResultServed is the result label of an answered request.
const ResultServed = "Served"

// serveTimeout bounds the reads behind one request.
const serveTimeout = 15 * time.Second

// NewRequestsMetric registers neuronetes_controller_model_source_requests_total{result} (result:
// Served or a modelsrcapi reason) with reg.
func NewRequestsMetric(reg prometheus.Registerer) *prometheus.CounterVec {
	c := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "neuronetes_controller_model_source_requests_total",
		Help: "Requests for Model source credentials by node agents, by result (Served or the refusal reason).",
	}, []string{"result"})
	reg.MustRegister(c)
	return c
}

// Server answers the node agents' requests for Model source credentials (modelsrcapi). A request
// is answered only when
//  1. its bearer token is authenticated by the apiserver for Audience (a TokenReview) as the
//     ServiceAccount NodeAgent, bound to a pod (pod name, UID and node name in the review's user
//     extras);
//  2. that pod exists with that UID, runs as that ServiceAccount on that node and has not
//     finished;
//  3. Decide allows the node the Model;
//  4. the controller's copy of the Model's credentials was made for the Model's current UID and
//     secretRef.
//
// Every refusal is logged and counted with its reason; its body names objects, never secrets.
type Server struct {
	// Reviews creates TokenReviews.
	Reviews authnv1client.TokenReviewInterface
	// Live reads pods (by spec.nodeName), Nodes and Models uncached.
	Live client.Reader
	// Cached reads AgentPools, AgentClasses and the copies (the manager's cache).
	Cached client.Reader
	// Namespace holds the copies.
	Namespace string
	// NodeAgent is the node agents' ServiceAccount, namespace/name.
	NodeAgent string
	// Audience the token must carry (default modelsrcapi.Audience).
	Audience string
	// Requests counts requests by result (nil: not counted).
	Requests *prometheus.CounterVec
}

// refusal is an answer other than the credentials.
type refusal struct {
	status int
	modelsrcapi.Refusal
}

func (r *refusal) Error() string { return r.Reason + ": " + r.Message }

func refuse(status int, reason, format string, args ...any) *refusal {
	return &refusal{status: status, Refusal: modelsrcapi.Refusal{Reason: reason, Message: fmt.Sprintf(format, args...)}}
}

// ServeHTTP implements http.Handler.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	log := klog.FromContext(r.Context())
	ctx, cancel := context.WithTimeout(r.Context(), serveTimeout)
	defer cancel()
	caller, req, creds, err := s.serve(ctx, r)
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	var rf *refusal
	if err != nil {
		if !errors.As(err, &rf) {
			rf = refuse(http.StatusServiceUnavailable, modelsrcapi.ReasonUnavailable, "%v", err)
		}
		s.count(rf.Reason)
		log.Info("Refused Model source credentials", "reason", rf.Reason, "message", rf.Message,
			"caller", caller, "model", klog.KRef(req.Namespace, req.Name), "remote", r.RemoteAddr)
		w.WriteHeader(rf.status)
		_ = json.NewEncoder(w).Encode(rf.Refusal)
		return
	}
	s.count(ResultServed)
	log.Info("Served Model source credentials", "caller", caller, "model", klog.KRef(req.Namespace, req.Name))
	_ = json.NewEncoder(w).Encode(creds)
}

func (s *Server) count(result string) {
	if s.Requests != nil {
		s.Requests.WithLabelValues(result).Inc()
	}
}

// serve checks the caller and the request and returns the credentials, or a *refusal. caller
// names the caller's pod and node once known.
func (s *Server) serve(ctx context.Context, r *http.Request) (caller string, req modelsrcapi.Request, creds modelsrcapi.Credentials, err error) {
	if r.Method != http.MethodPost {
		return "", req, creds, refuse(http.StatusMethodNotAllowed, modelsrcapi.ReasonBadRequest, "use POST")
	}
	pod, err := s.authenticate(ctx, r.Header.Get("Authorization"))
	if err != nil {
		return "", req, creds, err
	}
	caller = pod.Namespace + "/" + pod.Name + "@" + pod.Spec.NodeName
	body, err := io.ReadAll(io.LimitReader(r.Body, modelsrcapi.MaxBodyBytes+1))
	if err != nil || len(body) > modelsrcapi.MaxBodyBytes || json.Unmarshal(body, &req) != nil || req.Namespace == "" || req.Name == "" {
		return caller, req, creds, refuse(http.StatusBadRequest, modelsrcapi.ReasonBadRequest, "the body must be a JSON object with namespace and name")
	}
	m, err := s.model(ctx, req)
	if err != nil {
		return caller, req, creds, err
	}
	in, err := s.input(ctx, pod.Spec.NodeName, m)
	if err != nil {
		return caller, req, creds, err
	}
	d := Decide(in)
	if !d.Allowed {
		status := http.StatusForbidden
		if d.Reason == modelsrcapi.ReasonNoSecretRef {
			status = http.StatusNotFound
		}
		return caller, req, creds, refuse(status, d.Reason, "%s", d.Message)
	}
	creds, err = s.credentials(ctx, m)
	return caller, req, creds, err
}

// authenticate verifies the bearer token and returns the live pod it is bound to.
func (s *Server) authenticate(ctx context.Context, header string) (*corev1.Pod, error) {
	aud := s.Audience
	if aud == "" {
		aud = modelsrcapi.Audience
	}
	scheme, tok, _ := strings.Cut(header, " ")
	if tok = strings.TrimSpace(tok); !strings.EqualFold(scheme, "Bearer") || tok == "" || len(tok) > modelsrcapi.MaxBodyBytes {
		return nil, refuse(http.StatusUnauthorized, modelsrcapi.ReasonUnauthenticated, "send the node agent's projected ServiceAccount token (audience %s) as Authorization: Bearer", aud)
	}
	rev, err := s.Reviews.Create(ctx, &authnv1.TokenReview{Spec: authnv1.TokenReviewSpec{Token: tok, Audiences: []string{aud}}}, metav1.CreateOptions{})
	if err != nil {
		return nil, fmt.Errorf("TokenReview: %w", err)
	}
	st := rev.Status
	if !st.Authenticated || !slices.Contains(st.Audiences, aud) {
		return nil, refuse(http.StatusUnauthorized, modelsrcapi.ReasonUnauthenticated, "the apiserver does not authenticate the token for audience %s", aud)
	}
	ns, sa, err := serviceaccount.SplitUsername(st.User.Username)
	if err != nil || ns+"/"+sa != s.NodeAgent {
		return nil, refuse(http.StatusForbidden, modelsrcapi.ReasonNotNodeAgent, "%s is not the node agents' ServiceAccount", st.User.Username)
	}
	podName, podUID, nodeName := one(st.User.Extra[serviceaccount.PodNameKey]), one(st.User.Extra[serviceaccount.PodUIDKey]), one(st.User.Extra[NodeNameExtra])
	if podName == "" || podUID == "" || nodeName == "" {
		return nil, refuse(http.StatusUnauthorized, modelsrcapi.ReasonUnauthenticated, "the token is not bound to a pod on a node: the pod's projected token is required")
	}
	var pod corev1.Pod
	if err := s.Live.Get(ctx, types.NamespacedName{Namespace: ns, Name: podName}, &pod); apierrors.IsNotFound(err) {
		return nil, refuse(http.StatusUnauthorized, modelsrcapi.ReasonUnauthenticated, "the token's pod %s/%s no longer exists", ns, podName)
	} else if err != nil {
		return nil, fmt.Errorf("get pod %s/%s: %w", ns, podName, err)
	}
	if string(pod.UID) != podUID || pod.Spec.ServiceAccountName != sa || pod.Spec.NodeName != nodeName ||
		pod.Status.Phase == corev1.PodSucceeded || pod.Status.Phase == corev1.PodFailed {
		return nil, refuse(http.StatusUnauthorized, modelsrcapi.ReasonUnauthenticated, "the token's pod %s/%s is not the running pod it was issued to on node %s", ns, podName, nodeName)
	}
	return &pod, nil
}

// model reads the Model asked for (live) and checks the UID the caller saw.
func (s *Server) model(ctx context.Context, req modelsrcapi.Request) (*nnv1.Model, error) {
	var m nnv1.Model
	err := s.Live.Get(ctx, types.NamespacedName{Namespace: req.Namespace, Name: req.Name}, &m)
	if apierrors.IsNotFound(err) || err == nil && req.UID != "" && string(m.UID) != req.UID {
		return nil, refuse(http.StatusNotFound, modelsrcapi.ReasonModelNotFound, "no Model %s/%s with the UID asked for", req.Namespace, req.Name)
	}
	if err != nil {
		return nil, fmt.Errorf("get model %s/%s: %w", req.Namespace, req.Name, err)
	}
	return &m, nil
}

// input gathers what Decide looks at: the node, the Model namespace's pods on it (live, by field
// selector), and that namespace's AgentPools and AgentClasses (cached).
func (s *Server) input(ctx context.Context, nodeName string, m *nnv1.Model) (FetchInput, error) {
	in := FetchInput{Model: m, Node: &corev1.Node{}}
	if err := s.Live.Get(ctx, types.NamespacedName{Name: nodeName}, in.Node); err != nil {
		return in, fmt.Errorf("get node %s: %w", nodeName, err)
	}
	var pods corev1.PodList
	if err := s.Live.List(ctx, &pods, client.InNamespace(m.Namespace), client.MatchingFields{"spec.nodeName": nodeName}); err != nil {
		return in, fmt.Errorf("list pods of %s on node %s: %w", m.Namespace, nodeName, err)
	}
	var pools nnv1.AgentPoolList
	if err := s.Cached.List(ctx, &pools, client.InNamespace(m.Namespace)); err != nil {
		return in, fmt.Errorf("list agentpools of %s: %w", m.Namespace, err)
	}
	var classes nnv1.AgentClassList
	if err := s.Cached.List(ctx, &classes, client.InNamespace(m.Namespace)); err != nil {
		return in, fmt.Errorf("list agentclasses of %s: %w", m.Namespace, err)
	}
	in.Pods, in.Pools, in.Classes = pods.Items, pools.Items, classes.Items
	return in, nil
}

// credentials reads the controller's copy for m and checks it was made for m's UID and secretRef.
func (s *Server) credentials(ctx context.Context, m *nnv1.Model) (modelsrcapi.Credentials, error) {
	key := types.NamespacedName{Namespace: s.Namespace, Name: nnv1.ModelSourceSecretName(m.Namespace, m.Name)}
	notReady := refuse(http.StatusConflict, modelsrcapi.ReasonNotReady, "the controller holds no credentials for Model %s/%s from Secret %s yet; see its %s condition",
		m.Namespace, m.Name, m.Spec.Source.SecretRef.Name, nnv1.ModelConditionSourceCredentials)
	var sec corev1.Secret
	if err := s.Cached.Get(ctx, key, &sec); apierrors.IsNotFound(err) {
		return modelsrcapi.Credentials{}, notReady
	} else if err != nil {
		return modelsrcapi.Credentials{}, fmt.Errorf("get the copy %s: %w", key, err)
	}
	a := sec.Annotations
	if sec.Labels[nnv1.ManagedByLabel] != nnv1.ManagedByController || a[nnv1.ModelSourceUIDAnnotation] != string(m.UID) ||
		a[nnv1.ModelSourceNamespaceAnnotation] != m.Namespace || a[nnv1.ModelSourceNameAnnotation] != m.Name ||
		a[nnv1.ModelSourceSecretAnnotation] != m.Spec.Source.SecretRef.Name {
		return modelsrcapi.Credentials{}, notReady
	}
	d := sec.Data
	return modelsrcapi.Credentials{
		AccessKeyID: string(d[nnv1.ModelSecretAccessKeyID]), SecretAccessKey: string(d[nnv1.ModelSecretSecretAccessKey]),
		Endpoint: string(d[nnv1.ModelSecretEndpoint]), Region: string(d[nnv1.ModelSecretRegion]), Token: string(d[nnv1.ModelSecretToken]),
	}, nil
}

// one returns the only value of an extra, or "".
func one(v authnv1.ExtraValue) string {
	if len(v) != 1 {
		return ""
	}
	return v[0]
}
