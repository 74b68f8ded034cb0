package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// APIKeysSecretLabel must be set (to any value) on Secrets that hold Tenant API keys: the gateway
// watches only Secrets that carry it.
const APIKeysSecretLabel = "neuronetes.io/api-keys"

// Priority is a request priority class of the gateway. Under overload, queued requests of lower
// priority are shed first.
// +kubebuilder:validation:Enum=high;normal;low
type Priority string

// The priority classes, highest first.
const (
	PriorityHigh   Priority = "high"
	PriorityNormal Priority = "normal"
	PriorityLow    Priority = "low"
)

// APIKeySource names a Secret in the Tenant's namespace whose every data value is one API key of
// the tenant: either the key itself, or "sha256:" followed by the 64 lower-case hex digits of its
// SHA-256. The gateway keeps only the hashes in memory. The Secret must carry the label
// neuronetes.io/api-keys.
type APIKeySource struct {
	// SecretName is the Secret's name.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	SecretName string `json:"secretName"`
}

// OIDCIdentity accepts bearer JWTs from one OpenID Connect issuer as this tenant.
//
// +kubebuilder:validation:XValidation:rule="!has(self.claimValues) || has(self.claim)",message="oidc[].claimValues needs oidc[].claim",fieldPath=".claimValues"
type OIDCIdentity struct {
	// Issuer is the token's "iss"; its discovery document gives the JWKS unless JWKSURI is set.
	// +kubebuilder:validation:Pattern=`^https?://.+`
	// +kubebuilder:validation:MaxLength=2048
	Issuer string `json:"issuer"`
	// Audience must be one of the token's "aud" values.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=512
	Audience string `json:"audience"`
	// JWKSURI is the issuer's key set; when empty, discovery at
	// <issuer>/.well-known/openid-configuration gives it.
	// +kubebuilder:validation:Pattern=`^https?://.+`
	// +kubebuilder:validation:MaxLength=2048
	// +optional
	JWKSURI string `json:"jwksURI,omitempty"`
	// Claim, when set, must be present in the token with one of ClaimValues (or, when ClaimValues
	// is empty, the Tenant's name). It tells apart tenants that share an issuer and audience.
	// +kubebuilder:validation:MaxLength=256
	// +optional
	Claim string `json:"claim,omitempty"`
	// ClaimValues accepted for Claim (a string claim, or any element of an array claim).
	// +kubebuilder:validation:MaxItems=64
	// +optional
	ClaimValues []string `json:"claimValues,omitempty"`
}

// TenantQuota limits a tenant's use of one pool. Unset fields are unlimited.
type TenantQuota struct {
	// RequestsPerMinute is the refill rate of the request bucket.
	// +kubebuilder:validation:Minimum=1
	// +optional
	RequestsPerMinute *int64 `json:"requestsPerMinute,omitempty"`
	// RequestBurst is the request bucket's size (default: RequestsPerMinute).
	// +kubebuilder:validation:Minimum=1
	// +optional
	RequestBurst *int64 `json:"requestBurst,omitempty"`
	// TokensPerMinute is the refill rate of the token bucket. A request takes its estimated
	// prompt tokens plus max_tokens on admission; the difference to the billed usage is returned
	// (or taken) when the response ends.
	// +kubebuilder:validation:Minimum=1
	// +optional
	TokensPerMinute *int64 `json:"tokensPerMinute,omitempty"`
	// TokenBurst is the token bucket's size (default: TokensPerMinute).
	// +kubebuilder:validation:Minimum=1
	// +optional
	TokenBurst *int64 `json:"tokenBurst,omitempty"`
	// MaxConcurrent caps the tenant's requests in flight to the pool.
	// +kubebuilder:validation:Minimum=1
	// +optional
	MaxConcurrent *int32 `json:"maxConcurrent,omitempty"`
}

// PoolQuota overrides a Tenant's quota for one pool.
type PoolQuota struct {
	// Pool is the AgentPool's name in the Tenant's namespace.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	Pool string `json:"pool"`
	// Quota for that pool; it replaces spec.quota there.
	Quota TenantQuota `json:"quota"`
}

