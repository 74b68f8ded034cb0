package toolproxy

import (
	"context"
	"crypto/sha256"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/go-jose/go-jose/v4"
	"github.com/go-jose/go-jose/v4/jwt"
	"golang.org/x/sync/singleflight"
	authnv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	utilcache "k8s.io/apimachinery/pkg/util/cache"
	"k8s.io/apiserver/pkg/authentication/serviceaccount"
	authnv1client "k8s.io/client-go/kubernetes/typed/authentication/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1alpha1 "github.com/neuronetes/neuronetes/api/v1alpha1"
)

// Defaults of TokenIdentity.
const (
	// DefaultIdentityTTL bounds how long a verified token is trusted without asking the
	// apiserver again (also bounded by the token's own expiry).
	DefaultIdentityTTL = 30 * time.Second
	// DefaultIdentityCacheSize bounds the verified tokens kept (least recently used evicted).
	DefaultIdentityCacheSize = 4096
	// MaxTokenBytes bounds the bearer token read.
	MaxTokenBytes = 16 << 10
	// verifyTimeout bounds one verification (a TokenReview and two reads).
	verifyTimeout = 10 * time.Second
)

// tokenAlgorithms are the signature algorithms of ServiceAccount tokens.
var tokenAlgorithms = []jose.SignatureAlgorithm{jose.RS256, jose.RS384, jose.RS512, jose.ES256, jose.ES384, jose.ES512, jose.PS256, jose.PS384, jose.PS512}

// TokenIdentity identifies the caller by the projected ServiceAccount token that the controller
// mounts in every AgentPool and AgentSession pod (audience v1alpha1.ToolProxyAudience), sent as
// "Authorization: Bearer <token>". A caller is accepted only when
//  1. the apiserver authenticates the token for that audience (a TokenReview) and names the pod
//     it is bound to;
//  2. that pod exists with the bound UID, runs as the token's ServiceAccount and has not
//     terminated;
//  3. the pod's controller (its ownerReference with controller: true) is an AgentPool or an
//     AgentSession that exists in the pod's namespace with the referenced UID.
//
// The caller's pool (or session, and the session's class) is that controller's: labels are
// never read. A verified token is kept
// for at most TTL and never past its expiry, in an LRU of at most Size tokens (keyed by the
// token's SHA-256); a refusal is not kept.
type TokenIdentity struct {
	// Reviews creates TokenReviews (clientset.AuthenticationV1().TokenReviews()).
	Reviews authnv1client.TokenReviewInterface
	// Reader reads pods, AgentPools and AgentSessions; a live reader (the manager's API reader), so that a
	// pod created a moment ago is found.
	Reader client.Reader
	// Audience the token must carry (default v1alpha1.ToolProxyAudience).
	Audience string
	// TTL (default DefaultIdentityTTL) and Size (default DefaultIdentityCacheSize) of the cache.
	TTL  time.Duration
	Size int
	// Now is the clock (default time.Now).
	Now func() time.Time

	once   sync.Once
	cache  *utilcache.LRUExpireCache
	flight singleflight.Group
}

type clockFunc func() time.Time

func (f clockFunc) Now() time.Time { return f() }

func (ti *TokenIdentity) init() {
	if ti.Audience == "" {
		ti.Audience = v1alpha1.ToolProxyAudience
	}
	if ti.TTL <= 0 {
		ti.TTL = DefaultIdentityTTL
	}
	if ti.Size <= 0 {
		ti.Size = DefaultIdentityCacheSize
	}
	if ti.Now == nil {
		ti.Now = time.Now
	}
	ti.cache = utilcache.NewLRUExpireCacheWithClock(ti.Size, clockFunc(ti.Now))
}

