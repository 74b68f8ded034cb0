package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
)

// QueueConfig binds a pool to a message queue.
//
// +kubebuilder:validation:XValidation:rule="self.provider != 'sqs'",message="provider sqs is not supported yet: no SQS-compatible server that speaks the current SQS API builds here to test a consumer against; use nats, kafka or redis",fieldPath=".provider"
// +kubebuilder:validation:XValidation:rule="!has(self.dispatch) || self.dispatch.responseQueue != self.queueName",message="dispatch.responseQueue must differ from queueName (results would be consumed again)",fieldPath=".dispatch.responseQueue"
// +kubebuilder:validation:XValidation:rule="!has(self.dispatch) || self.dispatch.deadLetterQueue != self.queueName",message="dispatch.deadLetterQueue must differ from queueName",fieldPath=".dispatch.deadLetterQueue"
type QueueConfig struct {
	// Provider of the queue. sqs is refused (not supported yet).
	// +kubebuilder:validation:Enum=nats;kafka;sqs;redis
	Provider string `json:"provider"`
	// QueueName is the queue: for nats "<stream>" or "<stream>/<durable consumer>", for kafka
	// the topic, for redis the stream key.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=255
	QueueName string `json:"queueName"`
	// URL of the broker: nats://host:port; for kafka host:port[,host:port...] or
	// kafka://host:port[,...] (plaintext), or kafkas://[user:password@]host:port[,...] (TLS,
	// verified against the system roots for the host dialed; user:password, percent-encoded
	// where needed, authenticates with SASL, ?sasl=plain (default), scram-sha-256 or
	// scram-sha-512; credentials are refused over kafka://); redis://[:password@]host:port[/db]
	// or rediss:// (TLS). Optional: the controller's and dispatcher's default for the provider
	// otherwise.
	// +kubebuilder:validation:MaxLength=2048
	// +optional
	URL string `json:"url,omitempty"`
	// ConsumerGroup is the NATS durable consumer, Kafka consumer group or Redis Streams group the
	// dispatcher consumes with and the autoscaler reads lag of. Default for a dispatched binding:
	// "neuronetes-<namespace>-<name>" (for nats, the consumer named in queueName wins).
	// +kubebuilder:validation:MaxLength=200
	// +kubebuilder:validation:Pattern=`^[A-Za-z0-9_-]+$`
	// +optional
	ConsumerGroup string `json:"consumerGroup,omitempty"`
	// AutoscaleOnLag lets queue lag drive the pool's autoscaler.
	// +optional
	AutoscaleOnLag bool `json:"autoscaleOnLag,omitempty"`
	// MaxLagThreshold of queued messages above which the pool scales up.
	// +kubebuilder:validation:Minimum=1
	// +optional
	MaxLagThreshold *int32 `json:"maxLagThreshold,omitempty"`
	// PrefetchCount is how many messages one pool replica handles concurrently: the dispatcher
	// keeps at most prefetchCount x ready pool replicas messages in flight (default 1).
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=10000
	// +optional
	PrefetchCount *int32 `json:"prefetchCount,omitempty"`
	// TargetThroughput is the seed formula's target_throughput: messages one replica is expected
	// to clear per evaluation beyond its prefetch (default 1). Must be greater than 0.
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:ExclusiveMinimum=true
	// +optional
	TargetThroughput Decimal `json:"targetThroughput,omitempty"`
	// Dispatch makes the dispatcher consume the queue and send each message to the pool through
	// the gateway. Without it the binding only drives the autoscaler (the pool's agents consume
	// the queue themselves).
	// +optional
	Dispatch *DispatchConfig `json:"dispatch,omitempty"`
}

