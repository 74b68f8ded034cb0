package v1alpha1

import (
	"crypto/sha256"
	"encoding/hex"
	"strings"
)

// The contract between the controller (controller/modelcreds) and the node agent for a Model's
// spec.source.secretRef: the controller reads the Secret in the Model's own namespace and writes the
// credential keys into a copy named ModelSourceSecretName in one namespace of the installation
// (the chart's release namespace, --model-source-namespace) and serves it to the node agents
// (controller/modelcreds Server); no node agent reads a Secret.
const (
	// ModelSourceSecretPrefix starts the name of every copy. The controller's admission policy
	// admits its Secret writes in the copy namespace only for names with this prefix.
	ModelSourceSecretPrefix = "model-src-"
	// ModelSourceLabel, with value "true", marks a copy (next to ManagedByLabel).
	ModelSourceLabel = "neuronetes.io/model-source"
	// ModelSourceNamespaceAnnotation, ModelSourceNameAnnotation and ModelSourceUIDAnnotation on a
	// copy name the Model it was made for; the controller serves a copy only when the UID is its
	// Model's.
	ModelSourceNamespaceAnnotation = "neuronetes.io/model-namespace"
	ModelSourceNameAnnotation      = "neuronetes.io/model-name"
	ModelSourceUIDAnnotation       = "neuronetes.io/model-uid"
	// ModelSourceSecretAnnotation on a copy is the spec.source.secretRef name it was copied from.
	ModelSourceSecretAnnotation = "neuronetes.io/source-secret"

	// ModelConditionSourceCredentials is the Model condition the controller keeps for a Model with
	// spec.source.secretRef: True once the copy is written, False naming the Secret and the missing
	// key otherwise.
	ModelConditionSourceCredentials = "SourceCredentialsReady"
)

// Keys of a Model source Secret: ModelSecretAccessKeyID and ModelSecretSecretAccessKey (required
// for s3://), ModelSecretEndpoint and ModelSecretRegion (optional, s3://), ModelSecretToken
// (required for http(s)://, sent as a Bearer token). Only these keys are copied.
const (
	ModelSecretAccessKeyID     = "accessKeyID"
	ModelSecretSecretAccessKey = "secretAccessKey"
	ModelSecretEndpoint        = "endpoint"
	ModelSecretRegion          = "region"
	ModelSecretToken           = "token"
)

// ModelSecretKeys are the keys a copy may carry, in a fixed order.
var ModelSecretKeys = []string{ModelSecretAccessKeyID, ModelSecretSecretAccessKey, ModelSecretEndpoint, ModelSecretRegion, ModelSecretToken}

// ModelSecretRequiredKeys returns the keys a source Secret must hold for uri: the S3 key pair for
// s3://, the token for http(s)://, none otherwise.
func ModelSecretRequiredKeys(uri string) []string {
	switch {
	case strings.HasPrefix(uri, "s3://"):
		return []string{ModelSecretAccessKeyID, ModelSecretSecretAccessKey}
	case strings.HasPrefix(uri, "http://"), strings.HasPrefix(uri, "https://"):
		return []string{ModelSecretToken}
	}
	return nil
}

// modelSourceHashLen is how many hex characters of the hash end a copy's name.
const modelSourceHashLen = 16

// ModelSourceSecretName is the name of the copy of the source credentials of the Model
// namespace/name: "model-src-<namespace>-<name>-<hash>", where hash is the first 16 hex characters of
// SHA-256("<namespace>/<name>") (so two Models never share a name, however the readable part
// reads) and the readable part is cut so the whole name stays a valid Secret name of at most 253
// characters.
func ModelSourceSecretName(namespace, name string) string {
	sum := sha256.Sum256([]byte(namespace + "/" + name))
	hash := hex.EncodeToString(sum[:])[:modelSourceHashLen]
	readable := namespace + "-" + name
	if max := 253 - len(ModelSourceSecretPrefix) - 1 - modelSourceHashLen; len(readable) > max {
		readable = readable[:max]
	}
	// A cut may leave '.' or '-' at the end; "x.-hash" would be no DNS subdomain.
	readable = strings.TrimRight(readable, ".-")
	return ModelSourceSecretPrefix + readable + "-" + hash
}