// Identify implements Identity.
func (ti *TokenIdentity) Identify(r *http.Request) (Caller, error) {
	ti.once.Do(ti.init)
	scheme, tok, _ := strings.Cut(r.Header.Get("Authorization"), " ")
	if tok = strings.TrimSpace(tok); !strings.EqualFold(scheme, "Bearer") || tok == "" {
		return Caller{}, unauthenticated("no credential: send the pod's projected ServiceAccount token (audience %s, the file $%s) as Authorization: Bearer <token>",
			ti.Audience, v1alpha1.ToolTokenFileEnv)
	}
	if len(tok) > MaxTokenBytes {
		return Caller{}, unauthenticated("the bearer token is over %d bytes", MaxTokenBytes)
	}
	exp, err := ti.precheck(tok)
	if err != nil {
		return Caller{}, err
	}
	sum := sha256.Sum256([]byte(tok))
	key := string(sum[:])
	if c, ok := ti.cache.Get(key); ok {
		return c.(Caller), nil
	}
	v, err, _ := ti.flight.Do(key, func() (any, error) {
		// Shared by concurrent calls with the same token: not cancelled with the first one.
		ctx, cancel := context.WithTimeout(context.WithoutCancel(r.Context()), verifyTimeout)
		defer cancel()
		c, err := ti.verify(ctx, tok)
		if err == nil {
			if ttl := min(ti.TTL, exp.Sub(ti.Now())); ttl > 0 {
				ti.cache.Add(key, c, ttl)
			}
		}
		return c, err
	})
	if err != nil {
		return Caller{}, err
	}
	return v.(Caller), nil
}

// precheck reads the token's claims without verifying them, to refuse what cannot pass without
// asking the apiserver and to bound the cache by the expiry. The TokenReview decides.
func (ti *TokenIdentity) precheck(tok string) (time.Time, error) {
	parsed, err := jwt.ParseSigned(tok, tokenAlgorithms)
	if err != nil {
		return time.Time{}, unauthenticated("the bearer token is not a ServiceAccount token (a signed JWT): %v", err)
	}
	var cl jwt.Claims
	if err := parsed.UnsafeClaimsWithoutVerification(&cl); err != nil {
		return time.Time{}, unauthenticated("the bearer token's claims: %v", err)
	}
	if !cl.Audience.Contains(ti.Audience) {
		return time.Time{}, unauthenticated("the token's audience %q is not %s: send the tool token (the file $%s), not the pod's apiserver token",
			[]string(cl.Audience), ti.Audience, v1alpha1.ToolTokenFileEnv)
	}
	if cl.Expiry == nil {
		return time.Time{}, unauthenticated("the token has no expiry: a projected token of the pod is required")
	}
	if exp := cl.Expiry.Time(); !exp.After(ti.Now()) {
		return time.Time{}, unauthenticated("the token expired at %s: read the file $%s again (the kubelet rotates it)", exp.UTC().Format(time.RFC3339), v1alpha1.ToolTokenFileEnv)
	}
	return cl.Expiry.Time(), nil
}

