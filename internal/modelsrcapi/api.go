// Package modelsrcapi is the wire contract of the controller's Model source credentials endpoint
// (controller/modelcreds Server) and the node agent's client of it. The node agent holds no right
// on Secrets: it asks the controller for one Model's credentials over TLS, presenting its pod's
// projected ServiceAccount token for Audience; the controller answers only when the node the pod
// runs on has a reason to fetch that Model (controller/modelcreds Decide).
package modelsrcapi

const (
	// Audience is the audience of the node agent's projected token for this endpoint.
	Audience = "neuronetes.io/model-sources"
	// Path is the endpoint's path: POST a Request, get Credentials (200) or a Refusal.
	Path = "/v1/model-source-credentials"
	// MaxBodyBytes bounds a request and a response body.
	MaxBodyBytes = 64 << 10
)

// Reasons of a Refusal, and of Decide's answers.
const (
	// ReasonUnauthenticated: no token, a token the apiserver does not authenticate for Audience,
	// or one not bound to a live pod.
	ReasonUnauthenticated = "Unauthenticated"
	// ReasonNotNodeAgent: the token's ServiceAccount is not the node agents'.
	ReasonNotNodeAgent = "NotNodeAgent"
	// ReasonNotUsedOnNode: nothing on the caller's node uses the Model (Decide).
	ReasonNotUsedOnNode = "NotUsedOnNode"
	// ReasonNoSecretRef: the Model has no spec.source.secretRef.
	ReasonNoSecretRef = "NoSecretRef"
	// ReasonModelNotFound: no such Model.
	ReasonModelNotFound = "ModelNotFound"
	// ReasonNotReady: the controller holds no credentials for the Model's current secretRef yet
	// (see its SourceCredentialsReady condition).
	ReasonNotReady = "CredentialsNotReady"
	// ReasonBadRequest: the request is not a Request.
	ReasonBadRequest = "BadRequest"
	// ReasonUnavailable: the controller could not read what it needs (retry).
	ReasonUnavailable = "Unavailable"
	// ReasonUsedByPod and ReasonPoolMaySchedule are Decide's reasons to allow.
	ReasonUsedByPod       = "UsedByPod"
	ReasonPoolMaySchedule = "PoolMaySchedule"
)

// Request names the Model whose credentials are asked for, and the UID the caller saw: the
// controller answers only for that Model's current UID.
type Request struct {
	Namespace string `json:"namespace"`
	Name      string `json:"name"`
	UID       string `json:"uid,omitempty"`
}

// Credentials are the source credentials of one Model (keys of v1alpha1.ModelSecretKeys).
type Credentials struct {
	AccessKeyID     string `json:"accessKeyID,omitempty"`
	SecretAccessKey string `json:"secretAccessKey,omitempty"`
	Endpoint        string `json:"endpoint,omitempty"`
	Region          string `json:"region,omitempty"`
	Token           string `json:"token,omitempty"`
}

// Refusal is the body of every non-200 answer: a reason code and a message naming objects only.
type Refusal struct {
	Reason  string `json:"reason"`
	Message string `json:"message"`
}

// Error is a Refusal received by the client, with the HTTP status.
type Error struct {
	Status int
	Refusal
}

func (e *Error) Error() string {
	return "the controller refused the source credentials (" + e.Reason + "): " + e.Message
}
