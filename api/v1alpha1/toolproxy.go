package v1alpha1

// Tool proxy identity contract shared by the controller (which mounts the token into pool pods)
// and the dispatcher's tool proxy (which verifies it).
const (
	// ToolProxyAudience is the audience of the projected ServiceAccount token with which an agent
	// pod authenticates to the tool proxy. The apiserver refuses a token of this audience, and the
	// tool proxy refuses a token of any other (such as the pod's default apiserver token).
	ToolProxyAudience = "neuronetes.io/toolproxy"
	// ToolTokenVolume is the projected volume holding that token in every pool pod.
	ToolTokenVolume = "neuronetes-tool-token"
	// ToolTokenDir is where ToolTokenVolume is mounted in the pod's template containers.
	ToolTokenDir = "/var/run/secrets/neuronetes.io/tools"
	// ToolTokenFile is the token's path; the kubelet rewrites it before the token expires, so an
	// agent reads it again for each call (or at least every few minutes).
	ToolTokenFile = ToolTokenDir + "/token"
	// ToolTokenFileEnv names ToolTokenFile in the containers' environment.
	ToolTokenFileEnv = "NEURONETES_TOOL_TOKEN_FILE"
	// ToolTokenExpirationSeconds is the token's lifetime, the apiserver's minimum; the kubelet
	// rotates it at 80% of that.
	ToolTokenExpirationSeconds = 600
)
