package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// GuardrailType is the kind of a guardrail check.
// +kubebuilder:validation:Enum=pii;jailbreak;pattern;header;presidio;webhook
type GuardrailType string

// Guardrail check types.
const (
	// GuardrailPII is the built-in PII and secret detector.
	GuardrailPII GuardrailType = "pii"
	// GuardrailJailbreak is the built-in jailbreak / prompt-injection scorer.
	GuardrailJailbreak GuardrailType = "jailbreak"
	// GuardrailPattern is a deny list of RE2 expressions.
	GuardrailPattern GuardrailType = "pattern"
	// GuardrailHeader checks request headers.
	GuardrailHeader GuardrailType = "header"
	// GuardrailPresidio calls a Presidio-compatible analyzer (POST /analyze).
	GuardrailPresidio GuardrailType = "presidio"
	// GuardrailWebhook calls a policy webhook.
	GuardrailWebhook GuardrailType = "webhook"
)

// GuardrailAction is what a detection leads to.
// +kubebuilder:validation:Enum=block;redact;flag
type GuardrailAction string

// FailurePolicy is what happens when a check fails or times out.
// +kubebuilder:validation:Enum=Open;Closed
type FailurePolicy string

// Failure policies.
const (
	// FailOpen passes the request (the failure is logged and counted).
	FailOpen FailurePolicy = "Open"
	// FailClosed blocks the request with 503.
	FailClosed FailurePolicy = "Closed"
)

// PIICheck configures the built-in PII detector.
type PIICheck struct {
	// Entities limits detection to these types (default all): EMAIL_ADDRESS, PHONE_NUMBER,
	// CREDIT_CARD, IBAN_CODE, US_SSN, IP_ADDRESS, API_KEY, PRIVATE_KEY.
	// +kubebuilder:validation:MaxItems=16
	// +kubebuilder:validation:items:Enum=EMAIL_ADDRESS;PHONE_NUMBER;CREDIT_CARD;IBAN_CODE;US_SSN;IP_ADDRESS;API_KEY;PRIVATE_KEY
	// +optional
	Entities []string `json:"entities,omitempty"`
	// MinScore drops findings scored below it, 0 to 1 (default 0.5).
	// +optional
	MinScore Decimal `json:"minScore,omitempty"`
}

// JailbreakCheck configures the built-in jailbreak scorer.
type JailbreakCheck struct {
	// Threshold is the score, 0 to 1, at and above which a request is detected (default 0.5).
	// +optional
	Threshold Decimal `json:"threshold,omitempty"`
}

// PatternCheck is a deny list of RE2 expressions matched against the text.
type PatternCheck struct {
	// Patterns are RE2 expressions; every match is a detected span.
	// +kubebuilder:validation:MinItems=1
	// +kubebuilder:validation:MaxItems=64
	// +kubebuilder:validation:items:MaxLength=1024
	Patterns []string `json:"patterns"`
}

// HeaderMatch is one header rule.
type HeaderMatch struct {
	// Name of the header.
	// +kubebuilder:validation:Pattern=`^[A-Za-z0-9-]+$`
	// +kubebuilder:validation:MaxLength=128
	Name string `json:"name"`
	// Pattern is an RE2 expression; a value matching it is denied. Empty denies the header's
	// presence.
	// +kubebuilder:validation:MaxLength=1024
	// +optional
	Pattern string `json:"pattern,omitempty"`
}

// HeaderCheck checks request headers.
type HeaderCheck struct {
	// Deny lists headers (and values) that are detected.
	// +kubebuilder:validation:MaxItems=32
	// +optional
	Deny []HeaderMatch `json:"deny,omitempty"`
	// Require lists headers whose absence is detected.
	// +kubebuilder:validation:MaxItems=32
	// +kubebuilder:validation:items:MaxLength=128
	// +optional
	Require []string `json:"require,omitempty"`
}

// PresidioCheck calls a Presidio-compatible analyzer.
type PresidioCheck struct {
	// URL is the analyzer's base URL; the check POSTs to URL + "/analyze".
	// +kubebuilder:validation:MaxLength=2048
	// +kubebuilder:validation:Pattern=`^https?://`
	URL string `json:"url"`
	// Language sent with each text (default en).
	// +kubebuilder:validation:MaxLength=16
	// +optional
	Language string `json:"language,omitempty"`
	// Entities limits the types the analyzer reports (default all it knows).
	// +kubebuilder:validation:MaxItems=64
	// +kubebuilder:validation:items:MaxLength=64
	// +optional
	Entities []string `json:"entities,omitempty"`
	// MinScore is sent as score_threshold, 0 to 1.
	// +optional
	MinScore Decimal `json:"minScore,omitempty"`
}

// WebhookCheck calls a policy webhook (for example an adapter in front of Llama Guard or NeMo
// Guardrails). docs/guardrails.md describes the request and response bodies.
type WebhookCheck struct {
	// URL receives a POST per request.
	// +kubebuilder:validation:MaxLength=2048
	// +kubebuilder:validation:Pattern=`^https?://`
	URL string `json:"url"`
	// AuthorizationSecretRef names a Secret in the policy's namespace whose key "authorization"
	// is sent as the Authorization header.
	// +optional
	AuthorizationSecretRef *LocalObjectReference `json:"authorizationSecretRef,omitempty"`
}