// TenantSpec declares a caller of the gateway: how it authenticates, which models it may use
// and its quotas.
//
// +kubebuilder:validation:XValidation:rule="(has(self.apiKeys) && size(self.apiKeys) > 0) || (has(self.oidc) && size(self.oidc) > 0)",message="spec: set at least one of apiKeys and oidc"
type TenantSpec struct {
	// APIKeys are Secrets holding the tenant's API keys (Authorization: Bearer <key>, or the
	// x-api-key header).
	// +kubebuilder:validation:MaxItems=16
	// +optional
	APIKeys []APIKeySource `json:"apiKeys,omitempty"`
	// OIDC identities whose bearer tokens are this tenant.
	// +kubebuilder:validation:MaxItems=16
	// +optional
	OIDC []OIDCIdentity `json:"oidc,omitempty"`
	// Models the tenant may use: Model names (or, for AgentClasses without a modelRef, AgentClass
	// names) in the Tenant's namespace; "*" allows all of them.
	// +kubebuilder:validation:MinItems=1
	// +kubebuilder:validation:MaxItems=256
	// +kubebuilder:validation:items:MinLength=1
	// +kubebuilder:validation:items:MaxLength=253
	Models []string `json:"models"`
	// Quota applies to each pool the tenant uses, separately.
	// +optional
	Quota *TenantQuota `json:"quota,omitempty"`
	// PoolQuotas replace Quota for named pools.
	// +listType=map
	// +listMapKey=pool
	// +kubebuilder:validation:MaxItems=256
	// +optional
	PoolQuotas []PoolQuota `json:"poolQuotas,omitempty"`
	// AllowedPriorities are the values the tenant may send in the x-neuronetes-priority header;
	// other values are refused with 403. Empty: the header is refused.
	// +kubebuilder:validation:MaxItems=3
	// +optional
	AllowedPriorities []Priority `json:"allowedPriorities,omitempty"`
}

// TenantAPIKeysReady is the Tenant condition the gateway sets: True when every Secret of
// spec.apiKeys is read, False naming the Secret and what is wrong with it.
const TenantAPIKeysReady = "APIKeysReady"

// TenantStatus is what the gateway observed of a Tenant.
type TenantStatus struct {
	// ObservedGeneration is the generation the conditions describe.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`
	// Conditions: APIKeysReady.
	// +listType=map
	// +listMapKey=type
	// +optional
	Conditions []metav1.Condition `json:"conditions,omitempty"`
}

// Tenant is a caller of the gateway.
//
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:categories=neuronetes
// +kubebuilder:printcolumn:name="Models",type=string,JSONPath=`.spec.models`
// +kubebuilder:printcolumn:name="Keys",type=string,JSONPath=`.status.conditions[?(@.type=="APIKeysReady")].status`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type Tenant struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// Spec declares the tenant.
	Spec TenantSpec `json:"spec"`
	// Status is written by the gateway.
	// +optional
	Status TenantStatus `json:"status,omitempty"`
}

// TenantList is a list of Tenants.
//
// +kubebuilder:object:root=true
type TenantList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	// Items are the Tenants.
	Items []Tenant `json:"items"`
}

// PolicyTargetRef names the AgentPool, or the AgentClass (all its pools), a RoutingPolicy
// applies to, in the policy's namespace.
type PolicyTargetRef struct {
	// Kind is AgentPool or AgentClass.
	// +kubebuilder:validation:Enum=AgentPool;AgentClass
	Kind string `json:"kind"`
	// Name of the target.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	Name string `json:"name"`
}

// SessionKeySource is one place the session key is read from.
//
// +kubebuilder:validation:XValidation:rule="has(self.header) != has(self.body)",message="sessionKeys[]: set exactly one of header and body"
type SessionKeySource struct {
	// Header names a request header (e.g. x-session-id).
	// +kubebuilder:validation:Pattern=`^[A-Za-z0-9-]+$`
	// +kubebuilder:validation:MaxLength=128
	// +optional
	Header string `json:"header,omitempty"`
	// Body names a JSON body field: conversation_id, user, or metadata.<key>.
	// +kubebuilder:validation:Pattern=`^(conversation_id|user|metadata\.[A-Za-z0-9_.-]+)$`
	// +kubebuilder:validation:MaxLength=128
	// +optional
	Body string `json:"body,omitempty"`
}

// AffinityPolicy tunes session pins and the placement of new sessions.
type AffinityPolicy struct {
	// PinTTL is how long an unused pin lives; every use refreshes it (default 30m).
	// +optional
	PinTTL Duration `json:"pinTTL,omitempty"`
	// LoadFactor is ε of consistent hashing with bounded loads: no pod gets a new session while
	// it has more than (1+ε) times the mean in-flight requests (default 0.25).
	// +optional
	LoadFactor Decimal `json:"loadFactor,omitempty"`
}