// DispatchConfig is how the dispatcher turns queued messages into agent requests.
type DispatchConfig struct {
	// ResponseQueue receives each message's result (the completion), with the message id,
	// correlation id and gateway request id: a subject captured by a JetStream stream (nats), a
	// topic (kafka) or a stream key (redis).
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=255
	ResponseQueue string `json:"responseQueue"`
	// DeadLetterQueue receives a message whose attempts are exhausted, unchanged, with its last
	// error and attempt count (same kinds of name as ResponseQueue).
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=255
	DeadLetterQueue string `json:"deadLetterQueue"`
	// MaxRetries after the first attempt before the message is dead-lettered (default 3).
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=100
	// +optional
	MaxRetries *int32 `json:"maxRetries,omitempty"`
	// Timeout of one attempt, from the request to the whole response (default 60s).
	// +optional
	Timeout Duration `json:"timeout,omitempty"`
	// InitialBackoff before the first retry; each retry doubles it, with full jitter (default 1s).
	// +optional
	InitialBackoff Duration `json:"initialBackoff,omitempty"`
	// MaxBackoff caps the backoff (default 1m).
	// +optional
	MaxBackoff Duration `json:"maxBackoff,omitempty"`
	// SessionKeyField is a dot-separated path of a string field in a JSON message body whose value
	// is the session key (e.g. "metadata.conversation_id"). Empty: the message key (the Kafka
	// record key, the NATS header Neuronetes-Key, the redis entry field "key").
	// +kubebuilder:validation:MaxLength=255
	// +optional
	SessionKeyField string `json:"sessionKeyField,omitempty"`
	// DedupeTTL is how long a processed message id is remembered, so that a redelivery within it
	// is acknowledged without running the agent again (default 24h).
	// +optional
	DedupeTTL Duration `json:"dedupeTTL,omitempty"`
}

// ToolConfig describes a tool of type http or grpc that agents call through the dispatcher's
// tool proxy.
type ToolConfig struct {
	// Name the agents call the tool by (default the binding's name).
	// +kubebuilder:validation:MaxLength=128
	// +kubebuilder:validation:Pattern=`^[A-Za-z0-9_.-]+$`
	// +optional
	Name string `json:"name,omitempty"`
	// Method: for http the HTTP method (default POST); for grpc the full method
	// "package.Service/Method" (required).
	// +kubebuilder:validation:MaxLength=255
	// +optional
	Method string `json:"method,omitempty"`
	// Parameters is the JSON Schema (draft 2020-12) the call's arguments must satisfy.
	// +kubebuilder:validation:Schemaless
	// +kubebuilder:pruning:PreserveUnknownFields
	// +kubebuilder:validation:Type=object
	// +optional
	Parameters *runtime.RawExtension `json:"parameters,omitempty"`
	// AllowedPools are the AgentPools of the binding's namespace that may call the tool, besides
	// spec.agentPoolRef. A pool in neither is refused.
	// +kubebuilder:validation:MaxItems=256
	// +listType=set
	// +optional
	AllowedPools []string `json:"allowedPools,omitempty"`
	// AllowedSessionClasses are the AgentClasses of the binding's namespace whose AgentSessions
	// may call the tool: the tool proxy trusts a pod controlled by an AgentSession as that
	// session, and the session's spec.classRef must be listed here (docs/sessions.md).
	// +kubebuilder:validation:MaxItems=256
	// +listType=set
	// +optional
	AllowedSessionClasses []string `json:"allowedSessionClasses,omitempty"`
	// SideEffects marks a tool whose calls change something: each call must carry an
	// Idempotency-Key, and a repeated key gets the first call's answer without calling again.
	// +optional
	SideEffects bool `json:"sideEffects,omitempty"`
	// Timeout of one call (default 30s).
	// +optional
	Timeout Duration `json:"timeout,omitempty"`
}