// GuardrailCheck is one entry of an ordered chain.
//
// +kubebuilder:validation:XValidation:rule="(self.type == 'pii') == has(self.pii)",message="pii: set exactly when type is pii"
// +kubebuilder:validation:XValidation:rule="self.type == 'jailbreak' || !has(self.jailbreak)",message="jailbreak: set only when type is jailbreak"
// +kubebuilder:validation:XValidation:rule="(self.type == 'pattern') == has(self.pattern)",message="pattern: set exactly when type is pattern"
// +kubebuilder:validation:XValidation:rule="(self.type == 'header') == has(self.header)",message="header: set exactly when type is header"
// +kubebuilder:validation:XValidation:rule="(self.type == 'presidio') == has(self.presidio)",message="presidio: set exactly when type is presidio"
// +kubebuilder:validation:XValidation:rule="(self.type == 'webhook') == has(self.webhook)",message="webhook: set exactly when type is webhook"
// +kubebuilder:validation:XValidation:rule="self.action != 'redact' || self.type in ['pii', 'pattern', 'presidio', 'webhook']",message="action: redact needs spans; use it with pii, pattern, presidio or webhook"
type GuardrailCheck struct {
	// Name identifies the check in logs and Events; unique within its list.
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`
	// +kubebuilder:validation:MaxLength=63
	Name string `json:"name"`
	// Type of the check.
	Type GuardrailType `json:"type"`
	// Action on a detection (default block). A webhook's own verdict replaces it.
	// +kubebuilder:default=block
	// +optional
	Action GuardrailAction `json:"action,omitempty"`
	// Timeout of the check (default 250ms for built-in checks, 500ms for remote ones).
	// +optional
	Timeout Duration `json:"timeout,omitempty"`
	// FailurePolicy when the check errs or times out (default Closed).
	// +kubebuilder:default=Closed
	// +optional
	FailurePolicy FailurePolicy `json:"failurePolicy,omitempty"`

	// PII configures type pii.
	// +optional
	PII *PIICheck `json:"pii,omitempty"`
	// Jailbreak configures type jailbreak (optional even then).
	// +optional
	Jailbreak *JailbreakCheck `json:"jailbreak,omitempty"`
	// Pattern configures type pattern.
	// +optional
	Pattern *PatternCheck `json:"pattern,omitempty"`
	// Header configures type header.
	// +optional
	Header *HeaderCheck `json:"header,omitempty"`
	// Presidio configures type presidio.
	// +optional
	Presidio *PresidioCheck `json:"presidio,omitempty"`
	// Webhook configures type webhook.
	// +optional
	Webhook *WebhookCheck `json:"webhook,omitempty"`
}

// GuardrailPolicySpec declares the checks of the requests to, and the responses from, the
// target. A policy on an AgentPool replaces one on the pool's AgentClass.
//
// +kubebuilder:validation:XValidation:rule="!has(self.response) || self.response.all(c, c.type in ['pii', 'pattern'])",message="response: only pii and pattern checks run on streamed responses"
type GuardrailPolicySpec struct {
	// TargetRef is the AgentPool or AgentClass the policy applies to.
	TargetRef PolicyTargetRef `json:"targetRef"`
	// Request checks run in order on every request before it is routed.
	// +kubebuilder:validation:MaxItems=16
	// +listType=map
	// +listMapKey=name
	// +optional
	Request []GuardrailCheck `json:"request,omitempty"`
	// Response checks run in order on the response text as it streams.
	// +kubebuilder:validation:MaxItems=8
	// +listType=map
	// +listMapKey=name
	// +optional
	Response []GuardrailCheck `json:"response,omitempty"`
	// StreamWindowBytes bounds how much response text each response check holds back to find
	// values split across chunks (default 128).
	// +kubebuilder:validation:Minimum=16
	// +kubebuilder:validation:Maximum=4096
	// +optional
	StreamWindowBytes *int32 `json:"streamWindowBytes,omitempty"`
}

// GuardrailPolicy attaches guardrail checks to an AgentPool or AgentClass.
//
// +kubebuilder:object:root=true
// +kubebuilder:resource:categories=neuronetes,shortName=grp
// +kubebuilder:printcolumn:name="Kind",type=string,JSONPath=`.spec.targetRef.kind`
// +kubebuilder:printcolumn:name="Target",type=string,JSONPath=`.spec.targetRef.name`
// +kubebuilder:printcolumn:name="Request",type=string,JSONPath=`.spec.request[*].name`
// +kubebuilder:printcolumn:name="Response",type=string,JSONPath=`.spec.response[*].name`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type GuardrailPolicy struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// Spec declares the checks.
	Spec GuardrailPolicySpec `json:"spec"`
}

// GuardrailPolicyList is a list of GuardrailPolicies.
//
// +kubebuilder:object:root=true
type GuardrailPolicyList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	// Items are the GuardrailPolicies.
	Items []GuardrailPolicy `json:"items"`
}

func init() {
	SchemeBuilder.Register(&GuardrailPolicy{}, &GuardrailPolicyList{})
}