// ScoringPolicy weighs the scorers that pick a pod for requests without a usable pin. Each
// scorer gives every candidate a score in [0,1]; the weighted sum decides. A weight of 0 turns a
// scorer off.
type ScoringPolicy struct {
	// Prefill weighs the pod's estimated prefill backlog for the request: the prompt tokens this
	// gateway replica sent it that have no first token yet, plus this request's tokens the pod
	// has not cached by the prefix index (default 4).
	// +optional
	Prefill *Decimal `json:"prefill,omitempty"`
	// PrefixCache weighs the longest prompt prefix a pod served recently (default 1).
	// +optional
	PrefixCache *Decimal `json:"prefixCache,omitempty"`
	// Queue weighs the pod's vllm:num_requests_waiting and running (default 1).
	// +optional
	Queue *Decimal `json:"queue,omitempty"`
	// KVCache weighs free KV cache, 1 - vllm:kv_cache_usage_perc (default 1).
	// +optional
	KVCache *Decimal `json:"kvCache,omitempty"`
	// InFlight weighs the gateway's own in-flight requests and tokens to the pod (default 1).
	// +optional
	InFlight *Decimal `json:"inFlight,omitempty"`
	// Hash weighs the pod's rank on the session key's consistent-hash ring, for requests with a
	// session key (default 1).
	// +optional
	Hash *Decimal `json:"hash,omitempty"`
}

// AdmissionPolicy bounds the requests a pool takes from one gateway replica.
type AdmissionPolicy struct {
	// MaxInFlightPerEndpoint: beyond this many in-flight requests per ready endpoint, requests
	// wait in the gateway's priority queue (default 256, vLLM's default max_num_seqs).
	// +kubebuilder:validation:Minimum=1
	// +optional
	MaxInFlightPerEndpoint *int32 `json:"maxInFlightPerEndpoint,omitempty"`
	// MaxQueue is how many requests may wait; when full, the lowest priority is shed (default 1024).
	// +kubebuilder:validation:Minimum=0
	// +optional
	MaxQueue *int32 `json:"maxQueue,omitempty"`
	// QueueTimeout is the longest wait before a 503 (default 30s).
	// +optional
	QueueTimeout Duration `json:"queueTimeout,omitempty"`
}

// Pricing is the price of tokens, for neuronetes_cost_usd.
type Pricing struct {
	// InputPerMillionTokens in US dollars.
	// +kubebuilder:validation:Minimum=0
	// +optional
	InputPerMillionTokens Decimal `json:"inputPerMillionTokens,omitempty"`
	// OutputPerMillionTokens in US dollars.
	// +kubebuilder:validation:Minimum=0
	// +optional
	OutputPerMillionTokens Decimal `json:"outputPerMillionTokens,omitempty"`
}

// RoutingPolicySpec configures how the gateway routes to a pool. A policy on an AgentPool
// overrides, field by field, one on the pool's AgentClass.
type RoutingPolicySpec struct {
	// TargetRef is the AgentPool or AgentClass the policy applies to.
	TargetRef PolicyTargetRef `json:"targetRef"`
	// SessionKeys lists where the session key is read, first match wins (default: headers
	// x-session-id, x-conversation-id, then body conversation_id, metadata.conversation_id, user).
	// +kubebuilder:validation:MaxItems=16
	// +optional
	SessionKeys []SessionKeySource `json:"sessionKeys,omitempty"`
	// Affinity tunes pins and placement.
	// +optional
	Affinity *AffinityPolicy `json:"affinity,omitempty"`
	// Scoring weighs the pickers.
	// +optional
	Scoring *ScoringPolicy `json:"scoring,omitempty"`
	// Admission bounds in-flight requests and the queue.
	// +optional
	Admission *AdmissionPolicy `json:"admission,omitempty"`
	// Priority of requests to the target (the AgentClass's priority class) unless the tenant
	// sets an allowed x-neuronetes-priority header (default normal).
	// +optional
	Priority Priority `json:"priority,omitempty"`
	// Pricing of the target's tokens.
	// +optional
	Pricing *Pricing `json:"pricing,omitempty"`
}

// RoutingPolicy attaches gateway routing settings to an AgentPool or AgentClass.
//
// +kubebuilder:object:root=true
// +kubebuilder:resource:categories=neuronetes
// +kubebuilder:printcolumn:name="Kind",type=string,JSONPath=`.spec.targetRef.kind`
// +kubebuilder:printcolumn:name="Target",type=string,JSONPath=`.spec.targetRef.name`
// +kubebuilder:printcolumn:name="Priority",type=string,JSONPath=`.spec.priority`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type RoutingPolicy struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// Spec declares the policy.
	Spec RoutingPolicySpec `json:"spec"`
}

// RoutingPolicyList is a list of RoutingPolicies.
//
// +kubebuilder:object:root=true
type RoutingPolicyList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	// Items are the RoutingPolicies.
	Items []RoutingPolicy `json:"items"`
}

func init() {
	SchemeBuilder.Register(&Tenant{}, &TenantList{}, &RoutingPolicy{}, &RoutingPolicyList{})
}