// ToolBindingSpec binds a tool or a queue to an agent pool.
//
// +kubebuilder:validation:XValidation:rule="self.type != 'queue' || has(self.queueConfig)",message="spec.queueConfig is required when spec.type is queue",fieldPath=".queueConfig"
// +kubebuilder:validation:XValidation:rule="!has(self.queueConfig) || !has(self.queueConfig.dispatch) || has(self.agentPoolRef)",message="spec.agentPoolRef is required when spec.queueConfig.dispatch is set",fieldPath=".agentPoolRef"
// +kubebuilder:validation:XValidation:rule="self.type == 'queue' || (has(self.endpoint) && size(self.endpoint) > 0)",message="spec.endpoint is required when spec.type is http or grpc",fieldPath=".endpoint"
// +kubebuilder:validation:XValidation:rule="self.type != 'grpc' || (has(self.tool) && has(self.tool.method) && self.tool.method.contains('/'))",message="spec.tool.method (package.Service/Method) is required when spec.type is grpc",fieldPath=".tool.method"
type ToolBindingSpec struct {
	// Type of binding.
	// +kubebuilder:validation:Enum=queue;http;grpc
	Type string `json:"type"`
	// AgentPoolRef names the pool that consumes the binding (required with queueConfig.dispatch);
	// for a tool, a pool allowed to call it.
	// +optional
	AgentPoolRef *LocalObjectReference `json:"agentPoolRef,omitempty"`
	// QueueConfig for type queue.
	// +optional
	QueueConfig *QueueConfig `json:"queueConfig,omitempty"`
	// Endpoint for type http (a URL) or grpc (host:port).
	// +kubebuilder:validation:MaxLength=2048
	// +optional
	Endpoint string `json:"endpoint,omitempty"`
	// Tool configures a tool of type http or grpc.
	// +optional
	Tool *ToolConfig `json:"tool,omitempty"`
}

// ToolBindingStatus reports the binding.
type ToolBindingStatus struct {
	// Lag is the last observed number of queued messages.
	// +optional
	Lag int64 `json:"lag,omitempty"`
	// Dispatch counts the dispatcher's work on the binding (summed over its replicas).
	// +optional
	Dispatch *DispatchStatus `json:"dispatch,omitempty"`
	// Conditions of the binding: ProviderServed (controller), Ready and Degraded (dispatcher).
	// +listType=map
	// +listMapKey=type
	// +optional
	Conditions []metav1.Condition `json:"conditions,omitempty"`
}

// DispatchStatus counts messages since the binding was first dispatched.
type DispatchStatus struct {
	// Received messages (deliveries, redeliveries included).
	// +optional
	Received int64 `json:"received,omitempty"`
	// Succeeded messages: result published and input acknowledged.
	// +optional
	Succeeded int64 `json:"succeeded,omitempty"`
	// Retried attempts after a failure.
	// +optional
	Retried int64 `json:"retried,omitempty"`
	// DeadLettered messages.
	// +optional
	DeadLettered int64 `json:"deadLettered,omitempty"`
	// Duplicates: redeliveries of messages already done, acknowledged without processing.
	// +optional
	Duplicates int64 `json:"duplicates,omitempty"`
	// InFlight messages at the last report.
	// +optional
	InFlight int64 `json:"inFlight,omitempty"`
}

// ToolBinding connects an agent pool to a tool endpoint or a work queue.
//
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:categories=neuronetes
// +kubebuilder:printcolumn:name="Type",type=string,JSONPath=`.spec.type`
// +kubebuilder:printcolumn:name="Provider",type=string,JSONPath=`.spec.queueConfig.provider`
// +kubebuilder:printcolumn:name="Queue",type=string,JSONPath=`.spec.queueConfig.queueName`
// +kubebuilder:printcolumn:name="Lag",type=integer,JSONPath=`.status.lag`
// +kubebuilder:printcolumn:name="Ready",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].status`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type ToolBinding struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// Spec of the binding.
	Spec ToolBindingSpec `json:"spec"`
	// Status of the binding.
	// +optional
	Status ToolBindingStatus `json:"status,omitempty"`
}

// ToolBindingList is a list of ToolBindings.
//
// +kubebuilder:object:root=true
type ToolBindingList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	// Items are the ToolBindings.
	Items []ToolBinding `json:"items"`
}

func init() {
	SchemeBuilder.Register(&ToolBinding{}, &ToolBindingList{})
}