// verify asks the apiserver about the token, then checks the pod it is bound to and that pod's
// controller.
func (ti *TokenIdentity) verify(ctx context.Context, tok string) (Caller, error) {
	rev, err := ti.Reviews.Create(ctx, &authnv1.TokenReview{Spec: authnv1.TokenReviewSpec{Token: tok, Audiences: []string{ti.Audience}}}, metav1.CreateOptions{})
	if err != nil {
		return Caller{}, &CallerError{Status: http.StatusServiceUnavailable, Code: CodeIdentityUnavailable, Err: fmt.Errorf("TokenReview: %w", err)}
	}
	st := rev.Status
	if !st.Authenticated {
		return Caller{}, unauthenticated("the apiserver does not authenticate the token: %s", st.Error)
	}
	audOK := false
	for _, a := range st.Audiences {
		audOK = audOK || a == ti.Audience
	}
	if !audOK {
		return Caller{}, unauthenticated("the apiserver did not accept the token for audience %s (got %q)", ti.Audience, st.Audiences)
	}
	ns, sa, err := serviceaccount.SplitUsername(st.User.Username)
	if err != nil {
		return Caller{}, unauthenticated("the token is not a ServiceAccount's (user %q)", st.User.Username)
	}
	podName, podUID := one(st.User.Extra[serviceaccount.PodNameKey]), one(st.User.Extra[serviceaccount.PodUIDKey])
	if podName == "" || podUID == "" {
		return Caller{}, unauthenticated("the token of ServiceAccount %s/%s is not bound to a pod: the pod's projected token is required", ns, sa)
	}
	var pod corev1.Pod
	switch err := ti.Reader.Get(ctx, types.NamespacedName{Namespace: ns, Name: podName}, &pod); {
	case apierrors.IsNotFound(err):
		return Caller{}, unauthenticated("the token's pod %s/%s no longer exists", ns, podName)
	case err != nil:
		return Caller{}, &CallerError{Status: http.StatusServiceUnavailable, Code: CodeIdentityUnavailable, Err: fmt.Errorf("get pod %s/%s: %w", ns, podName, err)}
	}
	if string(pod.UID) != podUID {
		return Caller{}, unauthenticated("the token was issued to an earlier pod named %s/%s", ns, podName)
	}
	if pod.Spec.ServiceAccountName != sa {
		return Caller{}, unauthenticated("pod %s/%s does not run as the token's ServiceAccount %s", ns, podName, sa)
	}
	if pod.Status.Phase == corev1.PodSucceeded || pod.Status.Phase == corev1.PodFailed {
		return Caller{}, notAgentPod(&pod, "pod %s/%s has terminated", ns, podName)
	}
	return ti.controller(ctx, &pod)
}

// controller returns the caller that controls pod: the AgentPool or AgentSession named by its
// controller ownerReference, which must exist in the pod's namespace with the referenced UID.
// Labels are never read.
func (ti *TokenIdentity) controller(ctx context.Context, pod *corev1.Pod) (Caller, error) {
	ref := metav1.GetControllerOf(pod)
	if ref == nil || groupOf(ref.APIVersion) != v1alpha1.GroupVersion.Group || (ref.Kind != "AgentPool" && ref.Kind != "AgentSession") {
		return Caller{}, notAgentPod(pod, "pod %s/%s is not controlled by an AgentPool or an AgentSession (a %s or %s label does not make it one)",
			pod.Namespace, pod.Name, v1alpha1.PoolLabel, v1alpha1.SessionLabel)
	}
	var obj client.Object = &v1alpha1.AgentPool{}
	if ref.Kind == "AgentSession" {
		obj = &v1alpha1.AgentSession{}
	}
	switch err := ti.Reader.Get(ctx, types.NamespacedName{Namespace: pod.Namespace, Name: ref.Name}, obj); {
	case apierrors.IsNotFound(err):
		return Caller{}, notAgentPod(pod, "pod %s/%s names %s %s as its controller, which does not exist", pod.Namespace, pod.Name, ref.Kind, ref.Name)
	case err != nil:
		return Caller{}, &CallerError{Status: http.StatusServiceUnavailable, Code: CodeIdentityUnavailable, Err: fmt.Errorf("get %s %s/%s: %w", ref.Kind, pod.Namespace, ref.Name, err)}
	}
	if obj.GetUID() != ref.UID {
		return Caller{}, notAgentPod(pod, "pod %s/%s names an earlier %s %s as its controller", pod.Namespace, pod.Name, ref.Kind, ref.Name)
	}
	c := Caller{Namespace: pod.Namespace, Pod: pod.Name}
	if s, ok := obj.(*v1alpha1.AgentSession); ok {
		c.Session, c.SessionClass = s.Name, s.Spec.ClassRef.Name
	} else {
		c.Pool = obj.GetName()
	}
	return c, nil
}

func groupOf(apiVersion string) string {
	gv, err := schema.ParseGroupVersion(apiVersion)
	if err != nil {
		return ""
	}
	return gv.Group
}

// one returns the only value of an extra, or "".
func one(v authnv1.ExtraValue) string {
	if len(v) != 1 {
		return ""
	}
	return v[0]
}
